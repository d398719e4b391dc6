"""The ``audit-privacy`` flow: audit → post the report as an artifact → fail if a claim is beaten.

The Prefect face of ``das audit-privacy`` (same engine, same report). A lower bound above its
claim (or, for the self-test, a broken variant left undetected) fails the flow run after the
artifact is posted, so the UI shows both the red run and the evidence.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import flow, get_run_logger  # noqa: E402

from tasks.audit_privacy import publish_audit_report, run_privacy_audit  # noqa: E402


class PrivacyClaimExceeded(RuntimeError):
    """The audit found a lower bound above a claim (or missed a broken variant)."""


@flow(name="audit-privacy", description="Empirical lower bounds on the released privacy loss")
def audit_privacy_flow(
    target: str,
    config: str | None = None,
    trials: int | None = None,
    confidence: float = 0.95,
    delta: float = 1e-10,
    mechanism: str | None = None,
    budget: str | None = None,
    sensitivity: str | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """Audit ``target`` ("mechanism", "safetab-p", "phsafe" or "self-test"); the JSON result."""
    audit = run_privacy_audit(
        target,
        config=config,
        trials=trials,
        confidence=confidence,
        delta=delta,
        mechanism=mechanism,
        budget=budget,
        sensitivity=sensitivity,
        seed=seed,
    )
    publish_audit_report(audit["markdown"], target)
    get_run_logger().info("privacy audit of %s: %s", target, "ok" if audit["ok"] else "FAILED")
    if not audit["ok"]:
        raise PrivacyClaimExceeded(f"privacy audit of {target}: see the privacy-audit artifact")
    return audit["result"]
