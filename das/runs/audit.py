"""The audit record of a run (DESIGN §6): what ran, on what, with which randomness, at what cost.

``audit.json`` is written at the top of the output folder at the end of every run, including a
failed one (``status: "failed"`` and the error *type* only: messages may quote data). It holds
config and spec hashes, input file hashes, code and package versions, the randomness source,
the validation summary, every pass's ledger and totals, output hashes and row counts, and the
wall time of each stage. It never holds a record, a true count or a noise value.
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
from das.io.writers import file_sha256
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
    "validation",
    "ledger",
    "totals",
    "draws",
    "postprocessing",
    "outputs",
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


def file_hashes(paths: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """name → {path, sha256, bytes} of each existing file."""
    hashes: dict[str, dict[str, Any]] = {}
    for name, path in paths.items():
        path = Path(path)
        if path.is_file():
            hashes[name] = {
                "path": str(path),
                "sha256": file_sha256(path),
                "bytes": path.stat().st_size,
            }
    return hashes


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

    def write(self, status: str, error: BaseException | None = None) -> dict[str, Any]:
        """Finish the record (status, error type, end time) and write it atomically."""
        self.record.update(
            status=status,
            error_type=None if error is None else type(error).__name__,
            finished=_now(),
            seconds=round(time.perf_counter() - self._started, 4),
        )
        atomic_write_text(self.path, json.dumps(self.record, indent=1, allow_nan=False) + "\n")
        return self.record
