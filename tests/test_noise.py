"""Exact noise samplers (das.privacy.noise): goodness of fit, edge cases, overflow paths."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from das.privacy import noise
from das.privacy.distributions import DiscreteGaussian, NoiseDistribution, TwoSidedGeometric
from das.privacy.noise import (
    discrete_gaussian,
    effective_scale,
    effective_sigma_squared,
    geometric,
    seeded_rng,
)
from das.privacy.rng import SeededRandomSource

N_FIT = 200_000


def chi2_pvalue(samples: np.ndarray, dist: NoiseDistribution, cells: int = 200) -> float:
    """χ² goodness of fit with cells at quantiles of ``dist``, edge cells pooled so every
    expected count is >= 5. Cell i holds edges[i-1] < X <= edges[i]."""
    n = samples.size
    probs = np.linspace(0.0, 1.0, min(cells, n // 50) + 1)[1:-1]
    edges = np.unique(dist.icdf(probs))
    cdf = np.concatenate([[0.0], dist.cdf(edges), [1.0]])
    expected = list(np.diff(cdf) * n)
    observed = list(np.bincount(np.searchsorted(edges, samples), minlength=edges.size + 1))
    for take_first in (True, False):  # pool thin edge cells into their neighbour
        while len(expected) > 2 and expected[0 if take_first else -1] < 5:
            i, j = (0, 1) if take_first else (-1, -2)
            expected[j] += expected.pop(i)
            observed[j] += observed.pop(i)
    exp = np.array(expected)
    return float(stats.chisquare(observed, exp * (sum(observed) / exp.sum())).pvalue)


def fourth_moment_se(dist: NoiseDistribution, n: int) -> float:
    """Standard error of the sample variance, sqrt((μ4 - σ⁴)/n), from the exact pmf."""
    half = int(dist.icdf(1 - 1e-16)) + 2
    k = np.arange(-half, half + 1, dtype=np.float64)
    pmf = np.asarray(dist.pmf(k))
    mu4 = float((k**4 * pmf).sum())
    return math.sqrt((mu4 - dist.variance**2) / n)


# --- goodness of fit ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "sigma_squared", ["0.5", "2.3", "31.4", "625", "92402", Fraction(9000, 2862)]
)
def test_discrete_gaussian_fits_exact_pmf(sigma_squared: object) -> None:
    draws = discrete_gaussian(sigma_squared, N_FIT, rng=seeded_rng(2020))
    assert chi2_pvalue(draws, DiscreteGaussian(sigma_squared)) > 1e-4


@pytest.mark.parametrize("scale", ["0.5", "1", "2.3", "31.4", "300", Fraction(9000, 159)])
def test_geometric_fits_exact_pmf(scale: object) -> None:
    draws = geometric(scale, N_FIT, rng=seeded_rng(2021))
    assert chi2_pvalue(draws, TwoSidedGeometric(scale)) > 1e-4


@pytest.mark.parametrize("sigma_squared", ["2.3", "31.4", "625", "92402"])
def test_fit_test_detects_a_wrong_scale(sigma_squared: str) -> None:
    """The χ² test has power: the same draws against the pmf at 1.1·σ² fail clearly."""
    s2 = Fraction(sigma_squared)
    draws = discrete_gaussian(s2, N_FIT, rng=seeded_rng(7))
    assert chi2_pvalue(draws, DiscreteGaussian(s2)) > 1e-4
    assert chi2_pvalue(draws, DiscreteGaussian(s2 * Fraction(11, 10))) < 1e-8
    g = geometric(s2, N_FIT, rng=seeded_rng(8))
    assert chi2_pvalue(g, TwoSidedGeometric(s2)) > 1e-4
    assert chi2_pvalue(g, TwoSidedGeometric(s2 * Fraction(11, 10))) < 1e-8


@pytest.mark.parametrize(
    ("sampler", "dist"),
    [
        (lambda n, r: discrete_gaussian("0.5", n, r), DiscreteGaussian("0.5")),
        (lambda n, r: discrete_gaussian(625, n, r), DiscreteGaussian(625)),
        (lambda n, r: geometric("2.3", n, r), TwoSidedGeometric("2.3")),
        (lambda n, r: geometric(300, n, r), TwoSidedGeometric(300)),
    ],
)
def test_sample_variance_matches_exact_variance(sampler, dist: NoiseDistribution) -> None:
    n = 400_000
    draws = sampler(n, seeded_rng(11)).astype(np.float64)
    se = fourth_moment_se(dist, n)
    assert abs(draws.var() - dist.variance) < 5 * se
    assert abs(draws.mean()) < 5 * dist.std / math.sqrt(n)


@pytest.mark.parametrize(
    "draws",
    [
        pytest.param(lambda: discrete_gaussian("31.4", N_FIT, seeded_rng(3)), id="gauss"),
        pytest.param(lambda: geometric("2.3", N_FIT, seeded_rng(4)), id="geometric"),
    ],
)
def test_symmetry(draws) -> None:
    x = draws()
    pos, neg = int((x > 0).sum()), int((x < 0).sum())
    assert stats.binomtest(pos, pos + neg, 0.5).pvalue > 1e-4
    # P(k) = P(-k) for every k: Σ (c_k - c_-k)² / (c_k + c_-k) ~ χ²(#pairs)
    top = int(np.abs(x).max())
    counts = np.bincount(x + top, minlength=2 * top + 1)
    plus, minus = counts[top + 1 :], counts[:top][::-1]
    both = plus + minus
    use = both >= 10
    statistic = float((((plus - minus) ** 2)[use] / both[use]).sum())
    assert stats.chi2.sf(statistic, int(use.sum())) > 1e-4


# --- basic contract ----------------------------------------------------------------------
@pytest.mark.parametrize("zero", [0, "0", Fraction(0), 0.0])
def test_zero_parameter_means_no_noise(zero: object) -> None:
    for sampler in (discrete_gaussian, geometric):
        out = sampler(zero, (3, 4), rng=seeded_rng(1))
        assert out.dtype == np.int64 and out.shape == (3, 4) and not out.any()
    assert effective_sigma_squared(0) == 0 and effective_scale(0) == 0


@pytest.mark.parametrize(
    ("size", "shape"), [(5, (5,)), ((2, 3), (2, 3)), (0, (0,)), ((0, 4), (0, 4)), ((), ())]
)
def test_dtype_and_shape(size, shape) -> None:
    for sampler in (discrete_gaussian, geometric):
        out = sampler(4, size, rng=seeded_rng(2))
        assert out.dtype == np.int64 and out.shape == shape
    assert discrete_gaussian(4, np.int64(3), rng=seeded_rng(2)).shape == (3,)


def test_seeded_draws_are_reproducible() -> None:
    a = discrete_gaussian("31.4", 1000, rng=seeded_rng(99))
    b = discrete_gaussian("31.4", 1000, rng=seeded_rng(99))
    c = discrete_gaussian("31.4", 1000, rng=seeded_rng(100))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(geometric(3, 50, seeded_rng(1)), geometric(3, 50, seeded_rng(1)))


def test_secure_default_path() -> None:
    a = discrete_gaussian(Fraction(9, 2) / Fraction("0.008"), 50_000)  # σ² = 562.5
    b = discrete_gaussian(Fraction(9, 2) / Fraction("0.008"), 50_000)
    assert a.dtype == np.int64 and not np.array_equal(a, b)
    assert abs(a.var() / 562.5 - 1) < 0.05
    g = geometric(Fraction(9) / Fraction("0.5"), 50_000)  # scale 18
    assert abs(g.var() / TwoSidedGeometric(18).variance - 1) < 0.06
    assert chi2_pvalue(a, DiscreteGaussian("562.5")) > 1e-6


def test_float_parameters_are_read_exactly() -> None:
    """31.4 from JSON is 157/5: the float path gives the same stream as the exact one."""
    np.testing.assert_array_equal(
        discrete_gaussian(31.4, 500, seeded_rng(5)),
        discrete_gaussian(Fraction(157, 5), 500, seeded_rng(5)),
    )


@pytest.mark.parametrize("bad", [-1, "-0.5", float("nan"), float("inf"), "Infinity"])
def test_invalid_parameters(bad: object) -> None:
    with pytest.raises(ValueError):
        discrete_gaussian(bad, 3, rng=seeded_rng(1))
    with pytest.raises(ValueError):
        geometric(bad, 3, rng=seeded_rng(1))


def test_invalid_size_and_rng() -> None:
    for size in (-1, (2, -1)):
        with pytest.raises(ValueError):
            discrete_gaussian(1, size, rng=seeded_rng(1))
    for size in (2.5, "3", [2, 3], True):
        with pytest.raises(TypeError):
            geometric(1, size, rng=seeded_rng(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RandomSource"):
        discrete_gaussian(1, 3, rng=np.random.default_rng(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        discrete_gaussian([1, 2], 3, rng=seeded_rng(1))


# --- extreme parameters and the exact-integer fallbacks ----------------------------------
def test_huge_sigma_squared_1e10() -> None:
    """σ² = 10^10 (σ = 10^5): CKS's denominator 2pqt² ≈ 2·10^20 would overflow; ours is 2p."""
    plan = noise._gauss_plan(Fraction(10**10))
    assert plan.vectorized and plan.sigma_squared == 10**10
    assert plan.q * plan.x_safe**2 <= 2**61 and 2 * plan.p < 2**62
    draws = discrete_gaussian(10**10, 100_000, rng=seeded_rng(12))
    assert chi2_pvalue(draws, DiscreteGaussian(10**10)) > 1e-4


