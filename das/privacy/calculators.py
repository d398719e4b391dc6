"""Budget calculators: what the Census did in spreadsheets (SafeTEx for SafeTab-P, PHExplore for
PHSafe), so subject-matter experts can trade margins of error against privacy loss.

Discrete Gaussian (zCDP), using the continuous-Gaussian tail bound the papers use (the discrete
Gaussian's tails are no heavier, Canonne–Kamath–Steinke Prop. 25):

    MOE = z · σ,   z = Φ⁻¹((1 + c)/2),   σ² = Δ²/(2ρ)   ⇒   ρ = Δ² z² / (2 · MOE²)

where c is the confidence (0.95 for SafeTab-P, 0.90 for PHSafe), Δ the L2 sensitivity (√9 = 3
for SafeTab-P's flatmap of stability 9: its papers write σ² = 9/(2ρ); 2τ+2 for PHSafe's joined
tables and 2 for its unit-only tables) and ρ the budget of the measured stage. When the target
MOE applies to SafeTab-P's stage 2, which spends the fraction F = 1 − γ of the level budget,
the level's total is ρ/F.

Two-sided geometric (pure DP), with scale b = Δ/ε (Δ the L1 sensitivity): P(|Y| > m) =
2e^{−(m+1)/b}/(1 + e^{−1/b}). The geometric-vs-Gaussian paper approximates this by e^{−(m+1)/b}
≤ 1 − c, i.e. ε_unit = ln(1/(1−c))/(⌊MOE⌋+1) (its Corollary 2: ln 20/(⌊MOE⌋+1) at 95%), which
is slightly optimistic; ``method="exact"`` solves the exact tail instead.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from das.privacy import distributions
from das.privacy.exact import to_fraction

GeometricMoeMethod = Literal["exact", "paper"]


class RhoForMoe(NamedTuple):
    """``rho``: budget of the measured stage; ``rho_total``: the level's budget (rho / F)."""

    rho: float
    rho_total: float


class EpsilonForMoe(NamedTuple):
    """``epsilon``: budget of the measured stage; ``epsilon_total``: epsilon / F."""

    epsilon: float
    epsilon_total: float


def _confidence(confidence: float) -> float:
    value = float(confidence)
    if not 0.0 < value < 1.0:
        raise ValueError(f"Invalid confidence: {confidence} (need 0 < c < 1)")
    return value


def _positive(value: Any, what: str) -> float:
    number = float(value)
    if not number > 0 or math.isinf(number):
        raise ValueError(f"Invalid {what}: {value} (need a finite number > 0)")
    return number


def _stage_fraction(value: Any) -> float:
    number = float(value)
    if not 0.0 < number <= 1.0:
        raise ValueError(f"Invalid stage_fraction: {value} (need 0 < F <= 1)")
    return number


def z_score(confidence: float, decimals: int | None = None) -> float:
    """Two-sided normal quantile Φ⁻¹((1 + c)/2), optionally rounded as a spreadsheet did.

    PHExplore used z rounded to 3 decimals (1.645 at 90%): PHSafe Table 10's sixth decimal
    needs it (e.g. (State, A-G) at MOE 68: 0.141622 with 1.645, 0.141596 with 1.6448536…).
    """
    from scipy.special import ndtri  # Φ⁻¹, as scipy.stats.norm.ppf, without its 0.5 s import

    z = float(ndtri((1.0 + _confidence(confidence)) / 2.0))
    return z if decimals is None else round(z, decimals)


def rho_for_moe(
    moe: float,
    confidence: float,
    sensitivity: Any,
    stage_fraction: Any = 1,
    z_decimals: int | None = None,
) -> RhoForMoe:
    """ρ giving margin of error ``moe``: ρ = Δ²z²/(2·MOE²) for the stage, ρ/F for the level."""
    moe = _positive(moe, "moe")
    delta = _positive(sensitivity, "sensitivity")
    fraction = _stage_fraction(stage_fraction)
    z = z_score(confidence, z_decimals)
    rho = delta * delta * z * z / (2.0 * moe * moe)
    return RhoForMoe(rho, rho / fraction)


