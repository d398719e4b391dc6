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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das.io.arrays import RawColumns
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

BUCKET_PERSONS = 5_000_000  # persons per bucket by default (≈1.5 GiB to tabulate)
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


def _spill(
    chunks: Iterable[pd.DataFrame],
    keep: Callable[[pd.DataFrame], np.ndarray],
    columns: dict[str, Any],
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
            chunk = chunk.loc[keep(chunk)]
            bucket = chunk["MAFID"].to_numpy().astype(np.int64) % buckets
            order = np.argsort(bucket, kind="stable")
            bounds = np.searchsorted(bucket[order], np.arange(buckets + 1))
            values = {name: chunk[name].to_numpy()[order] for name in columns}
            for k in range(buckets):  # a loop over buckets, not over records
                if bounds[k + 1] > bounds[k]:
                    part = slice(int(bounds[k]), int(bounds[k + 1]))
                    appenders[k].append({name: v[part] for name, v in values.items()})
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
        buckets = max(1, math.ceil(estimated_rows(paths["persons"], PERSONS) / BUCKET_PERSONS))
    if (work.root / "buckets").exists():
        shutil.rmtree(work.root / "buckets")
    if (work.root / "counts").exists():
        shutil.rmtree(work.root / "counts")
    if work.fingerprint_dir.exists():
        shutil.rmtree(work.fingerprint_dir)
    work.root.mkdir(parents=True, exist_ok=True)
    prints = {spec.name: RecordFingerprint(spec) for spec in (PERSONS, UNITS, GEO)}
    rows = {
        "persons": _spill(
            iter_persons(paths["persons"], chunk_bytes),
            lambda p: p["RTYPE"].to_numpy() == PERSON_IN_HOUSING_UNIT,
            PERSON_SPILL,
            work.persons,
            buckets,
            prints[PERSONS.name],
        ),
        "units": _spill(
            iter_units(paths["units"], chunk_bytes),
            occupied_mask,
            UNIT_SPILL,
            work.units,
            buckets,
            prints[UNITS.name],
        ),
        "geo": _spill(
            iter_geo(paths["geo"], chunk_bytes),
            lambda g: np.ones(len(g), dtype=bool),
            GEO_SPILL,
            work.geo,
            buckets,
            prints[GEO.name],
        ),
    }  # fmt: skip
    digests = {name: fingerprint.hexdigest() for name, fingerprint in prints.items()}
    for name, digest in digests.items():
        record_fingerprint(work.fingerprint_dir, name, digest)
    atomic_write_text(work.meta, json.dumps({"buckets": buckets}))
    return PHSafeSpill(buckets, rows, digests)


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
    counts: the per-table task of a flow, with the table's noise store as ``rng``."""
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
