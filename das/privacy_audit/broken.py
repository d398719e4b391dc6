"""The self-test: deliberately broken copies of the mechanisms, which the audit must catch.

Each variant claims a budget its noise does not deliver, the way real bugs do:

* *noise scale halved* — the mechanism draws with half the scale it was built for (σ/2 for the
  discrete Gaussian: four times the ρ; b/2 for the geometric: twice the ε);
* *block sampler halved* — only the streamed sampler (``sample_blocks``, the one every release
  draws with) uses half the scale; the one-shot ``sample`` stays correct. An audit drawing with
  ``sample`` would pass it: the audit draws with the release's own path
  (:func:`das.privacy.mechanisms.release_draw`) and must catch it;
* *sensitivity understated by one person's second group* — noise calibrated for a person in
  one group (Δ = 1) while the person is in two (the neighbour moves two cells): twice the ρ or
  the ε;
* SafeTab-P planned with a stability of 1 (a person in one population group per level) while
  the worst-case person is in 9: nine times each level's ρ;
* PHSafe's joined tables planned with the unit-table sensitivity Δ = 2 (the truncation bound
  forgotten): (2τ + 2)²/4 times more loss than claimed per moved cell pattern.

A variant is *detected* when some lower bound of its audit exceeds the claimed budget (ρ under
zCDP, ε under pure DP). These copies exist only in this module; nothing on a release path
imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from das.privacy import noise
from das.privacy.accounting import Measurement
from das.privacy.mechanisms import (
    DiscreteGaussianMechanism,
    GeometricMechanism,
    Mechanism,
    mechanism_for,
)
from das.privacy_audit.audit import (
    DEFAULT_CONFIDENCE,
    DEFAULT_DELTA,
    AuditRow,
    Family,
    describe_randomness,
    run_audit,
)
from das.privacy_audit.mechanism import MECHANISMS
from das.privacy_audit.neighbours import MovedQuery

REPO = Path(__file__).resolve().parents[2]
DEMO_SAFETAB_P_CONFIG = REPO / "data_specs" / "safetab_p" / "demo" / "config.json"
DEMO_PHSAFE_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"

MECHANISM_TRIALS = 1_000_000
PRODUCT_TRIALS = 20_000
# Budgets of the mechanism variants: ε = 1 (geometric), ρ = 1/2 (discrete Gaussian).
MECHANISM_BUDGETS = {"geometric": Fraction(1), "discrete-gaussian": Fraction(1, 2)}
MECHANISM_VARIANTS = (
    ("geometric", "noise-halved"),
    ("geometric", "sensitivity-understated"),
    ("discrete-gaussian", "noise-halved"),
    ("discrete-gaussian", "sensitivity-understated"),
    ("discrete-gaussian", "block-sampler-halved"),  # zCDP: what both products release with
)


def noise_halved(mechanism: Mechanism) -> Mechanism:
    """The same mechanism drawing with half its noise scale (σ/2, i.e. σ²/4; or b/2)."""
    if isinstance(mechanism, DiscreteGaussianMechanism):
        return DiscreteGaussianMechanism(mechanism.sigma_squared / 4)
    if isinstance(mechanism, GeometricMechanism):
        return GeometricMechanism(mechanism.scale / 2)
    raise TypeError(f"no broken copy of {type(mechanism).__name__}")


def _noise_halved_measurement(measurement: Measurement) -> Mechanism:
    return noise_halved(measurement.mechanism)


@dataclass(frozen=True)
class BlockSamplerHalved(DiscreteGaussianMechanism):
    """A discrete Gaussian whose streamed sampler draws with half the noise scale (σ²/4).

    ``sample`` (one call) is inherited, correct; ``sample_blocks`` — what the noise store,
    hence every release, draws with — is :func:`noise_halved`'s. ``privacy_function`` is the
    loss a release drawing with it really has (the halved noise's): the self-test's true loss.
    """

    def _halved(self) -> DiscreteGaussianMechanism:
        return DiscreteGaussianMechanism(self.sigma_squared / 4)

    def privacy_function(self, sensitivity: Any) -> Any:
        return self._halved().privacy_function(sensitivity)

    def sample_blocks(
        self, size: int, rng: Any = None, block: int = noise.DEFAULT_BLOCK
    ) -> Iterator[np.ndarray]:
        return self._halved().sample_blocks(size, rng, block)


def phsafe_plan_without_truncation_bound(config: Any) -> list[Measurement]:
    """PHSafe's plan with every table given the unit-table sensitivity Δ = 2 (a bug)."""
    from das.phsafe.plan import plan_phsafe

    return [
        Measurement.create(m.name, m.definition, m.budget, 2, **dict(m.metadata))
        for m in plan_phsafe(config)
    ]


@dataclass(frozen=True)
class VariantResult:
    """One broken variant: its claim, the audit's lower bound (budget units), detection."""

    name: str
    description: str
    definition: str
    claimed: float
    lower_bound: float
    realised: float
    trials: int

    @property
    def detected(self) -> bool:
        return self.lower_bound > self.claimed

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "claimed": self.claimed,
            "lower_bound": self.lower_bound,
            "detected": self.detected,
            "unit": "rho" if self.definition == "zcdp" else "epsilon",
            "realised": self.realised,
            "description": self.description,
            "trials": self.trials,
        }


