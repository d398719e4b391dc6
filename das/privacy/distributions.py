"""The two noise distributions, described (not sampled): pmf, CDF, inverse CDF, variance.

Floating point is fine here: these functions *describe* the noise (suppression thresholds,
margins of error, statistical tests of the samplers); the samplers themselves are exact
(``das.privacy.noise``).

Discrete Gaussian N_Z(0, σ²) (Canonne, Kamath, Steinke 2020)::

    P(X = k) = exp(-k²/(2σ²)) / Z,   Z = Σ_{j∈Z} exp(-j²/(2σ²))

Two-sided geometric (discrete Laplace) with scale b, a = exp(-1/b)::

    P(X = k) = (1-a)/(1+a) · a^|k|,   Var X = 2a/(1-a)²

Both are symmetric, so every CDF value comes from one lower tail
``L(m) = P(X <= -m) = P(X >= m)`` (m >= 1): ``cdf(k) = L(-k)`` for k < 0 and
``1 - L(k+1)`` for k >= 0, and ``sf(k) = cdf(-k-1)``. Far tails underflow to exactly 0
(never NaN), and every CDF is monotone by construction.

Discrete Gaussian numerics (stable for any σ; checked against brute-force sums):

- Z: for σ > 1 by Poisson summation, Z = √(2π)·σ·(1 + 2Σ_{n>=1} exp(-2π²σ²n²)) (three terms
  are already below double precision); for σ <= 1 by the direct sum.
- L(m), σ <= 1000: exact tail sums of the terms, accumulated in extended precision.
- L(m), σ > 1000: Euler–Maclaurin with f(x) = exp(-x²/(2σ²)), u = m/σ, z = m/(σ√2)::

      Σ_{j>=m} f(j) = f(m)·[σ√(π/2)·erfcx(z) + 1/2 + Σ_{i=1}^{4} B_{2i}/(2i)! σ^{1-2i} He_{2i-1}(u)]

  (He = probabilists' Hermite polynomials, B = Bernoulli numbers); the first omitted term is
  below 1e-16 relative for σ > 1000.
- Variance: Σ k² P(k) by Poisson summation, σ²·Σ_n (1-4π²σ²n²)q_n / Σ_n q_n with
  q_n = exp(-2π²σ²n²) (slightly below σ²; equal to it in double precision once σ >~ 2), and
  the direct sum for σ <= 1.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from fractions import Fraction
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray

from das.privacy.exact import to_fraction

__all__ = [
    "DiscreteGaussian",
    "NoiseDistribution",
    "TwoSidedGeometric",
    "margin_of_error",
    "suppression_threshold",
]

# exp(-x) underflows to 0 in double precision for x > ~745.13; tails are cut where the
# log tail is below -_LOG_TAIL_CUT, so the CDF there is exactly 0 (or 1).
_LOG_TAIL_CUT = 760.0
# Above this σ the Euler–Maclaurin tail is used instead of a table of tail sums.
_TABLE_MAX_SIGMA = 1000.0
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _as_points(k: ArrayLike) -> NDArray[np.float64]:
    """Evaluation points as float64 (integers beyond 2^53 are in the tails anyway)."""
    arr = np.asarray(k)
    if arr.dtype == object or arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    if arr.dtype.kind != "f":
        raise TypeError(f"points must be numbers, got dtype {arr.dtype}")
    if np.isnan(arr).any():
        raise ValueError("points must not be NaN")
    return arr.astype(np.float64, copy=False)


def _scalar_or_array(value: NDArray, like: ArrayLike):
    """Return a numpy scalar for scalar input, the array otherwise."""
    return value[()] if np.ndim(like) == 0 else value


def _check_probabilities(p: ArrayLike, what: str) -> NDArray[np.float64]:
    arr = np.asarray(p, dtype=np.float64)
    if np.isnan(arr).any() or (arr <= 0).any() or (arr >= 1).any():
        raise ValueError(f"{what} must lie strictly between 0 and 1")
    return arr


class NoiseDistribution(ABC):
    """Common machinery of the two symmetric integer noise distributions.

    Subclasses give ``_log_pmf_points`` (log P(X=k) at integer points), ``_lower_tail``
    (L(m) = P(X >= m) for integer m >= 1, as float) and ``_tail_bound`` (an integer B with
    L(B+1) == 0.0 in double precision). ``is_point_mass`` covers the zero-noise case.
    """

    is_point_mass: bool

    # --- implemented by subclasses -------------------------------------------------------
    @abstractmethod
    def _log_pmf_points(self, k: NDArray[np.float64]) -> NDArray[np.float64]:
        """log P(X = k) at integer points."""

    @abstractmethod
    def _lower_tail(self, m: NDArray[np.float64]) -> NDArray[np.float64]:
        """P(X >= m) for integers m >= 1."""

    @abstractmethod
    def _tail_bound(self) -> int:
        """An integer B with P(X >= B + 1) == 0.0 in double precision."""

    @property
    @abstractmethod
    def variance(self) -> float:
        """Exact variance of one draw."""

    # --- shared ---------------------------------------------------------------------------
    @property
    def std(self) -> float:
        """Standard deviation, sqrt(variance)."""
        return math.sqrt(self.variance)

    def log_pmf(self, k: ArrayLike):
        """log P(X = k); -inf at non-integers (and at k != 0 for the point mass)."""
        kf = _as_points(k)
        integral = kf == np.floor(kf)
        if self.is_point_mass:
            out = np.where(kf == 0, 0.0, -np.inf)
        else:
            safe = np.where(integral, kf, 0.0)
            out = np.where(integral, self._log_pmf_points(safe), -np.inf)
        return _scalar_or_array(np.asarray(out, dtype=np.float64), k)

    def pmf(self, k: ArrayLike):
        """P(X = k), computed as exp(log_pmf) so far tails underflow to 0, never NaN."""
        return _scalar_or_array(np.exp(np.asarray(self.log_pmf(k))), k)

    def cdf(self, k: ArrayLike):
        """P(X <= k) (k is floored): L(-k) for k < 0, 1 - L(k+1) for k >= 0."""
        kf = np.floor(_as_points(k))
        if self.is_point_mass:
            return _scalar_or_array((kf >= 0).astype(np.float64), k)
        m = np.where(kf < 0, -kf, kf + 1.0)
        tail = self._lower_tail(m)
        out = np.where(kf < 0, tail, 1.0 - tail)
        return _scalar_or_array(np.asarray(out, dtype=np.float64), k)

    def sf(self, k: ArrayLike):
        """P(X > k) = cdf(-k-1) by symmetry (accurate far in the upper tail)."""
        kf = np.floor(_as_points(k))
        return _scalar_or_array(np.asarray(self.cdf(-kf - 1.0), dtype=np.float64), k)

    def icdf(self, p: ArrayLike):
        """Smallest integer k with cdf(k) >= p, for p in (0, 1); vectorized bisection."""
        parr = _check_probabilities(p, "p")
        if self.is_point_mass:
            return _scalar_or_array(np.zeros(parr.shape, dtype=np.int64), p)
        bound = self._tail_bound()
        # invariant: cdf(lo) < p <= cdf(hi); cdf(-bound-1) == 0 and cdf(bound) == 1 exactly
        lo = np.full(parr.shape, -bound - 1, dtype=np.int64)
        hi = np.full(parr.shape, bound, dtype=np.int64)
        while True:
            gap = hi - lo
            if not (gap > 1).any():
                break
            mid = lo + gap // 2
            ok = np.asarray(self.cdf(mid)) >= parr
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
        return _scalar_or_array(hi, p)

    def central_probability(self, m: ArrayLike):
        """P(|X| <= m) = 1 - 2·L(m+1) for integer m >= 0."""
        mf = np.floor(_as_points(m))
        if (mf < 0).any():
            raise ValueError("m must be >= 0")
        if self.is_point_mass:
            return _scalar_or_array(np.ones(mf.shape), m)
        out = 1.0 - 2.0 * self._lower_tail(mf + 1.0)
        return _scalar_or_array(np.asarray(out, dtype=np.float64), m)


class DiscreteGaussian(NoiseDistribution):
    """Discrete Gaussian N_Z(0, σ²): P(k) ∝ exp(-k²/(2σ²)) on the integers.

    ``sigma_squared`` is anything ``to_fraction`` accepts (e.g. ``Fraction(9, 2) / rho``);
    0 means no noise (point mass at 0).
    """

    def __init__(self, sigma_squared: object) -> None:
        self.sigma_squared: Fraction = to_fraction(
            sigma_squared, name="sigma_squared", nonnegative=True
        )
        self.is_point_mass = self.sigma_squared == 0
        self._s2 = float(self.sigma_squared)
        self.sigma = math.sqrt(self._s2)
        if not self.is_point_mass and self._s2 == 0.0:
            raise ValueError("sigma_squared is too small to describe in double precision")

    def __repr__(self) -> str:
        return f"DiscreteGaussian(sigma_squared={self.sigma_squared})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiscreteGaussian) and other.sigma_squared == self.sigma_squared

    def __hash__(self) -> int:
        return hash(("DiscreteGaussian", self.sigma_squared))

    @cached_property
    def _use_table(self) -> bool:
        return self.sigma <= _TABLE_MAX_SIGMA

    @cached_property
    def _cut(self) -> int:
        """Last index with a non-negligible term: j²/(2σ²) > _LOG_TAIL_CUT beyond it."""
        return math.isqrt(math.ceil(2.0 * self._s2 * _LOG_TAIL_CUT)) + 2

    @cached_property
    def _table(self) -> tuple[NDArray[np.float64], float]:
        """(tail sums T[m] = Σ_{j>=m} exp(-j²/(2σ²)) for m = 0..cut+1, Z) — small σ only."""
        j = np.arange(self._cut + 1, dtype=np.float64)
        terms = np.exp(-(j * j) / (2.0 * self._s2)).astype(np.longdouble)
        tails = np.cumsum(terms[::-1])[::-1]
        z = terms[0] + 2.0 * tails[1] if tails.size > 1 else terms[0]
        out = np.append(tails.astype(np.float64), 0.0)  # T[cut+1] = 0
        return out, float(z)

    @cached_property
    def _log_z(self) -> float:
        """log of the normalising constant Z (Poisson summation for σ > 1)."""
        if self.sigma <= 1.0:
            return math.log(self._table[1])
        q = sum(math.exp(-2.0 * math.pi**2 * self._s2 * n * n) for n in (1, 2, 3))
        return math.log(_SQRT_2PI * self.sigma) + math.log1p(2.0 * q)

    def _log_pmf_points(self, k: NDArray[np.float64]) -> NDArray[np.float64]:
        return -(k * k) / (2.0 * self._s2) - self._log_z

    def _lower_tail(self, m: NDArray[np.float64]) -> NDArray[np.float64]:
        if self._use_table:
            tails, z = self._table
            idx = np.minimum(m, float(tails.size - 1)).astype(np.int64)
            return tails[idx] / z
        return self._lower_tail_em(m)

    def _lower_tail_em(self, m: NDArray[np.float64]) -> NDArray[np.float64]:
        """Euler–Maclaurin tail L(m) (see module docstring); accurate for σ > 1000."""
        s = self.sigma
        m = np.minimum(m, float(self._cut + 1))  # beyond the cut the tail is 0 (set below)
        u = m / s
        u2 = u * u
        he1 = u
        he3 = u * (u2 - 3.0)
        he5 = u * (u2 * (u2 - 10.0) + 15.0)
        he7 = u * (u2 * (u2 * (u2 - 21.0) + 105.0) - 105.0)
        corr = (
            0.5
            + he1 / (12.0 * s)
            - he3 / (720.0 * s**3)
            + he5 / (30240.0 * s**5)
            - he7 / (1209600.0 * s**7)
        )
        from scipy.special import erfcx  # here: scipy.special costs every das process 0.2 s

        z = math.exp(self._log_z)
        ratio = 0.5 * erfcx(m / (s * math.sqrt(2.0))) * (_SQRT_2PI * s) / z + corr / z
        with np.errstate(under="ignore"):
            tail = np.exp(-(m * m) / (2.0 * self._s2)) * ratio
        return np.where(m > self._cut, 0.0, tail)

    def _tail_bound(self) -> int:
        return self._cut + 1

    @property
    def variance(self) -> float:
        """Exact variance Σ k² P(k) (< σ²; see the module docstring for the method)."""
        if self.is_point_mass:
            return 0.0
        if self.sigma <= 1.0:
            j = np.arange(1, self._cut + 1, dtype=np.float64)
            terms = np.exp(-(j * j) / (2.0 * self._s2))
            return float(2.0 * math.fsum(j * j * terms) / self._table[1])
        c = 2.0 * math.pi**2 * self._s2
        terms = [(n * n, math.exp(-c * n * n)) for n in (1, 2, 3)]
        num = 1.0 + 2.0 * sum((1.0 - 2.0 * c * n2) * qn for n2, qn in terms)
        den = 1.0 + 2.0 * sum(qn for _, qn in terms)
        return self._s2 * num / den


class TwoSidedGeometric(NoiseDistribution):
    """Two-sided geometric (discrete Laplace) with P(k) ∝ exp(-|k|/scale).

    ``scale`` is anything ``to_fraction`` accepts (Δ/ε for pure DP); 0 means no noise.
    """

    def __init__(self, scale: object) -> None:
        self.scale: Fraction = to_fraction(scale, name="scale", nonnegative=True)
        self.is_point_mass = self.scale == 0
        self._b = float(self.scale)
        if not self.is_point_mass and self._b == 0.0:
            raise ValueError("scale is too small to describe in double precision")

    def __repr__(self) -> str:
        return f"TwoSidedGeometric(scale={self.scale})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TwoSidedGeometric) and other.scale == self.scale

    def __hash__(self) -> int:
        return hash(("TwoSidedGeometric", self.scale))

    @cached_property
    def _a(self) -> float:
        return math.exp(-1.0 / self._b)

    @cached_property
    def _log_norm(self) -> float:
        """log((1-a)/(1+a)) without cancellation for large scales."""
        return math.log(-math.expm1(-1.0 / self._b)) - math.log1p(self._a)

    def _log_pmf_points(self, k: NDArray[np.float64]) -> NDArray[np.float64]:
        return self._log_norm - np.abs(k) / self._b

    def _lower_tail(self, m: NDArray[np.float64]) -> NDArray[np.float64]:
        """L(m) = a^m / (1+a) for m >= 1."""
        with np.errstate(under="ignore"):
            return np.exp(-m / self._b) / (1.0 + self._a)

    def _tail_bound(self) -> int:
        return math.ceil(_LOG_TAIL_CUT * self._b) + 1

    @property
    def variance(self) -> float:
        """Exact variance 2a/(1-a)² with a = exp(-1/scale)."""
        if self.is_point_mass:
            return 0.0
        return 2.0 * self._a / math.expm1(-1.0 / self._b) ** 2


def suppression_threshold(distribution: NoiseDistribution, p: float) -> int | None:
    """Smallest integer T with CDF(T) >= p: a true zero is released (noisy count > T) with
    probability <= 1 - p. SafeTab-P eq. (12): T = invcdf(σ, p), σ² = 9/(2(1-γ)ρ).

    ``p`` lies in [0, 1) as in the Census's configs; p = 0 means no suppression at all (every
    row is released), and gives None: there is no threshold, not even -∞ in the integers."""
    if p == 0:
        return None
    return int(distribution.icdf(p))


def margin_of_error(distribution: NoiseDistribution, confidence: float) -> int:
    """Exact discrete margin of error: smallest integer m >= 0 with P(|X| <= m) >= confidence.

    (The papers' tables use the continuous approximation z·σ; this is the exact value for
    the integer noise actually added.)
    """
    conf = float(_check_probabilities(confidence, "confidence"))
    if distribution.is_point_mass:
        return 0
    lo, hi = -1, distribution._tail_bound()  # P(|X| <= hi) == 1.0 exactly
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if float(distribution.central_probability(mid)) >= conf:
            hi = mid
        else:
            lo = mid
    return hi
