"""Nonnegative count estimates with 90% credible intervals (PHSafe statistical postprocessing).

Model (per noisy basis cell): the released value is ``y = n + e`` with the noise ``e`` discrete
Gaussian (or two-sided geometric) of known variance ``v``. We approximate ``e`` by a continuous
normal ``N(0, v)`` with exactly that variance and put a flat prior on the true count ``n ≥ 0``,
so the posterior is ``N(y, v)`` truncated to ``[0, ∞)``. With ``s = √v`` and ``α = -y/s``
(the standardized truncation point), the posterior is ``y + s Z`` with ``Z ~ N(0,1) | Z ≥ α``:

* mean ``= s (h(α) - α)`` where ``h(α) = φ(α) / Q(α)`` is the inverse Mills ratio (``Q = 1 - Φ``);
* ``p``-quantile ``= s (z_p - α)`` where ``Q(z_p) = (1 - p) Q(α)``.

Both are computed in log space (``log_ndtr``, ``ndtri_exp``); for ``α > 30`` (y far below 0)
the difference ``h(α) - α`` and ``z_p - α`` would cancel catastrophically, so we use the
asymptotic forms ``h(α) - α = 1/α - 2/α³ + 10/α⁵ - 74/α⁷ + O(α⁻⁹)`` and, for the quantile excess
``t``, Newton's method on ``-log(Q(α+t)/Q(α)) = -log(1 - p)`` with the asymptotic tail
``Q(x) = φ(x)/x · (1 - x⁻² + 3x⁻⁴ - 15x⁻⁶ + …)``. Both are accurate to ~1e-9 at the switch.

Two 90% credible intervals (``interval=``), both rounded outward to integers:

* ``"equal-tailed"`` (default; the issue's spec): the 5% and 95% quantiles.
* ``"hpd"``: the highest-posterior-density (shortest) interval. The density is unimodal with
  mode ``max(y, 0)``. Let ``c`` solve ``Φ(c) - Φ(-c) = q Q(α)`` (``q = 0.9``): the symmetric
  interval ``y ± c s`` then holds mass ``q`` of the truncated posterior. If ``y - c s ≥ 0`` it
  is the HPD; otherwise the HPD is ``[0, b]`` with ``b`` the ``q``-quantile (always so for
  ``y ≤ 0``, including the asymptotic branch). ``c = -Φ⁻¹((1 - q + q Φ(α)) / 2)`` is only
  needed for ``y > 0`` (``α < 0``), where the argument lies in ``[0.05, 0.275]``: no
  cancellation or underflow.

Why two: the equal-tailed interval of a posterior truncated at 0 excludes 0 as soon as its 5%
quantile reaches 1 (about 0.06 σ at a noisy 0), so a true 0 is covered only when y is far
below 0: simulated coverage of a true 0 is 0.047 at σ = 41 and 0 at σ ≥ 122. The HPD starts
at 0 whenever ``y ≲ 1.3 σ``, so it covers a true 0 ~90% of the time at every σ and small
true counts ≥ 85% (``tests/test_postprocess_counts.py``). Above 0 it is shifted down from
the equal-tailed interval by 3% of the width at ``y = 2 σ``, 0.2% at ``3 σ``, and both tend
to ``y ± 1.645 σ``. It is never longer than the equal-tailed interval.

Subtotal and total cells (two methods, both from the basis cells):

* ``"direct"`` (default): the aggregate's own noisy value ``Σ y_b`` with variance ``Σ v_b``
  (independent noise), and the same truncated-normal posterior with a flat prior on the
  aggregate, so the same interval (equal-tailed or HPD). Estimates are not exactly additive
  (rounded posterior means of different quantities). Coverage is ~90% only where the truth is
  away from 0: measured by ``benchmarks/phsafe_accuracy.py`` (2020 production budgets,
  synthetic persons), equal-tailed intervals pooled over every cell of PH2/PH3/PH4/PH6/PH7
  cover the truth in 0.866 of cells at 1 M persons (3 noise draws; true zeros 0.54, truths
  below 1 σ 0.84) and 0.71 at 100k persons, while cells with truth ≥ 1 σ are covered
  0.90–0.93; the shortfall is the true zeros and small truths of sparse aggregates and
  basis cells alike. With ``interval="hpd"`` the same benchmark gives 0.915 pooled at 1 M
  persons (true zeros 0.92, below 1 σ 0.94, ≥ 1 σ 0.90) and 0.92 at 100k persons.
* ``"sum_posterior"``: the sum of the independent basis posteriors; estimate = sum of the basis
  estimates (the table is additive); interval from seeded Monte Carlo draws (inverse CDF of the
  truncated normals; their sum is skewed near 0, where a moment-matched normal would be poor):
  the 5%/95% sample quantiles, or for ``"hpd"`` the shortest window holding 90% of the sorted
  draws (the sum of log-concave posteriors is unimodal, so that window estimates its HPD).
  The flat prior on every cell ≥ 0 pushes each near-zero cell up by ~0.8 σ, and these biases
  add: measured on PH2 (σ = 10, true cells 0–3) its total covered the truth in 0% of groups
  (52% for cells 0–19; 92% for cells 30–199), versus ~90% for ``"direct"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import special

from das.phsafe.tables import SHELLS, TableShell
from das.postprocess import INTERVALS, Interval

CONFIDENCE = 0.90
LOWER_Q = (1.0 - CONFIDENCE) / 2.0
UPPER_Q = 1.0 - LOWER_Q
_ASYMPTOTIC_ALPHA = 30.0
_LOG_2PI_HALF = 0.5 * np.log(2.0 * np.pi)
KEY_COLUMNS = ("REGION_ID", "REGION_TYPE", "ITERATION_CODE")


def _standardize(y: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, α = -y/s, degenerate mask); zero-variance cells are flagged, not divided by."""
    y = np.asarray(y, dtype=np.float64)
    s = np.sqrt(np.asarray(v, dtype=np.float64))
    degenerate = s <= 0.0
    safe = np.where(degenerate, 1.0, s)
    return s, -y / safe, degenerate


