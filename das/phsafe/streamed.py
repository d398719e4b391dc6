"""PHSafe at national scale in bounded memory: the same release as :func:`run_phsafe`.

The in-memory engine reads the three files whole. Here every step holds one *bucket* of
households: all records are partitioned by ``MAFID mod B``, so each household's person,
unit and geography rows land in the same bucket, and everything PHSafe does to records is
local to a household (unit and geography uniqueness, truncation to τ persons per MAFID, the
person-unit join). A bucket is tabulated with the in-memory engine's own functions; counts
add over buckets (the nation is the sum of the states' true cells before any noise); the
noise is drawn once per query on the summed counts, in the plan's order, as the in-memory
engine draws it. With the same random source (or the same per-measurement streams) both
engines release byte-identical tables.

Steps and work folder (``<work>/``), each callable on its own (one call per bucket for the
counting):

1. :func:`spill_phsafe` — stream ``persons``, ``units`` and ``geo`` (text or Parquet) once,
   keep only what any table can use (persons in housing units, occupied housing units, each
   geography row's state) and append it to ``buckets/<k>/{persons,units,geo}/*.bin``; the
   three files' canonical fingerprints (:mod:`das.io.fingerprint`, the privacy ledger's
   dataset identity) are computed on the same chunks, returned and kept in
   ``fingerprints/<name>.fingerprint``.
2. :func:`count_bucket` — the true counts of every planned query from one bucket →
   ``counts/<k>.npz``.
3. :func:`measure_table_streamed` (one call per table) or :func:`measure_streamed` (all) —
   sum the buckets' counts, draw every query's noise, return the rows / the
   :class:`PHSafeRelease` (tables are small: states × iterations × cells).

Memory: one chunk of one input file while spilling; one bucket's records while counting
(``BUCKET_PERSONS`` persons by default); no step logs a record count or a true count.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das import allocator
from das.io.arrays import RawAppender, RawColumns
from das.io.atomic import atomic_write_text
from das.io.fingerprint import RecordFingerprint, read_fingerprints, record_fingerprint
from das.io.phsafe import GEO, PERSONS, UNITS, iter_geo, iter_persons, iter_units
from das.io.tables import DEFAULT_CHUNK_BYTES, estimated_rows
from das.phsafe.engine import (
    PERSON_COLUMNS,
    STATE,
    UNIT_COLUMNS,
    PHSafeRelease,
    PreparedRecords,
    add_derived_tables,
    prepare_records,
    queries_by_table,
)
from das.phsafe.measure import TabulationInput, query_counts, query_rows
from das.phsafe.plan import plan_phsafe
from das.phsafe.tables import SHELLS, cell_codes, person_filter, unit_filter
from das.phsafe.truncate import first_per_key, truncation_order
from das.phsafe.universes import PERSON_IN_HOUSING_UNIT, UNIT_HOUSING, occupied_mask
from das.privacy.accounting import PrivacyAccountant
from das.runs.folder import safe_name
from das.specs.config import PHSafeConfig
from das.validation.findings import ValidationReport
from das.validation.scan import EngineTap

# Persons per bucket by default. A bucket's tabulation holds several copies of its records
# (truncation order, the join, cell codes): 0.36 GiB above the process's own for 2.4 M persons
# (0.71 GiB for 4.8 M, and 20 % more CPU-seconds a person), once per worker counting at once.
BUCKET_PERSONS = 2_500_000
# Spilled columns (RTYPE is implied by the universe filters: 3 for persons, 2 for units).
PERSON_SPILL = {name: _dtype for name, _dtype in (
    ("MAFID", np.uint32), ("QAGE", np.uint8), ("CENHISP", np.uint8), ("CENRACE", np.uint8),
    ("RELSHIP", np.uint8),
)}  # fmt: skip
UNIT_SPILL = {"MAFID": np.uint32, **{name: np.uint8 for name in UNIT_COLUMNS if name != "MAFID"}}
# geo keeps RTYPE: which geography rows a join may use can depend on it (group quarters)
GEO_SPILL = {"RTYPE": np.uint8, "MAFID": np.uint32, STATE: np.uint8}

# (rng or noise provider, accountant) for one table's measurements, by table name
NoiseForTable = Callable[[str], tuple[Any, PrivacyAccountant | None]]


@dataclass(frozen=True)
class PHSafeWork:
    """Paths of the streamed PHSafe engine's intermediate data (module docstring)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def persons(self, bucket: int) -> RawColumns:
        return RawColumns(self.root / "buckets" / f"{bucket:04d}" / "persons", PERSON_SPILL)

    def units(self, bucket: int) -> RawColumns:
        return RawColumns(self.root / "buckets" / f"{bucket:04d}" / "units", UNIT_SPILL)

    def geo(self, bucket: int) -> RawColumns:
        return RawColumns(self.root / "buckets" / f"{bucket:04d}" / "geo", GEO_SPILL)

    def counts(self, bucket: int) -> Path:
        return self.root / "counts" / f"{bucket:04d}.npz"

    @property
    def meta(self) -> Path:
        return self.root / "buckets.json"

    def buckets(self) -> int:
        return int(json.loads(self.meta.read_text())["buckets"])

    @property
    def fingerprint_dir(self) -> Path:
        return self.root / "fingerprints"

    def fingerprints(self) -> dict[str, str]:
        """Spec name → fingerprint of the inputs :func:`spill_phsafe` read ("persons", "units",
        "geo"); confidential-data derived: never for a log or Prefect."""
        return read_fingerprints(self.fingerprint_dir)


