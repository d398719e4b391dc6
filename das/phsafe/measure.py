"""Per-query PHSafe measurement (paper Algorithm 5) and the derived numerator tables.

A query is one plan :class:`~das.privacy.accounting.Measurement` (table × geography level ×
iteration level). Its key set is an integer index space: geography entity (the nation, or each
state of ``state_filter`` — never taken from the data) × iteration of the level × basis cell.
Every key is output, zeros included, as ``count + noise`` where the noise is drawn by the
measurement's own mechanism: discrete Gaussian σ² = Δ²/(2ρ) (zCDP) or two-sided geometric
b = Δ/ε (pure DP); an infinite budget draws no noise. VARIANCE is the mechanism's variance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from das.phsafe.tables import SHELLS, TableShell
from das.phsafe.universes import ITERATIONS, iteration_index
from das.privacy.accounting import Measurement, PrivacyAccountant, draw_noise
from das.privacy.rng import RandomSource
from das.specs.config import PHSafeGeography, PHSafeIterationLevel

NOISE_DISTRIBUTION = {"zcdp": "Discrete Gaussian", "puredp": "Two-Sided Geometric"}
REGION_TYPE = {PHSafeGeography.USA: "USA", PHSafeGeography.STATE: "STATE"}
USA_REGION_ID = "1"


@dataclass(frozen=True)
class TabulationInput:
    """Per-record arrays of one table: state FIPS, the iterating record's race/ethnicity, cell.

    Records with cell 0 are out of the table's universe and are not counted. ``weight``
    (optional) makes each row stand for that many records (aggregated inputs).
    """

    state: np.ndarray
    race: np.ndarray
    hispanic: np.ndarray
    cell: np.ndarray
    weight: np.ndarray | None = None


def output_columns(shell: TableShell) -> list[str]:
    """``REGION_ID|REGION_TYPE|[ITERATION_CODE]|<T>_DATA_CELL|COUNT|NOISE_DISTRIBUTION|VARIANCE``."""
    iteration = [] if shell.total_only else ["ITERATION_CODE"]
    return [
        "REGION_ID",
        "REGION_TYPE",
        *iteration,
        shell.cell_column,
        "COUNT",
        "NOISE_DISTRIBUTION",
        "VARIANCE",
    ]


def region_ids(geography: PHSafeGeography, state_filter: tuple[str, ...]) -> list[str]:
    return [USA_REGION_ID] if geography is PHSafeGeography.USA else list(state_filter)


def code_index(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Position of each value in ``codes`` (non-negative integers), -1 when absent.

    A lookup table over the code range: one gather per record, no sort or search.
    """
    codes = np.asarray(codes, dtype=np.int64)
    bound = int(codes.max()) + 1 if len(codes) else 0
    table = np.full(bound + 1, -1, dtype=np.int64)  # the last slot answers out-of-range values
    table[codes] = np.arange(len(codes))
    values = np.asarray(values)
    return table[np.where((values >= 0) & (values < bound), values, bound)]


def entity_index(
    geography: PHSafeGeography, state: np.ndarray, state_filter: tuple[str, ...]
) -> np.ndarray:
    """Entity index of each record at the level (-1: a state outside the pass)."""
    position = code_index(state, np.array([int(code) for code in state_filter], dtype=np.int64))
    if geography is PHSafeGeography.USA:
        return np.where(position >= 0, 0, -1)
    return position


def exact_counts(
    shell: TableShell,
    geography: PHSafeGeography,
    level: PHSafeIterationLevel,
    records: TabulationInput,
    state_filter: tuple[str, ...],
) -> np.ndarray:
    """True counts over the key set, shape (entities, iterations, basis cells), via bincount."""
    n_entities = len(region_ids(geography, state_filter))
    n_iterations = len(ITERATIONS[level])
    basis = shell.basis_codes
    entity = entity_index(geography, records.state, state_filter)
    iteration = iteration_index(level, records.race, records.hispanic).astype(np.int64)
    cell = code_index(records.cell, basis)
    valid = (entity >= 0) & (iteration >= 0) & (cell >= 0)
    flat = (entity * n_iterations + iteration) * len(basis) + cell
    size = n_entities * n_iterations * len(basis)
    if records.weight is None:
        counts = np.bincount(flat[valid], minlength=size)
    else:  # float64 sums of integers: exact below 2^53
        counts = np.bincount(flat[valid], weights=records.weight[valid], minlength=size)
    return counts.reshape(n_entities, n_iterations, len(basis)).astype(np.int64)


