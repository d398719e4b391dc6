"""The cryptography of the trust core, on standard formats only (names reach the rest of the
code through :mod:`das.trust`).

Approvers are people with OpenSSH keys (:mod:`~das.trust.signing.keys`); an approval is a
canonical JSON statement (:mod:`~das.trust.signing.canonical`) signed with SSHSIG
(:mod:`~das.trust.signing.sshsig`), which an approver can make at their own terminal with
``ssh-keygen -Y sign -n NAMESPACE -f ~/.ssh/id_ed25519 statement.json``. A release carries an
in-toto Statement v1 in a DSSE envelope (:mod:`~das.trust.signing.dsse`) signed by the run's
service-account key. Everything verifies with public keys only, outside the enclave.

It imports the standard library, cryptography, sshsig and securesystemslib, and nothing else
of ``das``.
"""
