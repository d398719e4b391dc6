"""Distribution math (das.privacy.distributions) and exact number conversion (exact.py)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.privacy.distributions import (
    DiscreteGaussian,
    TwoSidedGeometric,
    margin_of_error,
    suppression_threshold,
)
from das.privacy.exact import round_up_fraction, to_fraction


def brute_gauss(sigma_squared: float, half_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf by direct normalised summation (extended precision)."""
    k = np.arange(-half_width, half_width + 1)
    w = np.exp(-(k.astype(np.longdouble) ** 2) / (2 * np.longdouble(sigma_squared)))
    return k, w / w.sum()


# --- exact.py -----------------------------------------------------------------------------
class TestToFraction:
    def test_float_is_read_by_its_shortest_repr(self) -> None:
        assert to_fraction(0.159) == Fraction(159, 1000)
        assert to_fraction(np.float64(0.543)) == Fraction(543, 1000)
        assert to_fraction(np.float32(0.1)) == Fraction(1, 10)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (3, Fraction(3)),
            (np.int64(7), Fraction(7)),
            ("0.159", Fraction(159, 1000)),
            ("9/2", Fraction(9, 2)),
            (" 1e-3 ", Fraction(1, 1000)),
            (Decimal("2.5"), Fraction(5, 2)),
            (Fraction(4, 6), Fraction(2, 3)),
        ],
    )
    def test_accepted_inputs(self, value: object, expected: Fraction) -> None:
        assert to_fraction(value) == expected

    @pytest.mark.parametrize("value", [float("inf"), "Infinity", "inf", Decimal("Infinity")])
    def test_infinity_only_when_allowed(self, value: object) -> None:
        with pytest.raises(ValueError, match="finite"):
            to_fraction(value, name="rho")
        assert to_fraction(value, allow_infinite=True) == math.inf

    @pytest.mark.parametrize("value", [float("-inf"), "-Infinity"])
    def test_negative_infinity_always_rejected(self, value: object) -> None:
        with pytest.raises(ValueError):
            to_fraction(value, allow_infinite=True)

    @pytest.mark.parametrize("value", [float("nan"), "nan", Decimal("NaN")])
    def test_nan_rejected(self, value: object) -> None:
        with pytest.raises(ValueError, match="NaN"):
            to_fraction(value, allow_infinite=True)

    def test_sign_checks_name_the_value(self) -> None:
        with pytest.raises(ValueError, match=r"rho must be >= 0"):
            to_fraction("-0.1", name="rho", nonnegative=True)
        with pytest.raises(ValueError, match=r"rho must be > 0"):
            to_fraction(0, name="rho", positive=True)
        assert to_fraction(0, nonnegative=True) == 0

    @pytest.mark.parametrize("value", ["abc", "1/0", ""])
    def test_garbage_strings(self, value: str) -> None:
        with pytest.raises(ValueError, match="cannot read"):
            to_fraction(value, name="budget")

    @pytest.mark.parametrize("value", [True, None, [1], object()])
    def test_wrong_types(self, value: object) -> None:
        with pytest.raises(TypeError):
            to_fraction(value)


class TestRoundUpFraction:
    def test_keeps_small_denominators(self) -> None:
        assert round_up_fraction(Fraction(9000, 2862), 1000) == Fraction(500, 159)

    def test_rounds_up_never_down(self) -> None:
        x = Fraction(314159265358979, 10**14)
        assert round_up_fraction(x, 7) == Fraction(22, 7)  # 22/7 > π > 311/99...
        assert round_up_fraction(x, 1) == 4
        assert round_up_fraction(-x, 1) == -3

    def test_rejects_bad_bound(self) -> None:
        with pytest.raises(ValueError):
            round_up_fraction(Fraction(1, 3), 0)

    @settings(max_examples=300, deadline=None)
    @given(st.integers(-(10**9), 10**9), st.integers(1, 10**9), st.integers(1, 60))
    def test_is_the_smallest_upper_bound(self, num: int, den: int, bound: int) -> None:
        x = Fraction(num, den)
        got = round_up_fraction(x, bound)
        best = min(Fraction(math.ceil(x * q), q) for q in range(1, bound + 1))
        assert got == best
        assert got >= x and got.denominator <= bound


# --- discrete Gaussian --------------------------------------------------------------------
@pytest.mark.parametrize(("rho", "threshold"), [("0.008", 93), ("0.159", 21), ("0.543", 11)])
def test_safetab_p_table_6_suppression_thresholds(rho: str, threshold: int) -> None:
    """SafeTab-P paper eq. (12) / Table 6: σ² = 9/(2(1-γ)ρ), γ = 0.1, p = 0.9999."""
    sigma_squared = Fraction(9) / (2 * (1 - Fraction("0.1")) * Fraction(rho))
    dist = DiscreteGaussian(sigma_squared)
    assert suppression_threshold(dist, 0.9999) == threshold
    assert dist.cdf(threshold) >= 0.9999 > dist.cdf(threshold - 1)


