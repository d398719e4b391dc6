"""What a run's noise was drawn for, so that a rerun reuses it only for exactly that.

Reusing a noise vector on changed inputs releases the exact change in the true counts (the two
releases subtract to it). So a run folder records, when it is created, the hashes of every file
the run reads (config, spec files, inputs) and its seed mode; a rerun with the same run id must
present the same identity, or it is refused before validation, touching nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from das.io.atomic import atomic_write_text
from das.io.writers import file_sha256

IDENTITY_FORMAT = "das-run-identity/1"


def seed_mode(seed: int | None) -> str:
    """``"secure"`` or ``"seeded:<seed>"``: a seeded draw must never be relabelled secure."""
    return "secure" if seed is None else f"seeded:{seed}"


def hash_files(paths: Mapping[str, Path]) -> dict[str, str]:
    """name → sha256 of each file (every one must exist and be a regular file)."""
    return {name: file_sha256(path) for name, path in sorted(paths.items())}


@dataclass(frozen=True)
class RunIdentity:
    """Hashes of everything the noise depends on. ``inputs`` are the confidential record files
    (they key the privacy ledger); ``reference`` the other input files (e.g. the GRF-C)."""

    product: str
    config: str
    specs: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    reference: dict[str, str] = field(default_factory=dict)
    seed_mode: str = "secure"

    def to_dict(self) -> dict[str, Any]:
        return {"format": IDENTITY_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunIdentity:
        fields = {k: v for k, v in data.items() if k != "format"}
        return cls(**fields)

    def differences(self, stored: RunIdentity) -> list[str]:
        """What changed since ``stored`` was recorded, one phrase each (names and short
        hashes only)."""
        changes = []
        if self.product != stored.product:
            changes.append(f"product {stored.product} → {self.product}")
        if self.config != stored.config:
            changes.append(f"config.json sha256 {stored.config[:12]} → {self.config[:12]}")
        for label, now, then in (
            ("spec file", self.specs, stored.specs),
            ("input file", self.inputs, stored.inputs),
            ("reference file", self.reference, stored.reference),
        ):
            for name in sorted(set(now) | set(then)):
                if name not in then:
                    changes.append(f"{label} {name} added")
                elif name not in now:
                    changes.append(f"{label} {name} removed")
                elif now[name] != then[name]:
                    changes.append(
                        f"{label} {name} sha256 {then[name][:12]} → {now[name][:12]}"
                    )
        if self.seed_mode != stored.seed_mode:
            changes.append(f"randomness {stored.seed_mode} → {self.seed_mode}")
        return changes

    def write(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> RunIdentity | None:
        if not path.is_file():
            return None
        return cls.from_dict(json.loads(path.read_text()))
