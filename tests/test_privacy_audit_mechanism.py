"""Single-mechanism audits, the self-test's broken copies, and the audit's layering."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.privacy import conversions
from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism
from das.privacy.noise import seeded_rng
from das.privacy_audit import neighbours
from das.privacy_audit.audit import Family, run_audit
from das.privacy_audit.broken import (
    BlockSamplerHalved,
    _mechanism_variant,
    noise_halved,
    run_self_test,
)
from das.privacy_audit.mechanism import audit_mechanism, fewest_squares, neighbour_moves
from das.privacy_audit.neighbours import AdaptiveGroups, MovedQuery, simulate

REPO = Path(__file__).resolve().parents[1]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20_000))
def test_fewest_squares_sums_to_the_total_with_at_most_four(total: int) -> None:
    parts = fewest_squares(total)
    assert sum(p * p for p in parts) == total and 1 <= len(parts) <= 4
    if math.isqrt(total) ** 2 == total:
        assert parts == [math.isqrt(total)]


def test_neighbour_realises_the_claimed_sensitivity() -> None:
    assert neighbour_moves("puredp", 9).tolist() == [9]
    assert neighbour_moves("zcdp", 3).tolist() == [3]
    assert neighbour_moves("zcdp", 22).tolist() == [22]
    assert sorted(neighbour_moves("zcdp", "1.41421357").tolist()) == [1, 1]  # ⌈√2⌉ in 8 digits
    assert neighbour_moves("zcdp", 7**0.5 + 1e-9).tolist() == [2, 1, 1, 1]
    with pytest.raises(ValueError, match="at least one count"):
        neighbour_moves("puredp", "1/2")


CASES = [
    ("geometric", "0.1", "1"),
    ("geometric", "1", "1"),
    ("geometric", "4", "1"),
    ("geometric", "1", "9"),
    ("discrete-gaussian", "0.002619", "22"),  # PHSafe PH1_num, nation, 2020
    ("discrete-gaussian", "0.1431", "3"),  # SafeTab-P county-2 stage 2, 2020
    ("discrete-gaussian", "0.5", "1"),
    ("discrete-gaussian", "2", "1"),
]


@pytest.mark.parametrize(("kind", "budget", "sensitivity"), CASES)
def test_lower_bound_never_exceeds_the_claim(kind: str, budget: str, sensitivity: str) -> None:
    report = audit_mechanism(kind, budget, sensitivity, 200_000, rng=seeded_rng(11))
    row = report.rows[0]
    assert report.ok and not row.exceeded
    assert 0 <= row.epsilon_lower_bound <= row.claimed_epsilon
    if kind == "discrete-gaussian":
        assert row.claimed_epsilon == pytest.approx(
            conversions.zcdp_to_approx_dp_optimal(Fraction(budget), 1e-10)
        )
        assert 0 < row.rho_lower_bound <= float(Fraction(budget))
    else:
        assert row.claimed_epsilon == float(Fraction(budget))
        assert row.epsilon_lower_bound > 0.5 * row.claimed_epsilon  # the attack has power
    assert row.realised == pytest.approx(float(row.claimed))


def test_geometric_audit_is_tight() -> None:
    """The issue's target: ε = 1, sensitivity 1, 10⁶ trials → within 15% of the claim."""
    row = audit_mechanism("geometric", 1, 1, 1_000_000, rng=seeded_rng(2)).rows[0]
    assert 0.85 <= row.epsilon_lower_bound <= 1.0


def test_noise_halved_halves_the_scale() -> None:
    assert noise_halved(DiscreteGaussianMechanism(36)).sigma_squared == 9
    assert noise_halved(GeometricMechanism(3)).scale == Fraction(3, 2)


@pytest.mark.slow
def test_self_test_detects_every_broken_variant() -> None:
    report = run_self_test(rng=seeded_rng(5), mechanism_trials=300_000, product_trials=10_000)
    assert report.ok
    names = [variant.name for variant in report.variants]
    assert names == [
        "geometric/noise-halved",
        "geometric/sensitivity-understated",
        "discrete-gaussian/noise-halved",
        "discrete-gaussian/sensitivity-understated",
        "discrete-gaussian/block-sampler-halved",
        "safetab-p/stability-understated",
        "phsafe/sensitivity-understated",
    ]
    for variant in report.variants:
        assert variant.detected and variant.lower_bound > variant.claimed
        assert variant.realised > variant.claimed  # the bug is real: more loss than claimed


def test_the_audit_draws_with_the_release_path_never_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every audit draw goes through ``release_draw`` (``sample_blocks``, as the noise store):
    with ``sample`` made to raise, single mechanisms and SafeTab-P's adaptive groups still run."""

    def forbidden(self, *args, **kwargs):
        raise AssertionError("the audit drew with sample(), which no release uses")

    for cls in (DiscreteGaussianMechanism, GeometricMechanism):
        monkeypatch.setattr(cls, "sample", forbidden)
    for kind, budget, sensitivity in (("geometric", 1, 1), ("discrete-gaussian", "0.1431", 3)):
        assert audit_mechanism(kind, budget, sensitivity, 2_000, rng=seeded_rng(1)).ok
    groups = AdaptiveGroups(
        "level", DiscreteGaussianMechanism(50), DiscreteGaussianMechanism(8),
        thresholds=[0, 10, 20], totals=[5, 25], total_delta=[1, 1],
        cell_delta=np.ones((2, 4, 1), dtype=np.int64),
    )  # fmt: skip
    assert simulate((groups,), 1, 1_000, seeded_rng(2)).shape == (1_000,)


