"""SafeTab-P measurement of one population-group level (SafeTab-P paper §3;
docs/explanation/privacy-model.md)..

Records are first aggregated to distinct (block, code combination, sex, age23 bin) counts; each
combination's iterations come from one sparse incidence matrix. Counting is an ``np.bincount``
over integer group ids ``entity · n_iterations + column``: no loop per record or per cell.

Per level with budget B and stage-1 fraction f:

* stage 1: every adaptive group's total + noise at B·f; ``stat_level = digitize(noisy, t)``
  right-open (< t0 → 0, …, ≥ t2 → 3);
* stage 2 at B·(1−f): level 0 a total; 1 sex × age4; 2 sex × age9; 3 sex × age23;
* total-only groups (DETAILED_ONLY at state-or-above): a total at B, no stage 1.

Every group of the key set is measured, empty or not. The age4 and age9 edges are subsets of
the age23 edges, so exact cells are computed once at sex × age23 and merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from das.io.safetab_p import block_key, race_code_matrix
from das.privacy.accounting import Measurement, PrivacyAccountant, draw_noise
from das.safetab_p.iterations import IterationFilter
from das.safetab_p.keys import GeographyEntities

AGE_TOP = 115
AGE_EDGES: dict[int, tuple[int, ...]] = {
    1: (18, 45, 65),
    2: (5, 18, 25, 35, 45, 55, 65, 75),
    3: (5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85),
}
N_AGE23 = len(AGE_EDGES[3]) + 1
N_SEX = 2


def age_bins(workload: int) -> tuple[np.ndarray, np.ndarray]:
    """(AGESTART, AGEEND) of a workload's bins: right-open edges, AGEEND = edge − 1, top 115."""
    edges = np.asarray(AGE_EDGES[workload], dtype=np.int64)
    return np.concatenate([[0], edges]), np.concatenate([edges - 1, [AGE_TOP]])


# age23 bin → bin of workload w (valid because the coarser edges are age23 edges).
_AGE23_STARTS = age_bins(3)[0]
AGE23_TO: dict[int, np.ndarray] = {
    w: np.digitize(_AGE23_STARTS, np.asarray(AGE_EDGES[w])) for w in AGE_EDGES
}
N_BINS = np.array([1, *(len(AGE_EDGES[w]) + 1 for w in (1, 2, 3))], dtype=np.int64)


@dataclass(frozen=True)
class AggregatedPersons:
    """Distinct (block, combination, sex, age23) rows with their record counts.

    ``race_codes`` (k, 8) and ``qspan`` (k,) describe the k distinct combinations.
    """

    block: np.ndarray  # int64 index into the pass's sorted blocks
    combination: np.ndarray  # int64
    sex: np.ndarray  # int64 0/1
    age23: np.ndarray  # int64 0..22
    count: np.ndarray  # int64
    race_codes: np.ndarray
    qspan: np.ndarray


