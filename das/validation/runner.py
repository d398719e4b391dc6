"""The frame shared by both products: report folder, log, GX run, artifacts, fail-closed.

:func:`run_validation` calls a product's check function with a :class:`Context`, then always
(even when a check raised) reads back sample values for cross-row failures, runs the suites
with Great Expectations, and writes into the report folder:

- ``report.json``: :meth:`ValidationReport.to_dict` (failures with sample values: curator only)
- ``report.html``: every failure, engine and GX, on one self-contained page
- ``data_docs/index.html``: Great Expectations' own Data Docs for the suites (the folder is
  replaced on each run; the pages load their stylesheets from CDNs, so offline they render
  unstyled but complete)
- ``validation.log``: what ran, per file and per check, with counts and row numbers, no values

An unexpected exception becomes an ``internal_error`` failure (type and frames in the log, never
its message or source lines, which could quote data): the inputs count as not validated.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from das.io.atomic import atomic_write_text
from das.io.tables import TableSpec, resolve_input
from das.specs.config import ConfigError
from das.validation.findings import (
    FailureCollector,
    SkippedCheck,
    ValidationReport,
    render_html,
)
from das.validation.scan import FILE_READABLE, SCAN_CHUNK_BYTES, FileScan, fill_values, locate
from das.validation.suites import TABLE_TYPES, Suite

DEFAULT_SAMPLE_ROWS = 20_000
REPORT_SUBDIR = "validation"
LOG_FILE = "validation.log"
INTERNAL_ERROR = "internal_error"
GX_RUN = "great_expectations_run"
RECORDS_PRESENT = "file_has_records"

logger = logging.getLogger("das.validation")
T = TypeVar("T")


@dataclass
class Context:
    """What a product's checks need: where to record failures, scans, settings."""

    collector: FailureCollector
    report: ValidationReport
    sample_rows: int = DEFAULT_SAMPLE_ROWS
    chunk_bytes: int = SCAN_CHUNK_BYTES
    scans: list[tuple[Suite, FileScan]] = field(default_factory=list)

    def ran(self, *checks: str) -> None:
        for check in checks:
            if check not in self.report.checks_run:
                self.report.checks_run.append(check)

    def skip(self, check: str, reason: str) -> None:
        self.report.skipped.append(SkippedCheck(check, reason))
        logger.info("skipped %s: %s", check, reason)

    def add_scan(self, suite: Suite, scan: FileScan) -> FileScan:
        """Record a scanned file (and its fingerprint, if it has one); a file read to its end
        with no record at all is an error (a release of zero persons or units would be a
        complete, plausible-looking lie)."""
        self.scans.append((suite, scan))
        self.report.files.append(scan.summary)
        if scan.fingerprint is not None:
            self.report.fingerprints[scan.spec.name] = scan.fingerprint
        self.ran(*(e["type"] for e in suite.expectations), RECORDS_PRESENT)
        if scan.scanned and scan.summary.rows == 0:
            self.collector.add(
                scan.label,
                None,
                RECORDS_PRESENT,
                "the file has a header but no records; nothing can be released from it",
                count=1,
            )
        logger.info(
            "%s: %d rows%s",
            scan.label,
            scan.summary.rows,
            "" if scan.scanned else " (not fully read)",
        )
        return scan

    def load_config(self, config_path: Path, loader: Callable[[Path], T]) -> T | None:
        """Parse the run config; each problem becomes a `config_parses` failure (None then)."""
        self.ran("config_parses")
        try:
            return loader(config_path)
        except ConfigError as exc:
            lines = str(exc).splitlines()
            self.collector.add(
                config_path.name,
                None,
                "config_parses",
                str(exc),
                count=max(1, len(lines) - 1),
                values=lines[1:],
            )
            return None

    def locate(self, data_dir: Path, spec: TableSpec) -> tuple[Path | None, str]:
        """The input file of ``spec`` (text or Parquet) and its label for reports; a missing or
        ambiguous file is recorded as a failure and gives ``(None, label)``."""
        return locate(data_dir, spec, self.collector, resolve_input)


def default_report_dir(data_dir: str | Path) -> Path:
    """``<data>/validation/``: next to the inputs it describes (it quotes their values)."""
    return Path(data_dir) / REPORT_SUBDIR


