"""What validation found: failures with file, column, check, count, first rows and sample values.

A :class:`Failure` is one rule broken somewhere in one file: the rule's name (a Great
Expectations expectation type such as ``expect_column_values_to_match_regex`` for the reviewed
suites in ``expectations/``, or an engine check name such as ``block_in_grf_c``), the column(s),
how many rows break it, the first row numbers (1-based, row 1 = first record after the header,
as in :mod:`das.io.tables`) and a few of the offending values *as written in the file*.

Those values are the curator's own confidential data: they go to ``report.json`` and the HTML
reports in the local report folder only. Everything that is printed or logged
(:meth:`Failure.line`, :meth:`ValidationReport.summary_lines`) carries names, counts and row
numbers, never a value.
"""

from __future__ import annotations

import contextlib
import html
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from das.io.tables import rows_text

MAX_ROWS = 10  # first failing row numbers kept per failure
MAX_VALUES = 5  # sample values kept per failure (for the first rows)
VALUE_PREFIX = 40  # characters of a sample value kept in a report


def short_value(value: object) -> str:
    """A sample value as a report shows it: its first :data:`VALUE_PREFIX` characters, and
    how long it was when cut (a whole 1 MB field is evidence of nothing more than its start)."""
    text = str(value)
    if len(text) <= VALUE_PREFIX:
        return text
    return f"{text[:VALUE_PREFIX]}… ({len(text):,} characters)"


Severity = Literal["error", "warning"]


class ValidationFailed(RuntimeError):
    """Raised by :meth:`ValidationReport.raise_for_failures`; the message carries no values."""


@dataclass
class Failure:
    """One broken rule in one file (merged over all the chunks the file was read in)."""

    file: str
    column: str | None
    check: str
    message: str
    count: int = 0
    rows: list[int] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    severity: Severity = "error"
    source: Literal["engine", "great_expectations"] = "engine"
    # Columns whose text is shown as the bad value; filled from the file when ``values`` is empty.
    value_columns: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str | None, str]:
        return (self.file, self.column, self.check)

    def line(self) -> str:
        """One line for stdout and the log: no data values."""
        where = f"{self.file}" + (f" [{self.column}]" if self.column else "")
        rows = f"; {rows_text(self.rows, self.count, self.file)}" if self.rows else ""
        head = f"{self.severity.upper()} {where} {self.check}"
        return f"{head}: {self.count} failing{rows} — {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "column": self.column,
            "check": self.check,
            "severity": self.severity,
            "source": self.source,
            "count": self.count,
            "rows": list(self.rows),
            "values": list(self.values),
            "message": self.message,
        }