def test_phsafe_moe_check_value() -> None:
    """docs/explanation/architecture.md#phsafe: PH1_num τ=10, ρ=0.002619 → σ≈304, 90% MOE = 500."""
    dist = DiscreteGaussian(Fraction(22**2) / (2 * Fraction("0.002619")))
    assert round(dist.sigma) == 304
    assert margin_of_error(dist, 0.9) == 500


@pytest.mark.parametrize("sigma_squared", ["0.5", "2.3", "31.4", "625"])
def test_gauss_pmf_cdf_match_brute_force(sigma_squared: str) -> None:
    dist = DiscreteGaussian(sigma_squared)
    s2 = float(Fraction(sigma_squared))
    k, pmf = brute_gauss(s2, int(40 * math.sqrt(s2)) + 10)
    np.testing.assert_allclose(dist.pmf(k), pmf.astype(float), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.exp(dist.log_pmf(k)), pmf.astype(float), rtol=1e-12)
    cdf = np.cumsum(pmf)
    central = pmf > 1e-12
    np.testing.assert_allclose(dist.cdf(k)[central], cdf.astype(float)[central], rtol=1e-12)
    sf = np.cumsum(pmf[::-1])[::-1] - pmf  # P(X > k)
    np.testing.assert_allclose(dist.sf(k)[central], sf.astype(float)[central], rtol=1e-11)
    assert dist.pmf(0.5) == 0.0 and dist.log_pmf(1.5) == -np.inf


@pytest.mark.parametrize("sigma_squared", [4_000_000, 10**8])
def test_gauss_large_sigma_tail_matches_brute_force(sigma_squared: int) -> None:
    """σ = 2000 and 10^4 use the Euler–Maclaurin tail: compare with direct sums."""
    dist = DiscreteGaussian(sigma_squared)
    sigma = math.sqrt(sigma_squared)
    k, pmf = brute_gauss(sigma_squared, int(40 * sigma))
    cdf = np.cumsum(pmf)
    points = np.array([-30, -8, -3.7, -1, -0.01, 0.01, 1, 3.7]) * sigma
    idx = np.searchsorted(k, np.floor(points))
    np.testing.assert_allclose(dist.cdf(k[idx]), cdf[idx].astype(float), rtol=1e-12)


@pytest.mark.parametrize("sigma_squared", [10**8, 10**12, 10**20])
def test_gauss_stable_far_out(sigma_squared: int) -> None:
    dist = DiscreteGaussian(sigma_squared)
    sigma = math.sqrt(sigma_squared)
    far = np.array([-(10**30), -(10**18), -100 * sigma, 0, 100 * sigma, 10**18, 10**30])
    for values in (dist.pmf(far), dist.cdf(far), dist.sf(far), dist.log_pmf(far)):
        assert not np.isnan(values).any()
    assert dist.cdf(-(10**30)) == 0.0 and dist.cdf(10**30) == 1.0
    assert dist.sf(10**30) == 0.0 and dist.pmf(10**30) == 0.0
    grid = np.linspace(-40 * sigma, 40 * sigma, 20001).round()
    assert (np.diff(dist.cdf(grid)) >= 0).all()
    assert dist.icdf(0.5) == 0
    np.testing.assert_allclose(dist.std, sigma, rtol=1e-12)


def test_gauss_icdf_is_the_smallest_k() -> None:
    for s2 in ["0.5", "31.4", "92402", "1e10"]:
        dist = DiscreteGaussian(s2)
        p = np.array([1e-300, 1e-12, 1e-4, 0.1, 0.5, 0.5000001, 0.9, 0.9999, 1 - 1e-15])
        k = dist.icdf(p)
        assert k.dtype == np.int64
        assert (dist.cdf(k) >= p).all()
        assert (dist.cdf(k - 1) < p).all()
        assert (np.diff(k) >= 0).all()


@pytest.mark.parametrize("sigma_squared", ["0.5", "1", "2.3", "31.4"])
def test_gauss_variance_is_the_exact_sum(sigma_squared: str) -> None:
    dist = DiscreteGaussian(sigma_squared)
    s2 = float(Fraction(sigma_squared))
    k, pmf = brute_gauss(s2, 400)
    exact = float((k.astype(np.longdouble) ** 2 * pmf).sum())
    assert dist.variance == pytest.approx(exact, rel=1e-13)
    assert dist.variance <= s2
    if s2 < 1:
        assert dist.variance < s2  # visibly below σ² for small σ


def test_gauss_symmetry_and_normalisation() -> None:
    dist = DiscreteGaussian(Fraction(9000, 2862))
    k = np.arange(1, 60)
    np.testing.assert_array_equal(dist.pmf(k), dist.pmf(-k))
    np.testing.assert_allclose(dist.sf(k), dist.cdf(-k - 1), rtol=0)
    assert math.fsum(dist.pmf(np.arange(-100, 101))) == pytest.approx(1.0, abs=1e-15)


