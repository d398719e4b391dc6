"""Validation verdicts in the ledger: what ``--skip-validation`` in production leans on.

A verdict records counts and check names only (never a value); it is keyed by the dataset id
of the records validated, when every confidential file was read whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from das.runs.ledger.identity import who
from das.runs.ledger.store import LedgerTransaction


def record_validation(
    db: LedgerTransaction,
    product: str,
    dataset: str | None,
    config_sha256: str,
    summary: Mapping[str, Any],
    run_id: str | None = None,
) -> None:
    """A validation verdict of these records under this config (counts and check names)."""
    detail = {
        "product": product,
        "config_sha256": config_sha256,
        "ok": bool(summary.get("ok")),
        "errors": int(summary.get("errors") or 0),
        "warnings": int(summary.get("warnings") or 0),
        "failed_checks": list(summary.get("failed_checks") or []),
        "by": who(),
    }
    db.append("validation", detail, run_id=run_id, dataset=dataset)


def passing_validation(
    db: LedgerTransaction, product: str, dataset: str, config_sha256: str
) -> bool:
    """Whether the latest validation of these records under this config passed."""
    found = [
        e.payload
        for e in db.entries(dataset=dataset, kinds=("validation",))
        if e.payload["product"] == product and e.payload["config_sha256"] == config_sha256
    ]
    return bool(found) and bool(found[-1]["ok"])
