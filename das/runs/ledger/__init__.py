"""The privacy ledger: the system of record of runs, approvals, spends and draws.

- :mod:`das.runs.ledger.store`: the hash-chained entries in SQLite or PostgreSQL.
- :mod:`das.runs.ledger.book`: what the entries mean (runs, approvals, spends, draws).
- :mod:`das.runs.ledger.location`: where the ledger is, and opening it for a run.
"""

from das.runs.ledger.book import (
    ApprovalRequired,
    CeilingExceeded,
    CumulativeSpendRequired,
    DrawRecord,
    DrawRefused,
    DuplicateDraw,
    LedgerInfo,
    LedgerRefused,
    PassSpend,
    PrivacyLedger,
    ReleaseDiffers,
    RunOpening,
    RunState,
    decimal_text,
    parse_total,
    release_anchor_problems,
    witness_problems,
)
from das.runs.ledger.location import (
    OpenedLedger,
    configured_store,
    default_ledger_dir,
    ledger_store,
    open_ledger,
)
from das.runs.ledger.store import LEDGER_FILE, LedgerStore, LedgerUnavailable

__all__ = [
    "LEDGER_FILE",
    "ApprovalRequired",
    "CeilingExceeded",
    "CumulativeSpendRequired",
    "DrawRecord",
    "DrawRefused",
    "DuplicateDraw",
    "LedgerInfo",
    "LedgerRefused",
    "LedgerStore",
    "LedgerUnavailable",
    "OpenedLedger",
    "PassSpend",
    "PrivacyLedger",
    "ReleaseDiffers",
    "RunOpening",
    "RunState",
    "configured_store",
    "decimal_text",
    "default_ledger_dir",
    "ledger_store",
    "open_ledger",
    "parse_total",
    "release_anchor_problems",
    "witness_problems",
]
