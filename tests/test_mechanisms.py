"""Mechanisms that know their own privacy: exact noise parameters, losses and sampling."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from das.privacy.distributions import DiscreteGaussian, TwoSidedGeometric
from das.privacy.mechanisms import (
    DiscreteGaussianMechanism,
    GeometricMechanism,
    NoiseParameter,
    mechanism_for,
    mechanism_from_dict,
)
from das.privacy.noise import seeded_rng


def test_discrete_gaussian_noise_from_budget_is_exact() -> None:
    # SafeTab-P: σ² = Δ²/(2ρ) with Δ² = 9; (County, Detailed) stage 2 spends 0.9 × 0.159.
    rho = Fraction("0.159") * Fraction(9, 10)
    mechanism = DiscreteGaussianMechanism.from_budget(rho, 3)
    assert mechanism.sigma_squared == Fraction(9) / (2 * rho) == Fraction(45000, 1431)
    assert mechanism.privacy_function(3) == rho
    assert mechanism.privacy_function(6) == 4 * rho  # quadratic in the L2 sensitivity
    assert mechanism.noise_parameter == NoiseParameter("sigma_squared", Fraction(45000, 1431))
    assert mechanism.definition == "zcdp"


def test_geometric_noise_from_budget_is_exact() -> None:
    mechanism = GeometricMechanism.from_budget(Fraction("2.134"), 9)
    assert mechanism.scale == Fraction(9) / Fraction("2.134")
    assert mechanism.privacy_function(9) == Fraction("2.134")
    assert mechanism.privacy_function(18) == 2 * Fraction("2.134")  # linear in L1
    assert mechanism.noise_parameter.name == "scale"
    assert mechanism.definition == "puredp"


@pytest.mark.parametrize("cls", [DiscreteGaussianMechanism, GeometricMechanism])
def test_budget_round_trip_for_awkward_fractions(cls) -> None:
    # Large numerators and denominators, within the per-pass ceiling (ρ ≤ 10, ε ≤ 30).
    large = Fraction(10**9 - 1, 10**8 + 7)
    for budget in (Fraction(1, 3), Fraction("0.000022"), large, Fraction(22, 7)):
        for sensitivity in (1, 2, 22, Fraction(3, 2)):
            assert cls.from_budget(budget, sensitivity).privacy_function(sensitivity) == budget


def test_floats_are_read_as_their_decimal() -> None:
    mechanism = DiscreteGaussianMechanism.from_budget(0.159, 3)
    assert mechanism.privacy_function(3) == Fraction(159, 1000)
    assert GeometricMechanism(2.5).scale == Fraction(5, 2)


@pytest.mark.parametrize("cls", [DiscreteGaussianMechanism, GeometricMechanism])
def test_infinite_budget_means_no_noise(cls) -> None:
    mechanism = cls.from_budget(math.inf, 9)
    assert mechanism.noise_parameter.value == 0 and not mechanism.adds_noise
    assert mechanism.privacy_function(9) == math.inf
    assert mechanism.privacy_function(0) == 0
    np.testing.assert_array_equal(mechanism.sample(5, rng=seeded_rng(1)), np.zeros(5))
    assert mechanism.variance == 0
    assert mechanism.distribution.is_point_mass


@pytest.mark.parametrize("cls", [DiscreteGaussianMechanism, GeometricMechanism])
def test_invalid_parameters(cls) -> None:
    with pytest.raises(ValueError, match="zero-budget"):
        cls.from_budget(0, 3)
    with pytest.raises(ValueError):
        cls.from_budget(-1, 3)
    with pytest.raises(ValueError, match="sensitivity"):
        cls.from_budget(1, 0)
    with pytest.raises(ValueError):
        cls(Fraction(-1))
    with pytest.raises(ValueError):
        cls(math.inf)
    with pytest.raises(ValueError):
        cls(Fraction(1)).privacy_function(-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cls(Fraction(1)).__setattr__(
            "sigma_squared" if cls is DiscreteGaussianMechanism else "scale", 2
        )


def test_mechanism_for_and_serialisation() -> None:
    gaussian = mechanism_for("zcdp", Fraction(1, 2), 3)
    assert gaussian == DiscreteGaussianMechanism(Fraction(9))
    geometric = mechanism_for("PUREDP", Fraction(1, 2), 9)
    assert geometric == GeometricMechanism(Fraction(18))
    with pytest.raises(ValueError, match="definition"):
        mechanism_for("approxdp", 1, 1)
    for mechanism in (gaussian, geometric, DiscreteGaussianMechanism(Fraction(1, 3))):
        assert mechanism_from_dict(mechanism.to_dict()) == mechanism
    assert gaussian.to_dict() == {"mechanism": "discrete_gaussian", "sigma_squared": "9"}
    with pytest.raises(ValueError, match="Unknown mechanism"):
        mechanism_from_dict({"mechanism": "laplace", "scale": "1"})


def test_distribution_and_variance() -> None:
    gaussian = DiscreteGaussianMechanism(Fraction(625))
    assert gaussian.distribution == DiscreteGaussian(Fraction(625))
    assert gaussian.variance == pytest.approx(625, rel=1e-12)
    geometric = GeometricMechanism(Fraction(3))
    assert geometric.distribution == TwoSidedGeometric(Fraction(3))
    a = math.exp(-1 / 3)
    assert geometric.variance == pytest.approx(2 * a / (1 - a) ** 2)


@pytest.mark.parametrize(
    "mechanism", [DiscreteGaussianMechanism(Fraction(25, 2)), GeometricMechanism(Fraction(4))]
)
def test_sampling_delegates_to_the_exact_sampler(mechanism) -> None:
    draws = mechanism.sample((200, 100), rng=seeded_rng(7))
    assert draws.shape == (200, 100) and draws.dtype == np.int64
    np.testing.assert_array_equal(draws, mechanism.sample((200, 100), rng=seeded_rng(7)))
    # 20 000 draws: mean 0 and the distribution's variance within ~5 standard errors.
    variance = mechanism.variance
    assert abs(draws.mean()) < 5 * math.sqrt(variance / draws.size)
    assert draws.var() == pytest.approx(variance, rel=0.06)
    secure = mechanism.sample(10)
    assert secure.shape == (10,) and secure.dtype == np.int64
