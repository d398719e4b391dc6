"""What the product flows share besides the release run itself (:mod:`tasks.run_context`): the
run log file, the validation gate, steps done once per run, combining per-partition ledgers, and
the Prefect artifacts (privacy spend per pass, the audit summary, the validation report link).

Artifacts and logs carry stage names, timings, hashes, budgets, noise parameters and noisy row
counts only: never a record, a true count, a noise value or a count of input records (those go
to the curator's local log, :mod:`das.runs.curator_log`).
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from prefect import get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.io.tables import InputFormatError  # noqa: E402
from das.privacy.accounting import Measurement, PrivacyAccountant, compose, summarize  # noqa: E402
from das.privacy.report import measurement_row  # noqa: E402
from das.runs.audit import AuditRecorder, audit_markdown, md_escape  # noqa: E402
from das.runs.curator_log import curator_log  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.runs.policy import RunRefused  # noqa: E402
from das.runs.steps import RunSteps  # noqa: E402
from das.validation.report import ValidationFailed  # noqa: E402

if TYPE_CHECKING:
    from das.runs.start import RunInputs
    from tasks.run_context import ReleaseRun

# Loggers whose records go to the run's log file: the flow and task run loggers, the engine.
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "das")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RunLogHandler(logging.FileHandler):
    """The run log file; a write it cannot make (a full disk) is dropped quietly: the run
    itself then fails on its own write, and says so in one line."""

    def handleError(self, record: logging.LogRecord) -> None:
        self.failed = True


@contextlib.contextmanager
def run_log_file(path: str | Path) -> Iterator[Path]:
    """Copy the run's log records into ``path`` (appending: a rerun continues the same log).

    The file is written as the run goes, so a failed or killed run still leaves its log.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _RunLogHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield path
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    text = "-".join(parts).lower()
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def _shown(value: Any, digits: int = 6) -> Any:
    """A table cell: ∞ for an infinite (null) number, floats rounded for reading."""
    if value is None:
        return "∞"
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    return value


def ledger_table(accountant: PrivacyAccountant) -> list[dict[str, Any]]:
    """One row per measurement of a ledger, narrow enough for the Prefect UI: the query
    (geography / table / iteration level / stage), budget, Δ, σ² or scale, MOE, drawn."""
    rows = []
    for entry in accountant.entries:
        row = measurement_row(entry.measurement)
        parts = (row["geography"], row["table"], row["iteration_level"], row["stage"])
        parameter = row["noise_parameter"]
        rows.append(
            {
                "query": " / ".join(str(part) for part in parts if part is not None),
                "budget": _shown(row["budget"]),
                "Δ": _shown(row["sensitivity"]),
                "σ²" if parameter == "sigma_squared" else parameter: _shown(row[parameter]),
                f"MOE {row['confidence']:.0%}": _shown(row["moe"], 4),
                "drawn": "yes" if entry.drawn else "no",
            }
        )
    return rows


TOTAL_LABELS = {
    "rho": "ρ (zCDP, add/remove one person)",
    "bounded_rho": "ρ, bounded (change one person: 2ρ)",
    "rho_exact": "ρ, exact",
    "bounded_rho_exact": "bounded ρ, exact",
    "epsilon": "ε (pure DP, add/remove one person)",
    "bounded_epsilon": "ε, bounded (change one person: 2ε)",
    "epsilon_exact": "ε, exact",
    "bounded_epsilon_exact": "bounded ε, exact",
    "delta": "δ",
    "epsilon_analytic": "ε at δ: ρ + 2√(ρ ln 1/δ)",
    "epsilon_optimal": "ε at δ: optimal Rényi conversion",
    "epsilon_optimal_grid": "ε at δ: optimal, integer-order grid",
    "epsilon_rdp": "ε at δ: exact Rényi divergence",
}


def totals_markdown(title: str, accountants: Mapping[str, PrivacyAccountant], delta: float) -> str:
    """Markdown summary of each pass's totals: unbounded, bounded and (ε, δ), labelled for a
    reader (the audit and ``das budget report --json`` keep the keys)."""
    lines = [f"# {md_escape(title)}", "", f"(ε, δ) conversions at δ = {delta:g}.", ""]
    for name, accountant in accountants.items():
        summary = summarize(accountant, delta).to_dict()
        lines.append(f"## Pass {md_escape(name)} ({summary['privacy_defn']})")
        lines.append("")
        lines.append("| quantity | value |")
        lines.append("|---|---|")
        for key, value in summary.items():
            if key == "privacy_defn":
                continue
            shown = "∞" if value is None else _shown(value)
            lines.append(f"| {md_escape(TOTAL_LABELS.get(key, key))} | {md_escape(shown)} |")
        lines.append(f"| measurements | {len(accountant)} |")
        lines.append("")
    return "\n".join(lines)


