"""The tuning curves of das.privacy.calculators: workload and suppression probabilities vs n."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from das.privacy import calculators
from das.privacy.distributions import DiscreteGaussian, TwoSidedGeometric
from das.privacy.noise import discrete_gaussian, seeded_rng

THRESHOLDS = (971, 4971, 19971)


def _brute_force_classes(pmf_support: np.ndarray, pmf: np.ndarray, n: int) -> np.ndarray:
    noisy = n + pmf_support
    classes = np.digitize(noisy, THRESHOLDS)
    return np.bincount(classes, weights=pmf, minlength=len(THRESHOLDS) + 1)


@pytest.mark.parametrize(
    "noise",
    [
        DiscreteGaussian(Fraction(9, 2) / Fraction("0.0159")),
        TwoSidedGeometric(Fraction(9) / Fraction("0.0159")),
    ],
)
@pytest.mark.parametrize("n", [0, 950, 970, 971, 972, 4971, 19000, 19971, 30000])
def test_class_probabilities_match_a_pmf_sum(noise, n: int) -> None:
    support = np.arange(-20000, 20001)
    expected = _brute_force_classes(support, noise.pmf(support), n)
    got = calculators.threshold_class_probabilities(noise, THRESHOLDS, n)
    assert got.shape == (4,)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)


def test_class_probabilities_vectorize_and_match_sampling() -> None:
    sigma_squared = Fraction(9, 2) / Fraction("0.0008")  # (COUNTY, 1) stage 1: σ = 75
    sizes = np.array([4000, 4971, 5100])
    probabilities = calculators.threshold_class_probabilities(
        DiscreteGaussian(sigma_squared), THRESHOLDS, sizes
    )
    assert probabilities.shape == (3, 4)
    draws = discrete_gaussian(sigma_squared, 20_000, rng=seeded_rng(5))
    for row, n in zip(probabilities, sizes, strict=True):
        empirical = np.bincount(np.digitize(n + draws, THRESHOLDS), minlength=4) / draws.size
        assert empirical == pytest.approx(row, abs=0.015)
    # At n = t₁ the noisy total falls below t₁ (class 1, not 2) exactly when X < 0.
    assert probabilities[1, 1] == pytest.approx(DiscreteGaussian(sigma_squared).cdf(-1), abs=1e-9)


def test_class_probabilities_refuse_bad_thresholds() -> None:
    with pytest.raises(ValueError, match="increasing"):
        calculators.threshold_class_probabilities(DiscreteGaussian(4), (5, 5, 9), 0)


@pytest.mark.parametrize(("rho", "threshold"), [("0.008", 93), ("0.159", 21), ("0.543", 11)])
def test_suppression_probability_at_zero_is_the_chosen_chance(rho: str, threshold: int) -> None:
    """Paper Table 6 (γ = 0.1, p = 0.9999): T chosen so a true zero is hidden with p ≥ 0.9999."""
    budget = Fraction(rho)
    assert calculators.suppression_threshold(budget, Fraction(1, 10), 0.9999, 3) == threshold
    noise = DiscreteGaussian(Fraction(9) / (2 * Fraction(9, 10) * budget))
    at = calculators.suppression_probability(noise, threshold, [0, threshold, 4 * threshold])
    assert at[0] >= 0.9999
    assert calculators.suppression_probability(noise, threshold - 1, 0) < 0.9999
    assert 0.5 <= at[1] < 0.6  # P(X ≤ 0) at n = T
    assert at[2] < 1e-6


def test_sum_moe_is_z_sigma_root_k() -> None:
    sigma_squared = 9 / (2 * 0.9 * 0.159)
    cell = calculators.moe_for_rho(0.159, 0.95, 3, stage_fraction=0.9)
    sums = calculators.sum_moe(sigma_squared, [1, 8, 46], 0.95)
    assert sums == pytest.approx([cell, cell * np.sqrt(8), cell * np.sqrt(46)])
    with pytest.raises(ValueError):
        calculators.sum_moe(-1.0, 1, 0.95)
