"""The audit record of a run: what ran, on what, with which randomness, at what cost
(docs/explanation/architecture.md#validation-and-audit).

``audit.json`` is written into the run folder at the end of every attempt, including a failed
one (``status: "failed"`` and the error *type* only: messages may quote data), and into the
release folder of a published release. It holds config and spec hashes, input file hashes,
code and package versions, the randomness source and seed mode, the validation summary, the
dataset's privacy-ledger totals, every pass's ledger and totals, output hashes and row counts,
and the wall time of each stage. It never holds a record, a true count or a noise value.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from das.io.atomic import atomic_write_text
from das.resources import build_info

AUDIT_FORMAT = "das-audit/1"
PACKAGES = (
    "das-pipeline",
    "numpy",
    "pandas",
    "pyarrow",
    "scipy",
    "pydantic",
    "prefect",
    "prefect-dask",
    "dask",
    "distributed",
    "great-expectations",
)
AUDIT_KEYS = (
    "format",
    "product",
    "run_id",
    "status",
    "error_type",
    "started",
    "finished",
    "seconds",
    "parameters",
    "config",
    "inputs",
    "code_version",
    "packages",
    "randomness",
    "markers",
    "identity",
    "privacy_ledger",
    "validation",
    "ledger",
    "totals",
    "draws",
    "postprocessing",
    "outputs",
    "release",
    "timings",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def code_version() -> str:
    """Which code ran: ``git <describe>`` when the package runs from its own git checkout
    (an editable install), else ``das-pipeline <version>`` plus the commit the wheel recorded
    when it was built (``(git <describe>)``; absent when it was built without git)."""
    source = Path(__file__).resolve().parents[2]
    # Only this project's checkout: a wheel under site-packages inside some other repository
    # must not report that repository's commit.
    if (source / "pyproject.toml").is_file() and (source / ".git").exists():
        describe = _git_describe(source)
        if describe is not None:
            return f"git {describe}"
    version = package_versions(("das-pipeline",))["das-pipeline"] or "unknown"
    built = build_info().get("git")
    return f"das-pipeline {version}" + (f" (git {built})" if built else "")


def _git_describe(directory: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class AuditRecorder:
    """Collects a run's audit fields as the run goes; :meth:`write` saves ``audit.json``."""

    def __init__(self, product: str, run_id: str, path: str | Path) -> None:
        self.path = Path(path)
        self._started = time.perf_counter()
        self.record: dict[str, Any] = {key: None for key in AUDIT_KEYS}
        self.record.update(
            format=AUDIT_FORMAT,
            product=product,
            run_id=run_id,
            status="running",
            started=_now(),
            code_version=code_version(),
            packages=package_versions(),
            timings={},
        )

    def update(self, **fields: Any) -> None:
        unknown = set(fields) - set(AUDIT_KEYS)
        if unknown:
            raise KeyError(f"not audit fields: {sorted(unknown)}")
        self.record.update(fields)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage (seconds, also recorded when the stage fails)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record["timings"][name] = round(time.perf_counter() - start, 4)

    def finish(self, status: str, error: BaseException | None = None) -> dict[str, Any]:
        """Close the record (status, error type, end time) without writing it."""
        self.record.update(
            status=status,
            error_type=None if error is None else type(error).__name__,
            finished=_now(),
            seconds=round(time.perf_counter() - self._started, 4),
        )
        return self.record

    def save(self) -> dict[str, Any]:
        """Write the record as it stands to ``path``, atomically."""
        atomic_write_text(self.path, json.dumps(self.record, indent=1, allow_nan=False) + "\n")
        return self.record

    def write(self, status: str, error: BaseException | None = None) -> dict[str, Any]:
        """Finish the record (status, error type, end time) and write it atomically."""
        self.finish(status, error)
        return self.save()


# What could change how a value renders: emphasis and code marks, a table cell's bar, HTML and
# links. (An underscore inside a word is not emphasis in CommonMark, so names stay readable.)
_MARKDOWN_SPECIAL = str.maketrans({c: f"\\{c}" for c in "\\`*|<>[]"})


def md_escape(value: Any) -> str:
    """Text shown literally in Markdown (``*`` stays an asterisk, ``|`` does not split a cell)."""
    return str(value).translate(_MARKDOWN_SPECIAL).replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _validation_line(validation: Mapping[str, Any] | None) -> str:
    if not validation:
        return "not run"
    if validation.get("skipped"):
        return "SKIPPED by the operator (--skip-validation)"
    verdict = "valid" if validation.get("ok") else "NOT VALID"
    failed = ", ".join(validation.get("failed_checks") or []) or "none"
    return (
        f"{verdict}: {validation.get('errors')} error(s), {validation.get('warnings')} "
        f"warning(s), {validation.get('checks_run')} checks; failed: {failed}"
    )


