"""Where a run keeps its state: beside its release, never inside it.

Layout, for ``--output OUT``::

    OUT/                            the release: appears whole (one rename) or not at all
    OUT.das/
        lock                        held (flock) by the one run writing OUT
        runs/<run-id>/
            sealed/<digest>/        the run's parameters frozen at its start (validation reads them)
            lease                   the token of the attempt that owns the run now
            noise/<measurement>.<token>.npy  one int64 noise vector per measurement drawn; the
                                    privacy ledger records which file and its digest
            accountants/<partition>.json  each partition's accountant (level, table): budgets,
                                    digests
            validation/             the validation report of this run (curator only)
            run.log                 the run's local log (the curator's; may hold record counts)
            audit.json              the audit of the latest attempt, failed ones included
            <name>.seed             seeds a rerun must reuse (e.g. statistical postprocessing)
        staging/<run-id>/           the release being built; renamed to OUT at the end
        replaced/<run-id>-<time>/   earlier releases moved aside by an explicit replace

Noise vectors are confidential (noise + a released count gives the true count): ``OUT.das``
must stay inside the secure enclave with the inputs, and a run folder may be deleted once its
release was accepted.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.io.atomic import atomic_write_text

WORK_SUFFIX = ".das"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def new_run_id() -> str:
    """A fresh run id: UTC timestamp plus 8 random hex digits (sortable, collision-free)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def safe_name(name: str) -> str:
    """File-name form of a ledger name: "US/USA/1/stage-1" → "US__USA__1__stage-1"."""
    return _UNSAFE.sub("_", name.replace("/", "__"))


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f"Invalid run id {run_id!r}: use letters, digits, '.', '_', '-' (≤ 128)")
    return run_id


def work_dir_of(output: str | Path) -> Path:
    """``OUT.das``: the sibling folder of the release that holds lock, runs and staging."""
    output = Path(output).absolute()
    return output.with_name(output.name + WORK_SUFFIX)


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run's state (``output`` is made absolute); :meth:`create` makes them."""

    output: Path
    run_id: str

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        object.__setattr__(self, "output", Path(self.output).absolute())

    @property
    def release_dir(self) -> Path:
        return self.output

    @property
    def work_dir(self) -> Path:
        return work_dir_of(self.output)

    @property
    def lock_path(self) -> Path:
        return self.work_dir / "lock"

    @property
    def root(self) -> Path:
        return self.work_dir / "runs" / self.run_id

    @property
    def staging_dir(self) -> Path:
        return self.work_dir / "staging" / self.run_id

    @property
    def replaced_dir(self) -> Path:
        return self.work_dir / "replaced"

    @property
    def noise_dir(self) -> Path:
        return self.root / "noise"

    @property
    def accountants_dir(self) -> Path:
        return self.root / "accountants"

    @property
    def validation_dir(self) -> Path:
        return self.root / "validation"

    @property
    def log_path(self) -> Path:
        return self.root / "run.log"

    @property
    def audit_path(self) -> Path:
        """The audit of the latest attempt (a published release carries its own copy)."""
        return self.root / "audit.json"

    @property
    def lease_path(self) -> Path:
        return self.root / "lease"

    def exists(self) -> bool:
        """True when a run with this id has left state behind (a rerun)."""
        return self.root.is_dir()

    def create(self) -> RunFolder:
        for folder in (self.noise_dir, self.accountants_dir, self.validation_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    def accountant_path(self, partition: str) -> Path:
        return self.accountants_dir / f"{safe_name(partition)}.json"

    def stored_accountants(self) -> dict[str, Any]:
        """Partition accountants persisted so far (digests and budgets only): the audit of a
        failed run lists what is on disk, whoever drew it."""
        if not self.accountants_dir.is_dir():
            return {}
        return {
            path.stem: json.loads(path.read_text())
            for path in sorted(self.accountants_dir.glob("*.json"))
        }

    def noise_path(self, measurement_name: str) -> Path:
        return self.noise_dir / f"{safe_name(measurement_name)}.npy"

    def persistent_seed(self, name: str) -> int:
        """A 63-bit seed drawn from OS entropy on the first call and reread on every rerun, so
        that a resumed run's Monte Carlo steps give the same release as an uninterrupted one.
        (Not privacy noise: for postprocessing of released values only.)"""
        path = self.root / f"{safe_name(name)}.seed"
        if not path.is_file():
            atomic_write_text(path, f"{secrets.randbits(63)}\n")
        return int(path.read_text().strip())