def measure_query(
    measurement: Measurement,
    records: TabulationInput,
    state_filter: tuple[str, ...],
    rng: RandomSource | Any = None,
    accountant: PrivacyAccountant | None = None,
) -> pd.DataFrame:
    """Noisy counts of every key of one plan measurement, as output rows.

    The noise comes from :func:`~das.privacy.accounting.draw_noise`: charged to ``accountant``
    when given, or from a noise provider passed as ``rng`` (a rerun's stored draws).
    """
    counts = query_counts(measurement, records, state_filter)
    return query_rows(measurement, counts, state_filter, rng, accountant)


def query_counts(
    measurement: Measurement, records: TabulationInput, state_filter: tuple[str, ...]
) -> np.ndarray:
    """The true counts of one plan measurement's key set (see :func:`exact_counts`).

    Counts add over disjoint sets of households, so a caller may count part by part."""
    shell = SHELLS[str(measurement.metadata["table"])]
    geography = PHSafeGeography(measurement.metadata["geography"])
    level = PHSafeIterationLevel(measurement.metadata["iteration_level"])
    return exact_counts(shell, geography, level, records, state_filter)


def query_rows(
    measurement: Measurement,
    counts: np.ndarray,
    state_filter: tuple[str, ...],
    rng: RandomSource | Any = None,
    accountant: PrivacyAccountant | None = None,
) -> pd.DataFrame:
    """The output rows of one measurement: its true ``counts`` plus noise drawn now."""
    shell = SHELLS[str(measurement.metadata["table"])]
    geography = PHSafeGeography(measurement.metadata["geography"])
    level = PHSafeIterationLevel(measurement.metadata["iteration_level"])
    noisy = counts.ravel() + draw_noise(measurement, counts.size, rng, accountant)
    regions = region_ids(geography, state_filter)
    iterations = ITERATIONS[level]
    basis = shell.basis_codes
    n = counts.size
    columns: dict[str, object] = {
        "REGION_ID": np.repeat(np.array(regions, dtype=object), len(iterations) * len(basis)),
        "REGION_TYPE": np.full(n, REGION_TYPE[geography], dtype=object),
    }
    if not shell.total_only:
        columns["ITERATION_CODE"] = np.tile(
            np.repeat(np.array(iterations, dtype=object), len(basis)), len(regions)
        )
    columns[shell.cell_column] = np.tile(basis.astype(np.int64), len(regions) * len(iterations))
    columns["COUNT"] = noisy.astype(np.int64)
    columns["NOISE_DISTRIBUTION"] = np.full(n, NOISE_DISTRIBUTION[measurement.definition])
    columns["VARIANCE"] = np.full(n, float(measurement.mechanism.variance))
    return pd.DataFrame(columns, columns=output_columns(shell))


def derive_ph5_num(ph4: pd.DataFrame) -> pd.DataFrame:
    """PH5_num is PH4 (the population in families by age), renamed."""
    shell = SHELLS["PH5_num"]
    frame = ph4.rename(columns={SHELLS["PH4"].cell_column: shell.cell_column})
    return frame[output_columns(shell)].reset_index(drop=True)


def derive_ph8_num(ph7: pd.DataFrame) -> pd.DataFrame:
    """PH8_num from PH7: owner (cell 2) = PH7 cells 2 + 3, renter (cell 3) = PH7 cell 4.

    Noise of different cells is independent, so the variances of the summed cells add.
    """
    source = SHELLS["PH7"].cell_column
    target = SHELLS["PH8_num"]
    keys = ["REGION_ID", "REGION_TYPE", "ITERATION_CODE"]
    mapped = ph7.assign(**{target.cell_column: ph7[source].map({2: 2, 3: 2, 4: 3})})
    grouped = mapped.groupby([*keys, target.cell_column], sort=False, as_index=False).agg(
        COUNT=("COUNT", "sum"),
        NOISE_DISTRIBUTION=("NOISE_DISTRIBUTION", "first"),
        VARIANCE=("VARIANCE", "sum"),
    )
    grouped[target.cell_column] = grouped[target.cell_column].astype(np.int64)
    return grouped[output_columns(target)].reset_index(drop=True)
