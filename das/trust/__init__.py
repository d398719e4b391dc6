"""The trust core: who may spend privacy budget, what was spent, and the proof a release carries.

This face is the only door: the rest of the code imports the names below and nothing inside
(an import contract in ``pyproject.toml``), and this package imports nothing of the run
lifecycle (``das.runs``), the flows, the tasks, the command line, Prefect or Dask. A reviewer
can read it alone. Its parts, bottom up:

- ``signing/``: the cryptography, on the standard formats only: OpenSSH public keys and
  allowed-signers lines (``keys``), SSHSIG signatures as ``ssh-keygen -Y sign`` makes them
  (``sshsig``), canonical JSON statements and their digests (``canonical``), in-toto
  Statements in DSSE envelopes (``dsse``). It imports nothing else of ``das``.
- ``text``: text that came from the ledger or a statement, shown to a person escaped, so that
  no control character or look-alike can change what they read before they sign.
- ``ledger/``: the privacy ledger, the system of record: hash-chained entries in SQLite or
  PostgreSQL (``store``), what they mean (``state``), exact amounts (``amounts``), the charter
  of approvers, quorum and run keys (``charter``), signed approvals (``approvals``), authorizing
  a spend (``spending``), each draw (``draws``), entries signed by the run key
  (``run_signatures``), the sealed release and the heads kept outside (``anchors``),
  validation verdicts (``validations``), keyed ids and who acts (``identity``), where the
  ledger is (``location``), the whole ledger against a release (``verify``), its refusals
  (``errors``), and :class:`PrivacyLedger`, which owns the transactions (``ledger``).
- ``run_keys``: the service account's key, which signs the run's entries and certificates.
- ``journal``: an approver's own memory, outside the ledger, of what they signed.
- ``release_files``: the names and digest of a published release's files.
- ``certificate``: what a run signs into its release (in-toto/DSSE).
- ``root``: the trust root the approvers publish (the ledger's id and its charter chain) and a
  verifier pins; how a release's chain, a newer root and a run's ledger are checked against it.
- ``verifier``: the outsider's check of a release with public keys only, against a root.

What it trusts: the trust root a verifier pins (by its SHA-256, published by the agency) and
the signatures of the keys it names; the charter a quorum of approvers signed. Its rules —
who the approvers are, how many must sign, which key may certify — never come from the
evidence it checks. What it never trusts: a ledger row for itself (the
operator can write the database: rows that matter carry approvers' or the run key's
signatures, and the chain's heads are witnessed outside), a label or a name on a key, text
from a statement (shown escaped), or any statistic of the confidential data (none is ever
written here: spends, digests and keyed ids only).
"""

from das.trust.certificate import certify
from das.trust.journal import ApproverJournal
from das.trust.ledger.amounts import PassSpend, decimal_text, parse_total
from das.trust.ledger.anchors import anchor_remedy, release_anchor_problems, witness_problems
from das.trust.ledger.approvals import (
    APPROVAL_NAMESPACE,
    Approval,
    approval_statement,
    statement_problems,
    statement_text,
)
from das.trust.ledger.charter import CHARTER_NAMESPACE, Charter, charter_statement
from das.trust.ledger.draws import DrawRecord
from das.trust.ledger.errors import (
    ApprovalRequired,
    CeilingExceeded,
    CumulativeSpendRequired,
    DrawRefused,
    LedgerRefused,
    LedgerUnavailable,
    ReleaseDiffers,
)
from das.trust.ledger.identity import who
from das.trust.ledger.ledger import PrivacyLedger, ledger_ceilings
from das.trust.ledger.location import (
    LEDGER_ENV,
    LEDGER_ID_ENV,
    LEDGER_PASSWORD_FILE_ENV,
    LEDGER_URL_ENV,
    OpenedLedger,
    configured_store,
    ledger_store,
    open_ledger,
    url_without_password,
)
from das.trust.ledger.run_signatures import RunSigner
from das.trust.ledger.state import COUNTING, ENTRY_KINDS, LedgerInfo, RunOpening, RunState
from das.trust.ledger.store import LedgerStore
from das.trust.ledger.verify import release_problems
from das.trust.release_files import (
    AUDIT_FILE,
    CERTIFICATE,
    MANIFEST,
    MANIFEST_FORMAT,
    content_digest,
    read_manifest,
)
from das.trust.root import (
    PINNED_ROOT_FILE,
    RootInvalid,
    TrustRoot,
    check_pinned_roots,
    extension_problems,
    read_trust_root,
    root_document,
)
from das.trust.run_keys import RUN_KEY_ENV, run_key
from das.trust.signing.canonical import canonical_json
from das.trust.signing.errors import SignatureInvalid, SigningError
from das.trust.signing.keys import PublicKey, generate_key, load_keys_file, public_key_of
from das.trust.signing.sshsig import sign
from das.trust.text import printable, shown
from das.trust.verifier import verify_release, verify_releases

__all__ = [
    "APPROVAL_NAMESPACE",
    "AUDIT_FILE",
    "CERTIFICATE",
    "CHARTER_NAMESPACE",
    "COUNTING",
    "ENTRY_KINDS",
    "LEDGER_ENV",
    "LEDGER_ID_ENV",
    "LEDGER_PASSWORD_FILE_ENV",
    "LEDGER_URL_ENV",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "PINNED_ROOT_FILE",
    "RUN_KEY_ENV",
    "Approval",
    "ApprovalRequired",
    "ApproverJournal",
    "CeilingExceeded",
    "Charter",
    "CumulativeSpendRequired",
    "DrawRecord",
    "DrawRefused",
    "LedgerInfo",
    "LedgerRefused",
    "LedgerStore",
    "LedgerUnavailable",
    "OpenedLedger",
    "PassSpend",
    "PrivacyLedger",
    "PublicKey",
    "ReleaseDiffers",
    "RootInvalid",
    "RunOpening",
    "RunSigner",
    "RunState",
    "SignatureInvalid",
    "SigningError",
    "TrustRoot",
    "anchor_remedy",
    "approval_statement",
    "canonical_json",
    "certify",
    "charter_statement",
    "check_pinned_roots",
    "configured_store",
    "content_digest",
    "decimal_text",
    "extension_problems",
    "generate_key",
    "ledger_ceilings",
    "ledger_store",
    "load_keys_file",
    "open_ledger",
    "parse_total",
    "printable",
    "public_key_of",
    "read_manifest",
    "read_trust_root",
    "release_anchor_problems",
    "release_problems",
    "root_document",
    "run_key",
    "shown",
    "sign",
    "statement_problems",
    "statement_text",
    "url_without_password",
    "verify_release",
    "verify_releases",
    "who",
    "witness_problems",
]
