"""PHSafe statistical postprocessing: released noisy tables → estimates with 90% intervals.

Output columns (every frame keeps the noisy table's keys: ``REGION_ID``, ``REGION_TYPE``,
``ITERATION_CODE`` where the table has it, and ``<T>_DATA_CELL``):

==================  ==========================================================================
Column              Meaning
==================  ==========================================================================
ESTIMATE            Count tables PH2/PH3/PH4/PH6/PH7: nonnegative integer, the rounded
                    posterior mean (basis cells; subtotals and totals per
                    ``aggregate_method``, see :mod:`das.postprocess.counts`).
                    Average tables PH1/PH5/PH8: posterior mean of the average (float).
CI_LOWER_90         Lower end of the 90% credible interval. Count tables: per ``interval``,
                    the equal-tailed interval's 5% quantile (default) or the lower end of
                    the highest-posterior-density (shortest) interval (``"hpd"``), rounded
                    down to an integer. Averages: always equal-tailed (5% quantile).
CI_UPPER_90         Upper end: 95% quantile, or the HPD's upper end; counts are rounded up
                    to an integer.
NUMERATOR_ESTIMATE  Averages only: posterior mean of the numerator (persons).
DENOMINATOR_ESTIMATE  Averages only: posterior mean of the denominator (households, families,
                    occupied units).
ESS                 Averages only: effective sample size of the group's importance weights.
==================  ==========================================================================

Written files (``das run phsafe``): ``<output>/<T>_estimates/<T>_estimates.txt`` beside the
noisy ``<output>/<T>/`` folders, pipe-delimited with a header, columns in the order above.
Averages and their intervals are written with 4 decimals, NUMERATOR/DENOMINATOR_ESTIMATE with
2 and ESS with 1 (:func:`format_estimates`).

Average cells: PH1 / PH5 cell 1 = average household / family size, 2 = persons under 18 per
household / family, 3 = persons 18 and over per household / family; PH8 cell 1 = average size
of occupied units, 2 = owner occupied, 3 = renter occupied (cell 1 is the ratio of the summed
owner and renter draws). Each frame's ``attrs["diagnostics"]`` holds the method, for count
tables the ``interval`` type, and for averages the minimum ESS, the draws used and the
constraints. Postprocessing reads only released values (no confidential data), so it costs
no privacy budget; it is not privacy-critical, and a ``seed`` makes it reproducible
(None = fresh OS entropy).

Interval type (count tables only): ``"equal-tailed"`` is the default because the issue's spec
asks for it, but near 0 it is poorly calibrated (a true 0 is almost never covered once σ is in
the tens; pooled coverage 0.866 at 1 M synthetic persons with the 2020 budgets, see
:mod:`das.postprocess.counts`); ``"hpd"`` starts at 0 whenever the noisy value is within
~1.3 σ of 0 and covers small counts ~90% (pooled 0.915 on the same benchmark). Averages
keep equal-tailed intervals whatever ``interval`` says: a ratio's posterior is not the
truncated normal the HPD formula is for, and its measured equal-tailed coverage is already
within 0.85–0.97 (0.916 pooled, ``benchmarks/phsafe_accuracy.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from das.postprocess.averages import TARGET_ESS, RatioComponent, average_posterior
from das.postprocess.counts import (
    INTERVALS,
    Interval,
    Pivot,
    key_columns,
    pivot_table,
    postprocess_count_table,
)
from das.specs.config import PHSafeConfig

COUNT_TABLES = ("PH2", "PH3", "PH4", "PH6", "PH7")
COUNT_METHOD = (
    "closed-form posterior: Gaussian noise approximation of known variance, flat prior on "
    "[0, inf) (truncated normal)"
)
AVERAGE_METHOD = (
    "importance sampling of (numerator total, denominator) from a defensive mixture of two "
    "exact truncated-normal schemes on the constraint wedge; parts drawn exactly given the "
    "total; ESS of the weights"
)


@dataclass(frozen=True)
class AverageSpec:
    """How an average table is built from its released numerator and denominator tables."""

    numerator: str
    denominator: str
    tau_table: str
    min_per_unit: float
    per_component: bool  # PH8: owner/renter are separate (numerator, denominator) pairs


AVERAGES = {
    "PH1": AverageSpec("PH1_num", "PH1_denom", "PH1_num", 1.0, per_component=False),
    "PH5": AverageSpec("PH5_num", "PH5_denom", "PH4", 2.0, per_component=False),
    "PH8": AverageSpec("PH8_num", "PH8_denom", "PH7", 1.0, per_component=True),
}
_OUTPUT_CELLS = np.array([1, 2, 3], dtype=np.int64)


def _joined(num: Pivot, den: Pivot, keys: list[str]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Groups measured in both tables: their keys and row indices into each pivot."""
    left = num.keys.assign(_num=np.arange(len(num.keys)))
    right = den.keys.assign(_den=np.arange(len(den.keys)))
    both = left.merge(right, on=keys, how="inner", sort=False)
    return both[keys], both["_num"].to_numpy(), both["_den"].to_numpy()