def test_a_halved_block_sampler_is_caught_and_only_through_the_release_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The self-test's variant: ``sample`` correct, ``sample_blocks`` with half the scale.
    The audit catches it; an audit drawing with ``sample`` would have passed it."""
    broken = BlockSamplerHalved(36)
    assert broken.sample(10, seeded_rng(1)).tolist() == (
        DiscreteGaussianMechanism(36).sample(10, seeded_rng(1)).tolist()
    )
    halved = next(DiscreteGaussianMechanism(9).sample_blocks(10, seeded_rng(1)))
    assert next(broken.sample_blocks(10, seeded_rng(1))).tolist() == halved.tolist()

    args = ("discrete-gaussian", "block-sampler-halved", 200_000, 0.95, 1e-10)
    caught = _mechanism_variant(*args, seeded_rng(3))
    assert caught.detected and caught.lower_bound > 1.0 and caught.realised == 2.0
    monkeypatch.setattr(neighbours, "release_draw", lambda m, n, rng: m.sample(n, rng))
    missed = _mechanism_variant(*args, seeded_rng(3))
    assert not missed.detected and missed.lower_bound <= missed.claimed == 0.5


def test_the_correct_copies_of_the_self_test_are_not_flagged() -> None:
    """Same claims, neighbour and trials as the mechanism variants, without the bug."""
    for mechanism, delta in ((GeometricMechanism(1), [1]), (DiscreteGaussianMechanism(1), [1])):
        claimed = mechanism.privacy_function(1)
        query = MovedQuery("q", mechanism, delta)
        family = Family("ok", mechanism.definition, claimed, (query,), measurements=1)
        rows, _ = run_audit([family], trials=300_000, rng=seeded_rng(5))
        assert not rows[0].exceeded


def test_adaptive_statistic_follows_the_workload_each_trial_selects() -> None:
    """For discrete Gaussian noise E_D′[LLR] = Σ d²/(2σ²) over the answers a trial moves, and
    E_D[LLR] is its negative. Group 1 moves two stage-2 cells by 2 in workload 3 and one cell
    by 1 in workload 2, and its stage-1 answer (25 or 26, σ² = 50) lands on either side of the
    threshold 20: the mean shows each trial drew the workload its stage-1 answer selected."""
    stage_1, stage_2 = DiscreteGaussianMechanism(50), DiscreteGaussianMechanism(8)
    cell_delta = np.zeros((2, 4, 2), dtype=np.int64)
    cell_delta[:, :, 0] = 1
    cell_delta[1, 3, :] = [2, 2]
    groups = AdaptiveGroups(
        "level", stage_1, stage_2, thresholds=[0, 10, 20], totals=[5, 25],
        total_delta=[1, 1], cell_delta=cell_delta,
    )  # fmt: skip
    worst = 2 / 100 + 1 / 16 + 8 / 16  # every group in its costliest workload
    assert groups.realised_loss == pytest.approx(worst)

    def expected(world: int) -> float:
        in_workload_3 = float(stage_1.distribution.sf(20 - 25 - world - 1))  # P[25+w+Z ≥ 20]
        return 2 / 100 + 1 / 16 + (in_workload_3 * 8 + (1 - in_workload_3)) / 16

    trials = 400_000
    alternative = simulate((groups,), 1, trials, seeded_rng(4))
    null = simulate((groups,), 0, trials, seeded_rng(3))
    tolerance = 5 * float(np.std(alternative)) / math.sqrt(trials)  # 5 standard errors
    assert np.mean(alternative) == pytest.approx(expected(1), abs=tolerance)
    assert np.mean(null) == pytest.approx(-expected(0), abs=tolerance)
    assert expected(1) < worst - 4 * tolerance  # a fixed workload 3 would be told apart


def test_nothing_outside_the_audit_imports_it() -> None:
    """`das run` and the privacy foundation never reach the audit (or its broken copies)."""
    pattern = re.compile(r"^\s*(from|import)\s+das\.privacy_audit", re.MULTILINE)
    allowed = {
        REPO / "das" / "cli" / "audit_privacy.py",
        REPO / "tasks" / "audit_privacy.py",
        REPO / "flows" / "audit_privacy.py",
    }
    offenders = [
        path
        for folder in ("das", "tasks", "flows")
        for path in (REPO / folder).rglob("*.py")
        if "privacy_audit" not in path.parts
        and path not in allowed
        and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.integration  # a fresh interpreter: what importing `das` loads
def test_the_das_command_loads_no_broken_copy() -> None:
    """Building the `das` parser (what `das run` does first) never imports the self-test."""
    import subprocess
    import sys

    code = (
        "import sys, das.cli; das.cli.build_parser(); "
        "print('das.privacy_audit.broken' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "False"
