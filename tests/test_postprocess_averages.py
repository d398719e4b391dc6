"""Average (ratio) posteriors: importance sampler vs quadrature, constraints, coverage, ESS."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from das.postprocess.averages import (
    MIN_VARIANCE,
    RatioComponent,
    _log_diff,
    _log_diff_ndtr,
    _ratio_draws,
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


def _reference_truncated(mean, sd, low, high, u):
    """The truncated draw as first written: both ends evaluated, whatever they are."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = (low - mean) / sd
        b = np.maximum(a, (high - mean) / sd)
        flip = a > 0
        lo, hi, v = np.where(flip, -b, a), np.where(flip, -a, b), np.where(flip, 1.0 - u, u)
        log_lo = special.log_ndtr(lo)
        log_mass = _log_diff(special.log_ndtr(hi), log_lo, lo < hi)
        log_p = np.logaddexp(log_lo, np.log(v) + log_mass)
        z = np.clip(special.ndtri_exp(np.minimum(log_p, 0.0)), lo, hi)
        x = mean + sd * np.where(flip, -z, z)
    return np.clip(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0), low, np.maximum(high, low))


def _reference_ratio_draws(num_y, num_v, den_y, den_v, c, tau, u):
    """The sampler as first written: every importance weight's mass evaluated on its own."""
    num_y = np.asarray(num_y, np.float64)
    num_v = np.maximum(np.asarray(num_v, np.float64), MIN_VARIANCE)
    shape = (num_y.shape[0], u.shape[2])
    big_y, big_sd = num_y.sum(axis=1)[:, None], np.sqrt(num_v.sum(axis=1))[:, None]
    yd = np.asarray(den_y, np.float64)[:, None]
    sd_d = np.sqrt(np.maximum(np.asarray(den_v, np.float64), MIN_VARIANCE))[:, None]
    u_a, u_b = np.ascontiguousarray(u[:2, :, 0::2]), np.ascontiguousarray(u[:2, :, 1::2])
    half_a, half_b = u_a.shape[1:], u_b.shape[1:]
    t_a = _reference_truncated(big_y, big_sd, np.zeros(half_a), np.full(half_a, np.inf), u_a[0])
    d_a = _reference_truncated(yd, sd_d, np.maximum(1.0, t_a / tau), t_a / c, u_a[1])
    d_b = _reference_truncated(yd, sd_d, np.ones(half_b), np.full(half_b, np.inf), u_b[0])
    t_b = _reference_truncated(big_y, big_sd, c * d_b, tau * d_b, u_b[1])
    total, den = np.empty(shape), np.empty(shape)
    total[:, 0::2], total[:, 1::2] = t_a, t_b
    den[:, 0::2], den[:, 1::2] = d_a, d_b
    log_m_a = _log_diff_ndtr((np.maximum(1.0, total / tau) - yd) / sd_d, (total / c - yd) / sd_d)
    log_m_b = _log_diff_ndtr((c * den - big_y) / big_sd, (tau * den - big_y) / big_sd)
    log_z_t, log_z_d = special.log_ndtr(big_y / big_sd), special.log_ndtr((yd - 1.0) / sd_d)
    with np.errstate(over="ignore"):
        log_q = np.logaddexp(-log_z_t - log_m_a, -log_z_d - log_m_b) + np.log(0.5)
    feasible = (den >= 1.0) & (total >= c * den * (1 - 1e-12)) & (total <= tau * den * (1 + 1e-12))
    if num_y.shape[1] == 1:
        parts, log_g = total[:, None, :], np.zeros(shape)
    else:
        v1, v2 = num_v[:, :1], num_v[:, 1:]
        mu = (v2 * num_y[:, :1] + v1 * (total - num_y[:, 1:])) / (v1 + v2)
        s = np.sqrt(v1 * v2 / (v1 + v2))
        log_g = _log_diff_ndtr(-mu / s, (total - mu) / s)
        first = _reference_truncated(mu, s, np.zeros(shape), total, u[2])
        parts = np.stack([first, total - first], axis=1)
    log_weight = np.where(feasible & np.isfinite(log_q), log_g - log_q, -np.inf)
    return parts, den, log_weight


@pytest.mark.parametrize("n_parts", [1, 2])
def test_sampler_reuses_masses_bit_for_bit(n_parts: int) -> None:
    """The sampler reuses each truncation's interval mass in the importance weights and skips
    the infinite end of a one-sided interval: the same draws and weights, bit for bit, as the
    sampler that evaluates every mass on its own (so a seeded release is unchanged); on usual,
    awkward (negative, contradicting, zero-variance) and precise inputs."""
    rng = np.random.default_rng(39)
    usual = rng.normal(30, 12, (60, n_parts)), rng.uniform(1, 200, (60, n_parts))
    awkward = np.array([[-20.0, -5.0], [3.0, 2.0], [60.0, 90.0], [0.0, 0.0], [400.0, 600.0]])
    num_y = np.concatenate([usual[0], awkward[:, :n_parts], [[7.0] * n_parts]])
    num_v = np.concatenate([usual[1], np.full((5, n_parts), 100.0), [[0.0] * n_parts]])
    den_y = np.concatenate([rng.normal(10, 4, 60), [-10.0, 40.0, 20.0, 0.0, 20.0], [3.0]])
    den_v = np.concatenate([rng.uniform(0.5, 8, 60), np.full(5, 4.0), [0.0]])
    for c, tau in [(1.0, 10.0), (2.0, 5.0)]:
        u = rng.random((3, num_y.shape[0], 801))  # an odd number of draws too
        drawn = _ratio_draws(num_y, num_v, den_y, den_v, c, tau, u)
        parts, den, log_weight = _reference_ratio_draws(num_y, num_v, den_y, den_v, c, tau, u)
        assert np.isfinite(log_weight).mean() > 0.5  # mostly feasible draws were compared
        for name, new, old in [("parts", drawn.parts, parts), ("den", drawn.denominator, den),
                               ("log_weight", drawn.log_weight, log_weight)]:  # fmt: skip
            assert new.tobytes() == old.tobytes(), name