def test_large_denominator_is_rounded_up_and_fits() -> None:
    s2 = Fraction(10**30 + 1, 10**28)  # 100.0000...01 with a 10^28 denominator
    eff = effective_sigma_squared(s2)
    assert eff >= s2 and eff - s2 < Fraction(1, 10**9)
    assert eff.denominator <= noise._Q_MAX and eff.numerator <= noise._P_MAX + 1
    draws = discrete_gaussian(s2, N_FIT, rng=seeded_rng(13))
    assert chi2_pvalue(draws, DiscreteGaussian(eff)) > 1e-4
    sc = Fraction(10**30 + 7, 10**28)
    eff_sc = effective_scale(sc)
    assert sc <= eff_sc < sc * (1 + Fraction(1, 10**9)) and eff_sc.numerator <= noise._T_MAX
    g = geometric(sc, N_FIT, rng=seeded_rng(14))
    assert chi2_pvalue(g, TwoSidedGeometric(eff_sc)) > 1e-4
    assert effective_sigma_squared(Fraction(9000, 2862)) == Fraction(9000, 2862)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**40), st.integers(1, 10**40))
def test_gauss_plan_bounds_hold(num: int, den: int) -> None:
    """Every vectorized plan satisfies the bounds the overflow proofs rely on."""
    s2 = Fraction(num, den)
    plan = noise._gauss_plan(s2)
    eff = plan.sigma_squared
    assert eff >= s2 and plan.p == eff.numerator and plan.q == eff.denominator
    assert (plan.t - 1) ** 2 <= eff < plan.t**2  # t = floor(σ) + 1
    assert plan.m_num >= 0 and plan.q * plan.t**2 - 2 * plan.p + plan.m_num >= 0
    if plan.vectorized:
        assert plan.q <= noise._Q_MAX and 2 * plan.p <= 2**51 + 2
        assert plan.q * plan.x_safe**2 <= 2**61 and plan.t * plan.v_cap <= plan.x_safe
        if eff >= 1:
            assert eff - s2 <= s2 / 2**30  # rounding is negligible
            assert plan.x_safe >= 50 * math.sqrt(eff) - 1  # fallback lanes are rare