# --- two-sided geometric ------------------------------------------------------------------
@pytest.mark.parametrize("scale", ["0.5", "1", "2.3", "56.6", "300"])
def test_geometric_matches_brute_force(scale: str) -> None:
    dist = TwoSidedGeometric(scale)
    b = float(Fraction(scale))
    k = np.arange(-int(60 * b) - 30, int(60 * b) + 31)
    w = np.exp(-np.abs(k).astype(np.longdouble) / np.longdouble(b))
    pmf = w / w.sum()
    np.testing.assert_allclose(dist.pmf(k), pmf.astype(float), rtol=1e-12)
    cdf = np.cumsum(pmf)
    central = pmf > 1e-12
    np.testing.assert_allclose(dist.cdf(k)[central], cdf.astype(float)[central], rtol=1e-12)
    var = float((k.astype(np.longdouble) ** 2 * pmf).sum())
    assert dist.variance == pytest.approx(var, rel=1e-11)
    a = math.exp(-1 / b)
    assert dist.variance == pytest.approx(2 * a / (1 - a) ** 2, rel=1e-12)


def test_geometric_large_scale_stable() -> None:
    dist = TwoSidedGeometric(10**12)
    assert dist.variance == pytest.approx(2e24, rel=1e-9)
    assert not np.isnan(dist.cdf([-(10**20), 0, 10**20])).any()
    assert dist.cdf(-(10**20)) == 0.0 and dist.cdf(10**20) == 1.0
    k = dist.icdf([0.1, 0.5, 0.9])
    assert (dist.cdf(k) >= [0.1, 0.5, 0.9]).all() and (dist.cdf(k - 1) < [0.1, 0.5, 0.9]).all()


def test_geometric_pure_dp_values() -> None:
    """Scale 9/ε: the exact discrete quantities the budget tools report."""
    dist = TwoSidedGeometric(Fraction(9) / Fraction("0.159"))
    t = suppression_threshold(dist, 0.9999)
    assert dist.cdf(t) >= 0.9999 > dist.cdf(t - 1)
    # P(X >= m) = a^m/(1+a): solve for the threshold in closed form
    a = math.exp(-float(Fraction("0.159")) / 9)
    assert t == math.ceil(math.log(1e-4 * (1 + a)) / math.log(a)) - 1
    m = margin_of_error(dist, 0.9)
    assert dist.central_probability(m) >= 0.9 > dist.central_probability(m - 1)


# --- shared behaviour ---------------------------------------------------------------------
@pytest.mark.parametrize("dist", [DiscreteGaussian(0), TwoSidedGeometric("0")])
def test_zero_noise_is_a_point_mass(dist) -> None:
    assert dist.is_point_mass
    np.testing.assert_array_equal(dist.pmf([-1, 0, 1]), [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(dist.cdf([-1, 0, 1]), [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(dist.sf([-1, 0, 1]), [1.0, 0.0, 0.0])
    assert dist.icdf(0.9999) == 0 and dist.variance == 0 and dist.std == 0
    assert margin_of_error(dist, 0.95) == 0 and suppression_threshold(dist, 0.5) == 0


@pytest.mark.parametrize("cls", [DiscreteGaussian, TwoSidedGeometric])
def test_invalid_parameters(cls) -> None:
    for bad in (-1, "-0.5", float("nan"), float("inf")):
        with pytest.raises(ValueError):
            cls(bad)
    dist = cls(4)
    for p in (0, 1, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            dist.icdf(p)
        with pytest.raises(ValueError):
            margin_of_error(dist, p)


def test_margin_of_error_definition() -> None:
    for dist in (DiscreteGaussian("31.4"), DiscreteGaussian(10**9), TwoSidedGeometric(1)):
        for conf in (0.5, 0.9, 0.95, 0.999):
            m = margin_of_error(dist, conf)
            assert dist.central_probability(m) >= conf
            assert m == 0 or dist.central_probability(m - 1) < conf
    assert margin_of_error(TwoSidedGeometric(1), 0.9) == 2  # P(|X|<=2) = 0.927, <=1: 0.802


def test_scalar_and_array_shapes() -> None:
    dist = DiscreteGaussian(2)
    assert np.ndim(dist.pmf(0)) == 0 and np.ndim(dist.cdf(3)) == 0
    assert dist.pmf(np.zeros((2, 3), dtype=int)).shape == (2, 3)
    assert dist.icdf(np.full((4, 1), 0.3)).shape == (4, 1)
    assert DiscreteGaussian("9/2") == DiscreteGaussian(4.5)
    assert hash(TwoSidedGeometric(3)) == hash(TwoSidedGeometric("3"))
