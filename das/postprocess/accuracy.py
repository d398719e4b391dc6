"""PHSafe accuracy evidence: noisy counts against their 90% MOE, credible-interval coverage.

Inputs are three dicts of frames from one population: the *exact* release (``run_phsafe`` with
every budget ``Infinity``, so COUNT is the true, truncated tabulation), the *noisy* release of
the same config and keys, and the noisy release's ``postprocess_phsafe`` estimates. Outputs are
cell counts and fractions only (aggregate figures, never a cell value), so they can be printed
even for confidential inputs.

* :func:`moe_within` — per noisy table, the share of cells with ``|noisy − exact| ≤ MOE90``.
  The MOE is the exact discrete margin of the noise actually added
  (:func:`das.privacy.distributions.margin_of_error` of the discrete Gaussian or two-sided
  geometric whose variance is the cell's VARIANCE), so the expected share is just over 90%.
  PH8_num is derived: its owner cell sums two PH7 cells and their variances, a sum that is
  neither distribution, so the whole table uses the Gaussian approximation
  ``z₀.₉₅·√VARIANCE`` (continuous; for the production σ of hundreds the difference from the
  discrete margin is under one person).
* :func:`count_coverage` — per count table, the share of cells whose exact count lies in
  ``[CI_LOWER_90, CI_UPPER_90]`` (equal-tailed or HPD, as the estimates were made), split
  into basis cells, subtotals and the table total; exact aggregates are the exact basis cells
  summed by :func:`das.postprocess.counts.aggregate_matrix`, the same shell logic the
  estimates use.
* :func:`ratio_coverage` — per average table, coverage of the exact ratio and mean absolute
  error of ESTIMATE over output cells whose exact denominator is at least 1 (a ratio is
  undefined otherwise); the ratios are built from the exact numerator and denominator tables
  with the same part/component masks as :mod:`das.postprocess.phsafe` (PH8 cell 1 = summed
  owner and renter numerators over summed denominators).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from das.phsafe.tables import SHELLS
from das.postprocess.counts import aggregate_matrix, key_columns, pivot_table
from das.postprocess.phsafe import AVERAGES, COUNT_TABLES
from das.privacy.calculators import z_score
from das.privacy.distributions import (
    DiscreteGaussian,
    NoiseDistribution,
    TwoSidedGeometric,
    margin_of_error,
)

CONFIDENCE = 0.90
# NOISE_DISTRIBUTION values of the released tables (the published output format).
DISCRETE_GAUSSIAN = "Discrete Gaussian"
TWO_SIDED_GEOMETRIC = "Two-Sided Geometric"
# Tables whose cells may be sums of independent draws: Gaussian MOE approximation.
SUMMED_TABLES = frozenset({"PH8_num"})
# Tables that repeat noise of a measured table (PH5_num = PH4, PH8_num from PH7): left out of
# the pooled figure over independent measurements so no draw is counted twice.
DERIVED_TABLES = frozenset({"PH5_num", "PH8_num"})
# Ratio outputs (cells 1, 2, 3) as sums of numerator parts / denominator components.
_PART_MASKS = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])


@dataclass(frozen=True)
class Share:
    """``hits`` of ``cells`` met the criterion; shares add by pooling (repeats, tables)."""

    cells: int
    hits: int

    @property
    def fraction(self) -> float:
        """hits / cells (NaN for no cells, so an empty category is never read as 0% or 100%)."""
        return self.hits / self.cells if self.cells else math.nan

    def __add__(self, other: Share) -> Share:
        return Share(self.cells + other.cells, self.hits + other.hits)


def share(mask: np.ndarray) -> Share:
    """The share of True entries of a boolean array."""
    mask = np.asarray(mask, dtype=bool)
    return Share(int(mask.size), int(mask.sum()))


@dataclass(frozen=True)
class RatioFigures:
    """One average table: coverage per output cell (``"1"``, ``"2"``, ``"3"``, ``"all"``), MAE.

    The MAE is over the ``cells`` with a finite ESTIMATE (NaN only for infeasible groups).
    """

    coverage: dict[str, Share]
    abs_error_sum: float
    cells: int

    @property
    def mean_abs_error(self) -> float:
        """Mean |ESTIMATE − exact ratio|, from sums so that pooled repeats weigh every cell."""
        return self.abs_error_sum / self.cells if self.cells else math.nan

    def __add__(self, other: RatioFigures) -> RatioFigures:
        keys = self.coverage.keys() | other.coverage.keys()
        zero = Share(0, 0)
        return RatioFigures(
            {k: self.coverage.get(k, zero) + other.coverage.get(k, zero) for k in sorted(keys)},
            self.abs_error_sum + other.abs_error_sum,
            self.cells + other.cells,
        )


def _pooled(a: dict, b: dict) -> dict:
    """Key-wise sum of two dicts of addable figures (keys of either)."""
    return {k: a[k] + b[k] if k in a and k in b else a.get(k, b.get(k)) for k in a | b}


@dataclass(frozen=True)
class AccuracyReport:
    """All figures of one (or, added together, several pooled) noisy releases."""

    moe: dict[str, Share] = field(default_factory=dict)
    counts: dict[str, dict[str, Share]] = field(default_factory=dict)
    ratios: dict[str, RatioFigures] = field(default_factory=dict)

    @property
    def moe_overall(self) -> Share:
        """Within-MOE share pooled over the measured (independently noised) tables."""
        return sum((s for t, s in self.moe.items() if t not in DERIVED_TABLES), Share(0, 0))

    @property
    def count_overall(self) -> Share:
        """CI coverage pooled over every cell of every count table."""
        return sum((by["all"] for by in self.counts.values()), Share(0, 0))

    @property
    def ratio_overall(self) -> Share:
        """Ratio CI coverage pooled over every average table and output cell."""
        return sum((r.coverage["all"] for r in self.ratios.values()), Share(0, 0))

    def __add__(self, other: AccuracyReport) -> AccuracyReport:
        counts = {
            t: {k: s + other.counts[t][k] for k, s in by.items()} if t in other.counts else by
            for t, by in self.counts.items()
        }
        return AccuracyReport(
            _pooled(self.moe, other.moe),
            counts | {t: by for t, by in other.counts.items() if t not in counts},
            _pooled(self.ratios, other.ratios),
        )

    def to_dict(self) -> dict[str, object]:
        """Plain figures (fractions and cell counts) for JSON or printing."""

        def plain(s: Share) -> dict[str, float | int]:
            return {"fraction": s.fraction, "cells": s.cells}

        return {
            "moe_within": {t: plain(s) for t, s in self.moe.items()},
            "moe_within_overall": plain(self.moe_overall),
            "count_coverage": {
                t: {k: plain(s) for k, s in by.items()} for t, by in self.counts.items()
            },
            "count_coverage_overall": plain(self.count_overall),
            "ratio_coverage": {
                t: {k: plain(s) for k, s in r.coverage.items()} for t, r in self.ratios.items()
            },
            "ratio_mean_abs_error": {t: r.mean_abs_error for t, r in self.ratios.items()},
            "ratio_coverage_overall": plain(self.ratio_overall),
        }


# ------------------------------------------------------------------------- margins of error
def _discrete_gaussian_with_variance(variance: float) -> DiscreteGaussian:
    """The discrete Gaussian whose exact variance is ``variance`` (its σ² is slightly larger).

    For σ ≳ 2 the variance equals σ² in double precision; below, bisect on σ² (variance is
    increasing in σ²), so the MOE is that of the distribution the engine actually sampled.
    """
    candidate = DiscreteGaussian(variance)
    if candidate.variance >= variance:
        return candidate
    low, high = variance, 2.0 * variance + 1.0
    while DiscreteGaussian(high).variance < variance:
        high *= 2.0
    for _ in range(80):
        mid = 0.5 * (low + high)
        if DiscreteGaussian(mid).variance < variance:
            low = mid
        else:
            high = mid
    return DiscreteGaussian(high)


def _geometric_with_variance(variance: float) -> TwoSidedGeometric:
    """The two-sided geometric with ``2a/(1-a)² = variance``, i.e. scale ``b = -1/log a``."""
    a = ((variance + 1.0) - math.sqrt(2.0 * variance + 1.0)) / variance
    return TwoSidedGeometric(-1.0 / math.log(a))


def noise_distribution(label: str, variance: float) -> NoiseDistribution:
    """The released cell's noise distribution from its NOISE_DISTRIBUTION and VARIANCE."""
    if variance < 0 or not math.isfinite(variance):
        raise ValueError(f"invalid noise variance {variance!r}")
    if label == DISCRETE_GAUSSIAN:
        return DiscreteGaussian(0) if variance == 0 else _discrete_gaussian_with_variance(variance)
    if label == TWO_SIDED_GEOMETRIC:
        return TwoSidedGeometric(0) if variance == 0 else _geometric_with_variance(variance)
    raise ValueError(f"unknown noise distribution {label!r}")


