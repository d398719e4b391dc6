"""SafeTab-P postprocessing of one level: T1/T2 rows, optional clamp, zero suppression.

* T1 (``REGION_ID|REGION_TYPE|ITERATION_CODE|COUNT``): the measured total of total-only and
  workload-0 groups; for groups with a sex × age breakdown, the sum of their noisy cells (paper
  §5.3.1: internally consistent marginals).
* T2 (``REGION_ID|REGION_TYPE|ITERATION_CODE|AGESTART|AGEEND|SEX|COUNT``): the cells, then the
  sex marginals (``AGESTART = AGEEND = *``) as sums of the cells.
* Clamp: when negative counts are not allowed, every noisy value is set to max(0, ·) *before*
  the sums (so sums stay consistent).
* Zero suppression (paper §5.2, eq. 12): sub-state groups measured by a total only (workload
  0) publish their T1 row only when COUNT > T, T = smallest k with CDF(k) ≥ p of that row's
  stage-2 noise, p = ``zero_suppression_chance``; p = 0 (the Census's "no suppression")
  publishes every row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from das.io.tables import zero_pad
from das.privacy.distributions import suppression_threshold
from das.safetab_p.measure import LevelMeasurement, age_bins

T1_COLUMNS = ("REGION_ID", "REGION_TYPE", "ITERATION_CODE", "COUNT")
T2_COLUMNS = ("REGION_ID", "REGION_TYPE", "ITERATION_CODE", "AGESTART", "AGEEND", "SEX", "COUNT")
_STARTS = {w: age_bins(w)[0] for w in (1, 2, 3)}
_ENDS = {w: age_bins(w)[1] for w in (1, 2, 3)}


def level_threshold(level: LevelMeasurement, p: float) -> int | None:
    """T for this level's workload-0 rows: the (1−p)-tail bound of its stage-2 noise; None
    when p = 0 (nothing is suppressed)."""
    if p == 0:
        return None
    if level.stage_2 is None:
        return 0
    return suppression_threshold(level.stage_2.mechanism.distribution, p)


def _labels(level: LevelMeasurement, groups: np.ndarray) -> dict[str, np.ndarray]:
    n_columns = level.iterations.size
    return {
        "REGION_ID": level.entities.region_ids[groups // n_columns],
        "ITERATION_CODE": zero_pad(level.iteration_codes[groups % n_columns], 4),
    }


def tabulate_level(
    level: LevelMeasurement,
    allow_negative_counts: bool,
    zero_suppression_chance: float,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The level's T1 and T2 rows (after clamp and zero suppression), key-set order."""
    region_type = level.entities.geography.value
    total = level.total.copy()
    cells = level.cell_count.copy()
    if not allow_negative_counts:
        np.maximum(total, 0, out=total)
        np.maximum(cells, 0, out=cells)
    n_groups = level.workload.size
    sums = np.bincount(level.cell_group, weights=cells, minlength=n_groups).astype(np.int64)
    t1_count = np.where(level.workload >= 1, sums, total)
    keep = np.ones(n_groups, dtype=bool)
    if not level.entities.geography.is_state_or_above:
        threshold = level_threshold(level, zero_suppression_chance)
        if threshold is not None:
            keep = (level.workload != 0) | (t1_count > threshold)
    groups = np.flatnonzero(keep)
    t1 = pd.DataFrame(_labels(level, groups))
    t1.insert(1, "REGION_TYPE", region_type)
    t1["COUNT"] = t1_count[groups]

    workload = level.workload[level.cell_group]
    agestart = np.zeros(cells.size, dtype=np.int64)
    ageend = np.zeros(cells.size, dtype=np.int64)
    for w in (1, 2, 3):  # three workloads, not a per-cell loop
        here = workload == w
        agestart[here] = _STARTS[w][level.cell_bin[here]]
        ageend[here] = _ENDS[w][level.cell_bin[here]]
    sex_key = level.cell_group * 2 + level.cell_sex
    marginal_keys, marginal_index = np.unique(sex_key, return_inverse=True)
    marginal = np.bincount(marginal_index.ravel(), weights=cells).astype(np.int64)
    cell_rows = pd.DataFrame(_labels(level, level.cell_group))
    cell_rows["AGESTART"] = agestart.astype(str)
    cell_rows["AGEEND"] = ageend.astype(str)
    cell_rows["SEX"] = (level.cell_sex + 1).astype(str)
    cell_rows["COUNT"] = cells
    cell_rows["_ORDER"] = sex_key * 2 + 1
    marginal_rows = pd.DataFrame(_labels(level, marginal_keys // 2))
    marginal_rows["AGESTART"] = "*"
    marginal_rows["AGEEND"] = "*"
    marginal_rows["SEX"] = (marginal_keys % 2 + 1).astype(str)
    marginal_rows["COUNT"] = marginal
    marginal_rows["_ORDER"] = marginal_keys * 2
    t2 = pd.concat([marginal_rows, cell_rows], ignore_index=True)
    t2 = t2.sort_values("_ORDER", kind="stable").drop(columns="_ORDER").reset_index(drop=True)
    t2.insert(1, "REGION_TYPE", region_type)
    return t1[list(T1_COLUMNS)], t2[list(T2_COLUMNS)]
