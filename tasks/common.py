"""Helpers shared by the product flows' tasks: the run log file and privacy-spend artifacts.

Artifacts and logs carry aggregates only (budgets, noise parameters, row counts, hashes):
never a record, a true count or a noise value.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import contextlib  # noqa: E402
import logging  # noqa: E402
from collections.abc import Iterator, Mapping, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402

from das.privacy.accounting import PrivacyAccountant, summarize  # noqa: E402
from das.privacy.report import measurement_row  # noqa: E402

# Loggers whose records go to the run's log file: the flow and task run loggers, the engine.
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "das")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextlib.contextmanager
def run_log_file(path: str | Path) -> Iterator[Path]:
    """Copy the run's log records into ``path`` (appending: a rerun continues the same log).

    The file is written as the run goes, so a failed or killed run still leaves its log.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
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


def ledger_table(accountant: PrivacyAccountant) -> list[dict[str, Any]]:
    """One row per measurement of a ledger (level, stage, budget, Δ, σ²/scale, MOE, drawn)."""
    rows = []
    for entry in accountant.entries:
        row = measurement_row(entry.measurement)
        row["drawn"] = entry.drawn
        rows.append(row)
    return rows


def totals_markdown(
    title: str, accountants: Mapping[str, PrivacyAccountant], delta: float
) -> str:
    """Markdown summary of each pass's totals: unbounded, bounded and (ε, δ)."""
    lines = [f"# {title}", "", f"(ε, δ) conversions at δ = {delta:g}.", ""]
    for name, accountant in accountants.items():
        summary = summarize(accountant, delta).to_dict()
        lines.append(f"## Pass {name} ({summary['privacy_defn']})")
        lines.append("")
        lines.append("| quantity | value |")
        lines.append("|---|---|")
        for key, value in summary.items():
            if key == "privacy_defn":
                continue
            shown = "∞" if value is None else value
            lines.append(f"| {key} | {shown} |")
        lines.append(f"| measurements | {len(accountant)} |")
        lines.append("")
    return "\n".join(lines)


def publish_privacy_artifacts(
    product: str,
    accountants: Mapping[str, PrivacyAccountant],
    delta: float,
) -> list[str]:
    """A table artifact per pass (every query) and one Markdown summary of the totals."""
    ids = []
    for name, accountant in accountants.items():
        artifact = create_table_artifact(
            table=ledger_table(accountant),
            key=artifact_key(product, "privacy", name),
            description=f"{product} pass {name}: every measurement, its budget, noise and MOE",
        )
        ids.append(str(artifact))
    summary = create_markdown_artifact(
        markdown=totals_markdown(f"{product} privacy spend", accountants, delta),
        key=artifact_key(product, "privacy-totals"),
        description=f"{product}: privacy loss per pass (unbounded, bounded, (ε, δ))",
    )
    ids.append(str(summary))
    return ids


def publish_audit_artifact(product: str, audit: Mapping[str, Any], keys: Sequence[str]) -> str:
    """The audit record's headline fields as a Markdown artifact (the file has the rest)."""
    lines = [f"# {product} run {audit.get('run_id')}: {audit.get('status')}", ""]
    lines.append("| field | value |")
    lines.append("|---|---|")
    for key in keys:
        value = audit.get(key)
        if isinstance(value, dict | list):
            value = f"{len(value)} item(s), see audit.json"
        lines.append(f"| {key} | {value} |")
    artifact = create_markdown_artifact(
        markdown="\n".join(lines),
        key=artifact_key(product, "audit"),
        description=f"{product}: audit record (audit.json in the output folder)",
    )
    return str(artifact)