def moe_for_rho(
    rho: Any,
    confidence: float,
    sensitivity: Any,
    stage_fraction: Any = 1,
    z_decimals: int | None = None,
) -> float:
    """MOE = z·σ of the stage that spends F·ρ of the level budget ρ: σ² = Δ²/(2Fρ)."""
    rho = _positive(rho, "rho")
    delta = _positive(sensitivity, "sensitivity")
    fraction = _stage_fraction(stage_fraction)
    z = z_score(confidence, z_decimals)
    return z * math.sqrt(delta * delta / (2.0 * fraction * rho))


def _geometric_tail(scale: float, moe: int) -> float:
    """P(|Y| > m) for Y ~ L_ℤ(b): 2e^{−(m+1)/b}/(1 + e^{−1/b})."""
    return 2.0 * math.exp(-(moe + 1) / scale) / (1.0 + math.exp(-1.0 / scale))


def epsilon_for_moe(
    moe: float,
    confidence: float,
    sensitivity: Any,
    stage_fraction: Any = 1,
    method: GeometricMoeMethod = "exact",
) -> EpsilonForMoe:
    """Smallest ε whose two-sided geometric noise has margin of error ⌊MOE⌋ at ``confidence``.

    ``method="paper"``: scale b = (⌊MOE⌋+1)/ln(1/(1−c)) (GvG Corollary 2, eq. 38), ε = Δ/b.
    ``method="exact"``: the largest b with 2e^{−(m+1)/b}/(1+e^{−1/b}) ≤ 1 − c, m = ⌊MOE⌋.
    """
    level = _confidence(confidence)
    delta = _positive(sensitivity, "sensitivity")
    fraction = _stage_fraction(stage_fraction)
    target = float(moe)
    if not 0.0 <= target < math.inf:
        raise ValueError(f"Invalid moe: {moe} (need a finite number >= 0)")
    m = math.floor(target)
    alpha = 1.0 - level
    if method == "paper":
        scale = (m + 1) / math.log(1.0 / alpha)
    elif method == "exact":
        high = 1.0
        while _geometric_tail(high, m) <= alpha:
            high *= 2.0
        from scipy.optimize import brentq

        scale = brentq(lambda b: _geometric_tail(b, m) - alpha, 1e-9, high, xtol=1e-14)
    else:
        raise ValueError(f"Invalid method: {method!r} (use 'exact' or 'paper')")
    epsilon = delta / scale
    return EpsilonForMoe(epsilon, epsilon / fraction)


def moe_for_epsilon(
    epsilon: Any, confidence: float, sensitivity: Any, stage_fraction: Any = 1
) -> int:
    """Exact integer MOE of geometric noise with ε_stage = F·ε: the smallest m with
    P(|Y| ≤ m) ≥ c for Y ~ L_ℤ(b), b = Δ/(F·ε)."""
    eps = to_fraction(epsilon, name="epsilon", positive=True)
    delta = to_fraction(sensitivity, name="sensitivity", positive=True)
    fraction = to_fraction(stage_fraction, name="stage_fraction", positive=True)
    level = _confidence(confidence)
    noise = distributions.TwoSidedGeometric(delta / (fraction * eps))
    return distributions.margin_of_error(noise, level)


def suppression_threshold(rho: Any, stage1_fraction: Any, p: float, sensitivity: Any) -> int | None:
    """SafeTab-P eq. 12: T = invcdf(N_ℤ(Δ²/(2(1−γ)ρ)), p), the smallest k with CDF(k) ≥ p.

    A total-only sub-state row is published when COUNT > T, so a true zero is suppressed with
    probability ≥ p. Δ is the L2 sensitivity (3 for SafeTab-P: the paper's "9" is Δ²).
    Paper Table 6 (γ = 0.1, p = 0.9999): ρ 0.008 → 93, 0.159 → 21, 0.543 → 11.
    An infinite budget adds no noise, so the threshold is 0; p = 0 (the Census's "no
    suppression") gives None: every row is published.
    """
    budget = to_fraction(rho, name="rho", positive=True, allow_infinite=True)
    gamma = to_fraction(stage1_fraction, name="stage1_fraction", nonnegative=True)
    delta = to_fraction(sensitivity, name="sensitivity", positive=True)
    if gamma >= 1:
        raise ValueError(f"Invalid stage1_fraction: {stage1_fraction} (need 0 <= f < 1)")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"Invalid p: {p} (need 0 <= p < 1)")
    if float(p) == 0.0:
        return None
    if isinstance(budget, float):
        return 0
    sigma_squared = delta * delta / (2 * (1 - gamma) * budget)
    noise = distributions.DiscreteGaussian(sigma_squared)
    return distributions.suppression_threshold(noise, p)