@dataclass(frozen=True)
class SelfTestReport:
    variants: tuple[VariantResult, ...]
    confidence: float
    randomness: str
    seconds: float

    @property
    def ok(self) -> bool:
        return all(variant.detected for variant in self.variants)

    def to_dict(self) -> dict[str, Any]:
        return {
            "variants": [variant.to_dict() for variant in self.variants],
            "ok": self.ok,
            "confidence": self.confidence,
            "randomness": self.randomness,
            "seconds": self.seconds,
        }


def _strongest(rows: tuple[AuditRow, ...] | list[AuditRow]) -> AuditRow:
    """The row whose lower bound is largest relative to its claimed budget."""
    return max(rows, key=lambda row: row.budget_lower_bound / float(row.claimed))


def _result(
    name: str, description: str, rows: tuple[AuditRow, ...] | list[AuditRow], trials: int
) -> VariantResult:
    row = _strongest(rows)
    return VariantResult(
        name=name,
        description=description,
        definition=row.definition,
        claimed=float(row.claimed),
        lower_bound=row.budget_lower_bound,
        realised=row.realised,
        trials=trials,
    )


def _mechanism_variant(
    kind: str,
    broken: str,
    trials: int,
    confidence: float,
    delta: float,
    rng: Any,
) -> VariantResult:
    budget = MECHANISM_BUDGETS[kind]
    mechanism = mechanism_for(MECHANISMS[kind], budget, 1)
    if broken == "noise-halved":
        query = MovedQuery(kind, mechanism, [1], draw=noise_halved(mechanism))
        description = f"{kind} at budget {budget}, sensitivity 1, drawing with half the scale"
    elif broken == "block-sampler-halved":
        broken_copy = BlockSamplerHalved(mechanism.noise_parameter.value)
        query = MovedQuery(kind, mechanism, [1], draw=broken_copy)
        description = (
            f"{kind} at budget {budget}, sensitivity 1: its block sampler (the release's draw "
            "path) draws with half the scale; its one-shot sample() is correct"
        )
    else:
        query = MovedQuery(kind, mechanism, [1, 1])
        description = (
            f"{kind} at budget {budget} calibrated for sensitivity 1; the person is in a "
            "second group (two cells move)"
        )
    family = Family(f"{kind}/{broken}", MECHANISMS[kind], budget, (query,), measurements=1)
    rows, _ = run_audit([family], trials=trials, confidence=confidence, delta=delta, rng=rng)
    return _result(f"{kind}/{broken}", description, rows, trials)


def run_self_test(
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    rng: Any = None,
    mechanism_trials: int = MECHANISM_TRIALS,
    product_trials: int = PRODUCT_TRIALS,
) -> SelfTestReport:
    """Audit every broken variant; each must show a lower bound above its claimed budget."""
    import time

    from das.privacy_audit.phsafe import audit_phsafe
    from das.privacy_audit.safetab_p import audit_safetab_p
    from das.specs.config import load_phsafe_config

    started = time.perf_counter()
    results = [
        _mechanism_variant(kind, broken, mechanism_trials, confidence, delta, rng)
        for kind, broken in MECHANISM_VARIANTS
    ]
    safetab = audit_safetab_p(
        DEMO_SAFETAB_P_CONFIG,
        trials=product_trials,
        confidence=confidence,
        delta=delta,
        rng=rng,
        stability_override=1,
    )
    results.append(
        _result(
            "safetab-p/stability-understated",
            "SafeTab-P (demo specs, 2020 budgets) planned with stability 1; the added person "
            "is in 9 groups per level",
            safetab.rows,
            safetab.trials,
        )
    )
    phsafe = audit_phsafe(
        DEMO_PHSAFE_CONFIG,
        trials=product_trials,
        confidence=confidence,
        delta=delta,
        rng=rng,
        plan=phsafe_plan_without_truncation_bound(load_phsafe_config(DEMO_PHSAFE_CONFIG)),
    )
    results.append(
        _result(
            "phsafe/sensitivity-understated",
            "PHSafe (demo config, 2020 budgets) with the joined tables planned at Δ = 2 "
            "instead of 2τ + 2",
            phsafe.rows,
            phsafe.trials,
        )
    )
    return SelfTestReport(
        variants=tuple(results),
        confidence=confidence,
        randomness=describe_randomness(rng),
        seconds=time.perf_counter() - started,
    )