def aggregate_persons(persons: pd.DataFrame, blocks: pd.DataFrame) -> AggregatedPersons:
    """Aggregate a pass's person records (those in ``blocks``' states) to distinct rows.

    Records whose block is not in the GRF-C are out of the universe and dropped (validation
    reports them; the algorithm itself must not crash on them).
    """
    keys = block_key(blocks)
    person_keys = block_key(persons)
    position = np.minimum(np.searchsorted(keys, person_keys), max(keys.size - 1, 0))
    known = keys[position] == person_keys if keys.size else np.zeros(len(persons), dtype=bool)
    persons = persons.loc[known]
    position = position[known]
    codes = np.sort(race_code_matrix(persons).astype(np.int64), axis=1)
    qspan = persons["QSPAN"].to_numpy().astype(np.int64)
    # Distinct (sorted codes, QSPAN): fold one column at a time into a dense id (hash-based
    # factorize, O(n) per column; codes are < 10_000 so id · 10_000 + code stays exact).
    combination = pd.factorize(qspan)[0].astype(np.int64)
    for column in range(codes.shape[1]):
        combination = pd.factorize(combination * 10_000 + codes[:, column])[0].astype(np.int64)
    n_found = int(combination.max()) + 1 if combination.size else 0
    first = np.zeros(n_found, dtype=np.int64)
    first[combination[::-1]] = np.arange(combination.size - 1, -1, -1)
    combos = np.column_stack([codes, qspan])[first].reshape(n_found, 9)
    sex = (persons["QSEX"].to_numpy().astype(np.int64) == 2).astype(np.int64)
    age23 = np.digitize(persons["QAGE"].to_numpy().astype(np.int64), AGE_EDGES[3])
    n_combos = max(combos.shape[0], 1)
    row_key = ((position.astype(np.int64) * n_combos + combination) * N_SEX + sex) * N_AGE23
    found, unique = pd.factorize(row_key + age23)
    counts = np.bincount(found)
    unique = np.asarray(unique, dtype=np.int64)
    age = unique % N_AGE23
    rest = unique // N_AGE23
    return AggregatedPersons(
        block=rest // N_SEX // n_combos,
        combination=(rest // N_SEX) % n_combos,
        sex=rest % N_SEX,
        age23=age,
        count=counts.astype(np.int64),
        race_codes=combos[:, :8].astype(np.int16),
        qspan=combos[:, 8].astype(np.int16),
    )


@dataclass(frozen=True)
class LevelMeasurement:
    """Noisy answers of one level, group g = entity · n_iterations + column.

    ``workload[g]`` is −1 for total-only groups, else the stat level (0..3) chosen in stage 1.
    ``total[g]`` is the measured total where workload ≤ 0 (unused elsewhere). Cells of groups
    with workload ≥ 1 are ``cell_group``/``cell_sex`` (0/1)/``cell_bin``/``cell_count``.
    ``stage_2`` is the stage-2 measurement (its noise sets the suppression threshold).
    """

    entities: GeographyEntities
    iterations: IterationFilter
    iteration_codes: np.ndarray
    workload: np.ndarray
    total: np.ndarray
    cell_group: np.ndarray
    cell_sex: np.ndarray
    cell_bin: np.ndarray
    cell_count: np.ndarray
    stage_2: Measurement | None


def _expand(agg: AggregatedPersons, incidence: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) pairs: every aggregated row repeated once per iteration of its combo."""
    starts = incidence.indptr[agg.combination].astype(np.int64)
    lengths = np.diff(incidence.indptr)[agg.combination].astype(np.int64)
    total = int(lengths.sum())
    rows = np.repeat(np.arange(agg.count.size, dtype=np.int64), lengths)
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    columns = incidence.indices[offsets + np.arange(total, dtype=np.int64)].astype(np.int64)
    return rows, columns


def measure_level(
    agg: AggregatedPersons,
    entities: GeographyEntities,
    iterations: IterationFilter,
    iteration_codes: np.ndarray,
    incidence: sp.csr_matrix,
    measurements: dict[str, Measurement],
    thresholds: tuple[int, int, int] | None,
    rng: Any,
    accountant: PrivacyAccountant,
) -> LevelMeasurement:
    """Two-stage measurement of every (entity, iteration) of one level.

    ``measurements`` maps "stage-1" / "stage-2" / "total-only" to the plan's entries.
    """
    n_columns = iterations.size
    n_groups = entities.size * n_columns
    rows, columns = _expand(agg, incidence)
    entity = entities.block_entity[agg.block[rows]]
    inside = entity >= 0
    rows, columns, entity = rows[inside], columns[inside], entity[inside]
    group = entity * n_columns + columns
    weight = agg.count[rows]
    true_total = np.bincount(group, weights=weight, minlength=n_groups).astype(np.int64)

    total_only = np.tile(iterations.total_only, entities.size)
    workload = np.full(n_groups, -1, dtype=np.int64)
    total = np.zeros(n_groups, dtype=np.int64)
    adaptive = np.flatnonzero(~total_only)
    stage_2 = measurements.get("stage-2")
    # Every planned measurement is charged and drawn, even when it has no group (size 0).
    if "stage-1" in measurements:
        if thresholds is None or stage_2 is None:
            raise ValueError("an adaptive level needs thresholds and a stage-2 measurement")
        noisy = true_total[adaptive] + draw_noise(
            measurements["stage-1"], adaptive.size, rng, accountant
        )
        workload[adaptive] = np.digitize(noisy, np.asarray(thresholds, dtype=np.int64))
    elif adaptive.size:
        raise ValueError("adaptive groups but no stage-1 measurement in the plan")
    only = np.flatnonzero(total_only)
    if "total-only" in measurements:
        total[only] = true_total[only] + draw_noise(
            measurements["total-only"], only.size, rng, accountant
        )
    elif only.size:
        raise ValueError("total-only groups but no total-only measurement in the plan")

    # Stage 2: one draw of the whole level's workload answers (totals first, then cells).
    level_0 = np.flatnonzero(workload == 0)
    broken = np.flatnonzero(workload >= 1)
    rank = np.full(n_groups, -1, dtype=np.int64)
    rank[broken] = np.arange(broken.size)
    widths = N_SEX * N_BINS[workload[broken]]
    offsets = np.cumsum(widths) - widths
    n_cells = int(widths.sum())
    selected = rank[group] >= 0
    cell_rank = rank[group[selected]]
    chosen = workload[group[selected]]
    sel_rows = rows[selected]
    merged_bin = np.zeros(sel_rows.size, dtype=np.int64)
    for level, mapping in AGE23_TO.items():  # three workloads, not a per-record loop
        here = chosen == level
        merged_bin[here] = mapping[agg.age23[sel_rows[here]]]
    cell_index = offsets[cell_rank] + agg.sex[sel_rows] * N_BINS[chosen] + merged_bin
    exact_cells = np.bincount(cell_index, weights=agg.count[sel_rows], minlength=n_cells)
    if stage_2 is not None:
        noise = draw_noise(stage_2, level_0.size + n_cells, rng, accountant)
        total[level_0] = true_total[level_0] + noise[: level_0.size]
        cell_count = exact_cells.astype(np.int64) + noise[level_0.size :]
    else:
        cell_count = np.zeros(0, dtype=np.int64)
    cell_group = np.repeat(broken, widths)
    within = np.arange(n_cells, dtype=np.int64) - np.repeat(offsets, widths)
    bins_of_cell = np.repeat(N_BINS[workload[broken]], widths)
    return LevelMeasurement(
        entities=entities,
        iterations=iterations,
        iteration_codes=iteration_codes,
        workload=workload,
        total=total,
        cell_group=cell_group,
        cell_sex=within // np.maximum(bins_of_cell, 1),
        cell_bin=within % np.maximum(bins_of_cell, 1),
        cell_count=cell_count,
        stage_2=stage_2,
    )