@dataclass(frozen=True)
class PHSafeSpill:
    """What :func:`spill_phsafe` read: file row counts (for the local log only) and each
    file's fingerprint by spec name (every record, in or out of the universes)."""

    buckets: int
    rows_read: dict[str, int]
    fingerprints: dict[str, str]


# What each file keeps for the tables (persons in housing units, occupied housing units, every
# geography row), its spilled columns and its buckets' folders, by spec name.
_KEEP: dict[str, Callable[[pd.DataFrame], np.ndarray]] = {
    PERSONS.name: lambda p: p["RTYPE"].to_numpy() == PERSON_IN_HOUSING_UNIT,
    UNITS.name: occupied_mask,
    GEO.name: lambda g: np.ones(len(g), dtype=bool),
}
_SPILLED = {PERSONS.name: PERSON_SPILL, UNITS.name: UNIT_SPILL, GEO.name: GEO_SPILL}
_SPECS = {spec.name: spec for spec in (PERSONS, UNITS, GEO)}


def _target(work: PHSafeWork, name: str) -> Callable[[int], RawColumns]:
    return {PERSONS.name: work.persons, UNITS.name: work.units, GEO.name: work.geo}[name]


def _bucket_parts(
    chunk: pd.DataFrame, name: str, buckets: int
) -> list[tuple[int, dict[str, np.ndarray]]]:
    """(bucket, its rows' spilled columns) of one engine-form chunk of file ``name``, in file
    order within each bucket; rows no table uses are dropped."""
    chunk = chunk.loc[_KEEP[name](chunk)]
    bucket = chunk["MAFID"].to_numpy().astype(np.int64) % buckets
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange(buckets + 1))
    values = {column: chunk[column].to_numpy()[order] for column in _SPILLED[name]}
    parts = []
    for k in range(buckets):  # a loop over buckets, not over records
        if bounds[k + 1] > bounds[k]:
            part = slice(int(bounds[k]), int(bounds[k + 1]))
            parts.append((k, {column: v[part] for column, v in values.items()}))
    return parts


def _spill(
    chunks: Iterable[pd.DataFrame],
    name: str,
    target: Callable[[int], RawColumns],
    buckets: int,
    fingerprint: RecordFingerprint,
) -> int:
    """Append each chunk's kept rows to their buckets (every row into ``fingerprint``);
    returns the rows read."""
    appenders = [target(k).appender() for k in range(buckets)]
    for appender in appenders:
        appender.__enter__()
    rows = 0
    try:
        for chunk in chunks:
            rows += len(chunk)
            fingerprint.update_frame(chunk)
            for k, columns in _bucket_parts(chunk, name, buckets):
                appenders[k].append(columns)
    finally:
        for appender in appenders:
            appender.__exit__(None, None, None)
    return rows


