"""Posterior of average sizes (numerator / denominator) under demographic constraints.

Model for one (geography, iteration) group: numerator parts ``n_k ≥ 0`` (K = 1 or 2, e.g.
persons under 18 and 18+), their total ``T = Σ n_k`` and the denominator ``d`` (households,
families, units), each observed with independent noise approximated by a normal of the released
variance (flat priors). Constraints: ``d ≥ 1``, ``c·d ≤ T ≤ τ·d`` with ``c = 1`` person per
household (2 per family) and ``τ`` the truncation threshold of the numerator's joined table
(the truncated tabulation never has more than τ persons per unit). The posterior is

    p(n, d | y) ∝ Π_k N(y_k; n_k, v_k) 1[n_k ≥ 0] · N(y_d; d, v_d) 1[max(1, T/τ) ≤ d ≤ T/c].

Collapsing the parts: ``N(y_1; n_1, v_1) N(y_2; T - n_1, v_2) = N(Y; T, V) · N(n_1; μ(T), s²)``
with ``Y = y_1 + y_2``, ``V = v_1 + v_2``, ``μ(T) = (v_2 y_1 + v_1 (T - y_2)) / V``,
``s² = v_1 v_2 / V``; so ``(T, d)`` has density ``∝ N(Y; T, V) G(T) N(y_d; d, v_d)`` on the
constraint wedge, ``G(T) = P(0 ≤ n_1 ≤ T)`` under ``N(μ(T), s²)`` (``G = 1`` for K = 1), and
``n_1 | T`` is that normal truncated to ``[0, T]`` — drawn exactly.

``(T, d)`` by vectorized importance sampling from a defensive mixture of two exact schemes
(half the draws each; balance-heuristic weights): (A) ``T`` from ``N(Y, V)`` on ``[0, ∞)``,
then ``d`` from ``N(y_d, v_d)`` on ``[max(1, T/τ), T/c]`` (mass ``M_A(T)``); (B) ``d`` from
``N(y_d, v_d)`` on ``[1, ∞)``, then ``T`` from ``N(Y, V)`` on ``[c d, τ d]`` (mass ``M_B(d)``).
A works when the numerator is the precise one, B when the denominator is (the usual case:
Δ = 2 against 2τ + 2). The weight is ``G(T) / (½ / (Z_T M_A(T)) + ½ / (Z_d M_B(d)))`` with the
normalizers ``Z_T = P(N(Y, V) ≥ 0)``, ``Z_d = P(N(y_d, v_d) ≥ 1)``, all in log space.
Convergence is judged by the effective sample size of the weights, ``(Σw)² / Σw²``; groups
under the target ESS are redrawn with four times as many draws (bounded rounds). When the
released values contradict the constraints by many standard deviations (negligible probability
under the model) both schemes miss the posterior and the low ESS is reported. A zero variance
(infinite budget) is treated as ``MIN_VARIANCE``.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy import special

from das.postprocess.counts import LOWER_Q, UPPER_Q

TARGET_ESS = 400.0
MIN_VARIANCE = 1e-6
# Threads sharing each chunk of groups (a chunk holds ~100 MB of draws at the default chunk
# size): the cores of a small machine. 5.5 -> ~3 CPU-bound seconds of wall for a 100 k-person
# PHSafe run.
AVERAGE_THREADS = max(1, min(2, os.cpu_count() or 1))


def _log_diff_ndtr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``log(Φ(b) - Φ(a))`` for ``a ≤ b``, stable in both tails (-inf when a ≥ b)."""
    upper_side = a > 0
    # Upper tail: Φ(b) - Φ(a) = Q(a) - Q(b) = Φ(-a) - Φ(-b).
    hi = special.log_ndtr(np.where(upper_side, -a, b))
    lo = special.log_ndtr(np.where(upper_side, -b, a))
    return _log_diff(hi, lo, a < b)


