"""Average (ratio) posteriors: importance sampler vs quadrature, constraints, coverage, ESS."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from das.postprocess.averages import (
    RatioComponent,
    _log_diff_ndtr,
    average_posterior,
    weighted_summary,
)

TOTAL_AND_PARTS = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])


def _single(num_y, num_v, den_y, den_v, c=1.0, tau=10.0) -> RatioComponent:
    return RatioComponent(
        np.asarray(num_y, float),
        np.asarray(num_v, float),
        np.asarray(den_y, float),
        np.asarray(den_v, float),
        c,
        tau,
    )


def test_log_interval_mass_is_stable() -> None:
    a, b = np.array([-1.0, 0.5, -3.0]), np.array([2.0, 1.5, -2.0])
    np.testing.assert_allclose(_log_diff_ndtr(a, b), np.log(special.ndtr(b) - special.ndtr(a)))
    far = _log_diff_ndtr(np.array([40.0, -41.0]), np.array([41.0, -40.0]))
    np.testing.assert_allclose(far, special.log_ndtr(np.array([-40.0, -40.0])), rtol=1e-9)
    assert _log_diff_ndtr(np.array([1.0]), np.array([1.0]))[0] == -np.inf


def test_weighted_summary_definition() -> None:
    values = np.array([[3.0, 1.0, 2.0]])
    weights = np.array([[0.46, 0.04, 0.5]])
    mean, lower, upper = weighted_summary(values, weights)
    assert mean[0] == pytest.approx(0.04 * 1 + 0.5 * 2 + 0.46 * 3)
    assert (lower[0], upper[0]) == (2.0, 3.0)


def test_importance_sampler_matches_quadrature() -> None:
    # One numerator cell y = 8 (v = 16), denominator y = 3 (v = 1), 1 ≤ T/d ≤ τ = 2: binding.
    yt, vt, yd, vd, tau = 8.0, 16.0, 3.0, 1.0, 2.0
    t = np.linspace(0, 40, 2001)[:, None]
    d = np.linspace(1, 20, 1901)[None, :]
    density = np.exp(-((t - yt) ** 2) / (2 * vt) - ((d - yd) ** 2) / (2 * vd))
    density *= (t >= d) & (t <= tau * d)
    density /= density.sum()
    expected_ratio = float(np.sum(density * t / d))
    expected_d = float(np.sum(density * d))
    comp = _single([[yt]], [[vt]], [yd], [vd], tau=tau)
    result = average_posterior(
        [comp], np.ones((1, 1)), np.ones((1, 1)), np.random.default_rng(0), n_draws=200_000
    )
    assert result.ratio[0, 0] == pytest.approx(expected_ratio, rel=5e-3)
    assert result.denominator[0, 0] == pytest.approx(expected_d, rel=5e-3)
    assert result.ess[0] > 10_000


def test_two_part_sampler_matches_quadrature() -> None:
    # Parts -1 ± 2 and 7 ± 2 (both ≥ 0), denominator 3 ± 1, 2 ≤ T/d ≤ 3 (family constraint).
    y1, y2, v, yd, vd = -1.0, 7.0, 4.0, 3.0, 1.0
    n1 = (np.arange(200) + 0.5)[:, None, None] * 0.08  # midpoint rule on [0, 16]
    n2 = (np.arange(225) + 0.5)[None, :, None] * 0.08
    d = 1 + (np.arange(160) + 0.5)[None, None, :] * 0.05
    total = n1 + n2
    density = np.exp(-((n1 - y1) ** 2 + (n2 - y2) ** 2) / (2 * v) - (d - yd) ** 2 / (2 * vd))
    density = density * ((total >= 2 * d) & (total <= 3 * d))
    density /= density.sum()
    expected = [float(np.sum(density * x / d)) for x in (total, n1, n2)]
    comp = _single([[y1, y2]], [[v, v]], [yd], [vd], c=2.0, tau=3.0)
    result = average_posterior(
        [comp], TOTAL_AND_PARTS, np.ones((3, 1)), np.random.default_rng(6), n_draws=100_000
    )
    np.testing.assert_allclose(result.ratio[0], expected, rtol=0.008)


def test_constraints_respected_on_awkward_inputs() -> None:
    # Negative denominators, numerators below the denominator, above τ × denominator.
    num_y = np.array([[-20.0, -5.0], [3.0, 2.0], [60.0, 90.0], [0.0, 0.0], [50.0, 60.0]])
    den_y = np.array([-10.0, 40.0, 20.0, 0.0, 50.0])
    for c, tau in [(1.0, 10.0), (2.0, 5.0)]:
        comp = _single(num_y, np.full((5, 2), 100.0), den_y, np.full(5, 4.0), c, tau)
        result = average_posterior(
            [comp], TOTAL_AND_PARTS, np.ones((3, 1)), np.random.default_rng(1), n_draws=2000
        )
        total = result.ratio[:, 0]
        assert np.all(np.isfinite(result.ratio))
        slack = 1e-9 * tau  # mean vs quantile of a posterior piled against the bound τ
        assert np.all((c <= result.lower[:, 0]) & (result.lower[:, 0] <= total + slack))
        assert np.all((total <= result.upper[:, 0] + slack) & (result.upper[:, 0] <= tau))
        assert np.all(result.denominator >= 1.0)
        assert np.all(result.numerator[:, 0] >= c * result.denominator[:, 0] - 1e-9)
        assert np.all(result.lower[:, 1:] >= 0)
        np.testing.assert_allclose(result.ratio[:, 1] + result.ratio[:, 2], total)
        assert result.ess.min() >= 400


def test_data_contradicting_constraints_stay_in_bounds_with_low_ess_reported() -> None:
    # T ≈ 1000 ± 14 but d ≈ 20 ± 2 and τ = 10: the posterior sits ~40 σ from both proposals.
    comp = _single([[400.0, 600.0]], [[100.0, 100.0]], [20.0], [4.0], 1.0, 10.0)
    result = average_posterior(
        [comp], TOTAL_AND_PARTS, np.ones((3, 1)), np.random.default_rng(5), n_draws=1000
    )
    assert result.ess[0] < 400  # reported, not hidden
    assert 1.0 <= result.lower[0, 0] <= result.upper[0, 0] <= 10.0


def test_ratio_coverage_near_90_percent() -> None:
    gen = np.random.default_rng(90)
    n = 2000
    households = gen.integers(20, 400, n).astype(float)
    size = gen.uniform(1.1, 4.0, n)
    persons = np.rint(households * size)
    under18 = np.rint(persons * gen.uniform(0.1, 0.4, n))
    parts = np.stack([under18, persons - under18], axis=1)
    num_v, den_v = 400.0, 16.0
    comp = _single(
        parts + gen.normal(0, np.sqrt(num_v), parts.shape),
        np.full((n, 2), num_v),
        households + gen.normal(0, np.sqrt(den_v), n),
        np.full(n, den_v),
    )
    result = average_posterior(
        [comp], TOTAL_AND_PARTS, np.ones((3, 1)), np.random.default_rng(91), n_draws=1000
    )
    truth = np.stack([persons, parts[:, 0], parts[:, 1]], axis=1) / households[:, None]
    covered = (result.lower <= truth) & (truth <= result.upper)
    coverage = covered.mean(axis=0)
    assert np.all((coverage >= 0.86) & (coverage <= 0.94)), coverage
    assert result.ess.min() >= 400


def test_zero_variance_is_near_exact() -> None:
    # Infinite budget: variance 0 is treated as MIN_VARIANCE (1e-6), i.e. known to ~1e-3.
    comp = _single([[10.0, 20.0], [0.0, 0.0]], np.zeros((2, 2)), [10.0, 0.0], np.zeros(2))
    result = average_posterior(
        [comp], TOTAL_AND_PARTS, np.ones((3, 1)), np.random.default_rng(2), n_draws=500
    )
    np.testing.assert_allclose(result.ratio[0], [3.0, 1.0, 2.0], rtol=1e-4)
    np.testing.assert_allclose(result.lower[0], [3.0, 1.0, 2.0], rtol=1e-3)
    np.testing.assert_allclose(result.upper[0], [3.0, 1.0, 2.0], rtol=1e-3)
    # No household and nobody: the constraints force d ≥ 1, T ≥ d, so the average is ~1.
    assert 1.0 <= result.lower[1, 0] <= result.upper[1, 0] <= 1.01


def test_low_ess_groups_are_redrawn() -> None:
    # Very noisy numerator, precise denominator, tight τ: few proposals land in [d, 2d].
    comp = _single([[0.0], [500.0]], [[1e6], [100.0]], [1000.0, 300.0], [1.0, 1.0], tau=2.0)
    result = average_posterior(
        [comp], np.ones((1, 1)), np.ones((1, 1)), np.random.default_rng(3), n_draws=500
    )
    assert result.draws[0] > 500 and result.draws[1] == 500
    assert result.ess.min() >= 400
    assert 1.0 <= result.lower[0, 0] <= result.upper[0, 0] <= 2.0


def test_two_components_total_is_consistent() -> None:
    owner = _single([[300.0]], [[100.0]], [100.0], [4.0])
    renter = _single([[100.0]], [[100.0]], [60.0], [4.0])
    result = average_posterior(
        [owner, renter], TOTAL_AND_PARTS, TOTAL_AND_PARTS, np.random.default_rng(4), n_draws=4000
    )
    assert result.numerator[0, 0] == pytest.approx(result.numerator[0, 1] + result.numerator[0, 2])
    assert result.denominator[0, 0] == pytest.approx(
        result.denominator[0, 1] + result.denominator[0, 2]
    )
    assert result.ratio[0, 2] < result.ratio[0, 0] < result.ratio[0, 1]
    assert result.ratio[0, 1] == pytest.approx(3.0, rel=0.05)


def test_threads_give_the_same_estimates_bit_for_bit() -> None:
    """Chunks computed on several threads, their uniforms drawn beforehand in order: the same
    result as one thread, and the generator left in the same state (what follows it in a
    seeded release draws the same numbers)."""
    rng = np.random.default_rng(3)
    groups = 40
    parts = _single(rng.normal(20, 5, (groups, 2)), np.full((groups, 2), 9.0),
                    rng.normal(8, 2, groups), np.full(groups, 4.0), c=1.0, tau=6.0)  # fmt: skip
    masks = TOTAL_AND_PARTS

    def run(threads: int) -> tuple[object, float]:
        generator = np.random.default_rng(11)
        # small chunks (4 groups each) and a target that sends some groups to a second round
        result = average_posterior([parts], masks, np.ones((3, 1)), generator, n_draws=500,
                                   target_ess=300.0, max_chunk_elements=6_000,
                                   threads=threads)  # fmt: skip
        return result, generator.random()

    (one, after_one), (two, after_two) = run(1), run(2)
    assert (one.draws > 500).any() and (one.draws == 500).any()  # both rounds happened
    for name in ("ratio", "lower", "upper", "numerator", "denominator", "ess", "draws"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name), err_msg=name)
    assert after_one == after_two