def publish_privacy_artifacts(
    product: str,
    accountants: Mapping[str, PrivacyAccountant],
    delta: float,
    banner: str = "",
) -> list[str]:
    """A table artifact per pass (every query) and one Markdown summary of the totals;
    ``banner`` (e.g. "[SEEDED] ") heads every title of a release that is not private."""
    ids = []
    for name, accountant in accountants.items():
        artifact = create_table_artifact(
            table=ledger_table(accountant),
            key=artifact_key(product, "privacy", name),
            description=(
                f"{banner}{product} pass {name}: every measurement, its budget, noise and MOE"
            ),
        )
        ids.append(str(artifact))
    summary = create_markdown_artifact(
        markdown=totals_markdown(f"{banner}{product} privacy spend", accountants, delta),
        key=artifact_key(product, "privacy-totals"),
        description=f"{banner}{product}: privacy loss per pass (unbounded, bounded, (ε, δ))",
    )
    ids.append(str(summary))
    return ids


def publish_audit_artifact(product: str, audit: Mapping[str, Any], banner: str = "") -> str:
    """The audit record as a readable Markdown summary (:func:`das.runs.audit.audit_markdown`),
    titled with the attempt: a retried run's page shows each attempt's audit apart."""
    attempt = (audit.get("parameters") or {}).get("attempt") or 1
    artifact = create_markdown_artifact(
        markdown=audit_markdown(audit, banner),
        key=artifact_key(product, "audit"),
        description=(
            f"{banner}{product}: audit record of attempt {attempt} ({audit.get('status')}; "
            "audit.json in the release and the run folder)"
        ),
    )
    return str(artifact)


def publish_validation_verdict(product: str, summary: Mapping[str, Any]) -> None:
    """The verdict of a release run's validation on its page: VALID or NOT VALID, the counts
    of errors, warnings and checks, the failed checks by name, and where the report is (no
    data value, no count of records)."""
    from tasks.validate import validation_markdown

    create_markdown_artifact(
        markdown=validation_markdown(product, "this run", summary),
        key=artifact_key(product, "validation"),
        description=f"{product}: validation of this run's inputs — "
        + ("VALID" if summary.get("ok") else "NOT VALID"),
    )


def stored_ledgers(folder: RunFolder) -> dict[str, Any]:
    """Partition ledgers persisted so far (digests and budgets only): the audit of a failed run
    lists what is on disk, whoever drew it."""
    if not folder.ledger_dir.is_dir():
        return {}
    return {
        path.stem: json.loads(path.read_text()) for path in sorted(folder.ledger_dir.glob("*.json"))
    }


@dataclass(frozen=True)
class ValidationOutcome:
    """A validation's summary (counts and check names: for the audit and Prefect) and the
    canonical fingerprints of the files it read (for the ledger; never shown)."""

    summary: dict[str, Any]
    fingerprints: dict[str, str]