class FailureCollector:
    """Accumulates failures chunk by chunk, keyed by (file, column, check).

    The rows kept are the smallest row numbers: chunks arrive in file order; failures found
    per bucket of records (out of file order) come without values and are merged, and their
    values are read back from the file afterwards (``value_columns``).

    Chunks are checked in worker threads (:func:`das.validation.scan.scan_file`): there a
    thread's :meth:`add` calls are only recorded (:meth:`recording`), then replayed
    (:meth:`replay`) in file order, so the report is the same whatever order the threads
    finish in.
    """

    def __init__(self) -> None:
        self._failures: dict[tuple[str, str | None, str], Failure] = {}
        self._local = threading.local()

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[tuple[tuple, dict]]]:
        """Within the block, this thread's :meth:`add` calls are recorded in the list yielded
        instead of applied (for :meth:`replay`, in file order)."""
        calls: list[tuple[tuple, dict]] = []
        self._local.calls = calls
        try:
            yield calls
        finally:
            self._local.calls = None

    def replay(self, calls: Iterable[tuple[tuple, dict]]) -> None:
        """Apply recorded :meth:`add` calls, in their order."""
        for args, kwargs in calls:
            self.add(*args, **kwargs)

    def add(
        self,
        file: str,
        column: str | None,
        check: str,
        message: str,
        rows: Sequence[int] | np.ndarray = (),
        values: Sequence[str] | np.ndarray | None = None,
        count: int | None = None,
        severity: Severity = "error",
        value_columns: Sequence[str] = (),
        source: Literal["engine", "great_expectations"] = "engine",
    ) -> None:
        """Record ``count`` (default ``len(rows)``) failing rows; no-op when there are none.

        ``values`` (aligned with ``rows``) are the file's own text; when omitted they are read
        back later from ``value_columns`` (see :func:`das.validation.scan.fill_values`).
        """
        calls = getattr(self._local, "calls", None)
        if calls is not None:  # a worker thread's chunk: applied later, in file order
            calls.append(
                (
                    (file, column, check, message),
                    {"rows": rows, "values": values, "count": count, "severity": severity,
                     "value_columns": value_columns, "source": source},
                )
            )  # fmt: skip
            return
        rows_array = np.asarray(rows, dtype=np.int64).ravel()
        n = int(rows_array.size if count is None else count)
        if n <= 0:
            return
        key = (file, column, check)
        failure = self._failures.get(key)
        if failure is None:
            failure = Failure(
                file=file,
                column=column,
                check=check,
                message=message,
                severity=severity,
                source=source,
                value_columns=tuple(value_columns),
            )
            self._failures[key] = failure
        failure.count += n
        room = MAX_ROWS - len(failure.rows)
        if values is None and rows_array.size and failure.rows:
            # Rows may come out of file order (checks run per MAFID bucket): keep the smallest.
            smallest = np.sort(rows_array)[:MAX_ROWS]
            merged = np.sort(np.concatenate([np.asarray(failure.rows, np.int64), smallest]))
            failure.rows = [int(row) for row in merged[:MAX_ROWS]]
        elif room > 0 and rows_array.size:
            source = rows_array if values is not None else np.sort(rows_array)
            failure.rows.extend(int(row) for row in source[:room])
        if values is not None:
            # Values go with the first rows; a failure without rows (header, config) keeps 5.
            shown = min(MAX_VALUES, len(failure.rows)) if failure.rows else MAX_VALUES
            room = shown - len(failure.values)
            if room > 0:
                failure.values.extend(short_value(value) for value in list(values)[:room])

    def has(self, file: str, column: str | None = None, check: str | None = None) -> bool:
        return any(
            f.file == file
            and (column is None or f.column == column)
            and (check is None or f.check == check)
            for f in self._failures.values()
        )

    def has_errors(self, file: str) -> bool:
        """Whether an error-severity failure was recorded for ``file`` (applied ones only)."""
        return any(f.file == file and f.severity == "error" for f in self._failures.values())

    def needing_values(self, file: str) -> list[Failure]:
        return [
            f
            for f in self._failures.values()
            if f.file == file and f.value_columns and f.rows and not f.values
        ]

    def failures(self) -> list[Failure]:
        return list(self._failures.values())


@dataclass
class FileSummary:
    """How one input file was read: rows, whether every row was checked, the GX sample."""

    file: str
    path: str | None
    rows: int = 0
    scanned: bool = False  # every row went through the engine checks
    gx_suite: str | None = None
    gx_success: bool | None = None
    gx_rows: int = 0  # rows Great Expectations evaluated
    gx_sampled: bool = False  # True when GX saw a sample (every row was still engine-checked)
    gx_expectations: int = 0
    gx_failed_expectations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SkippedCheck:
    """A check that could not run because an earlier problem blocks it (the run is not ok)."""

    check: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "reason": self.reason}


