"""The privacy ledger: the system of record of runs, approvals, spends and draws.

The rest of the pipeline uses the names below; each lives in the module of its concept
(:mod:`das.runs.ledger.ledger` says which is where).
"""

from das.runs.ledger.amounts import PassSpend, decimal_text, parse_total
from das.runs.ledger.anchors import anchor_remedy, release_anchor_problems, witness_problems
from das.runs.ledger.approvals import Approval
from das.runs.ledger.charter import Charter, CharterChain
from das.runs.ledger.draws import DrawRecord
from das.runs.ledger.errors import (
    ApprovalRequired,
    CeilingExceeded,
    CumulativeSpendRequired,
    DrawRefused,
    DuplicateDraw,
    LedgerRefused,
    LedgerUnavailable,
    ReleaseDiffers,
)
from das.runs.ledger.ledger import PrivacyLedger
from das.runs.ledger.location import (
    OpenedLedger,
    configured_store,
    default_ledger_dir,
    ledger_store,
    open_ledger,
)
from das.runs.ledger.state import LedgerInfo, RunOpening, RunState
from das.runs.ledger.store import LEDGER_FILE, LedgerStore

__all__ = [
    "LEDGER_FILE",
    "Approval",
    "ApprovalRequired",
    "CeilingExceeded",
    "Charter",
    "CharterChain",
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
    "anchor_remedy",
    "configured_store",
    "decimal_text",
    "default_ledger_dir",
    "ledger_store",
    "open_ledger",
    "parse_total",
    "release_anchor_problems",
    "witness_problems",
]
