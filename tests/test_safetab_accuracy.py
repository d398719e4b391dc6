"""SafeTab-P accuracy against the paper's Table 7 MOE targets (2020 production config and specs).

A seeded synthetic population is measured level by level with :func:`measure_level`, exactly as
the engine does. Each level is measured twice with the same stage-1 (and total-only) noise: once
for real, once with the stage-2 noise replaced by zeros, so both runs pick the same workloads and
the second one yields the exact stage-2 answers (level-0 totals and cells) of the same workload.
The stage-2 error is the difference. Table 7 (SafeTab-P paper §6.3.1): for level budget ρ the
stage-2 share is 0.9, the L2 sensitivity is √9 = 3 (stability 9), so σ² = 9/(2·ρ·0.9) and the
95% MOE is z₀.₉₇₅·σ, which rounds to the published targets 3 / 11 / 50.

Levels sharing a budget share σ², so the coverage and variance checks pool them (per-level
regional cells are too few at this population size); every level is still checked on its own
against the exact discrete-Gaussian coverage, within a binomial tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from das.io.safetab_p import read_grf_c, read_person_records
from das.privacy.accounting import Measurement, PrivacyAccountant, compose
from das.privacy.distributions import DiscreteGaussian
from das.privacy.rng import seeded_rng
from das.safetab_p.iterations import combination_incidence, iteration_filter
from das.safetab_p.keys import geography_entities, pass_blocks
from das.safetab_p.measure import LevelMeasurement, aggregate_persons, measure_level
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import SafeTabGeography, load_safetab_p_config
from das.specs.race_specs import load_race_specs
from das.synth.safetab_p import generate_safetab_p

SHARED = Path(__file__).resolve().parents[2] / "shared"
PRODUCTION = SHARED / "census_specs" / "safetab_p" / "production_2020"
N_PERSONS = 150_000
Z = float(norm.ppf(0.975))
STAGE_2_SHARE = Fraction(9, 10)
STABILITY = 9
MIN_CELLS = 1_000

pytestmark = pytest.mark.skipif(
    not PRODUCTION.is_dir(), reason="/work/shared 2020 SafeTab-P specs absent"
)


class RecordingNoise:
    """Noise provider: charge, draw from a seeded source, record the digest, keep the draw."""

    def __init__(self, seed: int) -> None:
        self.rng = seeded_rng(seed)
        self.draws: dict[str, np.ndarray] = {}

    def noise_for(
        self, measurement: Measurement, size: int, accountant: PrivacyAccountant
    ) -> np.ndarray:
        accountant.charge(measurement)
        noise = np.asarray(measurement.mechanism.sample(size, self.rng), dtype=np.int64)
        accountant.record(measurement, f"test-draw-{measurement.name}")
        self.draws[measurement.name] = noise
        return noise


class ExactStage2:
    """Replays the recorded stage-1 / total-only noise; no stage-2 noise, no charge."""

    def __init__(self, recorded: RecordingNoise) -> None:
        self.recorded = recorded

    def noise_for(self, measurement: Measurement, size: int, accountant: Any) -> np.ndarray:
        if measurement.metadata["stage"] == "stage-2":
            return np.zeros(size, dtype=np.int64)
        return self.recorded.draws[measurement.name]


@dataclass(frozen=True)
class LevelErrors:
    """Stage-2 errors of one level with its budget and the ledger's stage-2 measurement."""

    name: str
    budget: Fraction
    stage_2: Measurement
    errors: np.ndarray
    exact: np.ndarray


def _stage_2_answers(measured: LevelMeasurement) -> np.ndarray:
    """The stage-2 answers in draw order: level-0 totals, then the cells."""
    return np.concatenate([measured.total[measured.workload == 0], measured.cell_count])


@pytest.fixture(scope="module")
def accuracy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("safetab-accuracy") / "data"
    generate_safetab_p(data, N_PERSONS, seed=7, specs_dir=PRODUCTION)
    config = load_safetab_p_config(data / "config.json")
    specs = load_race_specs(data)
    persons = read_person_records(data / "person-records.txt")
    grfc = read_grf_c(data / "GRF-C.txt")
    plan = plan_safetab_p(
        config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
    )
    by_level: dict[str, dict[str, Measurement]] = {}
    for item in plan:
        by_level.setdefault(str(item.partition), {})[str(item.metadata["stage"])] = item
    noise = RecordingNoise(2020)
    levels: list[LevelErrors] = []
    accountants: dict[str, PrivacyAccountant] = {}
    for pass_name in ("US", "PR"):
        pass_levels = [
            lv for lv in config.tabulated_levels() if lv.geography.pass_name == pass_name
        ]
        pass_plan = [m for m in plan if m.metadata["pass"] == pass_name]
        accountant = PrivacyAccountant(config.privacy_defn.value, compose(pass_plan))
        accountants[pass_name] = accountant
        blocks = pass_blocks(grfc, config, pass_name)
        agg = aggregate_persons(persons, blocks)
        entities = {
            g: geography_entities(blocks, g)
            for g in SafeTabGeography
            if any(lv.geography is g for lv in pass_levels)
        }
        for level in pass_levels:
            key = (level.iteration_level, level.geography.is_state_or_above)
            selected = iteration_filter(specs, *key)
            incidence = combination_incidence(specs, agg.race_codes, agg.qspan, selected)
            codes = specs.iteration_code[selected.index].astype(np.int64)
            name = f"{pass_name}/{level.geography.value}/{level.iteration_level}"
            args = (agg, entities[level.geography], selected, codes, incidence, by_level[name])
            thresholds = config.thresholds.get(level)
            noisy = measure_level(*args, thresholds, noise, accountant)
            exact = measure_level(*args, thresholds, ExactStage2(noise), None)
            # Same stage-1 noise → same workloads, so the two runs answer the same queries.
            assert np.array_equal(noisy.workload, exact.workload), name
            assert np.array_equal(noisy.cell_group, exact.cell_group), name
            true = _stage_2_answers(exact)
            levels.append(
                LevelErrors(
                    name=name,
                    budget=Fraction(config.budgets[level]),
                    stage_2=by_level[name]["stage-2"],
                    errors=_stage_2_answers(noisy) - true,
                    exact=true,
                )
            )
    return {"levels": levels, "accountants": accountants, "plan": plan}