def sum_moe(variance: float, cells: ArrayLike, confidence: float) -> NDArray[np.float64]:
    """Margin of error z·√(k·variance) of a sum of k independent cells of this noise variance.

    A SafeTab-P T1 count of a group with a sex × age breakdown is the sum of its 2·bins noisy
    cells (8, 18 or 46), so its error is larger than a cell's. The sum is no longer one of the
    two discrete distributions; this is the papers' Gaussian bound, as ``moe_gaussian_bound``.
    """
    if not variance >= 0 or math.isinf(variance):
        raise ValueError(f"Invalid variance: {variance} (need a finite number >= 0)")
    k = np.asarray(cells, dtype=np.float64)
    if (k < 0).any():
        raise ValueError("cells must be >= 0")
    return z_score(confidence) * np.sqrt(k * float(variance))


def threshold_class_probabilities(
    distribution: distributions.NoiseDistribution,
    thresholds: ArrayLike,
    sizes: ArrayLike,
) -> NDArray[np.float64]:
    """P(class k | true size n) when n + X is binned by increasing ``thresholds`` (right-open).

    SafeTab-P's stage 1: the noisy total n + X picks workload k = #{t ≤ n + X} (below t₀ → 0,
    …, at or above the last → len(thresholds)). With F the CDF of X,
    P(n + X < t) = F(t − n − 1), so P(k) = F(t_k − n − 1) − F(t_{k−1} − n − 1) with
    F(t_{−1} − ·) = 0 and F(t_K − ·) = 1. Returns shape ``sizes.shape + (len(thresholds)+1,)``.
    """
    edges = np.asarray(thresholds, dtype=np.int64)
    if edges.ndim != 1 or edges.size == 0 or np.any(np.diff(edges) <= 0):
        raise ValueError("thresholds must be a non-empty, strictly increasing list")
    n = np.asarray(sizes, dtype=np.float64)
    below = [np.asarray(distribution.cdf(t - n - 1.0), dtype=np.float64) for t in edges]
    cumulative = np.stack([np.zeros_like(n), *below, np.ones_like(n)], axis=-1)
    return np.clip(np.diff(cumulative, axis=-1), 0.0, 1.0)


def suppression_probability(
    distribution: distributions.NoiseDistribution, threshold: int, sizes: ArrayLike
) -> NDArray[np.float64]:
    """P(n + X ≤ T): a total-only group of true size n is suppressed (kept only when > T).

    SafeTab-P §5.3.2, Figure 1: at n = 0 this is at least the zero-suppression chance p that
    chose T (:func:`suppression_threshold`); it falls to 1/2 near n = T.
    """
    n = np.asarray(sizes, dtype=np.float64)
    return np.asarray(distribution.cdf(int(threshold) - n), dtype=np.float64)


def swap_epsilon(b: int, p: float | Fraction) -> float:
    """ε of the Permutation swapping algorithm (Theorem 5.6 of "Can swapping be DP?").

    With b the size of the largest stratum (of V_Match) holding two different records, and the
    odds o = p/(1−p) of selecting a record for swapping:

        ε = ln(b+1) − ln o                   if 0 < p ≤ 0.5
        ε = max(ln o, ln(b+1) − ln o)        if 0.5 < p < 1,     and ε = 0 if b = 0.

    For p ∈ {0, 1} (and b > 0) no finite ε holds (the theorem's second part, Appendix A): with
    p = 0 the output is the input, so Pr(Z = X | X) = 1 while Pr(Z = X | X') = 0; with p = 1
    every record of a stratum is deranged and none can stay fixed, so Pr(Z = X | X) = 0 while
    Pr(Z = X | X') > 0 for a neighbour one swap away. We return ``math.inf`` for those cases.
    """
    if isinstance(b, bool) or int(b) != b or b < 0:
        raise ValueError(f"Invalid b: {b} (need an integer >= 0)")
    rate = float(p)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"Invalid swap rate: {p} (need 0 <= p <= 1)")
    if b == 0:
        return 0.0
    if rate in (0.0, 1.0):
        return math.inf
    log_odds = math.log(rate) - math.log1p(-rate)
    base = math.log(int(b) + 1) - log_odds
    return base if rate <= 0.5 else max(log_odds, base)
