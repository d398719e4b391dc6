"""PHSafe engine: records → the nine measured tables and the two derived ones (paper §3, §6.4).

``run_phsafe`` follows the paper per table: universe filter → truncate-and-join (joined tables)
→ map each record to its geography entity, iteration and basis cell → one noisy measurement
per plan query. Records inconsistent with the Census semantics are not errors here (the
Census's own toy inputs have some): persons outside a housing unit, units that are not
occupied, geo rows of group-quarters-only geographies (RTYPE 4 or 5: removed before the join),
MAFIDs repeated in ``units`` or ``geo`` (all rows of such a MAFID dropped), units without a
geography or outside the pass's states, and codes outside a table's cells are all simply out
of universe. No private value is ever logged or put into an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das.io.atomic import atomic_output_dir
from das.io.writers import write_pipe_table
from das.phsafe.measure import (
    TabulationInput,
    derive_ph5_num,
    derive_ph8_num,
    measure_query,
    output_columns,
)
from das.phsafe.plan import plan_phsafe
from das.phsafe.tables import SHELLS, cell_codes, person_filter, unit_filter
from das.phsafe.truncate import drop_non_unique, truncate_and_join
from das.phsafe.universes import (
    housing_unit_geography,
    occupied_units,
    persons_in_housing_units,
)
from das.privacy.accounting import Measurement, PrivacyAccountant
from das.privacy.rng import RandomSource
from das.specs.config import PHSafeConfig

PERSON_COLUMNS = ["RTYPE", "MAFID", "QAGE", "CENHISP", "CENRACE", "RELSHIP"]
UNIT_COLUMNS = ["MAFID", "HHSPAN", "HHRACE", "TEN", "HHT", "HHT2", "CPLT"]
STATE = "TABBLKST"


@dataclass(frozen=True)
class PHSafeRelease:
    """Noisy tables by name (measured and derived) and the measurements that produced them."""

    pass_name: str
    tables: dict[str, pd.DataFrame]
    measurements: tuple[Measurement, ...] = field(default_factory=tuple)


def prepare_units(
    units: pd.DataFrame, geo: pd.DataFrame, state_filter: tuple[str, ...]
) -> pd.DataFrame:
    """Occupied housing units with a unique MAFID and a unique housing-unit geography (GQ-only
    geo rows removed first) in the pass's states."""
    occupied = drop_non_unique(occupied_units(units)[UNIT_COLUMNS])
    located = drop_non_unique(housing_unit_geography(geo)[["MAFID", STATE]])
    joined = occupied.merge(located, on="MAFID", how="inner")
    states = np.array([int(code) for code in state_filter], dtype=np.int64)
    return joined.loc[np.isin(joined[STATE].to_numpy().astype(np.int64), states)]


def tabulation_input(
    table: str, config: PHSafeConfig, persons: pd.DataFrame, units: pd.DataFrame
) -> TabulationInput:
    """The per-record arrays a table is counted from (persons already in housing units)."""
    shell = SHELLS[table]
    table_units = units.loc[unit_filter(table, units)]
    if shell.joined:
        table_persons = persons.loc[person_filter(table, persons)]
        records = truncate_and_join(table_persons, table_units, config.tau[table])
    else:
        records = table_units
    if shell.iterates_on == "person":
        race, hispanic = records["CENRACE"], records["CENHISP"]
    else:
        race, hispanic = records["HHRACE"], records["HHSPAN"]
    return TabulationInput(
        state=records[STATE].to_numpy().astype(np.int64),
        race=race.to_numpy().astype(np.int64),
        hispanic=hispanic.to_numpy().astype(np.int64),
        cell=cell_codes(table, records),
    )


@dataclass(frozen=True)
class PreparedRecords:
    """Persons in housing units and the pass's occupied, uniquely located units."""

    persons: pd.DataFrame
    units: pd.DataFrame


