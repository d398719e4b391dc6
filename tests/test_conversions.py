"""(ε, δ) conversions, composition and the Rényi divergence of the two-sided geometric."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import logsumexp

from das.privacy import conversions as cv


def _brute_force_geometric_rdp(alpha: float, epsilon: float, shift: int) -> float:
    """D_α by direct summation of the pmfs in log space (independent of the closed form)."""
    x = np.arange(-200_000, 200_001, dtype=float)
    log_c = math.log(math.tanh(epsilon / 2))
    log_p = log_c - epsilon * np.abs(x)
    log_q = log_c - epsilon * np.abs(x - shift)
    return float(logsumexp(alpha * log_p + (1 - alpha) * log_q) / (alpha - 1))


# ----------------------------------------------------------------------------- zCDP → (ε, δ)


def test_analytic_conversion_known_value() -> None:
    # ρ + 2√(ρ ln(1/δ)) with ρ = 1/2, δ = 1e-5: 0.5 + 2·√(0.5·11.512925…) = 5.298526…
    assert cv.zcdp_to_approx_dp_analytic(Fraction(1, 2), 1e-5) == pytest.approx(5.298526, abs=1e-6)


@pytest.mark.parametrize("rho", [0.001, 0.05, 0.5, 1.41, 5.0, 50.0])
def test_optimal_conversion_is_the_minimum_of_eq_7(rho: float) -> None:
    delta = 1e-10
    alpha = 1.0 + np.geomspace(1e-4, 1e6, 400_000)
    curve = rho * alpha + (
        math.log(1 / delta) + (alpha - 1) * np.log(1 - 1 / alpha) - np.log(alpha)
    ) / (alpha - 1)
    dense = float(curve.min())
    continuous = cv.zcdp_to_approx_dp_optimal(rho, delta)
    grid = cv.zcdp_to_approx_dp_optimal(rho, delta, method="grid")
    assert continuous == pytest.approx(dense, rel=1e-9, abs=1e-9)
    assert continuous <= grid + 1e-12
    assert continuous <= cv.zcdp_to_approx_dp_analytic(rho, delta)


def test_grid_search_is_too_coarse_for_small_rho() -> None:
    # For small ρ the optimal α is far above 10: the paper's grid misses it.
    grid = cv.zcdp_to_approx_dp_optimal(0.001, 1e-10, method="grid")
    continuous = cv.zcdp_to_approx_dp_optimal(0.001, 1e-10, method="continuous")
    assert continuous < 0.5 * grid


def test_grid_uses_the_papers_alphas() -> None:
    assert cv.PAPER_ALPHAS[0] == 1.01 and cv.PAPER_ALPHAS[-1] == 10.0
    assert len(cv.PAPER_ALPHAS) == 900


def test_conversion_edge_cases() -> None:
    assert cv.zcdp_to_approx_dp_optimal(0, 1e-10) == 0.0
    assert cv.zcdp_to_approx_dp_analytic(0, 1e-10) == 0.0
    assert cv.zcdp_to_approx_dp_optimal(math.inf, 1e-10) == math.inf
    assert cv.zcdp_to_approx_dp_analytic(math.inf, 1e-10) == math.inf
    for bad_delta in (0.0, 1.0, -1e-3):
        with pytest.raises(ValueError, match="delta"):
            cv.zcdp_to_approx_dp_analytic(1, bad_delta)
    with pytest.raises(ValueError, match="rho"):
        cv.zcdp_to_approx_dp_optimal(-1, 1e-10)
    with pytest.raises(ValueError, match="method"):
        cv.zcdp_to_approx_dp_optimal(1, 1e-10, method="newton")  # type: ignore[arg-type]


def test_rdp_to_approx_dp_formula_at_a_point() -> None:
    # eq. 6 at α = 2, τ = 1, δ = e^-10: 1 + (10 + log(1/2) − log 2)/1 = 11 − 2 ln 2
    value = cv.rdp_to_approx_dp_epsilon(1.0, 2.0, math.exp(-10))
    assert value == pytest.approx(11 - 2 * math.log(2), abs=1e-12)
    with pytest.raises(ValueError, match="alpha"):
        cv.rdp_to_approx_dp_epsilon(1.0, 1.0, 1e-10)


# ----------------------------------------------------------------------------- composition


def test_exact_composition() -> None:
    tenths = [Fraction(1, 10)] * 3
    assert cv.compose_zcdp(tenths) == Fraction(3, 10)  # floats would give 0.30000000000000004
    assert cv.compose_pure_dp([Fraction(1, 3), 2]) == Fraction(7, 3)
    assert cv.compose_pure_dp([Fraction(1), math.inf]) == math.inf
    with pytest.raises(TypeError):
        cv.compose_zcdp([0.1])
    with pytest.raises(ValueError):
        cv.compose_pure_dp([Fraction(-1)])
    assert cv.pure_dp_to_zcdp(Fraction(1, 2)) == Fraction(1, 8)
    assert cv.pure_dp_to_zcdp(math.inf) == math.inf


# ----------------------------------------------------------------------------- geometric RDP


def test_paper_formula_understates_the_true_divergence() -> None:
    # The brief's check: α = 2, ε = 0.5 gives 0.180 printed-formula vs 0.227 exact.
    assert cv.geometric_rdp_paper(2.0, 0.5) == pytest.approx(0.1798, abs=5e-4)
    assert cv.geometric_rdp_exact(2.0, 0.5) == pytest.approx(0.2273, abs=5e-4)
    alphas = np.linspace(1.05, 20, 50)
    for eps in (0.01, 0.1, 0.5, 2.0):
        assert np.all(cv.geometric_rdp_paper(alphas, eps) < cv.geometric_rdp_exact(alphas, eps))


@pytest.mark.parametrize(
    ("alpha", "epsilon", "shift"),
    [(2.0, 0.5, 1), (1.3, 1.2, 7), (3.5, 0.3, 4), (10.0, 0.01, 3), (1.01, 0.05, 1), (50.0, 2.0, 2)],
)
def test_exact_divergence_matches_direct_summation(
    alpha: float, epsilon: float, shift: int
) -> None:
    exact = cv.geometric_rdp_exact(alpha, epsilon, shift)
    assert exact == pytest.approx(_brute_force_geometric_rdp(alpha, epsilon, shift), rel=1e-10)


def test_exact_divergence_respects_pure_and_concentrated_bounds() -> None:
    # ε-DP ⇒ D_α ≤ kε and D_α ≤ α(kε)²/2 (ε-DP implies ε²/2-zCDP); D_∞ = kε.
    alphas = np.array([1.01, 1.5, 2.0, 5.0, 20.0, 100.0])
    for eps, k in itertools.product((0.01, 0.2, 1.0, 3.0), (1, 2, 5)):
        d = cv.geometric_rdp_exact(alphas, eps, k)
        assert np.all(d <= k * eps + 1e-12)
        assert np.all(d <= alphas * (k * eps) ** 2 / 2 + 1e-12)
    assert cv.geometric_rdp_exact(1e6, 0.7, 3) == pytest.approx(2.1, rel=1e-4)


def test_exact_divergence_is_stable_for_large_shifts() -> None:
    value = cv.geometric_rdp_exact(np.array([2.0, 10.0]), 5.0, 400)
    assert np.all(np.isfinite(value))
    assert value[1] == pytest.approx(2000.0, rel=0.05)


def test_exact_divergence_is_convex_in_the_shift() -> None:
    alphas = np.array([1.01, 1.5, 2.0, 5.0, 10.0, 50.0])
    for eps in (0.01, 0.1, 0.5, 2.0):
        d = np.array([cv.geometric_rdp_exact(alphas, eps, k) for k in range(30)])
        second_difference = d[2:] - 2 * d[1:-1] + d[:-2]
        assert second_difference.min() > -1e-12


@pytest.mark.parametrize(("sensitivity", "cell"), [(9, 1), (9, 2), (9, 4), (6, 3), (5, 9)])
def test_worst_case_rdp_is_the_worst_shift_pattern(sensitivity: int, cell: int) -> None:
    alpha, scale = 3.0, 4.5
    eps = 1 / scale
    cap = min(cell, sensitivity)
    divergence = [cv.geometric_rdp_exact(alpha, eps, k) for k in range(cap + 1)]

    def patterns(total: int, largest: int):  # integer partitions of at most `total`
        if total == 0 or largest == 0:
            yield []
            return
        yield []
        for part in range(min(total, largest), 0, -1):
            for rest in patterns(total - part, part):
                yield [part, *rest]

    brute = max(sum(divergence[k] for k in pattern) for pattern in patterns(sensitivity, cap))
    assert cv.geometric_worst_case_rdp(alpha, scale, sensitivity, cell) == pytest.approx(brute)


def test_safetab_rdp_takes_the_worse_group_type() -> None:
    alphas = np.array([2.0, 5.0])
    rho, s, gamma = 2.134, 9, 0.1
    expected = s * np.maximum(
        cv.geometric_rdp_exact(alphas, gamma * rho / s)
        + cv.geometric_rdp_exact(alphas, (1 - gamma) * rho / s),
        cv.geometric_rdp_exact(alphas, rho / s),
    )
    got = cv.safetab_geometric_rdp(alphas, [rho], s, gamma)
    np.testing.assert_allclose(got, expected)
    # Small per-group ε: RDP is ~quadratic, so the single total-only count dominates the split.
    np.testing.assert_allclose(got, s * cv.geometric_rdp_exact(alphas, rho / s))
    np.testing.assert_allclose(cv.safetab_geometric_rdp(alphas, [rho, rho]), 2 * got)


def test_safetab_approx_dp_never_exceeds_pure_dp() -> None:
    # D_α ≤ ε for ε-DP, so eq. 6 tends to the pure ε as α → ∞: the (ε, δ) figure of a large
    # pure budget is at most that budget (the continuous search reaches α = 1e6).
    budgets = [Fraction(20), Fraction(10)]
    eps = cv.safetab_geometric_approx_dp(budgets, 1e-10)
    assert eps <= 30 + 1e-3
    assert eps == pytest.approx(30, rel=0.01)
    # ... whereas a small budget is dominated by the log(1/δ) term and stays above it.
    assert cv.safetab_geometric_approx_dp([Fraction(1, 2)], 1e-10) > 0.5
    assert cv.safetab_geometric_approx_dp([math.inf], 1e-10) == math.inf
    with pytest.raises(ValueError, match="divergence"):
        cv.safetab_geometric_rdp(2.0, [1.0], divergence="continuous")  # type: ignore[arg-type]
