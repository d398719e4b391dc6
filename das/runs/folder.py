"""The run folder: a run's private working state, beside (not inside) its released tables.

Layout, under the output folder::

    <output>/.run/<run-id>/
        noise/<measurement>.npy     one int64 noise vector per measurement drawn
        ledger/<partition>.json     the privacy ledger of each population-group level
        validation/                 the validation report of this run
        run.log                     the run's log (progress only, never private values)
        <name>.seed                 seeds a rerun must reuse (e.g. statistical postprocessing)

The folder name is hidden so that the release (``t1/``, ``t2/``, ``audit.json``) is what a
reader sees. Noise vectors are confidential (noise + a released count gives the true count):
the run folder must stay inside the secure enclave with the inputs, and may be deleted once
the run succeeded and its release was accepted.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from das.io.atomic import atomic_write_text

RUN_DIR = ".run"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def new_run_id() -> str:
    """A fresh run id: UTC timestamp plus 8 random hex digits (sortable, collision-free)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def safe_name(name: str) -> str:
    """File-name form of a ledger name: "US/USA/1/stage-1" → "US__USA__1__stage-1"."""
    return _UNSAFE.sub("_", name.replace("/", "__"))


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run's state; :meth:`create` makes the folders."""

    output: Path
    run_id: str

    def __post_init__(self) -> None:
        if not _RUN_ID.match(self.run_id):
            raise ValueError(
                f"Invalid run id {self.run_id!r}: use letters, digits, '.', '_', '-' (≤ 128)"
            )
        object.__setattr__(self, "output", Path(self.output))

    @property
    def root(self) -> Path:
        return self.output / RUN_DIR / self.run_id

    @property
    def noise_dir(self) -> Path:
        return self.root / "noise"

    @property
    def ledger_dir(self) -> Path:
        return self.root / "ledger"

    @property
    def validation_dir(self) -> Path:
        return self.root / "validation"

    @property
    def log_path(self) -> Path:
        return self.root / "run.log"

    @property
    def audit_path(self) -> Path:
        return self.output / "audit.json"

    def exists(self) -> bool:
        """True when a run with this id has left state behind (a rerun)."""
        return self.root.is_dir()

    def create(self) -> RunFolder:
        for folder in (self.noise_dir, self.ledger_dir, self.validation_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    def ledger_path(self, partition: str) -> Path:
        return self.ledger_dir / f"{safe_name(partition)}.json"

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