@task(name="validate-inputs", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def validate_inputs(
    product: str, config_path: str, data_dir: str, report_dir: str
) -> ValidationOutcome:
    """Run `das validate <product>`; the summary (counts and check names, no values) and the
    records' fingerprints."""
    from das.validation import validate_phsafe, validate_safetab_p

    validator = {"safetab-p": validate_safetab_p, "phsafe": validate_phsafe}[product]
    report = validator(config_path, data_dir, report_dir)
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
    return ValidationOutcome(summary, dict(getattr(report, "fingerprints", None) or {}))


def validation_gate(run: ReleaseRun) -> None:
    """Validate the inputs — the run folder's sealed copy of the parameters and the records —
    (or record that the operator skipped it); raise :class:`ValidationFailed` before any noise
    is drawn when they are invalid. A resumed run whose earlier attempt validated these very
    files reuses that verdict (and its fingerprints). The verdict goes into the ledger."""
    audit, steps, folder = run.audit, run.steps, run.folder
    with run.stage("validate", skipped=steps.done("validate") is not None):
        if run.request.skip_validation:
            audit.update(validation={"skipped": True})
            get_run_logger().info("validation skipped (--skip-validation)")
            return
        earlier = steps.done("validate")
        if earlier is not None:
            audit.update(validation={**earlier["result"], "from_earlier_attempt": True})
            run.validated = dict(earlier.get("fingerprints") or {})
            get_run_logger().info("records unchanged since an earlier attempt validated them")
            return
        outcome = validate_inputs(
            run.product, str(run.sealed_config), str(run.inputs.data_dir),
            str(folder.validation_dir),
        )  # fmt: skip
        run.sealed.check_copy(folder.root)
        summary = outcome.summary
        audit.update(validation=summary)
        publish_validation_verdict(run.product, summary)
        run.ledger.record_validation_of(
            run.product, run.inputs.confidential, outcome.fingerprints,
            run.sealed.sha256("config.json"), summary, run.run_id,
        )  # fmt: skip
        if not summary["ok"]:
            raise ValidationFailed(
                f"inputs are not valid: {summary['errors']} error(s) in checks "
                f"{', '.join(summary['failed_checks'])}; report in "
                f"{summary['report_dir']}; no noise was drawn"
            )
        run.validated = dict(outcome.fingerprints)
        steps.mark("validate", result=summary, fingerprints=outcome.fingerprints)


def input_path(inputs: RunInputs, name: str) -> Path:
    """The record file ``name`` of the run (a run with ``--skip-validation`` meets a missing one
    here, before anything is drawn)."""
    path = inputs.records().get(name)
    if path is None:
        present = sorted(p.name for p in inputs.candidates if p.stem == name and p.is_file())
        if len(present) > 1:
            raise ValidationFailed(
                f"both {' and '.join(present)} exist in {inputs.data_dir}: keep only one {name} "
                "input (which one is meant would be a guess); nothing was drawn"
            )
        raise ValidationFailed(
            f"no {name} input in {inputs.data_dir} (.txt/.csv or .parquet); nothing was drawn"
        )
    return Path(path)


class InputUnreadable(InputFormatError):
    """A record file the run could not read past validation (changed since, or never validated
    under ``--skip-validation``): invalid input, exit 1. Nothing was drawn: reading precedes
    every draw. Its message names no value of the records (it is shareable)."""

    shareable = True


@contextlib.contextmanager
def read_records_locally(folder: RunFolder, what: str) -> Iterator[None]:
    """Run a task's read of the record files so that a format error's details (row numbers,
    row counts) reach the curator's local log only: the task's state message, which the Prefect
    server keeps, says what failed and where the details are."""
    try:
        yield
    except InputFormatError as exc:
        if exc.shareable:
            raise InputUnreadable(f"{exc}.") from None
        curator_log(folder, "%s could not be read: %s", what, exc)
        raise InputUnreadable(
            f"{what} could not be read ({type(exc).__name__}): the file changed since it was "
            "validated, or was never validated (--skip-validation). The details are in the "
            f"run's local log {folder.log_path}; nothing was drawn."
        ) from None


def unless_refused(task: Any, task_run: Any, state: Any) -> bool:
    """A task's ``retry_condition_fn``: retry faults, not refusals or unreadable inputs (a
    file that cannot be read fails the same way again)."""
    return not isinstance(state.data, RunRefused | InputUnreadable)


def run_once(steps: RunSteps, name: str, call: Callable[[], Any]) -> Any:
    """``call()`` unless an earlier attempt of this run completed step ``name`` (then its
    recorded result); marks the step complete afterwards. Results must be JSON values."""
    earlier = steps.done(name)
    if earlier is not None:
        get_run_logger().info("step %s: done by an earlier attempt, not repeated", name)
        return earlier.get("result")
    result = call()
    steps.mark(name, result=result)
    return result


def settled(futures: Sequence[Any], on_done: Callable[[], None] | None = None) -> list[Any]:
    """The results of ``futures`` once *all* of them finished (``on_done`` called as each
    does: progress): when one fails, the others (drawing tasks) are not left running behind
    the failure, so the failed attempt's audit lists every draw it persisted."""
    from prefect.futures import as_completed

    for _ in as_completed(list(futures)):
        if on_done is not None:
            on_done()
    return [future.result() for future in futures]


def record_draws(audit: AuditRecorder, results: Sequence[Any], what: str) -> None:
    """The measured partitions' fresh and reused draws, into the audit and the run log."""
    fresh = sum(len(result.fresh) for result in results)
    reused = sum(len(result.reused) for result in results)
    audit.update(draws={"fresh": fresh, "reused": reused})
    get_run_logger().info("measured %d %s: %d draws, %d reused from the run folder",
                          len(results), what, fresh, reused)  # fmt: skip


def combine_ledgers(
    definition: str, plan: Iterable[Measurement], ledgers: Iterable[Mapping[str, Any]]
) -> PrivacyAccountant:
    """One pass's ledger from its partitions' persisted ledgers, under the plan's total;
    refuses, exactly as the engine's accountant, an overspend or a duplicate."""
    accountant = PrivacyAccountant(definition, compose(plan))
    for ledger in ledgers:
        for entry in PrivacyAccountant.from_dict(ledger).entries:
            if entry.noise_digest is None:
                accountant.charge(entry.measurement)
            else:
                accountant.record(entry.measurement, entry.noise_digest)
    return accountant