def prepare_records(
    config: PHSafeConfig, persons: pd.DataFrame, units: pd.DataFrame, geo: pd.DataFrame
) -> PreparedRecords:
    """The records every table of the pass is tabulated from (universe filters, unique MAFIDs)."""
    return PreparedRecords(
        persons_in_housing_units(persons)[PERSON_COLUMNS],
        prepare_units(units, geo, config.state_filter),
    )


def queries_by_table(plan: list[Measurement]) -> dict[str, list[Measurement]]:
    """The plan's measurements grouped by table, tables and queries in configuration order."""
    grouped: dict[str, list[Measurement]] = {}
    for measurement in plan:
        grouped.setdefault(str(measurement.metadata["table"]), []).append(measurement)
    return grouped


def measure_table(
    table: str,
    measurements: list[Measurement],
    config: PHSafeConfig,
    records: PreparedRecords,
    rng: Any = None,
    accountant: PrivacyAccountant | None = None,
) -> pd.DataFrame:
    """Truncate-and-join once, then every query of one table (``rng`` may be a noise provider)."""
    tabulated = tabulation_input(table, config, records.persons, records.units)
    parts = [
        measure_query(m, tabulated, config.state_filter, rng, accountant) for m in measurements
    ]
    return pd.concat(parts, ignore_index=True)


def add_derived_tables(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The measured tables plus PH5_num (from PH4) and PH8_num (from PH7) when those exist."""
    out = dict(tables)
    if "PH4" in tables:
        out["PH5_num"] = derive_ph5_num(tables["PH4"])
    if "PH7" in tables:
        out["PH8_num"] = derive_ph8_num(tables["PH7"])
    return out


def run_phsafe(
    config: PHSafeConfig,
    persons: pd.DataFrame,
    units: pd.DataFrame,
    geo: pd.DataFrame,
    rng: RandomSource | None = None,
    accountant: PrivacyAccountant | None = None,
) -> PHSafeRelease:
    """Measure every planned query of one pass; add PH5_num / PH8_num when PH4 / PH7 exist.

    ``rng`` None = the OS CSPRNG (production); a seeded source only for tests and demos.
    With an ``accountant``, each query is charged before its noise is drawn (refused over
    budget) and recorded with a digest of its noise once drawn.
    """
    plan = plan_phsafe(config)
    records = prepare_records(config, persons, units, geo)
    tables = {
        table: measure_table(table, measurements, config, records, rng, accountant)
        for table, measurements in queries_by_table(plan).items()
    }
    return PHSafeRelease(config.pass_name, add_derived_tables(tables), tuple(plan))


def table_path(output_dir: str | Path, table: str) -> Path:
    """Where a table is written: ``<output>/<table>/<table>.txt``."""
    return Path(output_dir) / table / f"{table}.txt"


def write_tables(release: PHSafeRelease, folder: str | Path) -> dict[str, int]:
    """Write one ``<table>/<table>.txt`` per table into an existing (staging) folder."""
    written: dict[str, int] = {}
    for table, frame in release.tables.items():
        path = table_path(folder, table)
        path.parent.mkdir()
        written[table] = write_pipe_table(frame, path, output_columns(SHELLS[table]))
    return written


def write_table_folder(
    frame: pd.DataFrame,
    output_dir: str | Path,
    name: str,
    columns: list[str],
    *,
    overwrite: bool = False,
) -> int:
    """Write ``<output>/<name>/<name>.txt``, the folder atomically; the number of rows.

    With ``overwrite`` an existing folder is replaced as a whole (a rerun's release): at every
    instant the folder is either the complete old table or the complete new one.
    """
    with atomic_output_dir(Path(output_dir) / name, overwrite=overwrite) as staging:
        return write_pipe_table(frame, staging / f"{name}.txt", columns)


def write_release(
    release: PHSafeRelease, output_dir: str | Path, *, overwrite: bool = False
) -> dict[str, int]:
    """Write one folder per table atomically (all or nothing); return rows written per table."""
    with atomic_output_dir(output_dir, overwrite=overwrite) as staging:
        return write_tables(release, staging)
