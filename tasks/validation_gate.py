"""The validation gate of a release run: validate the inputs before any noise is drawn.

The verdict (counts and check names, never a value) goes into the audit, the run's page and the
privacy ledger; the records' canonical fingerprints (never shown) let the run prove later that
it measures the very records validated. A product's :class:`OneRead` makes validation's read
of the records also the engine's (its geography, its spill): the inputs are read once, and the
run measures exactly the records validated and fingerprinted.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from collections.abc import Mapping  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import TYPE_CHECKING, Any, Protocol  # noqa: E402

from prefect import get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.validation.findings import ValidationFailed, ValidationReport  # noqa: E402
from das.validation.scan import EngineTap  # noqa: E402
from tasks.artifacts import publish_validation_verdict  # noqa: E402

if TYPE_CHECKING:
    from das.runs.lifecycle import ReleaseRun


class OneRead(Protocol):
    """What a product's engine takes from validation's read of the records (its first steps,
    made from the chunks validation checks: no second read)."""

    def taps(self) -> Mapping[str, EngineTap]:
        """Spec name → the tap of that file (afresh: a retried validation starts again)."""
        ...

    def made(self, report: ValidationReport) -> dict[str, Any]:
        """Step name → its result (as :func:`tasks.flow_steps.run_once` keeps it) of each
        step the read made, when ``report`` is ok; else ``{}``, and nothing made is kept."""
        ...


@dataclass(frozen=True)
class ValidationOutcome:
    """A validation's summary (counts and check names: for the audit and Prefect), the
    canonical fingerprints of the files it read (for the ledger; never shown) and the engine
    steps its read made (their results: fingerprints, public states or buckets)."""

    summary: dict[str, Any]
    fingerprints: dict[str, str]
    made: dict[str, Any] = field(default_factory=dict)


@task(name="validate-inputs", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def validate_inputs(
    product: str,
    config_path: str,
    data_dir: str,
    report_dir: str,
    reading: OneRead | None = None,
) -> ValidationOutcome:
    """Run `das validate <product>`; the summary (counts and check names, no values) and the
    records' fingerprints; with ``reading``, the engine steps made on the same read."""
    from das.validation import validate_phsafe, validate_safetab_p

    validator = {"safetab-p": validate_safetab_p, "phsafe": validate_phsafe}[product]
    taps = reading.taps() if reading is not None else None
    report = validator(config_path, data_dir, report_dir, taps=taps)
    made = reading.made(report) if reading is not None else {}
    for line in report.summary_lines()[:1]:
        get_run_logger().info(line)
    summary = {
        "skipped": False,
        "ok": report.ok,
        "errors": len(report.errors),
        "warnings": len(report.warnings),
        "failed_checks": sorted({f.check for f in report.errors}),
        "checks_run": len(report.checks_run),
        "report_dir": report_dir,
    }
    fingerprints = dict(getattr(report, "fingerprints", None) or {})
    return ValidationOutcome(summary, fingerprints, made)


def validation_gate(run: ReleaseRun, reading: OneRead | None = None) -> set[str]:
    """Validate the inputs — the run folder's sealed copy of the parameters and the records —
    (or record that the operator skipped it); raise :class:`ValidationFailed` before any noise
    is drawn when they are invalid. A resumed run whose earlier attempt validated these very
    files reuses that verdict (and its fingerprints). The verdict goes into the ledger.

    With ``reading``, validation's read also makes the engine's first steps; they are marked
    done with the verdict (only when the inputs are valid). Returns the steps made so."""
    audit, steps, folder = run.audit, run.steps, run.folder
    with run.stage("validate", skipped=steps.done("validate") is not None):
        if run.request.skip_validation:
            audit.update(validation={"skipped": True})
            get_run_logger().info("validation skipped (--skip-validation)")
            return set()
        earlier = steps.done("validate")
        if earlier is not None:
            audit.update(validation={**earlier["result"], "from_earlier_attempt": True})
            run.validated = dict(earlier.get("fingerprints") or {})
            get_run_logger().info("records unchanged since an earlier attempt validated them")
            return set()
        outcome = validate_inputs(
            run.product, str(run.sealed_config), str(run.inputs.data_dir),
            str(folder.validation_dir), reading,
        )  # fmt: skip
        run.sealed.check_copy(folder.root)
        summary = outcome.summary
        audit.update(validation=summary)
        publish_validation_verdict(run.product, summary)
        run.ledger.record_validation_of(
            run.product, run.inputs.confidential, outcome.fingerprints,
            run.sealed.sha256("config.json"), summary, run.run_id, run.signer,
        )  # fmt: skip
        if not summary["ok"]:
            raise ValidationFailed(
                f"inputs are not valid: {summary['errors']} error(s) in checks "
                f"{', '.join(summary['failed_checks'])}; report in "
                f"{summary['report_dir']}; no noise was drawn"
            )
        run.validated = dict(outcome.fingerprints)
        for step, result in outcome.made.items():  # before the verdict: a resume that finds
            steps.mark(step, result=result)  # the verdict finds what its read made
        steps.mark("validate", result=summary, fingerprints=outcome.fingerprints)
        if outcome.made:
            get_run_logger().info(
                "validation's read of the records also made: %s", ", ".join(outcome.made)
            )
        return set(outcome.made)