def _table_7_target(name: str) -> int:
    """Table 7 MOE: Detailed (iteration level 2) 3 at state or above, else 11; Regional 50."""
    _, geography, iteration_level = name.split("/")
    if iteration_level == "1":
        return 50
    return 3 if SafeTabGeography(geography).is_state_or_above else 11


@pytest.mark.slow
def test_every_production_level_is_measured(accuracy: dict[str, Any]) -> None:
    names = {lv.name for lv in accuracy["levels"]}
    # AIANNH regional has budget 0 in the 2020 config and is not tabulated.
    assert "US/AIANNH/1" not in names
    assert {"US/USA/2", "US/TRACT/1", "PR/PR-STATE/2", "PR/PR-PLACE/1"} <= names
    assert len(names) == 19
    for level in accuracy["levels"]:
        assert level.exact.min() >= 0, level.name
        assert level.errors.size == level.exact.size > 0, level.name


@pytest.mark.slow
def test_ledger_sigma_squared_is_table_7_exactly(accuracy: dict[str, Any]) -> None:
    """Every drawn measurement: σ² = 9/(2·ρ·share) as a Fraction, share 0.1 / 0.9 / 1."""
    shares = {"stage-1": Fraction(1, 10), "stage-2": STAGE_2_SHARE, "total-only": Fraction(1)}
    budgets = {lv.name: lv.budget for lv in accuracy["levels"]}
    drawn = 0
    for accountant in accuracy["accountants"].values():
        for entry in accountant.entries:
            item = entry.measurement
            assert entry.drawn, item.name
            rho = budgets[str(item.partition)]
            share = shares[str(item.metadata["stage"])]
            expected = Fraction(STABILITY) / (2 * rho * share)
            sigma_squared = item.mechanism.sigma_squared
            assert isinstance(sigma_squared, Fraction)
            assert sigma_squared == expected, item.name
            drawn += 1
    assert drawn == len(accuracy["plan"])


@pytest.mark.slow
def test_moe_matches_table_7_targets(accuracy: dict[str, Any]) -> None:
    for level in accuracy["levels"]:
        moe = Z * math.sqrt(level.stage_2.mechanism.sigma_squared)
        # Table 7's ρ are rounded to 3 decimals (0.008 for target 50 gives z·σ ≈ 49.0), so the
        # MOE meets the target and is within 3% of it.
        target = _table_7_target(level.name)
        assert 0.97 * target < moe <= target + 0.01, level.name


@pytest.mark.slow
def test_stage_2_errors_within_table_7_moe(accuracy: dict[str, Any]) -> None:
    """≥ 95% of stage-2 errors within the Table 7 MOE, per budget (levels sharing σ² pooled).

    Noise is integer, so the coverage of the strict bound z·σ is P(|X| ≤ ⌊z·σ⌋): at ρ = 0.159
    (σ² ≈ 31.45, z·σ ≈ 10.99) that is ≈ 0.939, the published (rounded) target 11 gives ≈ 0.955.
    So the pooled ≥ 95% check uses the Table 7 target; each level is also checked against the
    exact discrete-Gaussian coverage of z·σ within 4 binomial standard errors.
    """
    pools: dict[Fraction, list[LevelErrors]] = {}
    for level in accuracy["levels"]:
        sigma_squared = level.stage_2.mechanism.sigma_squared
        pools.setdefault(sigma_squared, []).append(level)
        moe = Z * math.sqrt(sigma_squared)
        expected = float(DiscreteGaussian(sigma_squared).central_probability(math.floor(moe)))
        covered = float(np.mean(np.abs(level.errors) <= moe))
        spread = 4 * math.sqrt(expected * (1 - expected) / level.errors.size)
        assert abs(covered - expected) <= spread + 1e-12, level.name
    assert len(pools) == 3
    for sigma_squared, members in pools.items():
        errors = np.concatenate([lv.errors for lv in members])
        target = _table_7_target(members[0].name)
        assert {_table_7_target(lv.name) for lv in members} == {target}
        assert errors.size >= MIN_CELLS, sorted(lv.name for lv in members)
        assert np.mean(np.abs(errors) <= target) >= 0.95, target
        # The spread is the ledger's σ² (sample-variance standard error √(2/n) ≤ 4.5%).
        assert abs(errors.var() / float(sigma_squared) - 1) < 0.15, target
        assert abs(errors.mean()) < 4 * math.sqrt(float(sigma_squared) / errors.size), target
