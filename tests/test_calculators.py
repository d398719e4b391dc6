"""Budget calculators (SafeTEx / PHExplore): MOE ↔ budget, suppression threshold, swap ε."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from das.privacy import calculators as calc
from das.privacy.distributions import DiscreteGaussian, TwoSidedGeometric


def test_z_score() -> None:
    assert calc.z_score(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert calc.z_score(0.90) == pytest.approx(1.644854, abs=1e-6)
    assert calc.z_score(0.90, decimals=3) == 1.645
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="confidence"):
            calc.z_score(bad)


def test_rho_for_moe_formula_and_stage_fraction() -> None:
    # ρ = Δ² z² / (2 MOE²): Δ = 3, z = 1.96 (rounded), MOE = 3 → 9·3.8416/18 = 1.9208
    rho, total = calc.rho_for_moe(3, 0.95, 3, stage_fraction=Fraction(9, 10), z_decimals=2)
    assert rho == pytest.approx(1.9208, abs=1e-12)
    assert total == pytest.approx(1.9208 / 0.9, abs=1e-12)
    assert calc.rho_for_moe(3, 0.95, 3) == (pytest.approx(1.920729, abs=1e-6),) * 2


@pytest.mark.parametrize(
    ("moe", "confidence", "sensitivity", "fraction"),
    [(3, 0.95, 3, 0.9), (11, 0.95, 3, 0.9), (500, 0.9, 22, 1), (68, 0.9, 2, 1), (7.5, 0.8, 1, 0.5)],
)
def test_moe_and_rho_are_inverse(
    moe: float, confidence: float, sensitivity: int, fraction: float
) -> None:
    _, total = calc.rho_for_moe(moe, confidence, sensitivity, fraction)
    assert calc.moe_for_rho(total, confidence, sensitivity, fraction) == pytest.approx(moe)


def test_moe_is_z_sigma_of_the_mechanism_noise() -> None:
    # PHSafe check (docs/explanation/architecture.md#phsafe): PH1_num, τ = 10 (Δ = 22),
    # ρ = 0.002619 → σ ≈ 304, MOE 500.
    sigma = math.sqrt(22**2 / (2 * 0.002619))
    assert sigma == pytest.approx(304, abs=0.5)
    assert calc.moe_for_rho(Fraction("0.002619"), 0.90, 22) == pytest.approx(500, abs=0.5)


def test_calculator_input_validation() -> None:
    with pytest.raises(ValueError, match="moe"):
        calc.rho_for_moe(0, 0.95, 3)
    with pytest.raises(ValueError, match="sensitivity"):
        calc.rho_for_moe(3, 0.95, 0)
    with pytest.raises(ValueError, match="stage_fraction"):
        calc.rho_for_moe(3, 0.95, 3, stage_fraction=0)
    with pytest.raises(ValueError, match="rho"):
        calc.moe_for_rho(-1, 0.95, 3)


@pytest.mark.parametrize("moe", [0, 1, 6, 11, 50, 200])
def test_geometric_exact_epsilon_is_tight(moe: int) -> None:
    eps, eps_total = calc.epsilon_for_moe(moe, 0.95, 9, stage_fraction=0.9)
    assert eps_total == pytest.approx(eps / 0.9)
    # The MOE of the resulting noise is the target; a hair less budget misses it.
    assert calc.moe_for_epsilon(eps_total * (1 + 1e-9), 0.95, 9, 0.9) == moe
    assert calc.moe_for_epsilon(eps_total * (1 - 1e-6), 0.95, 9, 0.9) == moe + 1
    scale = 9 / (eps * (1 + 1e-9))
    assert TwoSidedGeometric(scale).central_probability(moe) >= 0.95


@pytest.mark.parametrize("moe", [6, 11, 50])
def test_paper_geometric_rule_is_optimistic_by_one(moe: int) -> None:
    # GvG Corollary 2, ε = ln 20/(⌊MOE⌋+1) per unit of sensitivity: its true 95% MOE is MOE+1.
    eps, _ = calc.epsilon_for_moe(moe, 0.95, 1, method="paper")
    assert eps == pytest.approx(math.log(20) / (moe + 1))
    assert calc.moe_for_epsilon(eps, 0.95, 1) == moe + 1
    with pytest.raises(ValueError, match="method"):
        calc.epsilon_for_moe(moe, 0.95, 1, method="table")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rho", "gamma", "p", "sensitivity"),
    [
        ("0.008", "0.1", 0.9999, 3),
        ("0.159", "0.1", 0.999, 3),
        ("2", "0", 0.99, 1),
        ("1/7", "1/2", 0.9, 22),
    ],
)
def test_suppression_threshold_is_the_smallest_quantile(
    rho: str, gamma: str, p: float, sensitivity: int
) -> None:
    threshold = calc.suppression_threshold(Fraction(rho), Fraction(gamma), p, sensitivity)
    sigma_squared = Fraction(sensitivity**2) / (2 * (1 - Fraction(gamma)) * Fraction(rho))
    noise = DiscreteGaussian(sigma_squared)
    assert noise.cdf(threshold) >= p
    assert noise.cdf(threshold - 1) < p


def test_suppression_threshold_edge_cases() -> None:
    assert calc.suppression_threshold(math.inf, Fraction(1, 10), 0.9999, 3) == 0
    with pytest.raises(ValueError):
        calc.suppression_threshold(0, Fraction(1, 10), 0.9999, 3)
    with pytest.raises(ValueError, match="stage1_fraction"):
        calc.suppression_threshold(Fraction(1), 1, 0.9999, 3)
    with pytest.raises(ValueError, match="p"):
        calc.suppression_threshold(Fraction(1), Fraction(1, 10), 1.0, 3)
    with pytest.raises(ValueError, match="p"):
        calc.suppression_threshold(Fraction(1), Fraction(1, 10), -0.01, 3)
    # p = 0 is the Census's "no suppression": no threshold at all, whatever the budget.
    assert calc.suppression_threshold(Fraction(1), Fraction(1, 10), 0.0, 3) is None
    assert calc.suppression_threshold(math.inf, Fraction(1, 10), 0, 3) is None


def test_swap_epsilon_cases() -> None:
    b = 1000
    assert calc.swap_epsilon(0, 0.3) == 0.0  # no stratum with two different records
    assert calc.swap_epsilon(b, 0.0) == math.inf  # nothing swapped
    assert calc.swap_epsilon(b, 1.0) == math.inf  # everything deranged
    assert calc.swap_epsilon(b, 0.5) == pytest.approx(math.log(b + 1))  # o = 1
    assert calc.swap_epsilon(b, 0.2) == pytest.approx(math.log(b + 1) - math.log(0.25))
    # p > 1/2: max(ln o, ln(b+1) − ln o); at p = 0.999 the first term wins only for small b.
    assert calc.swap_epsilon(b, 0.9) == pytest.approx(math.log(b + 1) - math.log(9))
    assert calc.swap_epsilon(10, 0.999) == pytest.approx(math.log(999))
    assert calc.swap_epsilon(b, Fraction(1, 5)) == calc.swap_epsilon(b, 0.2)
    for bad_b, bad_p in ((-1, 0.5), (2.5, 0.5), (10, 1.5), (10, -0.1)):
        with pytest.raises(ValueError):
            calc.swap_epsilon(bad_b, bad_p)  # type: ignore[arg-type]


@pytest.mark.parametrize("b", [10, 10**6])
def test_swap_epsilon_floor_is_half_log(b: int) -> None:
    # Theorem 5.6: the smallest ε over p is reached at o = √(b+1), where it is ln(b+1)/2
    # (Figure 2.1: ≈ 6.91 at p ≈ 99.9% for b = 10⁶).
    o = math.sqrt(b + 1)
    best_p = o / (1 + o)
    floor = calc.swap_epsilon(b, best_p)
    assert floor == pytest.approx(math.log(b + 1) / 2)
    for p in (0.05, 0.5, best_p * 0.99, min(best_p * 1.0005, 0.99999)):
        assert calc.swap_epsilon(b, p) >= floor - 1e-12
    if b == 10**6:
        assert round(floor, 2) == 6.91 and round(best_p, 3) == 0.999
