"""A validation's verdict into the privacy ledger, from `das validate` or the validate flow.

With a ledger configured (``DAS_LEDGER_DIR`` / ``DAS_LEDGER_URL``) the verdict is recorded
under the records' dataset id: a production run with ``--skip-validation`` needs a passing one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


def verdict_summary(report: Any) -> dict[str, Any]:
    """Counts and check names of a validation report (or of anything carrying its summary)."""
    if hasattr(report, "summary"):
        return dict(report.summary)
    return {
        "ok": report.ok,
        "errors": len(report.errors),
        "warnings": len(report.warnings),
        "failed_checks": sorted({f.check for f in report.errors}),
    }


def record_verdict(
    product: str, confidential: Iterable[str], config: Path, report: Any
) -> str | None:
    """Record ``report``'s verdict (a validation report, or the validate flow's outcome: its
    summary and the records' ``fingerprints``); a line saying where, or None without a ledger.
    ``confidential``: the names of the product's confidential record files."""
    from das.io.writers import file_sha256
    from das.refusal import RunRefused
    from das.trust import PrivacyLedger, configured_store

    store = configured_store()
    if store is None:
        return None
    from das.trust import RunSigner, run_key

    fingerprints = dict(getattr(report, "fingerprints", None) or {})
    try:
        ledger = PrivacyLedger(store)
        ledger.require_intact()
        signer = RunSigner(run_key()[0])  # counts in production only if the charter names it
        dataset = ledger.record_validation_of(
            product, confidential, fingerprints, file_sha256(config), verdict_summary(report),
            signer=signer,
        )  # fmt: skip
    except RunRefused as exc:
        return f"not recorded in the privacy ledger: {exc}"
    where = "dataset " + dataset[:16] if dataset else "no dataset (records not read whole)"
    return f"recorded in the privacy ledger {ledger.location}: {where}"
