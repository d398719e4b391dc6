"""What a process working for a run must see exactly as the flow's process sees it.

When a run's tasks execute on an existing Dask cluster (``DAS_DASK_ADDRESS``), every worker
reads the run's inputs (config, spec files, records) and reads and writes its run folder
(``<state root>/runs/<run-id>/``: the spilled records, true counts, noise and ledgers) *by path*.
A worker on a host where a path is missing, points at another copy, or is a local folder that
only looks the same would fail late or, worse, work on other data. :class:`SharedView` is what
the flow's process sees, made before anything is drawn; :meth:`SharedView.problems`, run in a
worker, lists what that worker sees differently:

- every input file exists at the same path with the same size and the same sample digest
  (SHA-256 of its size, first and last MiB: a cheap check that it is the same file, not a full
  hash of tens of GB per worker);
- the run folder is the same folder: the flow writes a random token into it and the worker
  must read it back, then create and delete a file there (it must be writable);
- the same code (:func:`das.runs.audit.code_version`) and package versions run there;
- the privacy ledger opens there and is the same ledger (its id): every draw is charged and
  recorded in it by the process that draws.

Problems name files and paths only, never sizes or digests: the size of a record file is a
statistic of the confidential data.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from das.io.atomic import atomic_write_text
from das.refusal import RunRefused
from das.runs.audit import code_version, package_versions
from das.trust import LedgerUnavailable, PrivacyLedger

SAMPLE_BYTES = 1 << 20
TOKEN_FILE = "shared-view"


def sample_digest(path: str | Path) -> str:
    """SHA-256 of a file's size and its first and last :data:`SAMPLE_BYTES` (two reads)."""
    with Path(path).open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest = hashlib.sha256(str(size).encode())
        digest.update(handle.read(SAMPLE_BYTES))
        if size > SAMPLE_BYTES:
            handle.seek(max(SAMPLE_BYTES, size - SAMPLE_BYTES))
            digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()


@dataclass(frozen=True)
class SharedFile:
    """One input file as the flow's process sees it."""

    name: str
    path: str
    size: int
    sample: str

    @classmethod
    def of(cls, name: str, path: str | Path) -> SharedFile:
        path = Path(path)
        return cls(name, str(path), path.stat().st_size, sample_digest(path))

    def problem(self) -> str | None:
        """What differs in this process, or None."""
        path = Path(self.path)
        if not path.is_file():
            return f"{self.name}: not found at {self.path}"
        if path.stat().st_size != self.size or sample_digest(path) != self.sample:
            return f"{self.name} at {self.path}: another file than the run reads (content differs)"
        return None


@dataclass(frozen=True)
class SharedView:
    """What the flow's process sees (see the module docstring); picklable, small."""

    files: tuple[SharedFile, ...]
    run_root: str
    token: str
    code_version: str
    packages: dict[str, str | None] = field(default_factory=dict)
    ledger: PrivacyLedger | None = None
    ledger_id: str | None = None

    @classmethod
    def of_run(
        cls,
        files: Mapping[str, str | Path],
        run_root: str | Path,
        ledger: PrivacyLedger | None = None,
    ) -> SharedView:
        """Fingerprint ``files`` and write a fresh token into ``run_root`` (which must exist)."""
        token = secrets.token_hex(16)
        atomic_write_text(Path(run_root) / TOKEN_FILE, token + "\n")
        return cls(
            files=tuple(SharedFile.of(name, path) for name, path in sorted(files.items())),
            run_root=str(run_root),
            token=token,
            code_version=code_version(),
            packages=package_versions(),
            ledger=ledger,
            ledger_id=None if ledger is None else ledger.info().ledger_id,
        )

    def problems(self) -> list[str]:
        """What this process sees differently from the flow's process (empty: all shared)."""
        found = [problem for item in self.files if (problem := item.problem()) is not None]
        found += self._run_folder_problems()
        here = code_version()
        if here != self.code_version:
            found.append(f"runs code {here}, the flow runs {self.code_version}")
        versions = package_versions(tuple(self.packages))
        found += [
            f"package {name} {versions[name]}, the flow has {version}"
            for name, version in self.packages.items()
            if versions[name] != version
        ]
        found += self._ledger_problems()
        return found

    def _ledger_problems(self) -> list[str]:
        if self.ledger is None:
            return []
        try:
            seen = self.ledger.info().ledger_id
        except (RunRefused, LedgerUnavailable) as exc:
            return [f"cannot open the privacy ledger at {self.ledger.location}: {exc}"]
        if seen != self.ledger_id:
            return [f"the privacy ledger at {self.ledger.location} is another ledger ({seen})"]
        return []

    def _run_folder_problems(self) -> list[str]:
        root = Path(self.run_root)
        try:
            seen = (root / TOKEN_FILE).read_text().strip()
        except OSError:
            seen = None
        if seen != self.token:
            return [f"the run folder {root} is not the flow's (not on a shared file system)"]
        probe = root / f".write-check-{socket.gethostname()}-{os.getpid()}-{self.token[:8]}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            probe.unlink()
        except OSError as exc:
            return [f"cannot write into the run folder {root}: {exc.strerror}"]
        return []