def mills_excess(alpha: np.ndarray) -> np.ndarray:
    """``E[Z - α | Z ≥ α]`` for standard normal Z: ``h(α) - α``, stable for every α."""
    alpha = np.asarray(alpha, dtype=np.float64)
    big = alpha > _ASYMPTOTIC_ALPHA
    a = np.where(big, 0.0, alpha)
    log_phi = -0.5 * a * a - _LOG_2PI_HALF
    direct = np.exp(log_phi - special.log_ndtr(-a)) - a
    b = np.where(big, alpha, _ASYMPTOTIC_ALPHA)
    inv2 = 1.0 / (b * b)
    series = (1.0 / b) * (1.0 - inv2 * (2.0 - inv2 * (10.0 - 74.0 * inv2)))
    return np.where(big, series, direct)


def _log_series(x: np.ndarray) -> np.ndarray:
    """``log S(x)`` with ``Q(x) = φ(x)/x · S(x)``, ``S = 1 - x⁻² + 3x⁻⁴ - 15x⁻⁶ + …`` (x ≥ 30)."""
    inv2 = 1.0 / (x * x)
    return np.log1p(-inv2 * (1.0 - inv2 * (3.0 - 15.0 * inv2)))


def tail_excess_quantile(alpha: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``p``-quantile of ``Z - α`` given ``Z ≥ α`` (standard normal Z); broadcasts α with p."""
    alpha, p = np.broadcast_arrays(np.asarray(alpha, np.float64), np.asarray(p, np.float64))
    big = alpha > _ASYMPTOTIC_ALPHA
    log_tail = np.log1p(-p)  # log(1 - p) ≤ 0
    a = np.where(big, 0.0, alpha)
    z = -special.ndtri_exp(log_tail + special.log_ndtr(-a))
    direct = z - a
    b = np.where(big, alpha, _ASYMPTOTIC_ALPHA)
    target = -log_tail
    t = target / b
    for _ in range(5):  # Newton on -log(Q(α+t)/Q(α)) = -log(1 - p), derivative sans S terms
        g = b * t + 0.5 * t * t + np.log1p(t / b) - _log_series(b + t) + _log_series(b) - target
        t = t - g / (b + t + 1.0 / (b + t))
    return np.maximum(np.where(big, t, direct), 0.0)


def truncnorm_mean(y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Posterior mean of the true count: mean of ``N(y, v)`` truncated to ``[0, ∞)``."""
    s, alpha, degenerate = _standardize(y, v)
    return np.where(degenerate, np.maximum(y, 0.0), s * mills_excess(alpha))


def truncnorm_quantile(y: np.ndarray, v: np.ndarray, p: np.ndarray | float) -> np.ndarray:
    """``p``-quantile of ``N(y, v)`` truncated to ``[0, ∞)`` (broadcast over y, v, p)."""
    s, alpha, degenerate = _standardize(y, v)
    shape = np.broadcast_shapes(np.shape(alpha), np.shape(p))
    excess = tail_excess_quantile(np.broadcast_to(alpha, shape), np.broadcast_to(p, shape))
    fallback = np.broadcast_to(np.maximum(np.asarray(y, np.float64), 0.0), shape)
    scaled = np.broadcast_to(s, shape) * excess
    return np.where(np.broadcast_to(degenerate, shape), fallback, scaled)


def truncnorm_draws(
    y: np.ndarray, v: np.ndarray, n_draws: int, generator: np.random.Generator
) -> np.ndarray:
    """Posterior draws, shape ``y.shape + (n_draws,)``, by inverse CDF of uniform draws."""
    y = np.asarray(y, dtype=np.float64)
    u = generator.random((*y.shape, n_draws))
    return truncnorm_quantile(y[..., None], np.asarray(v, np.float64)[..., None], u)


def truncnorm_hpd(
    y: np.ndarray, v: np.ndarray, mass: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """Shortest interval holding ``mass`` of ``N(y, v)`` truncated to ``[0, ∞)`` (see module).

    Symmetric ``y ± c s`` when it fits above 0, else ``[0, mass-quantile]``; zero variance gives
    ``[max(y, 0)] * 2``.
    """
    y = np.asarray(y, dtype=np.float64)
    s, alpha, degenerate = _standardize(y, v)
    top = truncnorm_quantile(y, v, mass)
    positive = alpha < 0.0  # only y > 0 can have a symmetric HPD; keeps ndtr's argument ≤ 0
    a = np.where(positive, alpha, 0.0)
    c = -special.ndtri(0.5 * ((1.0 - mass) + mass * special.ndtr(a)))
    symmetric = positive & ~degenerate & (y - c * s >= 0.0)
    lower = np.where(symmetric, y - c * s, 0.0)
    upper = np.where(symmetric, y + c * s, top)
    point = np.maximum(y, 0.0)
    return np.where(degenerate, point, lower), np.where(degenerate, point, upper)


def shortest_window(draws: np.ndarray, mass: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Shortest window holding ``ceil(mass · n)`` of the ``n`` draws on the last axis.

    The Monte Carlo HPD of a unimodal posterior (every window of that many sorted draws is
    compared at once; ties go to the lowest window).
    """
    ordered = np.sort(draws, axis=-1)
    n = ordered.shape[-1]
    k = min(n, max(1, int(np.ceil(mass * n - 1e-9))))
    width = ordered[..., k - 1 :] - ordered[..., : n - k + 1]
    start = np.argmin(width, axis=-1)[..., None]
    lower = np.take_along_axis(ordered, start, axis=-1)[..., 0]
    upper = np.take_along_axis(ordered, start + k - 1, axis=-1)[..., 0]
    return lower, upper


@dataclass(frozen=True)
class CellPosterior:
    """Posterior summaries of cells: mean and the chosen 90% interval (unrounded)."""

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def _check_interval(interval: str) -> None:
    """Refuse unknown interval names early (a typo must not silently give equal-tailed)."""
    if interval not in INTERVALS:
        raise ValueError(f"unknown interval {interval!r}; expected one of {INTERVALS}")


def count_posterior(
    y: np.ndarray, v: np.ndarray, interval: Interval = "equal-tailed"
) -> CellPosterior:
    """Closed-form posterior mean and 90% interval (equal-tailed 5%/95% quantiles, or HPD)."""
    _check_interval(interval)
    if interval == "hpd":
        lower, upper = truncnorm_hpd(y, v)
    else:
        lower, upper = truncnorm_quantile(y, v, LOWER_Q), truncnorm_quantile(y, v, UPPER_Q)
    return CellPosterior(truncnorm_mean(y, v), lower, upper)


def aggregate_matrix(shell: TableShell) -> np.ndarray:
    """0/1 matrix (cells × basis cells) from shell order: which basis cells each cell sums.

    Code 1 is the table total (every basis cell); any other non-basis cell is a subtotal of the
    basis cells that follow it up to the next non-basis cell; a basis cell is itself.
    """
    basis = [i for i, cell in enumerate(shell.cells) if cell.basis]
    position = {cell_index: j for j, cell_index in enumerate(basis)}
    matrix = np.zeros((len(shell.cells), len(basis)), dtype=np.int64)
    for i, cell in enumerate(shell.cells):
        if cell.basis:
            matrix[i, position[i]] = 1
        elif cell.code == 1:
            matrix[i, :] = 1
        else:
            j = i + 1
            while j < len(shell.cells) and shell.cells[j].basis:
                matrix[i, position[j]] = 1
                j += 1
    return matrix


@dataclass(frozen=True)
class Pivot:
    """A noisy table as arrays: one row per (geography, iteration) group, one column per cell."""

    keys: pd.DataFrame
    count: np.ndarray
    variance: np.ndarray


def key_columns(frame: pd.DataFrame) -> list[str]:
    return [column for column in KEY_COLUMNS if column in frame.columns]


def pivot_table(frame: pd.DataFrame, table: str) -> Pivot:
    """Group a noisy table's rows into ``(groups, basis cells)`` arrays, groups in first-seen order.

    The engine outputs every basis cell of every group; anything else is refused.
    """
    shell = SHELLS[table]
    keys = key_columns(frame)
    basis = shell.basis_codes.astype(np.int64)
    group = frame.groupby(keys, sort=False).ngroup().to_numpy()
    cell = frame[shell.cell_column].to_numpy().astype(np.int64)
    position = np.searchsorted(basis, cell)
    position = np.clip(position, 0, len(basis) - 1)
    n_groups = int(group.max()) + 1 if len(group) else 0
    seen = np.bincount(group * len(basis) + position, minlength=n_groups * len(basis))
    if not (np.array_equal(basis[position], cell) and np.all(seen == 1)):
        raise ValueError(f"{table}: every group needs exactly one row per basis cell")
    count = np.empty((n_groups, len(basis)))
    variance = np.empty((n_groups, len(basis)))
    count[group, position] = frame["COUNT"].to_numpy().astype(np.float64)
    variance[group, position] = frame["VARIANCE"].to_numpy().astype(np.float64)
    first = np.unique(group, return_index=True)[1]
    group_keys = frame.iloc[first][keys].reset_index(drop=True)
    return Pivot(group_keys, count, variance)


def postprocess_count_table(
    frame: pd.DataFrame,
    table: str,
    generator: np.random.Generator,
    n_draws: int = 4000,
    aggregate_method: Literal["direct", "sum_posterior"] = "direct",
    max_chunk_elements: int = 2_000_000,
    interval: Interval = "equal-tailed",
) -> pd.DataFrame:
    """Every shell cell of every group: ESTIMATE and 90% interval (integers, interval outward).

    Basis cells: closed-form truncated-normal posterior. Aggregates (see the module docstring):
    ``"direct"`` = closed form on the summed noisy value; ``"sum_posterior"`` = sum of basis
    estimates with Monte Carlo quantiles (or shortest 90% window, ``interval="hpd"``) of the
    summed posterior draws (``n_draws`` per cell, in chunks of groups to bound memory).
    ``interval`` picks equal-tailed (default) or HPD for every cell.
    """
    _check_interval(interval)
    shell = SHELLS[table]
    pivot = pivot_table(frame, table)
    matrix = aggregate_matrix(shell)
    n_groups, n_basis = pivot.count.shape
    posterior = count_posterior(pivot.count, pivot.variance, interval)
    estimate_basis = np.rint(posterior.mean)
    estimate = estimate_basis @ matrix.T
    lower = np.floor(posterior.lower) @ matrix.T
    upper = np.ceil(posterior.upper) @ matrix.T
    aggregate = matrix.sum(axis=1) > 1
    if aggregate_method == "direct":
        direct = count_posterior(pivot.count @ matrix.T, pivot.variance @ matrix.T, interval)
        estimate = np.rint(direct.mean)
        lower, upper = np.floor(direct.lower), np.ceil(direct.upper)
    elif aggregate_method != "sum_posterior":
        raise ValueError(f"unknown aggregate method {aggregate_method!r}")
    elif aggregate.any() and n_groups:
        sub = matrix[aggregate].T.astype(np.float64)
        chunk = max(1, max_chunk_elements // (n_basis * n_draws))
        for start in range(0, n_groups, chunk):
            rows = slice(start, start + chunk)
            draws = truncnorm_draws(pivot.count[rows], pivot.variance[rows], n_draws, generator)
            sums = np.einsum("gbd,ba->gad", draws, sub)
            if interval == "hpd":
                low, high = shortest_window(sums)
            else:
                low, high = np.quantile(sums, [LOWER_Q, UPPER_Q], axis=2)
            lower[rows, aggregate] = np.floor(low)
            upper[rows, aggregate] = np.ceil(high)
    lower = np.minimum(lower, estimate)
    upper = np.maximum(upper, estimate)
    codes = np.array([cell.code for cell in shell.cells], dtype=np.int64)
    out = pivot.keys.loc[np.repeat(np.arange(n_groups), len(codes))].reset_index(drop=True)
    out[shell.cell_column] = np.tile(codes, n_groups)
    out["ESTIMATE"] = estimate.ravel().astype(np.int64)
    out["CI_LOWER_90"] = np.maximum(lower.ravel(), 0).astype(np.int64)
    out["CI_UPPER_90"] = upper.ravel().astype(np.int64)
    return out