def spill_phsafe(
    config: PHSafeConfig,
    paths: dict[str, Path],
    work: PHSafeWork,
    buckets: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> PHSafeSpill:
    """Partition the pass's usable records into ``buckets`` (default: by the person count).

    ``paths`` maps ``persons``/``units``/``geo`` to their files. Replaces any earlier spill.
    """
    del config  # every pass reads the same universes; the state filter applies when counting
    if buckets is None:
        buckets = default_buckets(paths["persons"])
    _start_spill(work)
    prints = {spec.name: RecordFingerprint(spec) for spec in (PERSONS, UNITS, GEO)}
    readers = {PERSONS.name: iter_persons, UNITS.name: iter_units, GEO.name: iter_geo}
    rows = {
        name: _spill(
            read(paths[name], chunk_bytes), name, _target(work, name), buckets, prints[name]
        )
        for name, read in readers.items()
    }
    digests = {name: fingerprint.hexdigest() for name, fingerprint in prints.items()}
    for name, digest in digests.items():
        record_fingerprint(work.fingerprint_dir, name, digest)
    atomic_write_text(work.meta, json.dumps({"buckets": buckets}))
    return PHSafeSpill(buckets, rows, digests)


def default_buckets(persons_path: str | Path) -> int:
    """Buckets of about :data:`BUCKET_PERSONS` persons (the file's size says how many)."""
    return max(1, math.ceil(estimated_rows(persons_path, PERSONS) / BUCKET_PERSONS))


def _start_spill(work: PHSafeWork) -> None:
    """Remove what a previous attempt spilled, counted or fingerprinted."""
    for name in ("buckets", "counts"):
        if (work.root / name).exists():
            shutil.rmtree(work.root / name)
    if work.fingerprint_dir.exists():
        shutil.rmtree(work.fingerprint_dir)
    work.root.mkdir(parents=True, exist_ok=True)


class _BucketTap:
    """One file in engine form from validation's read, spilled by bucket as :func:`_spill`
    spills it (the same rows in the same order): chunks on the validation threads, appended
    in file order (the bucket files open while this file is read: one file at a time)."""

    def __init__(self, one_pass: OnePass, name: str) -> None:
        self.one_pass = one_pass
        self.name = name
        self.rows = 0
        self.complete = False
        self.appenders: list[RawAppender] = []

    def chunk(self, columns: Mapping[str, np.ndarray]) -> Callable[[], None]:
        spec = _SPECS[self.name]
        frame = pd.DataFrame(
            {c.name: np.asarray(columns[c.name]).astype(c.dtype) for c in spec.columns},
            copy=False,
        )
        parts = _bucket_parts(frame, self.name, self.one_pass.buckets)
        rows = len(frame)

        def append() -> None:
            if not self.appenders:
                target = _target(self.one_pass.work, self.name)
                self.appenders = [target(k).appender() for k in range(self.one_pass.buckets)]
                for appender in self.appenders:
                    appender.__enter__()
            for k, part in parts:
                self.appenders[k].append(part)
            self.rows += rows

        return append

    def done(self, complete: bool) -> None:
        for appender in self.appenders:
            appender.__exit__(None, None, None)
        self.appenders = []
        self.complete = complete


@dataclass
class OnePass:
    """Validation's read of persons, units and geo, made to also spill them by household
    bucket (:func:`spill_phsafe`'s spill, the same files): the engine reads the inputs once
    and counts the very records validated and fingerprinted.

    Give :meth:`taps` to :func:`das.validation.validate_phsafe`; then :meth:`outcome` with its
    report: the spill's summary when the inputs are valid and every record was spilled, else
    None — and nothing is left in the work folder (the spill is never used when validation
    fails: nothing is drawn from it).
    """

    work: PHSafeWork
    buckets: int
    _taps: dict[str, _BucketTap] = field(default_factory=dict)

    def taps(self) -> dict[str, EngineTap]:
        """Spec name → the tap of that file (for ``validate_phsafe(taps=...)``)."""
        _start_spill(self.work)
        self._taps = {name: _BucketTap(self, name) for name in _SPECS}
        return dict(self._taps)

    def outcome(self, report: ValidationReport) -> PHSafeSpill | None:
        """The spill's summary (fingerprints: validation's) if ``report`` is ok and every file
        was taken whole; else the spill is removed and None is returned."""
        digests = {name: report.fingerprints.get(name) for name in _SPECS}
        taps = self._taps
        complete = report.ok and taps and all(t.complete for t in taps.values())
        if not complete or any(digest is None for digest in digests.values()):
            self.discard()
            return None
        kept = {name: str(digest) for name, digest in digests.items()}
        for name, digest in kept.items():
            record_fingerprint(self.work.fingerprint_dir, name, digest)
        atomic_write_text(self.work.meta, json.dumps({"buckets": self.buckets}))
        rows = {name: tap.rows for name, tap in taps.items()}
        return PHSafeSpill(self.buckets, rows, kept)

    def discard(self) -> None:
        """Remove what the pass made (a failed validation's spill)."""
        for tap in self._taps.values():
            tap.done(False)
        _start_spill(self.work)


def _frame(columns: RawColumns, rtype: int | None) -> pd.DataFrame:
    """A bucket's spilled records as an engine-form frame (RTYPE restored when implied)."""
    frame = pd.DataFrame(columns.read(), copy=False)
    if rtype is not None:
        frame.insert(0, "RTYPE", np.full(len(frame), rtype, dtype=np.uint8))
    return frame


def bucket_tabulations(
    config: PHSafeConfig, records: PreparedRecords, tables: list[str]
) -> dict[str, TabulationInput]:
    """Each table's tabulation input for one bucket, aggregated to distinct (state, race,
    ethnicity, cell) rows with weights.

    The persons are put in truncation order once (:func:`truncation_order`); each joined
    table then keeps, per MAFID, its first τ persons in its own universe that live in one of
    its units, which is what :func:`truncate_and_join` keeps (the order does not depend on
    the filter, and persons without a unit never join). Counts equal
    :func:`das.phsafe.engine.tabulation_input`'s.
    """
    persons = records.persons
    units = records.units
    order = truncation_order(persons)
    persons = persons.iloc[order].reset_index(drop=True)
    keys = persons["MAFID"].to_numpy().astype(np.int64)
    unit_keys = units["MAFID"].to_numpy().astype(np.int64)
    unit_order = np.argsort(unit_keys, kind="stable")
    sorted_units = unit_keys[unit_order]
    position = np.minimum(np.searchsorted(sorted_units, keys), max(sorted_units.size - 1, 0))
    found = sorted_units[position] == keys if sorted_units.size else np.zeros(keys.size, bool)
    unit_of = np.where(found, unit_order[position] if sorted_units.size else 0, -1)
    unit_columns = [name for name in units.columns if name != "MAFID"]
    out = {}
    for table in tables:
        shell = SHELLS[table]
        in_units = unit_filter(table, units)
        if shell.joined:
            wanted = person_filter(table, persons) & found
            wanted[found] &= in_units[unit_of[found]]
            kept = np.flatnonzero(first_per_key(keys, wanted, config.tau[table]))
            joined = {name: persons[name].to_numpy()[kept] for name in persons.columns}
            joined.update({name: units[name].to_numpy()[unit_of[kept]] for name in unit_columns})
            rows = pd.DataFrame(joined, copy=False)
        else:
            rows = units.loc[in_units]
        race, hispanic = (
            ("CENRACE", "CENHISP") if shell.iterates_on == "person" else ("HHRACE", "HHSPAN")
        )
        cell = cell_codes(table, rows).astype(np.int64)
        counted = cell > 0
        key = (
            (rows[STATE].to_numpy().astype(np.int64)[counted] * 256
             + rows[race].to_numpy().astype(np.int64)[counted]) * 256
            + rows[hispanic].to_numpy().astype(np.int64)[counted]
        ) * 65_536 + cell[counted]  # fmt: skip
        ids, distinct = pd.factorize(key)
        distinct = np.asarray(distinct, dtype=np.int64)
        out[table] = TabulationInput(
            state=distinct // (65_536 * 256 * 256),
            race=(distinct // (65_536 * 256)) % 256,
            hispanic=(distinct // 65_536) % 256,
            cell=distinct % 65_536,
            weight=np.bincount(ids, minlength=distinct.size).astype(np.float64),
        )
    return out


def count_bucket(config: PHSafeConfig, work: PHSafeWork, bucket: int) -> Path:
    """True counts of every planned query from one bucket's households → ``counts/<k>.npz``.

    The bucket goes through the in-memory engine's universes, unique MAFIDs and state filter
    (:func:`prepare_records`), then :func:`bucket_tabulations`: its counts are exactly that
    engine's counts restricted to these households.
    """
    persons = _frame(work.persons(bucket), PERSON_IN_HOUSING_UNIT)
    units = _frame(work.units(bucket), UNIT_HOUSING)
    geo = _frame(work.geo(bucket), None)
    prepared = prepare_records(config, persons[PERSON_COLUMNS], units, geo)
    by_table = queries_by_table(plan_phsafe(config))
    inputs = bucket_tabulations(config, prepared, list(by_table))
    counts: dict[str, np.ndarray] = {}
    for table, measurements in by_table.items():
        for measurement in measurements:
            counts[safe_name(measurement.name)] = query_counts(
                measurement, inputs[table], config.state_filter
            )
    path = work.counts(bucket)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp.npz")
    np.savez(temporary, **counts)
    temporary.replace(path)
    return path


def summed_counts(config: PHSafeConfig, work: PHSafeWork) -> dict[str, np.ndarray]:
    """Every query's true counts over all buckets (after every :func:`count_bucket`)."""
    total: dict[str, np.ndarray] = {}
    for bucket in range(work.buckets()):
        with np.load(work.counts(bucket)) as counts:
            for name in counts.files:
                total[name] = total[name] + counts[name] if name in total else counts[name]
    return total


def measure_table_streamed(
    config: PHSafeConfig,
    work: PHSafeWork,
    table: str,
    rng: Any = None,
    accountant: PrivacyAccountant | None = None,
) -> pd.DataFrame:
    """One table's noisy rows (every query of the table, in plan order) from the summed
    counts: the per-table task of a flow, with the table's noise store as ``rng``.

    It first gives back the free memory of this process's heaps (:func:`das.allocator.release`):
    a worker that counted buckets kept their peak, 0.7 GiB per worker at national scale, to
    the end of the run, beside the statistical postprocessing's."""
    allocator.release()
    counts = summed_counts(config, work)
    measurements = queries_by_table(plan_phsafe(config))[table]
    return pd.concat(
        [
            query_rows(m, counts[safe_name(m.name)], config.state_filter, rng, accountant)
            for m in measurements
        ],
        ignore_index=True,
    )


def measure_streamed(
    config: PHSafeConfig,
    work: PHSafeWork,
    rng: Any = None,
    accountant: PrivacyAccountant | None = None,
    noise_for_table: NoiseForTable | None = None,
) -> PHSafeRelease:
    """Noisy tables from the buckets' summed counts; queries drawn in plan order.

    ``noise_for_table(table)`` gives each table's noise provider and accountant (e.g. the
    table's persisted noise store, as the flow uses); otherwise every query draws from
    ``rng`` charged to ``accountant``.
    """
    plan = plan_phsafe(config)
    tables: dict[str, pd.DataFrame] = {}
    for table in queries_by_table(plan):
        provider, table_accountant = (
            noise_for_table(table) if noise_for_table is not None else (rng, accountant)
        )
        tables[table] = measure_table_streamed(config, work, table, provider, table_accountant)
    return PHSafeRelease(config.pass_name, add_derived_tables(tables), tuple(plan))


def run_phsafe_streamed(
    config: PHSafeConfig,
    paths: dict[str, Path],
    work_dir: str | Path,
    rng: Any = None,
    accountant: PrivacyAccountant | None = None,
    *,
    buckets: int | None = None,
    noise_for_table: NoiseForTable | None = None,
) -> PHSafeRelease:
    """Every step in order, in this process: the release :func:`run_phsafe` gives."""
    work = PHSafeWork(Path(work_dir))
    spilled = spill_phsafe(config, paths, work, buckets)
    for bucket in range(spilled.buckets):
        count_bucket(config, work, bucket)
    return measure_streamed(config, work, rng, accountant, noise_for_table)
