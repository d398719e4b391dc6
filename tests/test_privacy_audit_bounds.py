"""The statistics of the privacy audit: Clopper–Pearson, the ε and ρ bounds, the threshold test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism
from das.privacy.noise import seeded_rng
from das.privacy_audit.attack import log_likelihood_ratio, threshold_test
from das.privacy_audit.bounds import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    per_bound_confidence,
    rho_lower_bound,
)

rates = st.floats(1e-6, 1 - 1e-6)
confidences = st.sampled_from([0.8, 0.9, 0.95, 0.99])


def test_clopper_pearson_known_values() -> None:
    # No success in n trials: the upper bound solves (1 − p)^n = 1 − confidence.
    assert clopper_pearson_upper(0, 100, 0.95) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_lower(100, 100, 0.95) == pytest.approx(0.05 ** (1 / 100))
    assert clopper_pearson_upper(100, 100, 0.95) == 1.0
    assert clopper_pearson_lower(0, 100, 0.95) == 0.0
    with pytest.raises(ValueError, match="whole numbers"):
        clopper_pearson_upper(101, 100, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson_upper(1, 100, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5000), st.data(), confidences)
def test_clopper_pearson_is_monotone_and_brackets_the_rate(n: int, data, confidence) -> None:
    k = data.draw(st.integers(0, n))
    upper = clopper_pearson_upper(np.array([k, min(k + 1, n)]), n, confidence)
    lower = clopper_pearson_lower(k, n, confidence)
    assert lower <= k / n <= upper[0] <= upper[1]
    assert clopper_pearson_upper(k, n, min(confidence + 0.005, 0.999)) >= upper[0]


@settings(max_examples=25, deadline=None)
@given(st.integers(20, 2000), st.floats(0.002, 0.998), confidences, st.integers(0, 2**32 - 1))
def test_clopper_pearson_covers_simulated_bernoulli_rates(n, p, confidence, seed) -> None:
    """Over 4000 simulated experiments the upper bound is below the true rate at most
    1 − confidence of the time (plus a 4σ allowance for the simulation)."""
    experiments = 4000
    counts = np.random.default_rng(seed).binomial(n, p, size=experiments)
    missed = np.mean(clopper_pearson_upper(counts, n, confidence) < p)
    allowance = 4 * math.sqrt(confidence * (1 - confidence) / experiments)
    assert missed <= (1 - confidence) + allowance
    missed_lower = np.mean(clopper_pearson_lower(counts, n, confidence) > p)
    assert missed_lower <= (1 - confidence) + allowance


def test_per_bound_confidence_is_bonferroni() -> None:
    assert per_bound_confidence(0.95, 1) == pytest.approx(0.975)
    assert per_bound_confidence(0.95, 10) == pytest.approx(1 - 0.05 / 20)


def test_epsilon_bound_known_values() -> None:
    a = math.exp(-1.0)  # geometric, scale 1, sensitivity 1: FPR = FNR = a/(1 + a)
    rate = a / (1 + a)
    assert epsilon_lower_bound(rate, rate) == pytest.approx(1.0)
    assert epsilon_lower_bound(0.5, 0.5) == 0.0
    assert epsilon_lower_bound(0.9, 0.9) == 0.0  # worse than guessing: no information
    assert epsilon_lower_bound(0.01, 0.5, 0.4) == pytest.approx(math.log(0.1 / 0.01))


@settings(max_examples=200, deadline=None)
@given(rates, rates, rates, rates, st.sampled_from([0.0, 1e-10, 1e-3]))
def test_epsilon_bound_decreases_in_both_rates(f1, f2, g1, g2, delta) -> None:
    low_f, high_f = sorted((f1, f2))
    low_g, high_g = sorted((g1, g2))
    best = epsilon_lower_bound(low_f, low_g, delta)
    assert best >= epsilon_lower_bound(high_f, low_g, delta)
    assert best >= epsilon_lower_bound(low_f, high_g, delta)
    assert epsilon_lower_bound(low_f, low_g, delta) <= epsilon_lower_bound(low_f, low_g, 0.0)


@settings(max_examples=200, deadline=None)
@given(rates, rates, rates, rates)
def test_rho_bound_decreases_in_both_rates(f1, f2, g1, g2) -> None:
    low_f, high_f = sorted((f1, f2))
    low_g, high_g = sorted((g1, g2))
    best = float(rho_lower_bound(low_f, low_g))
    assert best >= float(rho_lower_bound(high_f, low_g)) - 1e-12
    assert best >= float(rho_lower_bound(low_f, high_g)) - 1e-12


def _representable(*rates: float) -> bool:
    """Rates (and their complements) that doubles hold to ~1e-7 relative precision."""
    return all(1e-9 <= rate <= 1 - 1e-9 for rate in rates)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 6.0), st.floats(-8.0, 8.0))
def test_bounds_from_exact_gaussian_rates_never_exceed_the_truth(mu: float, t: float) -> None:
    """The Gaussian mechanism N(0, 1) vs N(μ, 1) is μ²/2-zCDP: the error rates of *any*
    threshold, even known exactly, give ρ and ε(δ) bounds at or below the truth."""
    fpr, fnr = norm.sf(t), norm.cdf(t - mu)
    assume(_representable(fpr, fnr))
    rho = mu * mu / 2
    assert float(rho_lower_bound(fpr, fnr)) <= rho * (1 + 1e-9)
    delta = 1e-6
    exact_epsilon_at_delta = _gaussian_epsilon(mu, delta)
    assert epsilon_lower_bound(fpr, fnr, delta) <= exact_epsilon_at_delta + 1e-6


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact ε(δ) of the Gaussian mechanism (Balle–Wang): the root of δ(ε) = δ."""

    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return 0.0 if excess(0.0) <= 0 else brentq(excess, 0.0, 100.0, xtol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["1/3", "1", "7/2", "12"]), st.integers(-60, 60), st.integers(1, 5))