def _log_diff(log_hi: np.ndarray, log_lo: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """``log(exp(log_hi) - exp(log_lo))`` where ``ordered``, else -inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.minimum(log_lo - log_hi, 0.0)
        out = log_hi + np.log(-np.expm1(gap))
    return np.where(ordered, out, -np.inf)


# log Φ at the infinite ends, as log_ndtr gives them (-0.0 at +∞): a one-sided interval's
# infinite end costs no evaluation and changes no bit.
_LOG_NDTR_POS_INF = special.log_ndtr(np.inf)
_LOG_NDTR_NEG_INF = special.log_ndtr(-np.inf)


def _truncated(
    mean: np.ndarray,
    sd: np.ndarray,
    low: np.ndarray | float,
    high: np.ndarray | None,
    u: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-CDF draw of ``N(mean, sd²)`` truncated to ``[low, high]`` (clipped to it), and
    the log mass of that interval (``_log_diff_ndtr`` of its standardized ends, the same bits):
    the importance weights reuse it. ``high=None``: ``[low, ∞)``. The ends broadcast against
    ``u``: ends given per group (``(G, 1)`` or a scalar) are evaluated once per group, and the
    mass has their shape.

    In standard units with ``a ≤ 0`` (else reflect: ``x ↦ -x``, ``u ↦ 1 - u``) the draw is
    ``Φ⁻¹(Φ(a) + u (Φ(b) - Φ(a)))``, evaluated in log space (``ndtri_exp``) so that both far
    tails stay exact; about ten times faster than ``scipy.stats.truncnorm.ppf``.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = (low - mean) / sd
        flip = a > 0
        if high is None:
            # b = +∞: the reflected lower end is -∞ and the upper end +∞, so only the finite
            # end is evaluated (one log Φ per draw instead of two)
            b = np.maximum(a, np.inf)
            lo = np.where(flip, -b, a)
            hi = np.where(flip, -a, b)
            finite = special.log_ndtr(np.where(flip, hi, lo))
            log_lo = np.where(flip, _LOG_NDTR_NEG_INF, finite)
            log_hi = np.where(flip, finite, _LOG_NDTR_POS_INF)
            high = np.full(np.shape(low), np.inf)
        else:
            b = np.maximum(a, (high - mean) / sd)
            lo = np.where(flip, -b, a)
            hi = np.where(flip, -a, b)
            # lo ≤ 0: log(Φ(hi) - Φ(lo)) is _log_diff_ndtr's lower-tail branch, Φ(lo) reused
            log_lo = special.log_ndtr(lo)
            log_hi = special.log_ndtr(hi)
        v = np.where(flip, 1.0 - u, u)
        log_mass = _log_diff(log_hi, log_lo, lo < hi)
        log_p = np.logaddexp(log_lo, np.log(v) + log_mass)
        z = np.clip(special.ndtri_exp(np.minimum(log_p, 0.0)), lo, hi)
        x = mean + sd * np.where(flip, -z, z)
    drawn = np.clip(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0), low, np.maximum(high, low))
    return drawn, log_mass


@dataclass(frozen=True)
class RatioDraws:
    """Weighted posterior draws: parts ``(G, K, D)``, denominator ``(G, D)``, log weights."""

    parts: np.ndarray
    denominator: np.ndarray
    log_weight: np.ndarray


def draw_ratio_posterior(
    num_y: np.ndarray,
    num_v: np.ndarray,
    den_y: np.ndarray,
    den_v: np.ndarray,
    min_per_unit: float,
    tau: float,
    n_draws: int,
    generator: np.random.Generator,
) -> RatioDraws:
    """Importance-sampled posterior of numerator parts ``(G, K ≤ 2)`` and denominator ``(G,)``."""
    n_groups, n_parts = np.shape(num_y)
    if n_parts not in (1, 2):
        raise ValueError("the ratio model takes one or two numerator parts")
    return _ratio_draws(
        num_y, num_v, den_y, den_v, min_per_unit, tau, generator.random((3, n_groups, n_draws))
    )


def _ratio_draws(
    num_y: np.ndarray,
    num_v: np.ndarray,
    den_y: np.ndarray,
    den_v: np.ndarray,
    min_per_unit: float,
    tau: float,
    u: np.ndarray,
) -> RatioDraws:
    """:func:`draw_ratio_posterior` from its uniforms ``u`` ``(3, G, D)``, drawn beforehand in
    the generator's order: a function of its arguments alone, so chunks run in any thread."""
    num_y = np.asarray(num_y, np.float64)
    num_v = np.maximum(np.asarray(num_v, np.float64), MIN_VARIANCE)
    n_groups, n_parts = num_y.shape
    c, shape = float(min_per_unit), (n_groups, u.shape[2])
    big_y = num_y.sum(axis=1)[:, None]
    big_sd = np.sqrt(num_v.sum(axis=1))[:, None]
    yd = np.asarray(den_y, np.float64)[:, None]
    sd_d = np.sqrt(np.maximum(np.asarray(den_v, np.float64), MIN_VARIANCE))[:, None]
    # (A) T first, then d on its interval, in the even draws; (B) d first, then T on its
    # interval, in the odd ones. Each scheme is drawn only where it is used.
    u_a, u_b = np.ascontiguousarray(u[:2, :, 0::2]), np.ascontiguousarray(u[:2, :, 1::2])
    # The one-sided draws' ends are each group's (a scalar lower end): their log Φ and interval
    # mass are evaluated once per group, not once per draw (the same values, the same bits).
    t_a, _ = _truncated(big_y, big_sd, 0.0, None, u_a[0])
    d_a, log_m_a_even = _truncated(yd, sd_d, np.maximum(1.0, t_a / tau), t_a / c, u_a[1])
    d_b, _ = _truncated(yd, sd_d, 1.0, None, u_b[0])
    t_b, log_m_b_odd = _truncated(big_y, big_sd, c * d_b, tau * d_b, u_b[1])
    total, den = np.empty(shape), np.empty(shape)
    total[:, 0::2], total[:, 1::2] = t_a, t_b
    den[:, 0::2], den[:, 1::2] = d_a, d_b
    # Each scheme's conditional mass, M_A(T) and M_B(d): in its own draws it is the mass of the
    # interval the second value was drawn on (the same expression, the same bits); only the
    # other scheme's draws evaluate it.
    log_m_a, log_m_b = np.empty(shape), np.empty(shape)
    log_m_a[:, 0::2], log_m_b[:, 1::2] = log_m_a_even, log_m_b_odd
    log_m_a[:, 1::2] = _log_diff_ndtr(
        (np.maximum(1.0, t_b / tau) - yd) / sd_d, (t_b / c - yd) / sd_d
    )
    log_m_b[:, 0::2] = _log_diff_ndtr((c * d_a - big_y) / big_sd, (tau * d_a - big_y) / big_sd)
    log_z_t = special.log_ndtr(big_y / big_sd)
    log_z_d = special.log_ndtr((yd - 1.0) / sd_d)
    with np.errstate(over="ignore"):
        log_q = np.logaddexp(-log_z_t - log_m_a, -log_z_d - log_m_b) + np.log(0.5)
    feasible = (den >= 1.0) & (total >= c * den * (1 - 1e-12)) & (total <= tau * den * (1 + 1e-12))
    if n_parts == 1:
        parts = total[:, None, :]
        log_g = np.zeros(shape)
    else:
        v1, v2 = num_v[:, :1], num_v[:, 1:]
        mu = (v2 * num_y[:, :1] + v1 * (total - num_y[:, 1:])) / (v1 + v2)
        s = np.sqrt(v1 * v2 / (v1 + v2))
        # G(T) = P(0 ≤ n_1 ≤ T): the mass of the interval n_1 is drawn on
        first, log_g = _truncated(mu, s, 0.0, total, u[2])
        parts = np.stack([first, total - first], axis=1)
    log_weight = np.where(feasible & np.isfinite(log_q), log_g - log_q, -np.inf)
    return RatioDraws(parts, den, log_weight)


def normalized_weights(log_weight: np.ndarray) -> np.ndarray:
    """Weights summing to 1 per group (rows of all -inf give all-NaN rows)."""
    top = np.max(log_weight, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        w = np.exp(log_weight - top)
        return w / w.sum(axis=-1, keepdims=True)


def effective_sample_size(weights: np.ndarray) -> np.ndarray:
    """Kish ESS ``(Σw)² / Σw²`` of normalized weights per group (0 when no draw is feasible)."""
    with np.errstate(invalid="ignore"):
        ess = 1.0 / np.sum(weights * weights, axis=-1)
    return np.nan_to_num(ess, nan=0.0)


def weighted_summary(
    values: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted mean and (5%, 95%) quantiles along the last axis (values broadcast to weights).

    Quantile ``q`` = the smallest draw whose cumulative weight reaches ``q``.
    """
    values, weights = np.broadcast_arrays(values, weights)
    mean = np.sum(values * weights, axis=-1)
    order = np.argsort(values, axis=-1)
    sorted_values = np.take_along_axis(values, order, axis=-1)
    cumulative = np.cumsum(np.take_along_axis(weights, order, axis=-1), axis=-1)
    last = values.shape[-1] - 1
    bounds = []
    for q in (LOWER_Q, UPPER_Q):
        index = np.minimum(np.sum(cumulative < q, axis=-1), last)
        bounds.append(np.take_along_axis(sorted_values, index[..., None], axis=-1)[..., 0])
    return mean, bounds[0], bounds[1]


@dataclass(frozen=True)
class RatioComponent:
    """One constrained (numerator parts, denominator) pair observed for every group."""

    num_y: np.ndarray  # (G, K) noisy numerator parts
    num_v: np.ndarray  # (G, K) their variances
    den_y: np.ndarray  # (G,) noisy denominator
    den_v: np.ndarray  # (G,)
    min_per_unit: float
    tau: float


@dataclass(frozen=True)
class AverageResult:
    """Per group × output ratio: posterior means and 90% intervals; per group: ESS, draws."""

    ratio: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    numerator: np.ndarray
    denominator: np.ndarray
    ess: np.ndarray
    draws: np.ndarray


def _summarize(
    components: list[RatioComponent],
    rows: np.ndarray,
    part_masks: np.ndarray,
    component_masks: np.ndarray,
    uniforms: list[np.ndarray],
) -> tuple[np.ndarray, ...]:
    """Draw every component for ``rows`` from its uniforms and summarize each output ratio
    (one draw set)."""
    parts, dens, log_w = [], [], 0.0
    for c, u in zip(components, uniforms, strict=True):
        drawn = _ratio_draws(
            c.num_y[rows], c.num_v[rows], c.den_y[rows], c.den_v[rows], c.min_per_unit, c.tau, u
        )
        parts.append(drawn.parts)
        dens.append(drawn.denominator[:, None, :])
        log_w = log_w + drawn.log_weight
    all_parts = np.concatenate(parts, axis=1)  # (g, P, D)
    all_dens = np.concatenate(dens, axis=1)  # (g, C, D)
    weights = normalized_weights(log_w)
    numerator = np.einsum("gpd,jp->gjd", all_parts, part_masks)
    denominator = np.einsum("gcd,jc->gjd", all_dens, component_masks)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = numerator / denominator
    w = weights[:, None, :]
    mean, lower, upper = weighted_summary(ratio, w)
    num_mean = np.sum(numerator * w, axis=-1)
    den_mean = np.sum(denominator * w, axis=-1)
    ess = effective_sample_size(weights)
    infeasible = ~np.isfinite(np.max(log_w, axis=-1))
    lower[infeasible] = np.nan
    upper[infeasible] = np.nan
    return mean, lower, upper, num_mean, den_mean, ess


def _split(size: int, parts: int) -> list[slice]:
    """``range(size)`` in at most ``parts`` consecutive slices of sizes differing by one at most."""
    count = min(parts, size)
    return [slice(size * k // count, size * (k + 1) // count) for k in range(count)]


def average_posterior(
    components: list[RatioComponent],
    part_masks: np.ndarray,
    component_masks: np.ndarray,
    generator: np.random.Generator,
    n_draws: int = 4000,
    target_ess: float = TARGET_ESS,
    max_rounds: int = 3,
    max_chunk_elements: int = 2_000_000,
    threads: int = AVERAGE_THREADS,
) -> AverageResult:
    """Ratios ``(part_masks · n) / (component_masks · d)`` for every group and output row.

    Output ``j`` divides the sum of the numerator parts selected by ``part_masks[j]`` (parts of
    all components, concatenated) by the sum of the denominators selected by
    ``component_masks[j]``; all outputs share one set of draws, so e.g. PH8's total is the
    ratio of the summed owner and renter draws and is consistent with its parts. Groups whose
    ESS is under ``target_ess`` are redrawn with 4× the draws, up to ``max_rounds`` rounds.
    Each chunk of groups is shared between ``threads`` threads (NumPy and SciPy's special
    functions release the GIL), its uniforms drawn beforehand in order: the same estimates, bit
    for bit, as one thread.
    A group whose constraints admit no value (only possible with zero-variance inputs) gets NaN.
    """
    n_groups = components[0].num_y.shape[0]
    n_out = part_masks.shape[0]
    result = {
        name: np.full((n_groups, n_out), np.nan)
        for name in ("ratio", "lower", "upper", "numerator", "denominator")
    }
    ess = np.zeros(n_groups)
    draws = np.zeros(n_groups, dtype=np.int64)
    n_parts = part_masks.shape[1] + len(components)
    pending = np.arange(n_groups)

    def collect(rows: np.ndarray, summary: tuple[np.ndarray, ...], size: int) -> None:
        for name, values in zip(result, summary[:5], strict=True):
            result[name][rows] = values
        ess[rows] = summary[5]
        draws[rows] = size

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="das-average") as pool:
        for round_index in range(max_rounds):
            if pending.size == 0:
                break
            size = n_draws * 4**round_index
            chunk = max(1, max_chunk_elements // (size * n_parts))
            running: deque[tuple[np.ndarray, Future]] = deque()
            for start in range(0, pending.size, chunk):
                rows = pending[start : start + chunk]
                # The uniforms here, in order: the generator's stream is the same however
                # many chunks run at once, so are the estimates.
                uniforms = [generator.random((3, rows.size, size)) for _ in components]
                # The chunk's groups shared between the threads (each group is summarized
                # from its own uniforms alone): no thread idles beside a last, smaller chunk.
                for part in _split(rows.size, threads):
                    work = (components, rows[part], part_masks, component_masks,
                            [u[:, part] for u in uniforms])  # fmt: skip
                    running.append((rows[part], pool.submit(_summarize, *work)))
                while len(running) > threads:  # this chunk computing, the next one drawn
                    done_rows, future = running.popleft()
                    collect(done_rows, future.result(), size)
            while running:
                done_rows, future = running.popleft()
                collect(done_rows, future.result(), size)
            pending = pending[(ess[pending] < target_ess) & (ess[pending] > 0)]
    return AverageResult(**result, ess=ess, draws=draws)