def run_validation(
    product: str,
    config_path: str | Path,
    data_dir: str | Path,
    report_dir: str | Path | None,
    checks: Callable[[Context], None],
    *,
    run_gx: bool = True,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    chunk_bytes: int = SCAN_CHUNK_BYTES,
) -> ValidationReport:
    """Run ``checks`` and GX, and always leave report.json, report.html, Data Docs and a log."""
    started = time.perf_counter()
    # Absolute, so the report and the Data Docs name the same folder from any working directory.
    out = (Path(report_dir) if report_dir is not None else default_report_dir(data_dir)).absolute()
    out.mkdir(parents=True, exist_ok=True)
    report = ValidationReport(
        product=product,
        config=str(config_path),
        data=str(data_dir),
        report_dir=str(out),
        started=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        gx_sample_rows=sample_rows,
    )
    collector = FailureCollector()
    context = Context(collector, report, sample_rows=sample_rows, chunk_bytes=chunk_bytes)
    handler = logging.FileHandler(out / LOG_FILE, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.info("das validate %s: config %s, data %s", product, config_path, data_dir)
    try:
        try:
            checks(context)
            for _, scan in context.scans:
                fill_values(collector, scan)
        except Exception as exc:
            _internal_error(collector, "checks", exc)
        if run_gx:
            try:
                _run_great_expectations(context, out / "data_docs")
            except Exception as exc:
                _internal_error(collector, GX_RUN, exc)
    finally:
        report.failures = collector.failures()
        report.seconds = time.perf_counter() - started
        report.artifacts = {"report_json": "report.json", "report_html": "report.html"}
        if run_gx and (out / "data_docs" / "index.html").is_file():
            report.artifacts["data_docs"] = "data_docs/index.html"
        report.artifacts["log"] = LOG_FILE
        for failure in report.failures:
            log = logger.error if failure.severity == "error" else logger.warning
            log("%s", failure.line())
        logger.info(
            "result: %s (%d error(s), %d warning(s)) in %.1f s",
            "VALID" if report.ok else "NOT VALID",
            len(report.errors),
            len(report.warnings),
            report.seconds,
        )
        atomic_write_text(out / "report.json", report.to_json())
        atomic_write_text(out / "report.html", render_html(report))
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(previous_level)
    return report


def _internal_error(collector: FailureCollector, stage: str, exc: Exception) -> None:
    """Fail closed on a bug: record the exception type; the stack (no message) goes to the log."""
    collector.add(
        "(validation)",
        None,
        INTERNAL_ERROR if stage != GX_RUN else GX_RUN,
        f"{stage} stopped with {type(exc).__name__}; see the log. Inputs are NOT validated",
        count=1,
    )
    # Frames only (file, line, function): neither the message nor source lines are logged.
    stack = "\n".join(
        f"  {frame.filename}:{frame.lineno} in {frame.name}"
        for frame in traceback.extract_tb(exc.__traceback__)
    )
    logger.error("%s stopped with %s at:\n%s", stage, type(exc).__name__, stack)


def _run_great_expectations(context: Context, docs_dir: Path) -> None:
    """Run the suites on the scans' samples; report any GX failure the engine did not find."""
    from das.validation.gx_runner import run_suites

    batches = [(suite, scan) for suite, scan in context.scans if scan.sample is not None]
    if not batches:
        return
    outcomes = run_suites([(suite, scan.sample) for suite, scan in batches], docs_dir)
    collector = context.collector
    for (_, scan), outcome in zip(batches, outcomes, strict=True):
        summary = scan.summary
        summary.gx_success = outcome.success
        summary.gx_rows = outcome.rows
        summary.gx_sampled = scan.sampled
        summary.gx_expectations = outcome.expectations
        summary.gx_failed_expectations = len(outcome.failures)
        header_failed = collector.has(scan.label, None, FILE_READABLE) or any(
            collector.has(scan.label, None, kind) for kind in TABLE_TYPES
        )
        for failure in outcome.failures:
            if header_failed or collector.has(scan.label, failure.column, failure.type):
                continue
            message = (
                "the expectation raised an error in Great Expectations (see Data Docs)"
                if failure.error is not None
                else "found by Great Expectations on its sample but not by the engine"
            )
            collector.add(
                scan.label,
                failure.column,
                failure.type,
                message,
                rows=failure.rows,
                values=failure.values,
                count=max(1, failure.unexpected_count),
                source="great_expectations",
            )