def cell_moe(frame: pd.DataFrame, gaussian: bool = False) -> np.ndarray:
    """Each cell's 90% MOE: exact discrete margin, or ``z₀.₉₅·√VARIANCE`` when ``gaussian``.

    Computed once per distinct (distribution, variance) pair: a table has one per measurement.
    """
    variance = frame["VARIANCE"].to_numpy().astype(np.float64)
    if gaussian:
        return z_score(CONFIDENCE) * np.sqrt(variance)
    pairs = pd.DataFrame({"label": frame["NOISE_DISTRIBUTION"].to_numpy(), "v": variance})
    codes, unique = pd.MultiIndex.from_frame(pairs).factorize()
    margins = np.array(
        [
            margin_of_error(noise_distribution(str(label), float(v)), CONFIDENCE)
            for label, v in unique
        ],
        dtype=np.float64,
    )
    return margins[codes]


def _aligned(
    exact: pd.DataFrame,
    other: pd.DataFrame,
    cell_column: str,
    value: str,
    extra: tuple[str, ...] | list[str] = (),
) -> pd.DataFrame:
    """``other`` with the exact ``value`` (as EXACT) and ``extra`` columns, joined on keys + cell.

    Every row of ``other`` must find its cell in ``exact``.
    """
    keys = [*key_columns(other), cell_column]
    merged = other.merge(
        exact[[*keys, value, *extra]].rename(columns={value: "EXACT"}),
        on=keys,
        how="left",
        sort=False,
        validate="one_to_one",
        indicator=True,
    )
    if (merged["_merge"] != "both").any():
        raise ValueError(f"the exact release lacks cells with keys {keys}")
    return merged.drop(columns="_merge")