def test_huge_values_take_the_exact_integer_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates beyond x_safe (|Y| far out, normally probability < e^-25) are finished in
    Python integers; force many of them and check the law is unchanged."""
    monkeypatch.setattr(noise, "_X_SAFE_MAX", 10)
    draws = discrete_gaussian("31.4", 60_000, rng=seeded_rng(14))
    assert np.abs(draws).max() > 10
    assert chi2_pvalue(draws, DiscreteGaussian("31.4")) > 1e-4
    monkeypatch.setattr(noise, "_V_CAP_MAX", 1)
    g = geometric("3.5", 60_000, rng=seeded_rng(15))
    assert chi2_pvalue(g, TwoSidedGeometric("3.5")) > 1e-4


def test_parameters_beyond_64_bits_use_the_reference_algorithm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """σ² > 2^49 (or scale > 2^40) run CKS in Python integers; forced here at small scales."""
    monkeypatch.setattr(noise, "_P_MAX", 100)
    assert not noise._gauss_plan(Fraction(625)).vectorized
    draws = discrete_gaussian(625, 4000, rng=seeded_rng(16))
    assert chi2_pvalue(draws, DiscreteGaussian(625), cells=40) > 1e-4
    monkeypatch.setattr(noise, "_T_MAX", 10)
    eff = effective_scale("31.4")
    assert eff == 32 and not noise._geom_plan(Fraction("31.4")).vectorized
    g = geometric("31.4", 4000, rng=seeded_rng(17))
    assert chi2_pvalue(g, TwoSidedGeometric(eff), cells=40) > 1e-4


def test_astronomical_sigma_squared_runs() -> None:
    s2 = 2**60
    draws = discrete_gaussian(s2, 300, rng=seeded_rng(18))
    assert draws.dtype == np.int64 and np.unique(draws).size == 300
    assert 0.7 < draws.std() / math.sqrt(s2) < 1.3


# --- building blocks ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("num", "den", "lanes"),
    [
        (0, 7, 100_000),
        (3, 7, 400_000),
        (6, 7, 400_000),
        (1000, 184_804, 400_000),
        (184_803, 184_804, 400_000),
        (1_234_567, 3_000_000, 400_000),
        (2**49 - 5, 2**50, 400_000),
        (2**61, 2**62, 20_000),  # only one step per word: later steps use Python integers
    ],
)
def test_bernoulli_exp_fraction(num: int, den: int, lanes: int) -> None:
    r = np.full(lanes, num, dtype=np.int64)
    hits = noise._bern_exp_frac(seeded_rng(num % 1000 + den % 1000), r, den)
    p = math.exp(-num / den)
    if num == 0:
        assert hits.all()
        return
    assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / lanes)


def test_geometric_e1_runs() -> None:
    v = noise._geom_e1(seeded_rng(19), 1_000_000)
    top = 12
    counts = np.bincount(np.minimum(v, top), minlength=top + 1)
    probs = np.exp(-np.arange(top + 1.0)) * (1 - math.exp(-1))
    probs[-1] = math.exp(-top)  # P(V >= 12)
    assert stats.chisquare(counts, probs * v.size).pvalue > 1e-4


def test_exp_minus_one_table_agrees_with_exact_rule() -> None:
    words = seeded_rng(20).uint32(1_000_000)
    words[:4] = [0, 106, 107, noise._E1_LIMIT]  # W = 0 (K > 11), first W = 1, invalid
    table = noise._E1_TABLE[words >> 16]
    exact = noise._e1_outcome_exact(words)
    known = table != noise._AMBIGUOUS
    np.testing.assert_array_equal(table[known], exact[known])
    assert list(exact[:4]) == [noise._AMBIGUOUS, noise._AMBIGUOUS, 1, noise._INVALID]
    assert known.mean() > 0.999
    # exactly e^-1 of the valid mass is "success", up to the 1/11! continuation
    bounds = noise._E1_MULT * noise._E1_T
    success = sum(int(bounds[k - 2] - bounds[k - 1]) for k in (3, 5, 7, 9, 11))
    assert abs(success / noise._E1_LIMIT - math.exp(-1)) < 1 / math.factorial(11)


def test_stage_plans_respect_64_bits() -> None:
    for den in (1, 2, 7, 314, 184_804, 3_000_000, 2**40, 2**50):
        for k0 in (0, 3, 9):
            stage = noise._stage(den, k0)
            assert stage.j >= 1
            span = den**stage.j * math.prod(range(k0 + 1, k0 + stage.j + 1))
            assert stage.limit == stage.mult * span <= 2**64
            assert all(a * (den**i) <= stage.limit for i, a in enumerate(stage.scaled, 1))
    assert noise._stage(2**62, 1).j == 0  # the Python-integer fallback


def test_rng_is_seeded_source_type() -> None:
    assert isinstance(seeded_rng(1), SeededRandomSource)
    assert noise.seeded_rng is seeded_rng