@dataclass
class ValidationReport:
    """The result of validating one product's inputs; ``ok`` only when no error was found."""

    product: str
    config: str
    data: str
    report_dir: str | None
    failures: list[Failure] = field(default_factory=list)
    files: list[FileSummary] = field(default_factory=list)
    skipped: list[SkippedCheck] = field(default_factory=list)
    checks_run: list[str] = field(default_factory=list)
    started: str = ""
    seconds: float = 0.0
    gx_sample_rows: int = 0
    artifacts: dict[str, str] = field(default_factory=dict)
    # Spec name -> canonical fingerprint (das.io.fingerprint) of each record file read to its
    # end with every value converted: the dataset identity of the privacy ledger. Derived from
    # the confidential records: report.json (curator's folder) only, never a log or Prefect.
    # Meaningful only when ``ok``.
    fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def errors(self) -> list[Failure]:
        return [f for f in self.failures if f.severity == "error"]

    @property
    def warnings(self) -> list[Failure]:
        return [f for f in self.failures if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        """Valid: no error-severity failure (warnings do not block a run)."""
        return not self.errors

    def find(self, check: str, file: str | None = None, column: str | None = None) -> list[Failure]:
        """Failures of one check (optionally in one file / column): handy in tests and flows."""
        return [
            f
            for f in self.failures
            if f.check == check
            and (file is None or f.file == file)
            and (column is None or f.column == column)
        ]

    def summary_lines(self) -> list[str]:
        """A short human summary (no data values): verdict, files, then one line per failure."""
        verdict = "VALID" if self.ok else "NOT VALID"
        lines = [
            f"das validate {self.product}: {verdict} — {len(self.errors)} error(s), "
            f"{len(self.warnings)} warning(s), {len(self.files)} file(s) in {self.seconds:.1f} s"
        ]
        for summary in self.files:
            gx = ""
            if summary.gx_suite is not None and summary.gx_success is not None:
                scope = "sample of " if summary.gx_sampled else ""
                state = "passed" if summary.gx_success else "FAILED"
                gx = f"; GX suite {summary.gx_suite} {state} on {scope}{summary.gx_rows:,} rows"
            read = "all rows checked" if summary.scanned else "NOT fully read"
            lines.append(f"  {summary.file}: {summary.rows:,} rows, {read}{gx}")
        lines.extend(f"  {failure.line()}" for failure in self.failures)
        lines.extend(f"  SKIPPED {s.check}: {s.reason}" for s in self.skipped)
        if self.report_dir:
            lines.append(f"  report: {self.report_dir}")
        return lines

    def raise_for_failures(self) -> None:
        """Raise :class:`ValidationFailed` (counts and names only) unless the inputs are valid."""
        if not self.ok:
            lines = [f.line() for f in self.errors]
            raise ValidationFailed(
                f"{self.product} inputs failed validation ({len(lines)} error(s)):\n  "
                + "\n  ".join(lines)
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "product": self.product,
            "ok": self.ok,
            "config": self.config,
            "data": self.data,
            "report_dir": self.report_dir,
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "failures": [f.to_dict() for f in self.failures],
            "files": [s.to_dict() for s in self.files],
            "skipped_checks": [s.to_dict() for s in self.skipped],
            "checks_run": list(self.checks_run),
            "great_expectations": {
                "sample_rows": self.gx_sample_rows,
                "note": (
                    "Great Expectations evaluates each suite on the whole file when it has at most "
                    "sample_rows rows, else on a systematic sample plus the rows the engine "
                    "flagged; the engine checks every rule of every suite on every row."
                ),
            },
            "artifacts": dict(self.artifacts),
            "fingerprints": dict(sorted(self.fingerprints.items())),
            "privacy_note": (
                "values are the input files' own text, for the curator only: keep this folder "
                "with the confidential inputs"
            ),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def render_html(report: ValidationReport) -> str:
    """A self-contained HTML page of every failure (engine and GX), escaped, no external assets."""

    def cell(value: object) -> str:
        return f"<td>{html.escape(str(value))}</td>"

    def rows_of(failures: Iterable[Failure]) -> str:
        body = []
        for f in failures:
            body.append(
                "<tr>"
                + "".join(
                    cell(v)
                    for v in (
                        f.severity,
                        f.file,
                        f.column or "",
                        f.check,
                        f.count,
                        ", ".join(map(str, f.rows)),
                        " ; ".join(f.values),
                        f.message,
                    )
                )
                + "</tr>"
            )
        return "\n".join(body)

    files = "\n".join(
        "<tr>"
        + "".join(
            cell(v)
            for v in (
                s.file,
                s.rows,
                "yes" if s.scanned else "no",
                s.gx_suite or "",
                {True: "passed", False: "failed", None: ""}[s.gx_success],
                f"{s.gx_rows}{' (sample)' if s.gx_sampled else ''}",
            )
        )
        + "</tr>"
        for s in report.files
    )
    verdict = "VALID" if report.ok else "NOT VALID"
    docs = report.artifacts.get("data_docs")
    docs_link = (
        f'<p><a href="{html.escape(docs)}">Great Expectations Data Docs</a></p>' if docs else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>das validate {report.product}</title>
<style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}
td,th{{border:1px solid #999;padding:2px 6px;vertical-align:top}}</style></head>
<body><h1>das validate {html.escape(report.product)}: {verdict}</h1>
<p>Config {html.escape(report.config)}; data {html.escape(report.data)}; started
{html.escape(report.started)}; {report.seconds:.1f} s.
Values shown are the input files' own text: confidential, for the curator only.</p>
{docs_link}
<h2>Files</h2><table><tr><th>file</th><th>rows</th><th>every row checked</th><th>GX suite</th>
<th>GX result</th><th>GX rows</th></tr>
{files}</table>
<h2>Failures</h2><table><tr><th>severity</th><th>file</th><th>column</th><th>check</th>
<th>count</th><th>first rows</th><th>sample values</th><th>rule</th></tr>
{rows_of(report.failures)}</table>
</body></html>
"""