def moe_within(
    exact_tables: dict[str, pd.DataFrame], noisy_tables: dict[str, pd.DataFrame]
) -> dict[str, Share]:
    """Per noisy table: share of cells with ``|noisy COUNT − exact COUNT| ≤ 90% MOE``."""
    out: dict[str, Share] = {}
    for table, noisy in noisy_tables.items():
        merged = _aligned(exact_tables[table], noisy, SHELLS[table].cell_column, "COUNT")
        error = np.abs(merged["COUNT"].to_numpy(np.float64) - merged["EXACT"].to_numpy(np.float64))
        out[table] = share(error <= cell_moe(merged, gaussian=table in SUMMED_TABLES))
    return out


# ------------------------------------------------------------------------------- counts
def shell_cells(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """Every shell cell of every group: COUNT and VARIANCE summed over its basis cells.

    On the exact release COUNT is each cell's truth; on a noisy one VARIANCE is the noise
    variance of the cell's direct estimate (independent basis noise, variances add).
    """
    shell = SHELLS[table]
    pivot = pivot_table(frame, table)
    matrix = aggregate_matrix(shell).T
    codes = np.array([cell.code for cell in shell.cells], dtype=np.int64)
    n_groups = len(pivot.keys)
    out = pivot.keys.loc[np.repeat(np.arange(n_groups), len(codes))].reset_index(drop=True)
    out[shell.cell_column] = np.tile(codes, n_groups)
    out["COUNT"] = (pivot.count @ matrix).ravel()
    out["VARIANCE"] = (pivot.variance @ matrix).ravel()
    return out


def _covered(frame: pd.DataFrame) -> np.ndarray:
    """Truth inside the closed interval (a NaN bound covers nothing)."""
    exact = frame["EXACT"].to_numpy(np.float64)
    lower = frame["CI_LOWER_90"].to_numpy(np.float64)
    upper = frame["CI_UPPER_90"].to_numpy(np.float64)
    return (lower <= exact) & (exact <= upper)


def count_coverage(
    exact_tables: dict[str, pd.DataFrame],
    noisy_tables: dict[str, pd.DataFrame],
    estimates: dict[str, pd.DataFrame],
) -> dict[str, dict[str, Share]]:
    """Per count table: CI coverage by cell kind and by the truth's size against the noise.

    Keys: ``"basis"``, ``"subtotal"``, ``"total"``, ``"all"``; and, with σ the noise standard
    deviation of the cell's estimate, ``"exact_0"``, ``"exact_lt_1sd"`` (0 < truth < σ),
    ``"exact_1_3sd"`` and ``"exact_ge_3sd"``. The split shows where the flat prior on
    ``[0, ∞)`` matters: an equal-tailed interval of a posterior truncated at 0 excludes 0
    whenever its 5% quantile is at least 1 (about 0.06 σ at a noisy 0), so true zeros are
    rarely covered once σ is in the tens; the HPD interval (``interval="hpd"`` of
    :func:`das.postprocess.phsafe.postprocess_phsafe`) starts at 0 for noisy values below
    ~1.3 σ and is not affected. The figures are of whichever interval ``estimates`` carry.
    """
    out: dict[str, dict[str, Share]] = {}
    for table in COUNT_TABLES:
        if table not in estimates:
            continue
        shell = SHELLS[table]
        keys = [*key_columns(estimates[table]), shell.cell_column]
        truth = shell_cells(exact_tables[table], table).drop(columns="VARIANCE")
        noise = shell_cells(noisy_tables[table], table)[[*keys, "VARIANCE"]]
        truth = truth.merge(noise, on=keys, how="inner", validate="one_to_one")
        merged = _aligned(truth, estimates[table], shell.cell_column, "COUNT", ["VARIANCE"])
        covered = _covered(merged)
        code = merged[shell.cell_column].to_numpy(np.int64)
        basis = np.isin(code, shell.basis_codes.astype(np.int64))
        total = code == 1
        exact = merged["EXACT"].to_numpy(np.float64)
        sd = np.sqrt(merged["VARIANCE"].to_numpy(np.float64))
        out[table] = {
            "basis": share(covered[basis]),
            "subtotal": share(covered[~basis & ~total]),
            "total": share(covered[total]),
            "all": share(covered),
            "exact_0": share(covered[exact == 0]),
            "exact_lt_1sd": share(covered[(exact > 0) & (exact < sd)]),
            "exact_1_3sd": share(covered[(exact >= sd) & (exact < 3 * sd) & (exact > 0)]),
            "exact_ge_3sd": share(covered[(exact >= 3 * sd) & (exact > 0)]),
        }
    return out


# ------------------------------------------------------------------------------- ratios
def exact_ratio_cells(exact_tables: dict[str, pd.DataFrame], name: str) -> pd.DataFrame:
    """Exact numerator, denominator and ratio of each output cell (1–3) of an average table."""
    spec = AVERAGES[name]
    num = pivot_table(exact_tables[spec.numerator], spec.numerator)
    den = pivot_table(exact_tables[spec.denominator], spec.denominator)
    keys = key_columns(exact_tables[spec.numerator])
    left = num.keys.assign(_num=np.arange(len(num.keys)))
    right = den.keys.assign(_den=np.arange(len(den.keys)))
    both = left.merge(right, on=keys, how="inner", sort=False)
    numerator = num.count[both["_num"].to_numpy()] @ _PART_MASKS.T
    component_masks = _PART_MASKS if spec.per_component else np.ones((3, 1))
    denominator = den.count[both["_den"].to_numpy()] @ component_masks.T
    n_groups = len(both)
    out = both[keys].loc[np.repeat(np.arange(n_groups), 3)].reset_index(drop=True)
    out[f"{name}_DATA_CELL"] = np.tile(np.arange(1, 4, dtype=np.int64), n_groups)
    out["NUMERATOR"] = numerator.ravel()
    out["DENOMINATOR"] = denominator.ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["RATIO"] = np.where(
            out["DENOMINATOR"] >= 1, out["NUMERATOR"] / out["DENOMINATOR"], np.nan
        )
    return out


def ratio_coverage(
    exact_tables: dict[str, pd.DataFrame], estimates: dict[str, pd.DataFrame]
) -> dict[str, RatioFigures]:
    """Per average table: CI coverage of the exact ratio, |ESTIMATE − ratio|; denominator ≥ 1."""
    out: dict[str, RatioFigures] = {}
    for name in AVERAGES:
        if name not in estimates:
            continue
        cell_column = f"{name}_DATA_CELL"
        merged = _aligned(
            exact_ratio_cells(exact_tables, name), estimates[name], cell_column, "RATIO"
        )
        merged = merged.loc[merged["EXACT"].notna()]  # NaN: exact denominator < 1
        covered = _covered(merged)
        error = np.abs(merged["ESTIMATE"].to_numpy(np.float64) - merged["EXACT"].to_numpy())
        cell = merged[cell_column].to_numpy(np.int64)
        coverage = {str(c): share(covered[cell == c]) for c in (1, 2, 3)}
        coverage["all"] = share(covered)
        finite = np.isfinite(error)
        out[name] = RatioFigures(coverage, float(error[finite].sum()), int(finite.sum()))
    return out


def evaluate(
    exact_tables: dict[str, pd.DataFrame],
    noisy_tables: dict[str, pd.DataFrame],
    estimates: dict[str, pd.DataFrame],
) -> AccuracyReport:
    """All figures of one noisy release against the exact one."""
    return AccuracyReport(
        moe_within(exact_tables, noisy_tables),
        count_coverage(exact_tables, noisy_tables, estimates),
        ratio_coverage(exact_tables, estimates),
    )
