"""Persisted noise: each measurement is drawn once per run, and a rerun reuses the stored draw.

"A rerun of a failed run reuses the measurements already drawn; it never draws the same query twice
(that would spend budget twice)" (docs/explanation/architecture.md#noise). A :class:`NoiseStore`
owns the ledger of one ledger partition (a SafeTab-P population-group level) and is handed to the
engine in place of the rng: the engine's draw step asks ``store.noise_for(measurement, size,
accountant)``.

Per measurement, in this order (so that a crash at any point is safe):

1. already recorded as drawn in the persisted ledger → ``accountant.reuse`` (same parameters
   or refuse), load ``noise/<name>.npy``, check its size and that sha256 of its int64 bytes is
   the ledger's digest, return it. No draw, no new charge.
2. otherwise charge it (refuses over the total) and persist the ledger *before* drawing, draw,
   write the vector atomically, record the digest and persist the ledger again. A crash between
   charge and record leaves an entry "charged, not drawn": nothing was released from it, so the
   rerun draws it without a second charge (see :class:`PrivacyAccountant`).

The digest is ``sha256(noise.astype(int64).tobytes())``, the engine's ledger convention.

In a release run the store also answers to the **privacy ledger** (:class:`DrawLedger`), the
system of record: a draw is charged there before the noise exists and recorded there (file and
digest) after; a resume reuses a noise file only when it matches the ledger's record for the
run — the digests in the run folder authorize nothing, so a run folder whose noise files and
digests were both replaced is not reused. Each draw goes to a file of its own name
(``<measurement>.<token>.npy``) and the ledger says which file holds the recorded draw, so two
processes that drew the same measurement (a Dask task retried while its first worker was still
alive) never overwrite each other's file: the first record stands. A draw of an attempt that a
newer attempt (a Retry) superseded is refused by the ledger.

:meth:`NoiseStore.noise_file_for` is the same step for vectors too large to hold (national
key sets: hundreds of millions of cells): the draws are streamed block by block into the
``.npy`` file, the digest computed on the way, and a read-only memory map is returned; a reuse
checks the digest by reading the file in blocks. Both methods write and read the same files,
so either may reuse what the other drew.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from das.io.arrays import npy_data_digest, npy_info, open_npy, write_npy_blocks
from das.io.atomic import atomic_write_bytes, atomic_write_text
from das.privacy.accounting import Measurement, PrivacyAccountant, noise_digest
from das.privacy.mechanisms import release_draw
from das.privacy.rng import RandomSource, default_source, seeded_rng
from das.runs.folder import RunFolder, safe_name
from das.trust import DrawRecord, PrivacyLedger, RunSigner

RngFor = Callable[[Measurement], Any]


class NoiseDigestError(RuntimeError):
    """A stored noise vector is missing or does not match its ledger digest; nothing is redrawn."""


_TAMPERED = (
    "Something wrote into the run folder while the run used it: keep the folder for review; "
    "the spend stays recorded"
)
_NO_RESUME = (
    "This run cannot be resumed (its spend stays recorded); start a new run with another run "
    "id, within the dataset's approvals; keep this run folder for `das ledger verify`"
)


def secure_streams() -> RngFor:
    """Every measurement draws from the process-wide OS-seeded CSPRNG."""
    return lambda measurement: default_source()


def seeded_streams(seed: int) -> RngFor:
    """One reproducible PCG64 stream per measurement, seeded by sha256(seed, name).

    Independent of the order in which parallel levels draw, so a seeded run gives the same
    release whatever the scheduling. Tests and demos only (``is_secure`` is False).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")

    def rng_for(measurement: Measurement) -> RandomSource:
        digest = hashlib.sha256(f"{seed}:{measurement.name}".encode()).digest()
        return seeded_rng(int.from_bytes(digest[:8], "big") >> 1)

    return rng_for


def describe_streams(seed: int | None) -> dict[str, Any]:
    """The randomness source as written into the audit record."""
    if seed is None:
        return {"secure": True, "seed": None, "source": default_source().describe()}
    return {
        "secure": False,
        "seed": seed,
        "source": seeded_rng(seed).describe() + "; one stream per measurement, sha256(seed:name)",
    }


def _stored_as_recorded(path: Path, size: int, digest: str) -> bool:
    """The ``.npy`` file holds ``size`` int64 values whose data sha256 is ``digest``."""
    if not path.is_file():
        return False
    shape, dtype = npy_info(path)
    return dtype == np.int64 and shape == (size,) and npy_data_digest(path) == digest