def postprocess_average(
    release_tables: dict[str, pd.DataFrame],
    name: str,
    config: PHSafeConfig,
    generator: np.random.Generator,
    n_draws: int = 4000,
) -> pd.DataFrame:
    """One average table (PH1, PH5 or PH8) for every group measured in numerator and denominator."""
    spec = AVERAGES[name]
    tau = float(config.tau[spec.tau_table])
    num = pivot_table(release_tables[spec.numerator], spec.numerator)
    den = pivot_table(release_tables[spec.denominator], spec.denominator)
    keys = key_columns(release_tables[spec.numerator])
    group_keys, i_num, i_den = _joined(num, den, keys)
    num_y, num_v = num.count[i_num], num.variance[i_num]
    den_y, den_v = den.count[i_den], den.variance[i_den]
    if spec.per_component:
        components = [
            RatioComponent(
                num_y[:, [k]], num_v[:, [k]], den_y[:, k], den_v[:, k], spec.min_per_unit, tau
            )
            for k in range(num_y.shape[1])
        ]
        part_masks = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
        component_masks = part_masks
    else:
        components = [
            RatioComponent(num_y, num_v, den_y[:, 0], den_v[:, 0], spec.min_per_unit, tau)
        ]
        part_masks = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
        component_masks = np.ones((3, 1))
    result = average_posterior(components, part_masks, component_masks, generator, n_draws)
    n_groups = len(group_keys)
    out = group_keys.loc[np.repeat(np.arange(n_groups), 3)].reset_index(drop=True)
    out[f"{name}_DATA_CELL"] = np.tile(_OUTPUT_CELLS, n_groups)
    out["ESTIMATE"] = result.ratio.ravel()
    out["CI_LOWER_90"] = result.lower.ravel()
    out["CI_UPPER_90"] = result.upper.ravel()
    out["NUMERATOR_ESTIMATE"] = result.numerator.ravel()
    out["DENOMINATOR_ESTIMATE"] = result.denominator.ravel()
    out["ESS"] = np.repeat(result.ess, 3)
    out.attrs["diagnostics"] = {
        "method": AVERAGE_METHOD,
        "min_ess": float(result.ess.min()) if n_groups else float("nan"),
        "target_ess": TARGET_ESS,
        "converged": bool(np.all(result.ess >= TARGET_ESS)),
        "max_draws": int(result.draws.max()) if n_groups else 0,
        "groups": n_groups,
        "constraints": f"denominator >= 1; {spec.min_per_unit:g} <= numerator/denominator "
        f"<= tau = {tau:g}",
    }
    return out


def postprocess_phsafe(
    release_tables: dict[str, pd.DataFrame],
    config: PHSafeConfig,
    seed: int | None = None,
    n_draws: int = 4000,
    aggregate_method: Literal["direct", "sum_posterior"] = "direct",
    interval: Interval = "equal-tailed",
) -> dict[str, pd.DataFrame]:
    """Estimates and 90% credible intervals for every count and average table present.

    Count tables need their own noisy table; averages need both numerator and denominator
    (groups measured in only one are left out). ``interval`` (equal-tailed or HPD) applies to
    count tables; averages are always equal-tailed. See the module docstring for the columns.
    """
    if interval not in INTERVALS:
        raise ValueError(f"unknown interval {interval!r}; expected one of {INTERVALS}")
    generator = np.random.default_rng(seed)
    out: dict[str, pd.DataFrame] = {}
    for table in COUNT_TABLES:
        if table in release_tables:
            frame = postprocess_count_table(
                release_tables[table],
                table,
                generator,
                n_draws,
                aggregate_method,
                interval=interval,
            )
            frame.attrs["diagnostics"] = {
                "method": COUNT_METHOD,
                "aggregate_method": aggregate_method,
                "interval": interval,
                "draws": n_draws if aggregate_method == "sum_posterior" else 0,
            }
            out[table] = frame
    for name, spec in AVERAGES.items():
        if spec.numerator in release_tables and spec.denominator in release_tables:
            out[name] = postprocess_average(release_tables, name, config, generator, n_draws)
    return out


ESTIMATES_SUFFIX = "_estimates"
_DECIMALS = {
    "ESTIMATE": 4,
    "CI_LOWER_90": 4,
    "CI_UPPER_90": 4,
    "NUMERATOR_ESTIMATE": 2,
    "DENOMINATOR_ESTIMATE": 2,
    "ESS": 1,
}


def estimates_name(table: str) -> str:
    """Folder and file name of a table's estimates: ``PH2`` → ``PH2_estimates``."""
    return f"{table}{ESTIMATES_SUFFIX}"


def format_estimates(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as written: float columns rounded (see the module docstring); integers kept."""
    rounded = {
        name: frame[name].round(digits)
        for name, digits in _DECIMALS.items()
        if name in frame.columns and pd.api.types.is_float_dtype(frame[name].dtype)
    }
    return frame.assign(**rounded)


def estimates_diagnostics(estimates: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Each table's method and convergence figures (derived from released values only);
    non-finite figures (no group to measure) become None so the audit stays strict JSON."""

    def plain(value: object) -> object:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    return {
        name: {key: plain(value) for key, value in frame.attrs.get("diagnostics", {}).items()}
        for name, frame in estimates.items()
    }
