"""Privacy-definition conversions: zCDP / Rényi DP → (ε, δ)-DP, and composition.

This is *analysis*, not accounting: the ledger keeps exact budgets (``Fraction``); the numbers
here are floats, for reports that compare a release with other (ε, δ) statements.

Sources (papers/safetab_geometric-vs-discrete-gaussian.*, "GvG" below):

* Lemma 4 / eq. 6 (Canonne–Kamath–Steinke): if D_α(M(x)‖M(x')) ≤ τ for all neighbours, M is
  (ε, δ)-DP with ``ε = τ + (log(1/δ) + (α−1)·log(1−1/α) − log α) / (α−1)``.
* eq. 7: for ρ-zCDP (τ = ρα) the tightest ε is the infimum of eq. 6 over α > 1. The paper
  searched α ∈ {1.01, 1.02, …, 10.00}; we offer that grid and a continuous minimisation.
* Lemma 5 / eq. 8 (Bun–Steinke): the analytic bound ``ε = ρ + 2·√(ρ·log(1/δ))``.
* Lemma 8 / Corollary 1 / eq. 17: the paper's Rényi divergence of the two-sided geometric. Its
  proof integrates the *pmf as a density* over ℝ, which is not the divergence of the discrete
  distribution and understates it (α = 2, ε = 0.5: 0.180 instead of 0.227). We keep it to
  reproduce the paper and compute the exact discrete divergence for reports.
* eq. 31–32, 39–40: RDP of SafeTab[Geometric] over its two-stage structure, then eq. 6 over α.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np

Number = Fraction | int | float
OptimizeMethod = Literal["grid", "continuous"]
Divergence = Literal["exact", "paper"]

#: The α grid of GvG §F.2: 1.01, 1.02, …, 9.99, 10.00.
PAPER_ALPHAS: np.ndarray = np.arange(101, 1001) / 100.0

# Continuous search: α − 1 spans 1e-4 … 1e6 on a log grid, then a bounded local refinement.
_LOG_AM1_RANGE = (math.log(1e-4), math.log(1e6))
_SEARCH_POINTS = 4001


def _positive_delta(delta: float) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"Invalid delta: {delta} (need 0 < delta < 1)")
    return delta


def _nonnegative(value: Number, what: str) -> float:
    number = float(value)
    if math.isnan(number) or number < 0:
        raise ValueError(f"Invalid {what}: {value} (need a number >= 0)")
    return number


def _alphas(alpha: float | np.ndarray) -> np.ndarray:
    array = np.asarray(alpha, dtype=float)
    if np.any(~(array > 1.0)):
        raise ValueError("Invalid alpha: Rényi orders must be > 1")
    return array


def _scalar_or_array(value: np.ndarray) -> float | np.ndarray:
    return float(value) if np.ndim(value) == 0 else value


# --------------------------------------------------------------------------- composition


def compose_pure_dp(epsilons: Iterable[Number]) -> Fraction | float:
    """Sequential composition under pure DP: ε = Σ εᵢ (exact for Fractions; ∞ if any is ∞)."""
    return _exact_sum(epsilons, "epsilon")


def compose_zcdp(rhos: Iterable[Number]) -> Fraction | float:
    """Sequential composition under zCDP: ρ = Σ ρᵢ (Bun–Steinke Lemma 2.3)."""
    return _exact_sum(rhos, "rho")


def _exact_sum(values: Iterable[Number], what: str) -> Fraction | float:
    total: Fraction | float = Fraction(0)
    for value in values:
        if isinstance(value, float):
            if math.isinf(value) and value > 0:
                return math.inf
            raise TypeError(f"Invalid {what}: {value} (compose exact Fractions, or math.inf)")
        if value < 0:
            raise ValueError(f"Invalid {what}: {value} (need >= 0)")
        total += Fraction(value)
    return total


def pure_dp_to_zcdp(epsilon: Number) -> Fraction | float:
    """ε-DP implies (ε²/2)-zCDP (Bun–Steinke Prop. 1.4); exact for Fractions."""
    if isinstance(epsilon, float):
        if math.isinf(epsilon) and epsilon > 0:
            return math.inf
        raise TypeError(f"Invalid epsilon: {epsilon} (use a Fraction, or math.inf)")
    if epsilon < 0:
        raise ValueError(f"Invalid epsilon: {epsilon} (need >= 0)")
    return Fraction(epsilon) ** 2 / 2


# --------------------------------------------------------------------------- RDP → (ε, δ)


def rdp_to_approx_dp_epsilon(
    rdp: float | np.ndarray, alpha: float | np.ndarray, delta: float
) -> float | np.ndarray:
    """GvG eq. 6: ``ε = τ + (log(1/δ) + (α−1)·log(1−1/α) − log α) / (α−1)`` for (α, τ)-RDP."""
    alpha = _alphas(alpha)
    delta = _positive_delta(delta)
    am1 = alpha - 1.0
    value = (
        np.asarray(rdp, dtype=float)
        + (math.log(1.0 / delta) + am1 * np.log1p(-1.0 / alpha) - np.log(alpha)) / am1
    )
    return _scalar_or_array(value)


def minimize_over_alpha(
    epsilon_of_alpha: Callable[[np.ndarray], np.ndarray], method: OptimizeMethod = "continuous"
) -> float:
    """min over α > 1 of a vectorised ε(α).

    ``"grid"`` is the paper's search over α ∈ {1.01, …, 10.00}. ``"continuous"`` scans α − 1 on
    a log grid from 1e-4 to 1e6 (which contains the paper's grid range) and refines the best
    bracket with a bounded scalar minimiser; it is never worse than the grid.
    """
    if method == "grid":
        return float(np.min(epsilon_of_alpha(PAPER_ALPHAS)))
    if method != "continuous":
        raise ValueError(f"Invalid method: {method!r} (use 'grid' or 'continuous')")
    log_am1 = np.linspace(*_LOG_AM1_RANGE, _SEARCH_POINTS)
    values = epsilon_of_alpha(1.0 + np.exp(log_am1))
    best = int(np.nanargmin(values))
    low = log_am1[max(best - 1, 0)]
    high = log_am1[min(best + 1, len(log_am1) - 1)]

    def objective(x: float) -> float:
        return float(epsilon_of_alpha(np.asarray([1.0 + math.exp(x)]))[0])

    from scipy.optimize import minimize_scalar  # here: 0.3 s off every das process's start

    refined = minimize_scalar(objective, bounds=(low, high), method="bounded")
    candidates = [float(values[best]), float(refined.fun)]
    candidates.append(float(np.min(epsilon_of_alpha(PAPER_ALPHAS))))
    return min(candidates)


# --------------------------------------------------------------------------- zCDP → (ε, δ)


def zcdp_to_approx_dp_analytic(rho: Number, delta: float) -> float:
    """Bun–Steinke (GvG eq. 8): ρ-zCDP ⇒ (ρ + 2·√(ρ·ln(1/δ)), δ)-DP. Not tight; simple."""
    rho = _nonnegative(rho, "rho")
    delta = _positive_delta(delta)
    if math.isinf(rho):
        return math.inf
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def zcdp_to_approx_dp_optimal(
    rho: Number, delta: float, method: OptimizeMethod = "continuous"
) -> float:
    """GvG eq. 7: ``ε = inf_{α>1} [ρα + (log(1/δ) + (α−1)·log(1−1/α) − log α)/(α−1)]``.

    ``method="grid"`` reproduces the paper (α ∈ {1.01, …, 10}); ``"continuous"`` minimises over
    all α > 1, which matters for small ρ, where the optimal α exceeds 10.
    """
    rho = _nonnegative(rho, "rho")
    delta = _positive_delta(delta)
    if math.isinf(rho):
        return math.inf
    if rho == 0.0:
        return 0.0
    return minimize_over_alpha(
        lambda alpha: rdp_to_approx_dp_epsilon(rho * alpha, alpha, delta), method
    )


# --------------------------------------------------------------------------- two-sided geometric


def geometric_rdp_paper(alpha: float | np.ndarray, epsilon: Number) -> float | np.ndarray:
    """GvG Corollary 1 (eq. 17), as printed, for BaseGeometric with ε (scale b = 1/ε).

    ``τ = 1/(α−1) · log[ (e^ε−1)/(e^ε+1)``
    ``      · ( 2α/(ε(2α−1))·e^{(α−1)ε} + 2(α−1)/(ε(2α−1))·e^{−αε} ) ]``

    Its proof (eq. 12–16) integrates the pmf over ℝ as though it were a density: this is *not*
    the Rényi divergence of the discrete distribution, and it understates it. Kept only to
    reproduce the paper; see :func:`geometric_rdp_exact`.
    """
    alpha = _alphas(alpha)
    eps = _nonnegative(epsilon, "epsilon")
    if math.isinf(eps):
        return _scalar_or_array(np.full_like(alpha, math.inf))
    if eps == 0.0:
        return _scalar_or_array(np.zeros_like(alpha))
    am1 = alpha - 1.0
    two_am1 = 2.0 * alpha - 1.0
    log_norm = math.log(math.tanh(eps / 2.0))  # (e^ε − 1)/(e^ε + 1) = tanh(ε/2)
    first = np.log(2.0 * alpha / (eps * two_am1)) + am1 * eps
    second = np.log(2.0 * am1 / (eps * two_am1)) - alpha * eps
    return _scalar_or_array((log_norm + np.logaddexp(first, second)) / am1)


def geometric_rdp_exact(
    alpha: float | np.ndarray, epsilon: Number, shift: int = 1
) -> float | np.ndarray:
    """Exact D_α(L_ℤ(b) ‖ L_ℤ(b) + k) of the two-sided geometric with b = 1/ε, shift k ≥ 0.

    With pmf ``p(x) = c·e^{−ε|x|}``, ``c = tanh(ε/2)``, the divergence is
    ``1/(α−1) · log Σ_{x∈ℤ} p(x)^α p(x−k)^{1−α}``. The series converges (its terms decay as
    e^{−ε|x|}) and splits into three geometric sums, x ≤ 0, 0 < x < k, x ≥ k:

        Σ = c · [ e^{(α−1)kε}/(1−e^{−ε}) + e^{−αkε}/(1−e^{−ε})
                  + e^{(α−1)kε} · r(1 − r^{k−1})/(1 − r) ],   r = e^{−(2α−1)ε},

    evaluated in log space (log-sum-exp, log1p/expm1), so large kε neither overflows nor
    cancels. For k = 1: ``Σ = (e^{(α−1)ε} + e^{−αε}) / (1 + e^{−ε})``.
    """
    alpha = _alphas(alpha)
    eps = _nonnegative(epsilon, "epsilon")
    if isinstance(shift, bool) or int(shift) != shift or shift < 0:
        raise ValueError(f"Invalid shift: {shift} (need an integer >= 0)")
    k = int(shift)
    if k == 0 or eps == 0.0:
        return _scalar_or_array(np.zeros_like(alpha))
    if math.isinf(eps):
        return _scalar_or_array(np.full_like(alpha, math.inf))
    am1 = alpha - 1.0
    log_c = math.log(math.tanh(eps / 2.0))
    log_one_minus_q = math.log(-math.expm1(-eps))
    terms = [am1 * k * eps - log_one_minus_q, -alpha * k * eps - log_one_minus_q]
    if k >= 2:
        rate = (2.0 * alpha - 1.0) * eps
        middle = (
            am1 * k * eps - rate + np.log(-np.expm1(-(k - 1) * rate)) - np.log(-np.expm1(-rate))
        )
        terms.append(middle)
    from scipy.special import logsumexp

    stacked = np.stack(np.broadcast_arrays(*terms))
    return _scalar_or_array((log_c + logsumexp(stacked, axis=0)) / am1)


def geometric_rdp(
    alpha: float | np.ndarray, epsilon: Number, divergence: Divergence = "exact"
) -> float | np.ndarray:
    """RDP τ(α, ε) of BaseGeometric(ε) for a unit shift: the exact one or the paper's (eq. 17)."""
    if divergence == "exact":
        return geometric_rdp_exact(alpha, epsilon, 1)
    if divergence == "paper":
        return geometric_rdp_paper(alpha, epsilon)
    raise ValueError(f"Invalid divergence: {divergence!r} (use 'exact' or 'paper')")


def geometric_worst_case_rdp(
    alpha: float | np.ndarray, scale: Number, l1_sensitivity: int, max_cell_change: int
) -> float | np.ndarray:
    """Worst-case RDP of adding L_ℤ(scale) to each cell of a query vector.

    One record changes the vector by v with ‖v‖₁ ≤ Δ and ‖v‖_∞ ≤ m. Noise is independent per
    cell, so D_α = Σᵢ D(|vᵢ|) with D(k) the exact divergence for a shift k. D is increasing and
    convex in k with D(0) = 0, so Σ D(vᵢ) is Schur-convex: the worst v puts q = ⌊Δ/m⌋ cells at
    m and one at the remainder r = Δ − qm, giving ``q·D(m) + D(r)``. For counts over a flatmap
    (each of a record's ≤ Δ rows adds 1 to one cell: m = 1) this is ``Δ·D(1)`` — the paper's
    "s · τ(ρᵢ/s)" per level (eq. 31).
    """
    for value, what in ((l1_sensitivity, "l1_sensitivity"), (max_cell_change, "max_cell_change")):
        if isinstance(value, bool) or int(value) != value or value < 0:
            raise ValueError(f"Invalid {what}: {value} (need an integer >= 0)")
    delta_l1, m = int(l1_sensitivity), int(max_cell_change)
    if m == 0 or delta_l1 == 0:
        return _scalar_or_array(np.zeros_like(_alphas(alpha)))
    scale_value = _nonnegative(scale, "scale")
    if scale_value == 0.0:
        return _scalar_or_array(np.full_like(_alphas(alpha), math.inf))
    eps_unit = 1.0 / scale_value
    full, remainder = divmod(delta_l1, min(m, delta_l1))
    value = full * np.asarray(geometric_rdp_exact(alpha, eps_unit, min(m, delta_l1)))
    if remainder:
        value = value + np.asarray(geometric_rdp_exact(alpha, eps_unit, remainder))
    return _scalar_or_array(value)


def safetab_geometric_rdp(
    alpha: float | np.ndarray,
    level_budgets: Sequence[Number],
    stability: int = 9,
    stage1_fraction: Number = Fraction(1, 10),
    divergence: Divergence = "exact",
) -> float | np.ndarray:
    """f(α) of GvG eq. 32 / 39: the RDP of SafeTab[Geometric] with level budgets ρᵢ (pure-DP ε).

    ``f(α) = Σᵢ s · max[ τ(α, γρᵢ/s) + τ(α, (1−γ)ρᵢ/s),  τ(α, ρᵢ/s) ]``

    A record is in at most s = ``stability`` groups of a level (generalised parallel composition,
    GvG Lemma 12); each group is either two-stage (stage 1 with γρᵢ/s, stage 2 with (1−γ)ρᵢ/s,
    sequentially composed, Lemma 3) or TotalOnly (ρᵢ/s); levels compose sequentially.
    """
    alpha = _alphas(alpha)
    s = int(stability)
    if s <= 0 or s != stability:
        raise ValueError(f"Invalid stability: {stability} (need an integer > 0)")
    gamma = float(stage1_fraction)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"Invalid stage1_fraction: {stage1_fraction} (need 0 <= f <= 1)")
    total = np.zeros_like(alpha)
    for budget in level_budgets:
        rho = _nonnegative(budget, "level budget")
        two_stage = np.asarray(geometric_rdp(alpha, gamma * rho / s, divergence)) + np.asarray(
            geometric_rdp(alpha, (1.0 - gamma) * rho / s, divergence)
        )
        total_only = np.asarray(geometric_rdp(alpha, rho / s, divergence))
        total = total + s * np.maximum(two_stage, total_only)
    return _scalar_or_array(total)


def safetab_geometric_approx_dp(
    level_budgets: Sequence[Number],
    delta: float,
    stability: int = 9,
    stage1_fraction: Number = Fraction(1, 10),
    divergence: Divergence = "exact",
    method: OptimizeMethod = "continuous",
) -> float:
    """GvG eq. 40: (ε, δ)-DP of SafeTab[Geometric] from its RDP curve, minimised over α.

    ``divergence="paper"`` with ``method="grid"`` is the paper's own computation (eq. 17 and
    α ∈ {1.01, …, 10}); reports use ``divergence="exact"``.
    """
    delta = _positive_delta(delta)
    budgets = list(level_budgets)
    if any(math.isinf(float(b)) for b in budgets):
        return math.inf

    def epsilon(alpha: np.ndarray) -> np.ndarray:
        rdp = safetab_geometric_rdp(alpha, budgets, stability, stage1_fraction, divergence)
        return np.asarray(rdp_to_approx_dp_epsilon(rdp, alpha, delta))

    return minimize_over_alpha(epsilon, method)