@dataclass(frozen=True)
class DrawLedger:
    """One attempt of one run, as the privacy ledger knows it (picklable: a ledger URL)."""

    ledger: PrivacyLedger
    run_id: str
    attempt: int
    signer: RunSigner | None = None  # the run key that signs each record

    def recorded(self, name: str) -> DrawRecord | None:
        return self.ledger.draws(self.run_id).get(name)

    def charge(self, name: str) -> None:
        self.ledger.charge_draw(self.run_id, self.attempt, name)

    def record(self, name: str, digest: str, size: int, file: str) -> DrawRecord:
        return self.ledger.record_draw(
            self.run_id, self.attempt, name, digest, size, file, self.signer
        )

    def check_files(self, noise_dir: Path, files: Mapping[str, str | Path]) -> None:
        """The noise files a stage is about to read (or has read), by measurement name, are
        the very files the ledger recorded, with the recorded size and sha256.

        A noise file is written once, when drawn; a run folder's work files then name it. A
        file edited afterwards (zeros written into it in place) or a work file pointed at
        another file would put other noise into a release labelled private: checked before the
        release is written and again before it is sealed, it stops the run instead.
        """
        recorded = self.ledger.draws(self.run_id)
        checks = []
        for name, path in sorted(files.items()):
            record = recorded.get(name)
            path = Path(path)
            expected = noise_dir / record.file if record is not None else None
            if record is None or expected is None or path.resolve() != expected.resolve():
                raise NoiseDigestError(
                    f"{name}: the run folder names a noise file the ledger did not record; the "
                    f"release is not published. {_TAMPERED}"
                )
            checks.append((name, path, record))
        # every file hashed whole (gigabytes at national size): on all cores, hashlib releases
        # the interpreter lock; the first file in name order that differs is named
        with ThreadPoolExecutor(max_workers=_hash_threads(), thread_name_prefix="das-hash") as pool:
            same = list(
                pool.map(lambda c: _stored_as_recorded(c[1], c[2].size, c[2].digest), checks)
            )
        for (name, _, _), unchanged in zip(checks, same, strict=True):
            if not unchanged:
                raise NoiseDigestError(
                    f"{name}: its noise file changed after it was drawn (size or sha256 differ "
                    f"from the ledger's record); the release is not published. {_TAMPERED}"
                )


