"""Signed approvals and release certificates: the cryptographic foundation.

Approvers are people with OpenSSH keys; an approval is a canonical JSON statement
(:func:`canonical_json`) signed with SSHSIG, which an approver can make at their own terminal
with ``ssh-keygen -Y sign -n NAMESPACE -f ~/.ssh/id_ed25519 statement.json``. A release carries
an in-toto Statement v1 in a DSSE envelope signed by the run's service-account key. Everything
verifies with public keys only, outside the enclave.

A foundation layer: it imports the standard library, cryptography, sshsig and securesystemslib,
and nothing else of ``das``.
"""

from das.signing.attestation import (
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    sign_envelope,
    statement,
    verify_envelope,
)
from das.signing.canonical import canonical_json, sha256_hex, statement_digest
from das.signing.errors import SignatureInvalid, SigningError
from das.signing.keys import (
    SUPPORTED_ALGORITHMS,
    PublicKey,
    generate_key,
    load_keys_file,
    parse_public_key,
    public_key_of,
)
from das.signing.sshsig import sign, signature_key, verify

__all__ = [
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "SUPPORTED_ALGORITHMS",
    "PublicKey",
    "SignatureInvalid",
    "SigningError",
    "canonical_json",
    "generate_key",
    "load_keys_file",
    "parse_public_key",
    "public_key_of",
    "sha256_hex",
    "sign",
    "sign_envelope",
    "signature_key",
    "statement",
    "statement_digest",
    "verify",
    "verify_envelope",
]