def _draws_line(draws: Mapping[str, Any]) -> str:
    """Fresh and reused draws of a finished measurement, or, for an attempt that failed, what
    the privacy ledger recorded as drawn (persisted noise counts as spent)."""
    if not draws:
        return "none recorded"
    if "reused" in draws:
        return f"{draws.get('fresh')} drawn now, {draws.get('reused')} reused"
    return (
        f"{draws.get('fresh')} drawn and persisted by this attempt, "
        f"{draws.get('earlier_attempts')} by earlier attempts (the ledger's record)"
    )


def audit_markdown(audit: Mapping[str, Any], banner: str = "") -> str:
    """The audit record as a page a reviewer reads in the Prefect UI: what ran on what, with
    which randomness, what it cost (the ledger's cumulative totals), what was released. Only
    hashes, budgets, timings and output row counts: no value or count of the input records."""
    randomness = audit.get("randomness") or {}
    draws = audit.get("draws") or {}
    release = audit.get("release") or {}
    parameters = audit.get("parameters") or {}
    lines = [
        f"# {md_escape(banner)}{md_escape(audit.get('product'))} run "
        f"{md_escape(audit.get('run_id'))}: {md_escape(audit.get('status'))}",
        "",
    ]
    if audit.get("markers"):
        lines += [
            f"**NOT A PRIVATE RELEASE: {md_escape(', '.join(audit['markers']))}** (see the "
            "marker files in the release folder).",
            "",
        ]
    summary = [
        ("status", audit.get("status") if not audit.get("error_type")
         else f"{audit.get('status')} ({audit.get('error_type')})"),
        ("release folder", parameters.get("output")),
        ("release", release.get("state", "not published")
         + (f"; replaces run {release['replaces']}" if release.get("replaces") else "")),
        ("rerun of an earlier attempt", parameters.get("rerun")),
        ("code version", audit.get("code_version")),
        ("randomness", randomness.get("source")),
        ("seed mode", "secure (OS CSPRNG)" if randomness.get("secure")
         else f"SEEDED, seed {randomness.get('seed')}"),
        ("config sha256", (audit.get("config") or {}).get("sha256")),
        ("validation", _validation_line(audit.get("validation"))),
        ("draws", _draws_line(draws)),
        ("duration (s)", audit.get("seconds")),
    ]  # fmt: skip
    lines += _table(("field", "value"), summary)
    report = (audit.get("validation") or {}).get("report_dir")
    if report:
        # Its own line, not a table cell: a long path wraps here, and it is on the curator's
        # machine (the UI cannot open it).
        lines += [f"Validation report (on the curator's machine): {md_escape(report)}", ""]
    ledger = audit.get("privacy_ledger") or {}
    if ledger.get("passes"):
        lines += ["## Privacy ledger of this dataset", ""]
        approval = ledger.get("approval")
        lines += [
            f"Dataset {md_escape(str(ledger.get('dataset'))[:16])}… (the ledger's keyed id of "
            f"the records' fingerprint), ledger {md_escape(ledger.get('ledger_id'))} at "
            f"{md_escape(ledger.get('ledger'))}; "
            + (f"approval {md_escape(approval)}." if approval else "no approval (outside "
               "production)."),
            "",
        ]  # fmt: skip
        lines += _table(
            ("pass", "definition", "earlier runs", "this run", "cumulative"),
            [
                (p["pass"], p["definition"], p["prior"], p["this_run"], p["cumulative"])
                for p in ledger["passes"]
            ],
        )
    inputs = audit.get("inputs") or {}
    if inputs:
        lines += ["## Inputs", ""]
        lines += _table(
            ("file", "path", "ledger id of its records"),
            [(name, info.get("path"), str(info.get("id") or "—")[:16]) for name, info in
             inputs.items()],
        )  # fmt: skip
    outputs = audit.get("outputs") or {}
    if outputs:
        lines += ["## Outputs", ""]
        lines += _table(
            ("file", "rows", "sha256"),
            [(name, info.get("rows"), info.get("sha256")) for name, info in outputs.items()],
        )
    timings = audit.get("timings") or {}
    if timings:
        lines += ["## Timings", ""]
        lines += _table(("stage", "seconds"), [(k, f"{v:.2f}") for k, v in timings.items()])
    return "\n".join(lines)
