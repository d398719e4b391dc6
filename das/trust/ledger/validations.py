"""Validation verdicts in the ledger: what ``--skip-validation`` in production leans on.

A verdict records counts and check names only (never a value); it is keyed by the dataset id
of the records validated, when every confidential file was read whole. Verdicts are signed by
the run key of whoever validated; in a chartered ledger only a verdict signed by a run key of
the charter (the validate deployment, run by the service account) lets a production run skip
its own validation — a verdict written into the database by hand, or by an operator's own
`das validate`, does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from das.trust.ledger.identity import who
from das.trust.ledger.run_signatures import RunSigner, entry_signer
from das.trust.ledger.store import LedgerTransaction
from das.trust.signing.keys import PublicKey


def record_validation(
    db: LedgerTransaction,
    product: str,
    dataset: str | None,
    config_sha256: str,
    summary: Mapping[str, Any],
    run_id: str | None = None,
    signer: RunSigner | None = None,
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
    payload = detail if signer is None else signer.sign("validation", run_id, dataset, detail)
    db.append("validation", payload, run_id=run_id, dataset=dataset)


def passing_validation(
    db: LedgerTransaction,
    product: str,
    dataset: str,
    config_sha256: str,
    runners: Sequence[PublicKey] | None = None,
) -> bool:
    """Whether the latest validation of these records under this config passed; with
    ``runners`` (a chartered ledger), the latest one a run key of the charter signed."""
    found = [
        e.payload
        for e in db.entries(dataset=dataset, kinds=("validation",))
        if e.payload["product"] == product
        and e.payload["config_sha256"] == config_sha256
        and (runners is None or entry_signer(e, runners) is not None)
    ]
    return bool(found) and bool(found[-1]["ok"])
