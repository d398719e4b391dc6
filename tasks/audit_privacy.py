"""Prefect tasks of the audit-privacy flow: run an audit of das.privacy_audit, post its report.

An audit reads no confidential data (its inputs are synthetic, its trials simulated), so its
result may be cached by Prefect like any other; it is not, because a rerun should draw fresh
trials. The report is posted as a Markdown artifact for the Prefect UI.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.privacy.noise import seeded_rng  # noqa: E402
from das.privacy_audit.audit import DEFAULT_PRODUCT_TRIALS  # noqa: E402
from das.privacy_audit.markdown import audit_markdown, self_test_markdown  # noqa: E402

REPORT_ARTIFACT_KEY = "privacy-audit"
TARGETS = ("mechanism", "safetab-p", "phsafe", "self-test")


@task(name="privacy-audit", cache_policy=NO_CACHE, persist_result=False)
def run_privacy_audit(
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
    """The audit as ``{"result": <the CLI's --json object>, "markdown": ..., "ok": bool}``."""
    rng = None if seed is None else seeded_rng(seed)
    if target == "mechanism":
        from das.privacy_audit.mechanism import audit_mechanism

        if mechanism is None or budget is None or sensitivity is None or trials is None:
            raise ValueError("a mechanism audit needs mechanism, budget, sensitivity, trials")
        report = audit_mechanism(
            mechanism, budget, sensitivity, trials, confidence=confidence, delta=delta, rng=rng
        )
        return {"result": report.to_dict(), "markdown": audit_markdown(report), "ok": report.ok}
    if target in ("safetab-p", "phsafe"):
        if config is None:
            raise ValueError(f"a {target} audit needs a config")
        if target == "safetab-p":
            from das.privacy_audit.safetab_p import audit_safetab_p as audit
        else:
            from das.privacy_audit.phsafe import audit_phsafe as audit
        report = audit(
            config,
            trials=trials or DEFAULT_PRODUCT_TRIALS,
            confidence=confidence,
            delta=delta,
            rng=rng,
        )
        return {"result": report.to_dict(), "markdown": audit_markdown(report), "ok": report.ok}
    if target == "self-test":
        from das.privacy_audit.broken import run_self_test

        tested = run_self_test(confidence=confidence, delta=delta, rng=rng)
        return {"result": tested.to_dict(), "markdown": self_test_markdown(tested), "ok": tested.ok}
    raise ValueError(f"Unknown audit target {target!r} (use {', '.join(TARGETS)})")


@task(name="privacy-audit-artifact", cache_policy=NO_CACHE, persist_result=False)
def publish_audit_report(markdown: str, target: str) -> str:
    """The report as a Markdown artifact (synthetic inputs and simulated trials only)."""
    artifact_id = create_markdown_artifact(
        markdown=markdown,
        key=REPORT_ARTIFACT_KEY,
        description=f"Empirical privacy audit ({target}): claimed versus lower bound",
    )
    return str(artifact_id)