def test_epsilon_bound_from_exact_geometric_rates_never_exceeds_epsilon(scale, t, d) -> None:
    mechanism = GeometricMechanism(scale)
    distribution = mechanism.distribution
    fpr = float(distribution.sf(t - 1))  # P[Z ≥ t]
    fnr = float(distribution.cdf(t - d - 1))  # P[Z + d < t]
    assume(_representable(fpr, fnr))
    epsilon = float(mechanism.privacy_function(d))
    assert epsilon_lower_bound(fpr, fnr) <= epsilon + 1e-6


@pytest.mark.parametrize(
    "mechanism",
    [DiscreteGaussianMechanism("9/2"), DiscreteGaussianMechanism(30), GeometricMechanism("5/2")],
)
def test_statistic_is_the_log_likelihood_ratio(mechanism) -> None:
    x = np.arange(-12, 13)
    for d in (1, 3, -2):
        expected = mechanism.distribution.log_pmf(x - d) - mechanism.distribution.log_pmf(x)
        got = log_likelihood_ratio(mechanism, x, np.full_like(x, d))
        assert got == pytest.approx(expected, abs=1e-9)


def _geometric_audit(trials: int, seed: int, confidence: float) -> float:
    """One audit of the geometric (ε = 1, sensitivity 3: several candidate thresholds)."""
    mechanism = GeometricMechanism(3)
    rng = seeded_rng(seed)
    d = np.array([3])
    null = log_likelihood_ratio(mechanism, mechanism.sample((trials, 1), rng), d).sum(axis=1)
    alt = log_likelihood_ratio(mechanism, mechanism.sample((trials, 1), rng) + d, d).sum(axis=1)
    test = threshold_test(
        null, alt, lambda f, g: epsilon_lower_bound(f, g), per_bound_confidence(confidence, 1)
    )
    return test.bound


@pytest.mark.slow
def test_audit_bound_has_its_coverage_on_simulated_trials() -> None:
    """The whole procedure (threshold chosen on half, Clopper–Pearson on the other) reports a
    bound above the true ε = 1 at most 1 − confidence of the time. At confidence 0.8 a bound
    from point estimates (no Clopper–Pearson) would exceed it about half the time."""
    confidence, audits = 0.8, 300
    exceeded = sum(_geometric_audit(2000, seed, confidence) > 1.0 for seed in range(audits))
    allowance = 4 * math.sqrt(confidence * (1 - confidence) / audits)
    assert exceeded / audits <= (1 - confidence) + allowance


def test_threshold_test_picks_a_useful_threshold_and_reports_its_rates() -> None:
    bound = _geometric_audit(200_000, 1, 0.95)
    assert 0.9 < bound <= 1.0
    with pytest.raises(ValueError, match="same number"):
        threshold_test(np.zeros(10), np.zeros(11), epsilon_lower_bound, 0.95)


def test_gaussian_trade_off_curve_would_overstate_the_discrete_gaussian() -> None:
    """Why ρ is bounded through Rényi divergences and not read off the Gaussian trade-off
    curve: the discrete Gaussian with σ² = 1/4 (ρ = 2 at Δ = 1) beats that curve, so the
    curve's "ρ" would exceed the truth; the Rényi bound stays below it."""
    mechanism = DiscreteGaussianMechanism("1/4")
    fpr = float(mechanism.distribution.sf(0))  # reject D when the answer is ≥ 1
    fnr = float(mechanism.distribution.cdf(-1))
    mu = norm.ppf(1 - fpr) - norm.ppf(fnr)
    assert mu * mu / 2 > 3.0 > float(mechanism.privacy_function(1)) == 2.0
    assert float(rho_lower_bound(fpr, fnr)) <= 2.0
