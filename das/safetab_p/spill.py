"""SafeTab-P at national scale, step 1: the geography and the person file, spilled per state.

The in-memory engine (:func:`das.safetab_p.engine.run_safetab_p`) holds the person file; at
national scale (≈330 M records) that does not fit a 24 GiB machine, so the streamed engine
(:mod:`das.safetab_p.streamed`) works from a *work folder* the caller gives (inside the
enclave: it holds record-level data) and touches the person file exactly once, here:

* :func:`prepare_geography` reads the GRF-C (public geography) and writes, per pass, the
  sorted block keys, each block's *geounit* (the distinct combination of state, county,
  tract, place and AIANNH area its persons are tabulated in) and, per tabulated geography, the
  entity of each geounit and the entities' REGION_IDs; plus the coterminous sets.
* :func:`spill_persons` streams the person file chunk by chunk (text or Parquet readers of
  :mod:`das.io.safetab_p`) and appends each record, reduced to four integers, to its state's
  spill: ``geounit`` (int32), the race/ethnicity combination as two packed words ``lo``/``hi``
  (:class:`CombinationCodec`), and ``sexage`` = sex · 23 + age23 bin (uint8). Records whose
  block is not in the GRF-C, or whose state no enabled pass tabulates, are out of universe and
  dropped (as in the in-memory engine). 21 bytes per record on disk, one chunk in memory.

Work folder layout (``<work>/``)::

    geography/<PASS>/blocks.npy           sorted int64 block keys of the pass (SSCCCTTTTTTBBBB)
    geography/<PASS>/block_geounit.npy    geounit of each block (int32)
    geography/<PASS>/geounit_state.npy    state FIPS of each geounit (int16)
    geography/<PASS>/entity-<GEO>.npy     entity of each geounit at GEO (int64, -1 none)
    geography/<PASS>/regions-<GEO>.npy    REGION_IDs of GEO's entities, sorted (unicode)
    geography/<PASS>/coterminous.parquet  coterminous sets derived from the GRF-C
    spill/<SS>/{geounit,lo,hi,sexage}.bin the records of state SS
    fingerprints/GRF-C.fingerprint        canonical fingerprints of the inputs
    fingerprints/person-records.fingerprint  (das.io.fingerprint; the ledger's dataset identity)

Both passes compute their input's fingerprint on the chunks they read anyway (no extra read):
:func:`prepare_geography` returns the GRF-C's, :func:`spill_persons` the person file's
(:attr:`SpillSummary.fingerprint`); both also keep it in the work folder
(:meth:`WorkFolder.fingerprints`), for a run whose steps are separate tasks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.arrays import RawColumns
from das.io.fingerprint import (
    RecordFingerprint,
    forget_fingerprint,
    read_fingerprints,
    record_fingerprint,
)
from das.io.safetab_p import GRF_C, PERSON_RECORDS, RACE_COLUMNS, block_key, iter_person_records
from das.io.tables import DEFAULT_CHUNK_BYTES
from das.safetab_p.coterminous import coterminous_sets
from das.safetab_p.iterations import code_positions
from das.safetab_p.keys import geography_entities, pass_blocks
from das.safetab_p.measure import AGE_EDGES, N_AGE23
from das.safetab_p.memo import file_identity, geography_of
from das.safetab_p.stability import RaceCodeBoundError, require_race_code_bound
from das.specs.config import SafeTabGeography, SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs
from das.validation.findings import ValidationReport
from das.validation.scan import EngineTap

PASSES = ("US", "PR")
GEOGRAPHY_COLUMNS = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")
BLOCK_FACTORS = (10**13, 10**10, 10**4, 1)  # SS CCC TTTTTT BBBB: das.io.safetab_p.block_key
SPILL_COLUMNS = {"geounit": np.int32, "lo": np.uint64, "hi": np.uint64, "sexage": np.uint8}
N_SEXAGE = 2 * N_AGE23
_MAX_CODE = 9_999
_SLOTS = len(RACE_COLUMNS)
# Batcher's odd-even merge sort of 8 values: 19 compare-exchanges (i < j: min to i, max to j).
_SORTING_NETWORK_8 = (
    (0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (1, 2), (5, 6),
    (0, 4), (1, 5), (2, 6), (3, 7), (2, 4), (3, 5), (1, 2), (3, 4), (5, 6),
)  # fmt: skip


# ---------------------------------------------------------------------------- combinations


class CombinationCodec:
    """A record's race codes and QSPAN packed losslessly into two uint64 words (``lo``, ``hi``).

    Each code becomes its position in the spec code list + 1 (0 = Null, ``n_codes + 1`` = a
    code the specs do not list), ``bits`` bits wide; the eight race values, sorted, and the
    QSPAN value are laid end to end as a 9·bits-bit number (≤ 126 bits, since codes are
    4-digit). Equal words ⇔ equal multisets of positions, which is all the iterations depend
    on (:func:`das.safetab_p.iterations.position_incidence`).
    """

    def __init__(self, specs: RaceEthnicitySpecs) -> None:
        self.n_codes = specs.n_codes
        self.bits = (self.n_codes + 1).bit_length()
        if 9 * self.bits > 128:
            raise ValueError("the code list is too long to pack a combination in 128 bits")
        # value of every 4-digit code: position + 1 (code_positions gives n_codes if unlisted)
        values = code_positions(specs, np.arange(_MAX_CODE + 1, dtype=np.int64)) + 1
        values[0] = 0  # the engine value of a Null slot
        self._value = values.astype(np.uint64)

    def _values(self, codes: np.ndarray) -> np.ndarray:
        codes = np.asarray(codes)
        if codes.size and (codes.min() < 0 or codes.max() > _MAX_CODE):  # not from the reader
            inside = (codes >= 0) & (codes <= _MAX_CODE)
            clipped = np.clip(codes, 0, _MAX_CODE).astype(np.intp)
            return np.where(inside, self._value[clipped], np.uint64(self.n_codes + 1))
        return self._value[codes.astype(np.intp)]

    def pack(self, race_codes: np.ndarray, qspan: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of each record; ``race_codes`` (n, 8) with 0 for Null, ``qspan`` (n,)."""
        race = np.asarray(race_codes)
        return self.pack_columns([race[:, k] for k in range(race.shape[1])], qspan)

    def pack_columns(
        self, race_columns: Sequence[np.ndarray], qspan: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`pack` of the race codes given as one array per slot (no (n, 8) copy): the
        eight values sorted by a sorting network of element-wise minima and maxima (the same
        order ``np.sort`` gives), then laid end to end."""
        values = [self._values(column).astype(np.uint16) for column in race_columns]
        for first, second in _SORTING_NETWORK_8 if len(values) == _SLOTS else ():
            low = np.minimum(values[first], values[second])
            np.maximum(values[first], values[second], out=values[second])
            values[first] = low
        if len(values) != _SLOTS:
            values = list(np.sort(np.stack(values, axis=1), axis=1).T)
        fields = [*values, self._values(qspan)]
        lo = np.zeros(len(qspan), dtype=np.uint64)
        hi = np.zeros(len(qspan), dtype=np.uint64)
        for index, value in enumerate(fields):
            offset = index * self.bits
            value = value.astype(np.uint64)
            if offset + self.bits <= 64:
                lo |= value << np.uint64(offset)
            elif offset >= 64:
                hi |= value << np.uint64(offset - 64)
            else:  # straddles the two words
                lo |= value << np.uint64(offset)
                hi |= value >> np.uint64(64 - offset)
        return lo, hi

    def unpack(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions (m, 8), qspan positions (m,)): −1 for Null, ``n_codes`` if unlisted."""
        lo = np.asarray(lo, dtype=np.uint64)
        hi = np.asarray(hi, dtype=np.uint64)
        mask = np.uint64((1 << self.bits) - 1)
        values = np.empty((lo.size, _SLOTS + 1), dtype=np.int64)
        for index in range(_SLOTS + 1):
            offset = index * self.bits
            if offset + self.bits <= 64:
                value = (lo >> np.uint64(offset)) & mask
            elif offset >= 64:
                value = (hi >> np.uint64(offset - 64)) & mask
            else:
                value = ((lo >> np.uint64(offset)) | (hi << np.uint64(64 - offset))) & mask
            values[:, index] = value.astype(np.int64)
        positions = values - 1  # Null (0) → −1; unlisted (n_codes + 1) → n_codes
        return positions[:, :_SLOTS], positions[:, _SLOTS]


def combination_ids(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(id per record, lo and hi of each distinct combination): ids 0.. in first-seen order."""
    ids = pd.factorize(lo)[0]
    ids = ids.astype(np.int64)
    if hi.size and np.any(hi):
        hi_ids, _ = pd.factorize(hi)
        ids, _ = pd.factorize(ids * (int(hi_ids.max()) + 1) + hi_ids)
        ids = ids.astype(np.int64)
    n = int(ids.max()) + 1 if ids.size else 0
    first = np.zeros(n, dtype=np.int64)
    first[ids[::-1]] = np.arange(ids.size - 1, -1, -1)
    return ids, lo[first], hi[first]


def sexage(qsex: np.ndarray, qage: np.ndarray) -> np.ndarray:
    """sex · 23 + age23 bin, as the in-memory engine bins them (QSEX 2 → 1, right-open ages)."""
    sex = (np.asarray(qsex).astype(np.int64) == 2).astype(np.int64)
    age23 = np.digitize(np.asarray(qage).astype(np.int64), AGE_EDGES[3])
    return (sex * N_AGE23 + age23).astype(np.uint8)


# ---------------------------------------------------------------------------- work folder


@dataclass(frozen=True)
class WorkFolder:
    """Paths of the streamed engine's intermediate data (see the module docstring)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def geography(self, pass_name: str) -> Path:
        return self.root / "geography" / pass_name

    def spill(self, state: int) -> RawColumns:
        return RawColumns(self.root / "spill" / f"{state:02d}", SPILL_COLUMNS)

    def spilled_states(self) -> list[int]:
        folder = self.root / "spill"
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())

    def level(self, partition: str) -> Path:
        return self.root / "levels" / partition.replace("/", "__")

    def noise(self) -> Path:
        return self.root / "noise"

    @property
    def fingerprint_dir(self) -> Path:
        return self.root / "fingerprints"

    def fingerprints(self) -> dict[str, str]:
        """Spec name → fingerprint of the inputs the passes have read so far ("GRF-C",
        "person-records"); confidential-data derived: never for a log or Prefect."""
        return read_fingerprints(self.fingerprint_dir)


# ---------------------------------------------------------------------------- geography


def tabulated_geographies(config: SafeTabPConfig, pass_name: str) -> list[SafeTabGeography]:
    """Geographies with a tabulated level in the pass, in release order (as the engine)."""
    levels = [lv for lv in config.tabulated_levels() if lv.geography.pass_name == pass_name]
    return [g for g in SafeTabGeography if any(lv.geography is g for lv in levels)]


@dataclass(frozen=True)
class PassGeography:
    """One pass's geography as integer maps (read back from the work folder)."""

    pass_name: str
    geographies: tuple[SafeTabGeography, ...]
    blocks: np.ndarray  # sorted block keys
    block_geounit: np.ndarray
    geounit_state: np.ndarray
    geounit_entity: dict[SafeTabGeography, np.ndarray]
    region_ids: dict[SafeTabGeography, np.ndarray]

    @property
    def states(self) -> list[int]:
        return sorted({int(s) for s in np.unique(self.geounit_state)})

    def state_geounits(self, state: int) -> tuple[int, int]:
        """The geounit range [start, stop) of a state (geounits are numbered state by state)."""
        inside = np.flatnonzero(self.geounit_state == state)
        if inside.size == 0:
            return 0, 0
        return int(inside[0]), int(inside[-1]) + 1

    def state_entities(self, geography: SafeTabGeography, state: int) -> tuple[int, int]:
        """Entity range [start, stop) of a state at a geography contained in states."""
        start, stop = self.state_geounits(state)
        entity = self.geounit_entity[geography][start:stop]
        entity = entity[entity >= 0]
        if entity.size == 0:
            return 0, 0
        return int(entity.min()), int(entity.max()) + 1


def prepare_geography(config: SafeTabPConfig, grfc: pd.DataFrame, work: WorkFolder) -> str:
    """Write each enabled pass's geography maps and coterminous sets (see the module docstring);
    returns the GRF-C's fingerprint, also kept in the work folder.

    ``grfc`` is the whole GRF-C in engine form (:func:`das.io.safetab_p.read_grf_c`), so its
    fingerprint is the file's. Geounits are numbered in block order, so a state's geounits, and
    its entities at every geography but USA and AIANNH, form contiguous ranges in the engine's
    (sorted) order.
    """
    forget_fingerprint(work.fingerprint_dir, GRF_C.name)
    fingerprint = RecordFingerprint(GRF_C)
    fingerprint.update_frame(grfc)
    for pass_name in PASSES:
        geographies = tabulated_geographies(config, pass_name)
        folder = work.geography(pass_name)
        if folder.exists():
            shutil.rmtree(folder)
        if not geographies:
            continue
        folder.mkdir(parents=True)
        blocks = pass_blocks(grfc, config, pass_name)
        entities = [geography_entities(blocks, g) for g in geographies]
        state = blocks["TABBLKST"].to_numpy().astype(np.int64)
        geounit = pd.factorize(state)[0].astype(np.int64)
        for level in entities:
            geounit = pd.factorize(geounit * (level.size + 1) + (level.block_entity + 1))[0]
            geounit = geounit.astype(np.int64)
        n_geounits = int(geounit.max()) + 1 if geounit.size else 0
        first = np.zeros(n_geounits, dtype=np.int64)
        first[geounit[::-1]] = np.arange(geounit.size - 1, -1, -1)
        np.save(folder / "blocks.npy", block_key(blocks))
        np.save(folder / "block_geounit.npy", geounit.astype(np.int32))
        np.save(folder / "geounit_state.npy", state[first].astype(np.int16))
        for level in entities:
            name = level.geography.value
            np.save(folder / f"entity-{name}.npy", level.block_entity[first])
            np.save(folder / f"regions-{name}.npy", level.region_ids)
        sets = coterminous_sets(entities)
        sets.to_parquet(folder / "coterminous.parquet", index=False)
        (folder / "geographies.json").write_text(json.dumps([g.value for g in geographies]))
    digest = fingerprint.hexdigest()
    record_fingerprint(work.fingerprint_dir, GRF_C.name, digest)
    return digest


def load_geography(work: WorkFolder, pass_name: str) -> PassGeography | None:
    """A pass's geography maps (None when the pass is not tabulated), read-only.

    Read once per process while its files stay the same (every state's and level's step asks
    for it: :func:`das.safetab_p.memo.geography_of`); the block-level maps (8 M blocks in the
    US) are mapped from their files, not kept in memory.
    """
    folder = work.geography(pass_name)
    names_file = folder / "geographies.json"
    if not names_file.is_file():
        return None
    names = json.loads(names_file.read_text())
    files = [names_file, *(folder / name for name in _GEOGRAPHY_FILES)]
    files += [folder / f"{kind}-{name}.npy" for name in names for kind in ("entity", "regions")]
    key = ("geography", str(folder.absolute()), pass_name, tuple(names), file_identity(*files))
    return geography_of(key, lambda: _read_geography(folder, pass_name, names))


_GEOGRAPHY_FILES = ("blocks.npy", "block_geounit.npy", "geounit_state.npy")


def _read_geography(folder: Path, pass_name: str, names: list[str]) -> PassGeography:
    def read(name: str, mapped: bool = False) -> np.ndarray:
        array = np.load(folder / name, mmap_mode="r" if mapped else None)
        array.flags.writeable = False
        return array

    geographies = tuple(SafeTabGeography(name) for name in names)
    return PassGeography(
        pass_name=pass_name,
        geographies=geographies,
        blocks=read("blocks.npy", mapped=True),
        block_geounit=read("block_geounit.npy", mapped=True),
        geounit_state=read("geounit_state.npy"),
        geounit_entity={g: read(f"entity-{g.value}.npy") for g in geographies},
        region_ids={g: read(f"regions-{g.value}.npy") for g in geographies},
    )


def derived_sets(work: WorkFolder, pass_name: str) -> pd.DataFrame:
    """The coterminous sets :func:`prepare_geography` derived for a pass."""
    sets = pd.read_parquet(work.geography(pass_name) / "coterminous.parquet")
    return sets.astype({"REGION_TYPE": str, "REGION_ID": str})


# ---------------------------------------------------------------------------- person spill


@dataclass(frozen=True)
class SpillSummary:
    """What :func:`spill_persons` read: the file's row count and chunks, the states with
    records (no count of records in the universe: that is a true count), and the person
    file's fingerprint (every record, in or out of the universe)."""

    rows_read: int
    chunks: int
    states: tuple[int, ...]
    fingerprint: str


class _PersonSpiller:
    """How a chunk of person records (engine form) becomes spill rows, by state: each record's
    block looked up in the enabled passes' blocks (out of universe: dropped), its race codes
    and QSPAN packed, its sex × age23 bin. Read-only once built: chunks may be spilled on
    several threads at once and appended in file order."""

    def __init__(self, config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder):
        self.config = config
        self.codec = CombinationCodec(specs)
        passes = [g for g in (load_geography(work, p) for p in PASSES) if g is not None]
        keys = np.concatenate([g.blocks for g in passes]) if passes else np.zeros(0, np.int64)
        order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[order]
        geounits = np.concatenate([g.block_geounit for g in passes]) if passes else keys
        self.block_geounit = geounits.astype(np.int32)[order]

    def rows(self, chunk: Mapping[str, np.ndarray]) -> dict[int, dict[str, np.ndarray]]:
        """State FIPS → the spill columns of the chunk's records in that state (in file
        order). Raises :class:`RaceCodeBoundError` (no record named) for a record with more
        race codes than the config allows."""
        race = [np.asarray(chunk[name]) for name in RACE_COLUMNS]
        codes = np.zeros(race[0].size, dtype=np.int8)
        for column in race:
            codes += column > 0
        if codes.size and int(codes.max()) > self.config.max_race_codes:
            require_race_code_bound(np.stack(race, axis=1), self.config.max_race_codes)
        person_keys = np.zeros(race[0].size, dtype=np.int64)
        for name, factor in zip(GEOGRAPHY_COLUMNS, BLOCK_FACTORS, strict=True):
            person_keys += np.asarray(chunk[name]).astype(np.int64) * factor
        if self.sorted_keys.size == 0:
            return {}
        size = self.sorted_keys.size
        position = np.minimum(np.searchsorted(self.sorted_keys, person_keys), size - 1)
        known = self.sorted_keys[position] == person_keys
        if not known.any():
            return {}
        every = bool(known.all())  # the usual case: no copy of the chunk's columns
        rows = slice(None) if every else np.flatnonzero(known)
        lo, hi = self.codec.pack_columns(
            [column[rows] for column in race], np.asarray(chunk["QSPAN"])[rows]
        )
        columns = {
            "geounit": self.block_geounit[position[rows]],
            "lo": lo,
            "hi": hi,
            "sexage": sexage(np.asarray(chunk["QSEX"])[rows], np.asarray(chunk["QAGE"])[rows]),
        }
        state = np.asarray(chunk["TABBLKST"])[rows].astype(np.int64)
        by_state = {}
        present = np.flatnonzero(np.bincount(state, minlength=1))  # states: 0..99
        if present.size == 1:
            return {int(present[0]): columns}
        for fips in present.tolist():  # at most 52 per chunk
            mine = state == fips
            by_state[int(fips)] = {name: values[mine] for name, values in columns.items()}
        return by_state


def _start_spill(work: WorkFolder) -> None:
    """Remove the spill (and person fingerprint) a previous attempt left."""
    spill_root = work.root / "spill"
    if spill_root.exists():
        shutil.rmtree(spill_root)
    forget_fingerprint(work.fingerprint_dir, PERSON_RECORDS.name)


def _append(work: WorkFolder, by_state: Mapping[int, Mapping[str, np.ndarray]]) -> None:
    for fips, columns in by_state.items():
        work.spill(fips).append(columns)


def spill_persons(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    person_path: str | Path,
    work: WorkFolder,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> SpillSummary:
    """Stream the person file into per-state spills (after :func:`prepare_geography`).

    Replaces any spill a previous attempt left. Vectorized per chunk; the only Python loop is
    over the states present in a chunk. The file's fingerprint is computed on the same chunks
    (returned, and kept in the work folder). A run that validates its inputs makes the same
    spill from validation's read instead (:class:`OnePass`).
    """
    _start_spill(work)
    spiller = _PersonSpiller(config, specs, work)
    rows_read = chunks = 0
    states: set[int] = set()
    fingerprint = RecordFingerprint(PERSON_RECORDS)
    for chunk in iter_person_records(person_path, chunk_bytes):
        chunks += 1
        rows_read += len(chunk)
        fingerprint.update_frame(chunk)
        by_state = spiller.rows({name: chunk[name].to_numpy() for name in chunk.columns})
        _append(work, by_state)
        states.update(by_state)
    digest = fingerprint.hexdigest()
    record_fingerprint(work.fingerprint_dir, PERSON_RECORDS.name, digest)
    return SpillSummary(rows_read, chunks, tuple(sorted(states)), digest)


# ---------------------------------------------------------------------------- one pass


class _GeographyTap:
    """The GRF-C in engine form from validation's read, kept in file order; once the whole
    file is in and valid so far, the geography is prepared from it."""

    def __init__(self, one_pass: OnePass) -> None:
        self.one_pass = one_pass
        self.parts: list[dict[str, np.ndarray]] = []

    def chunk(self, columns: Mapping[str, np.ndarray]) -> Callable[[], None]:
        part = {c.name: np.asarray(columns[c.name]).astype(c.dtype) for c in GRF_C.columns}
        return lambda: self.parts.append(part)

    def done(self, complete: bool) -> None:
        parts, self.parts = self.parts, []
        if not complete:
            return
        columns = {}
        for column in GRF_C.columns:  # one column's parts freed as it is joined
            columns[column.name] = np.concatenate([part.pop(column.name) for part in parts])
        del parts
        grfc = pd.DataFrame(columns, copy=False)
        del columns
        one_pass = self.one_pass
        one_pass.geography = prepare_geography(one_pass.config, grfc, one_pass.work)
        one_pass.spiller = _PersonSpiller(one_pass.config, one_pass.specs, one_pass.work)


class _PersonTap:
    """The person file in engine form from validation's read, spilled as :func:`spill_persons`
    spills it (the same rows, in the same order): chunks on validation's worker threads,
    appended in file order."""

    def __init__(self, one_pass: OnePass) -> None:
        self.one_pass = one_pass
        self.abandoned = False
        self.rows = self.chunks = 0

    def chunk(self, columns: Mapping[str, np.ndarray]) -> Callable[[], None] | None:
        spiller = self.one_pass.spiller
        if spiller is None or self.abandoned:
            return None  # no geography (the GRF-C is not valid): nothing to spill into
        try:
            by_state = spiller.rows(columns)
        except RaceCodeBoundError:  # validation reports it (race_codes_within_max)
            self.abandoned = True
            return None
        rows = next(iter(columns.values())).size

        def append() -> None:
            if not self.abandoned:
                _append(self.one_pass.work, by_state)
                self.one_pass.states.update(by_state)
                self.rows += rows
                self.chunks += 1

        return append

    def done(self, complete: bool) -> None:
        self.one_pass.persons_complete = complete and not self.abandoned


@dataclass
class OnePass:
    """Validation's read of the GRF-C and the person file, made to also prepare the geography
    and spill the persons (:func:`prepare_geography`, :func:`spill_persons`): the engine reads
    the inputs once, and measures the very records validated and fingerprinted.

    Give :meth:`taps` to :func:`das.validation.validate_safetab_p`; then :meth:`outcome` with
    its report: the GRF-C's fingerprint and the spill's summary when the inputs are valid and
    every record was spilled, else None — and nothing is left in the work folder (the spill is
    never used when validation fails: nothing is drawn from it).
    """

    config: SafeTabPConfig
    specs: RaceEthnicitySpecs
    work: WorkFolder
    geography: str | None = None
    spiller: _PersonSpiller | None = None
    states: set[int] = field(default_factory=set)
    persons_complete: bool = False
    _persons: _PersonTap | None = None

    def taps(self) -> dict[str, EngineTap]:
        """Spec name → the tap of that file (for ``validate_safetab_p(taps=...)``)."""
        forget_fingerprint(self.work.fingerprint_dir, GRF_C.name)
        _start_spill(self.work)
        self._persons = _PersonTap(self)
        return {GRF_C.name: _GeographyTap(self), PERSON_RECORDS.name: self._persons}

    def outcome(self, report: ValidationReport) -> tuple[str, SpillSummary] | None:
        """(GRF-C fingerprint, the spill's summary) if ``report`` is ok and both files were
        taken whole (fingerprints equal to validation's); else the work folder's geography
        and spill are removed and None is returned."""
        persons = self._persons
        digest = report.fingerprints.get(PERSON_RECORDS.name)
        complete = (
            report.ok
            and persons is not None
            and self.persons_complete
            and self.geography is not None
            and self.geography == report.fingerprints.get(GRF_C.name)
            and digest is not None
        )
        if not complete or persons is None or digest is None or self.geography is None:
            self.discard()
            return None
        record_fingerprint(self.work.fingerprint_dir, PERSON_RECORDS.name, digest)
        summary = SpillSummary(persons.rows, persons.chunks, tuple(sorted(self.states)), digest)
        return self.geography, summary

    def discard(self) -> None:
        """Remove what the pass made (a failed validation's geography and spill)."""
        for name in ("geography", "spill", "fingerprints"):
            shutil.rmtree(self.work.root / name, ignore_errors=True)
