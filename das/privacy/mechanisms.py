"""Noise mechanisms that know their own privacy (STYLE.md, after Tumult Core).

A mechanism is built from its noise parameter and answers ``privacy_function(sensitivity)``
with the exact loss; the accountant asks it, so nobody writes a loss by hand next to a draw.

* :class:`DiscreteGaussianMechanism` — zCDP. Adding N_ℤ(σ²) to a query of L2 sensitivity Δ is
  ρ-zCDP with ``ρ = Δ²/(2σ²)`` (Canonne–Kamath–Steinke Thm. 14); conversely ``σ² = Δ²/(2ρ)``.
* :class:`GeometricMechanism` — pure DP. Adding the two-sided geometric L_ℤ(b) to a query of L1
  sensitivity Δ is ε-DP with ``ε = Δ/b``; conversely ``b = Δ/ε``.

Everything privacy-relevant is an exact ``Fraction``. The sampler may round a noise parameter
with a huge denominator *up* to fit 64-bit arithmetic (``noise.effective_sigma_squared`` /
``effective_scale``): more noise, so the budget charged stays an upper bound on the loss.
A zero noise parameter means "no noise"
(privacy loss ∞); it is what an infinite budget (JSON ``Infinity`` in a config, used by golden
tests) buys. A budget of exactly 0 is refused: a zero-budget query is not run at all.
A mechanism built from a finite budget (``from_budget``, :func:`mechanism_for`) is refused when
the budget exceeds what a whole pass may spend, or its noise lies beyond what the exact
samplers draw in reasonable time (:mod:`das.privacy.limits`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, NamedTuple

import numpy as np

from das.privacy import noise
from das.privacy.distributions import DiscreteGaussian, TwoSidedGeometric
from das.privacy.exact import to_fraction
from das.privacy.limits import BudgetLimitError, noise_problem, query_ceiling_problem

Budget = Fraction | float  # an exact Fraction, or math.inf meaning "no noise"

ZCDP = "zcdp"
PUREDP = "puredp"
DEFINITIONS = (ZCDP, PUREDP)


class NoiseParameter(NamedTuple):
    """The noise parameter of a mechanism, named as reports print it."""

    name: str
    value: Fraction


def exact(value: Any, what: str) -> Fraction:
    """A finite exact value (ints, Fractions, decimal strings; floats by their shortest repr)."""
    return to_fraction(value, name=what)


def budget_value(value: Any, what: str = "budget") -> Budget:
    """A budget: an exact Fraction >= 0, or ``math.inf`` (no noise)."""
    return to_fraction(value, name=what, nonnegative=True, allow_infinite=True)


def _sensitivity(value: Any) -> Fraction:
    parsed = exact(value, "sensitivity")
    if parsed < 0:
        raise ValueError(f"Invalid sensitivity: {value} (need >= 0)")
    return parsed


def _budget_for_noise(
    definition: str, budget: Any, sensitivity: Any, what: str
) -> tuple[Budget, Fraction]:
    """Validate the inputs of ``from_budget``: budget > 0 (or ∞) and sensitivity > 0, and a
    finite budget no larger than a whole pass may spend (:mod:`das.privacy.limits`)."""
    parsed = budget_value(budget)
    delta = _sensitivity(sensitivity)
    if parsed == 0:
        raise ValueError("Invalid budget: 0 (a zero-budget query is not run; drop it instead)")
    if delta == 0:
        raise ValueError("Invalid sensitivity: 0 (a query that ignores its input needs no noise)")
    problem = query_ceiling_problem(definition, parsed, what)
    if problem is not None:
        raise BudgetLimitError(problem)
    return parsed, delta


def _within_sampler(definition: str, budget: Budget, noise_parameter: Fraction, what: str) -> None:
    """Refuse noise the exact samplers cannot draw in reasonable time (whatever Δ: the config
    floor keeps it far away, this is the exact check for the query's own sensitivity)."""
    problem = noise_problem(definition, budget, noise_parameter, what)
    if problem is not None:
        raise BudgetLimitError(problem)


def fraction_text(value: Budget) -> str:
    """``"n/d"`` (or ``"n"``) for a Fraction, ``"Infinity"`` for ∞: exact, and JSON-safe."""
    if isinstance(value, float):
        if math.isinf(value) and value > 0:
            return "Infinity"
        raise TypeError(f"Not exact: {value!r}")
    return str(Fraction(value))


def parse_fraction_text(text: str) -> Budget:
    """Inverse of :func:`fraction_text`."""
    if text == "Infinity":
        return math.inf
    return Fraction(text)


@dataclass(frozen=True)
class DiscreteGaussianMechanism:
    """Adds discrete Gaussian noise N_ℤ(σ²) to each cell; satisfies Δ²/(2σ²)-zCDP.

    ``sigma_squared`` is the exact σ² of the pmf ∝ exp(−x²/(2σ²)) on ℤ; 0 means no noise.
    """

    sigma_squared: Fraction
    definition: ClassVar[str] = ZCDP
    kind: ClassVar[str] = "discrete_gaussian"

    def __post_init__(self) -> None:
        value = exact(self.sigma_squared, "sigma_squared")
        if value < 0:
            raise ValueError(f"Invalid sigma_squared: {value} (need >= 0)")
        object.__setattr__(self, "sigma_squared", value)

    @classmethod
    def from_budget(
        cls, budget: Any, sensitivity: Any, what: str = "budget"
    ) -> DiscreteGaussianMechanism:
        """σ² = Δ²/(2ρ) for budget ρ and L2 sensitivity Δ (∞ budget: no noise).

        Raises :class:`~das.privacy.limits.BudgetLimitError` (a ValueError, message led by
        ``what``) for ρ above a pass's ceiling or σ² beyond the samplers' fast exact range.
        """
        rho, delta = _budget_for_noise(cls.definition, budget, sensitivity, what)
        if isinstance(rho, float):
            return cls(Fraction(0))
        sigma_squared = delta * delta / (2 * rho)
        _within_sampler(cls.definition, rho, sigma_squared, what)
        return cls(sigma_squared)

    @property
    def adds_noise(self) -> bool:
        return self.sigma_squared > 0

    def privacy_function(self, sensitivity: Any) -> Budget:
        """ρ = Δ²/(2σ²) for L2 sensitivity Δ; ∞ without noise (0 if Δ = 0)."""
        delta = _sensitivity(sensitivity)
        if delta == 0:
            return Fraction(0)
        if not self.adds_noise:
            return math.inf
        return delta * delta / (2 * self.sigma_squared)

    @property
    def noise_parameter(self) -> NoiseParameter:
        return NoiseParameter("sigma_squared", self.sigma_squared)

    @property
    def distribution(self) -> DiscreteGaussian:
        """The noise distribution (pmf, cdf, icdf, …); a point mass at 0 without noise."""
        return DiscreteGaussian(self.sigma_squared)

    @property
    def variance(self) -> float:
        """Variance of one draw, Σ k² P(k): just below σ² (equal in double precision for σ ≳ 2)."""
        return self.distribution.variance

    def sample(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """int64 noise, exact sampler of :mod:`das.privacy.noise` (rng None = OS CSPRNG)."""
        if not self.adds_noise:
            return np.zeros(size, dtype=np.int64)
        return noise.discrete_gaussian(self.sigma_squared, size, rng=rng)

    def sample_blocks(
        self, size: int, rng: Any = None, block: int = noise.DEFAULT_BLOCK
    ) -> Iterator[np.ndarray]:
        """:meth:`sample` streamed in ``block``-sized int64 arrays: the same draws, in order."""
        if not self.adds_noise:
            return noise.zero_blocks(size, block)
        return noise.discrete_gaussian_blocks(self.sigma_squared, size, rng=rng, block=block)

    def to_dict(self) -> dict[str, str]:
        return {"mechanism": self.kind, "sigma_squared": fraction_text(self.sigma_squared)}


@dataclass(frozen=True)
class GeometricMechanism:
    """Adds two-sided geometric noise L_ℤ(b), pmf ∝ exp(−|x|/b), to each cell; Δ/b-DP.

    ``scale`` is the exact b; 0 means no noise.
    """

    scale: Fraction
    definition: ClassVar[str] = PUREDP
    kind: ClassVar[str] = "geometric"

    def __post_init__(self) -> None:
        value = exact(self.scale, "scale")
        if value < 0:
            raise ValueError(f"Invalid scale: {value} (need >= 0)")
        object.__setattr__(self, "scale", value)

    @classmethod
    def from_budget(cls, budget: Any, sensitivity: Any, what: str = "budget") -> GeometricMechanism:
        """b = Δ/ε for budget ε and L1 sensitivity Δ (∞ budget: no noise).

        Raises :class:`~das.privacy.limits.BudgetLimitError` (a ValueError, message led by
        ``what``) for ε above a pass's ceiling or a scale beyond the samplers' fast exact range.
        """
        epsilon, delta = _budget_for_noise(cls.definition, budget, sensitivity, what)
        if isinstance(epsilon, float):
            return cls(Fraction(0))
        scale = delta / epsilon
        _within_sampler(cls.definition, epsilon, scale, what)
        return cls(scale)

    @property
    def adds_noise(self) -> bool:
        return self.scale > 0

    def privacy_function(self, sensitivity: Any) -> Budget:
        """ε = Δ/b for L1 sensitivity Δ; ∞ without noise (0 if Δ = 0)."""
        delta = _sensitivity(sensitivity)
        if delta == 0:
            return Fraction(0)
        if not self.adds_noise:
            return math.inf
        return delta / self.scale

    @property
    def noise_parameter(self) -> NoiseParameter:
        return NoiseParameter("scale", self.scale)

    @property
    def distribution(self) -> TwoSidedGeometric:
        """The noise distribution (pmf, cdf, icdf, …); a point mass at 0 without noise."""
        return TwoSidedGeometric(self.scale)

    @property
    def variance(self) -> float:
        """Variance of one draw, 2a/(1−a)² with a = e^{−1/b} (0 without noise)."""
        return self.distribution.variance

    def sample(self, size: int | tuple[int, ...], rng: Any = None) -> np.ndarray:
        """int64 noise, exact sampler of :mod:`das.privacy.noise` (rng None = OS CSPRNG)."""
        if not self.adds_noise:
            return np.zeros(size, dtype=np.int64)
        return noise.geometric(self.scale, size, rng=rng)

    def sample_blocks(
        self, size: int, rng: Any = None, block: int = noise.DEFAULT_BLOCK
    ) -> Iterator[np.ndarray]:
        """:meth:`sample` streamed in ``block``-sized int64 arrays: the same draws, in order."""
        if not self.adds_noise:
            return noise.zero_blocks(size, block)
        return noise.geometric_blocks(self.scale, size, rng=rng, block=block)

    def to_dict(self) -> dict[str, str]:
        return {"mechanism": self.kind, "scale": fraction_text(self.scale)}


Mechanism = DiscreteGaussianMechanism | GeometricMechanism


def release_draw(mechanism: Mechanism, size: int, rng: Any = None) -> np.ndarray:
    """``size`` int64 noise values of ``mechanism``, drawn the one way a release draws them.

    Every release draw goes through ``mechanism.sample_blocks``: streamed to disk block by block
    (``NoiseStore.noise_file_for``, ``draw_noise_file``) or, for a vector held in memory
    (``NoiseStore.noise_for``, ``draw_noise``), joined here. The privacy audit draws with this
    function too, so it exercises the very sampler a release uses (``sample`` gives the same
    draws in one call, for library callers; no release path uses it).
    """
    out = np.empty(size, dtype=np.int64)
    filled = 0
    for block in mechanism.sample_blocks(size, rng):
        data = np.ascontiguousarray(block, dtype=np.int64).reshape(-1)
        if filled + data.size > size:
            raise ValueError(f"the block sampler gave more than the {size} values asked for")
        out[filled : filled + data.size] = data
        filled += data.size
    if filled != size:
        raise ValueError(f"the block sampler gave {filled} values, not the {size} asked for")
    return out


def mechanism_for(
    definition: str, budget: Any, sensitivity: Any, what: str = "budget"
) -> Mechanism:
    """The mechanism that spends exactly ``budget`` on a query of the given sensitivity.

    ``definition`` is ``"zcdp"`` (discrete Gaussian, budget ρ, L2 sensitivity) or ``"puredp"``
    (two-sided geometric, budget ε, L1 sensitivity). ``what`` names the query in the message of
    a :class:`~das.privacy.limits.BudgetLimitError` (budget or noise outside the limits).
    """
    key = str(definition).lower()
    if key == ZCDP:
        return DiscreteGaussianMechanism.from_budget(budget, sensitivity, what)
    if key == PUREDP:
        return GeometricMechanism.from_budget(budget, sensitivity, what)
    raise ValueError(f"Invalid privacy definition: {definition!r} (use 'zcdp' or 'puredp')")


def mechanism_from_dict(data: dict[str, Any]) -> Mechanism:
    """Inverse of ``Mechanism.to_dict`` (ledger files)."""
    kind = data.get("mechanism")
    if kind == DiscreteGaussianMechanism.kind:
        return DiscreteGaussianMechanism(Fraction(data["sigma_squared"]))
    if kind == GeometricMechanism.kind:
        return GeometricMechanism(Fraction(data["scale"]))
    raise ValueError(f"Unknown mechanism: {kind!r}")