def _hash_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class NoiseStore:
    """The noise provider of one ledger partition (see the module docstring).

    ``fresh`` and ``reused`` list the measurement names drawn now and taken from disk.
    """

    def __init__(
        self,
        folder: RunFolder,
        partition: str,
        accountant: PrivacyAccountant,
        rng_for: RngFor,
        guard: Callable[[], None] | None = None,
        draws: DrawLedger | None = None,
    ) -> None:
        self.folder = folder
        self.partition = partition
        self.accountant = accountant
        self.rng_for = rng_for
        # Called before every charge, draw and write: raises when the run that owns this store
        # is gone or superseded (das.runs.release.RunLease.check), so orphaned tasks stop.
        self.guard = guard
        self.draws = draws
        self.fresh: list[str] = []
        self.reused: list[str] = []
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        folder: RunFolder,
        partition: str,
        definition: str,
        total: Any,
        rng_for: RngFor,
        guard: Callable[[], None] | None = None,
        draws: DrawLedger | None = None,
    ) -> NoiseStore:
        """The store of ``partition``: its persisted ledger when a previous attempt left one."""
        path = folder.accountant_path(partition)
        if path.is_file():
            accountant = PrivacyAccountant.from_dict(json.loads(path.read_text()))
            fresh = PrivacyAccountant(definition, total)
            if accountant.definition != fresh.definition or accountant.total != fresh.total:
                raise ValueError(
                    f"{partition}: the stored ledger was made under another definition or "
                    "total; a changed configuration cannot reuse earlier noise (use a new run id)"
                )
        else:
            accountant = PrivacyAccountant(definition, total)
        return cls(folder, partition, accountant, rng_for, guard, draws)

    def _check_owner(self) -> None:
        if self.guard is not None:
            self.guard()

    def save_ledger(self) -> None:
        atomic_write_text(
            self.folder.accountant_path(self.partition),
            json.dumps(self.accountant.to_dict(), indent=1),
        )

    def _missing(self, measurement: Measurement) -> NoiseDigestError:
        return NoiseDigestError(
            f"{measurement.name}: recorded as drawn but its noise file is missing; "
            f"it cannot be drawn again under the same run id. {_NO_RESUME}"
        )

    def _mismatch(self, measurement: Measurement) -> NoiseDigestError:
        return NoiseDigestError(
            f"{measurement.name}: the stored noise does not match the ledger's record "
            f"(size or sha256); refusing to reuse or redraw it. {_NO_RESUME}"
        )

    def _load(self, measurement: Measurement, path: Path, size: int, digest: str) -> np.ndarray:
        if not path.is_file():
            raise self._missing(measurement)
        noise = np.load(path, allow_pickle=False)
        if noise.dtype != np.int64 or noise.shape != (size,) or noise_digest(noise) != digest:
            raise self._mismatch(measurement)
        return noise

    def _check_file(self, measurement: Measurement, path: Path, size: int, digest: str) -> None:
        """The stored file has ``size`` int64 values whose sha256 is the recorded digest."""
        if not path.is_file():
            raise self._missing(measurement)
        if not _stored_as_recorded(path, size, digest):
            raise self._mismatch(measurement)

    def _held(self, measurement: Measurement, size: int) -> tuple[Path, str] | None:
        """Where the noise of ``measurement`` already drawn is, and its digest: the privacy
        ledger's record in a release run, else this partition's persisted ledger."""
        accountant = self.accountant
        if self.draws is None:
            if measurement.name in accountant and accountant.get(measurement.name).drawn:
                entry = accountant.reuse(measurement)
                return self.folder.noise_path(measurement.name), str(entry.noise_digest)
            return None
        record = self.draws.recorded(measurement.name)
        if record is None:
            # A draw the system of record does not hold was never completed (or was forged):
            # it is drawn again, never reused.
            if measurement.name in accountant and accountant.get(measurement.name).drawn:
                accountant.revert_draw(measurement.name)
            return None
        if record.size != size:
            raise self._mismatch(measurement)
        if measurement.name in accountant and accountant.get(measurement.name).drawn:
            entry = accountant.reuse(measurement)
            if entry.noise_digest != record.digest:
                accountant.revert_draw(measurement.name)
        if not (measurement.name in accountant and accountant.get(measurement.name).drawn):
            accountant.record(measurement, record.digest)
            self.save_ledger()
        return self.folder.noise_dir / record.file, record.digest

    def _draw_file(self, measurement: Measurement) -> Path:
        if self.draws is None:
            return self.folder.noise_path(measurement.name)
        return self.folder.noise_dir / f"{safe_name(measurement.name)}.{secrets.token_hex(6)}.npy"

    def _charge(self, measurement: Measurement) -> None:
        self._check_owner()
        if measurement.name not in self.accountant:
            self.accountant.charge(measurement)
            self.save_ledger()
        if self.draws is not None:
            self.draws.charge(measurement.name)

    def _record(self, measurement: Measurement, path: Path, digest: str, size: int) -> Path:
        """Record the draw in the privacy ledger (if any) and the partition ledger; the file
        that holds the recorded draw (another process's, when it recorded first)."""
        if self.draws is not None:
            record = self.draws.record(measurement.name, digest, size, path.name)
            if record.file != path.name:
                path.unlink(missing_ok=True)
                path, digest = self.folder.noise_dir / record.file, record.digest
                self._check_file(measurement, path, size, digest)
        self.accountant.record(measurement, digest)
        self.save_ledger()
        self.fresh.append(measurement.name)
        return path

    def noise_for(
        self, measurement: Measurement, size: int, accountant: PrivacyAccountant
    ) -> np.ndarray:
        """The noise of ``measurement`` (``size`` int64 values): stored if drawn, else drawn now."""
        if accountant is not self.accountant:
            raise ValueError(f"{measurement.name}: drawn against a ledger this store does not own")
        with self._lock:
            held = self._held(measurement, size)
            if held is not None:
                noise = self._load(measurement, held[0], size, held[1])
                self.reused.append(measurement.name)
                return noise
            self._charge(measurement)
            # The release's one draw path (sample_blocks), as noise_file_for streams it.
            noise = release_draw(measurement.mechanism, size, self.rng_for(measurement))
            self._check_owner()
            buffer = io.BytesIO()
            np.save(buffer, noise, allow_pickle=False)
            mine = self._draw_file(measurement)
            atomic_write_bytes(mine, buffer.getvalue())
            path = self._record(measurement, mine, noise_digest(noise), size)
            return noise if path == mine else np.load(path, allow_pickle=False)

    def noise_file_for(
        self, measurement: Measurement, size: int, accountant: PrivacyAccountant
    ) -> np.ndarray:
        """:meth:`noise_for` streamed: a read-only memory map of the stored ``.npy`` file.

        Drawn now (charged first, streamed to disk block by block, digest recorded) or, when
        already drawn, reused after its size and digest are checked in blocks.
        """
        if accountant is not self.accountant:
            raise ValueError(f"{measurement.name}: drawn against a ledger this store does not own")
        with self._lock:
            held = self._held(measurement, size)
            if held is not None:
                self._check_file(measurement, held[0], size, held[1])
                self.reused.append(measurement.name)
                return open_npy(held[0])
            self._charge(measurement)
            path = self._draw_file(measurement)
            blocks = measurement.mechanism.sample_blocks(size, self.rng_for(measurement))
            digest = write_npy_blocks(path, blocks, size)
            self._check_owner()
            path = self._record(measurement, path, digest, size)
            return open_npy(path)
