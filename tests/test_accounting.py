"""The privacy ledger: exact composition, refusals, reruns, JSON round trip, summaries."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from das.privacy import conversions as cv
from das.privacy.accounting import (
    BudgetExceededError,
    DuplicateMeasurementError,
    Measurement,
    PrivacyAccountant,
    bounded_budget,
    compose,
    exact_from_json,
    exact_to_json,
    summarize,
)
from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism

GAMMA = Fraction(1, 10)


def _zcdp(name: str, budget, sensitivity=3, **kwargs) -> Measurement:
    return Measurement.create(name, "zcdp", budget, sensitivity, **kwargs)


def _safetab_level(prefix: str, definition: str, budget: Fraction, total_only: bool):
    """A SafeTab-P level: adaptive branch (stage 1 + stage 2) and, optionally, total-only."""
    sensitivity = 3 if definition == "zcdp" else 9
    common = {"partition": prefix, "max_cell_change": 1}
    items = [
        Measurement.create(
            f"{prefix}/stage-1",
            definition,
            budget * GAMMA,
            sensitivity,
            branch="adaptive",
            stage="stage-1",
            **common,
        ),
        Measurement.create(
            f"{prefix}/stage-2",
            definition,
            budget * (1 - GAMMA),
            sensitivity,
            branch="adaptive",
            stage="stage-2",
            **common,
        ),
    ]
    if total_only:
        items.append(
            Measurement.create(
                f"{prefix}/total-only",
                definition,
                budget,
                sensitivity,
                branch="total-only",
                stage="total-only",
                **common,
            )
        )
    return items


# ----------------------------------------------------------------------------- Measurement


def test_measurement_cost_comes_from_the_mechanism() -> None:
    m = _zcdp("US/COUNTY/2/stage-2", Fraction("0.159") * (1 - GAMMA), pass_="US")
    assert m.mechanism == DiscreteGaussianMechanism(Fraction(9) / (2 * Fraction("0.1431")))
    assert m.charge == m.budget == Fraction("0.1431")
    assert m.definition == "zcdp"
    assert m.metadata == {"pass_": "US"}


def test_measurement_with_a_mismatched_budget_is_refused() -> None:
    mechanism = DiscreteGaussianMechanism(Fraction(9, 2))  # ρ = 9/(2·9/2) = 1 at Δ = 3
    assert Measurement("q", Fraction(1), Fraction(3), mechanism).charge == 1
    with pytest.raises(ValueError, match="not the requested budget"):
        Measurement("q", Fraction(2), Fraction(3), mechanism)
    with pytest.raises(ValueError, match="not the requested budget"):
        Measurement("q", Fraction(1), Fraction(9), mechanism)  # sensitivity 9 costs 9


def test_measurement_validation() -> None:
    with pytest.raises(ValueError, match="zero-budget"):
        _zcdp("q", 0)
    with pytest.raises(ValueError, match="name"):
        _zcdp("", Fraction(1))
    with pytest.raises(ValueError, match="partition and a branch"):
        _zcdp("q", Fraction(1), partition="level")
    with pytest.raises(TypeError, match="metadata"):
        _zcdp("q", Fraction(1), table=["PH1"])
    with pytest.raises(ValueError, match="definition"):
        Measurement.create("q", "renyi", Fraction(1), 1)
    # floats are taken by their decimal: 0.159 is 159/1000 exactly
    assert _zcdp("q", 0.159).budget == Fraction(159, 1000)


def test_infinite_budget_means_no_noise() -> None:
    m = _zcdp("golden", math.inf)
    assert m.mechanism.sigma_squared == 0 and m.charge == math.inf


# ----------------------------------------------------------------------------- charging


def test_exact_budget_no_floating_overshoot() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction(3, 10))
    for i in range(3):  # 0.1 + 0.1 + 0.1 > 0.3 in floating point; exactly 3/10 here
        accountant.charge(_zcdp(f"q{i}", 0.1))
    assert accountant.spent == Fraction(3, 10)
    assert accountant.remaining == 0
    with pytest.raises(BudgetExceededError, match="over the total"):
        accountant.charge(_zcdp("q3", Fraction(1, 10**12)))


def test_refusal_happens_before_anything_is_recorded() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction(1))
    accountant.charge(_zcdp("a", Fraction(9, 10)))
    too_much = _zcdp("b", Fraction(2, 10))
    with pytest.raises(BudgetExceededError):
        accountant.check(too_much)
    with pytest.raises(BudgetExceededError):
        accountant.record(too_much, "sha256:abc")
    assert not accountant.has("b") and len(accountant) == 1
    assert accountant.spent == Fraction(9, 10)


def test_duplicates_and_definition_mismatch_are_refused() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction(10))
    accountant.charge(_zcdp("q", Fraction(1)))
    with pytest.raises(DuplicateMeasurementError):
        accountant.charge(_zcdp("q", Fraction(1)))
    with pytest.raises(ValueError, match="puredp measurement"):
        accountant.charge(Measurement.create("g", "puredp", Fraction(1), 9))
    with pytest.raises(TypeError):
        accountant.charge("q2")  # type: ignore[arg-type]


def test_infinite_budgets() -> None:
    finite = PrivacyAccountant("zcdp", Fraction(5))
    with pytest.raises(BudgetExceededError):
        finite.charge(_zcdp("golden", math.inf))
    unlimited = PrivacyAccountant("zcdp", math.inf)
    unlimited.charge(_zcdp("golden", math.inf))
    assert unlimited.spent == math.inf and unlimited.remaining == math.inf
    assert unlimited.bounded_total() == math.inf
    assert PrivacyAccountant("puredp", "Infinity").total == math.inf


def test_partition_costs_the_max_of_its_branches() -> None:
    budget = Fraction("2.134")
    accountant = PrivacyAccountant("zcdp", budget + Fraction("0.008"))
    for m in _safetab_level("US/USA/2", "zcdp", budget, total_only=True):
        accountant.charge(m)
    assert accountant.spent == budget  # not 2 × budget: total-only groups are parallel
    for m in _safetab_level("US/USA/1", "zcdp", Fraction("0.008"), total_only=False):
        accountant.charge(m)
    assert accountant.spent == budget + Fraction("0.008")
    assert accountant.remaining == 0
    # A larger branch raises the partition's cost: refused here, as it exceeds the total.
    with pytest.raises(BudgetExceededError):
        accountant.charge(
            _zcdp("US/USA/2/extra", Fraction(1, 1000), partition="US/USA/2", branch="total-only")
        )
    with pytest.raises(ValueError, match="mixes sensitivities"):
        accountant.charge(
            _zcdp("US/USA/2/other", Fraction(1, 10**6), 9, partition="US/USA/2", branch="x")
        )


def test_compose_is_exact_and_order_free() -> None:
    items = _safetab_level("L", "puredp", Fraction(3), total_only=True)
    items.append(Measurement.create("solo", "puredp", Fraction(1, 7), 2))
    assert compose(items) == Fraction(3) + Fraction(1, 7)
    assert compose(reversed(items)) == compose(items)


# ----------------------------------------------------------------------------- reruns


def test_record_reuse_and_pending() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction(2))
    first = _zcdp("a", Fraction(1, 2), stage="stage-1")
    second = _zcdp("b", Fraction(1, 2))
    accountant.charge(first)
    assert accountant.pending == ("a",)
    accountant.record(first, "sha256:aaa")
    accountant.record(second, "sha256:bbb")  # charges too
    assert accountant.pending == ()
    assert accountant.get("b").noise_digest == "sha256:bbb"
    with pytest.raises(DuplicateMeasurementError, match="already drawn"):
        accountant.record(first, "sha256:again")
    assert accountant.reuse(_zcdp("a", Fraction(1, 2), stage="stage-1")).noise_digest == (
        "sha256:aaa"
    )
    with pytest.raises(ValueError, match="different parameters"):
        accountant.reuse(_zcdp("a", Fraction(1, 4), stage="stage-1"))
    with pytest.raises(ValueError, match="differs"):
        accountant.record(_zcdp("a", Fraction(1, 4)), "sha256:x")
    with pytest.raises(KeyError):
        accountant.get("missing")
    with pytest.raises(ValueError, match="digest"):
        accountant.record(_zcdp("c", Fraction(1, 4)), "")


def test_json_round_trip_restores_the_ledger() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction("4.944"))
    for m in _safetab_level("US/USA/2", "zcdp", Fraction("2.134"), total_only=True):
        accountant.record(m, f"sha256:{m.name}")
    accountant.charge(_zcdp("US/COUNTY/2/stage-1", Fraction("0.0159"), geography="COUNTY"))
    text = json.dumps(accountant.to_dict())
    data = json.loads(text)
    assert data["spent"] == {"exact": "21499/10000", "float": 2.1499}
    restored = PrivacyAccountant.from_dict(data)
    assert restored.measurements == accountant.measurements
    assert restored.entries == accountant.entries
    assert restored.spent == accountant.spent and restored.total == accountant.total
    assert restored.pending == ("US/COUNTY/2/stage-1",)
    # A rerun reuses the drawn ones and may not draw them again.
    assert restored.reuse(accountant.get("US/USA/2/stage-2").measurement).drawn
    with pytest.raises(DuplicateMeasurementError):
        restored.record(accountant.get("US/USA/2/stage-2").measurement, "sha256:new")


def test_json_tampering_is_detected() -> None:
    accountant = PrivacyAccountant("puredp", Fraction(5))
    accountant.charge(Measurement.create("q", "puredp", Fraction(2), 9))
    data = accountant.to_dict()
    data["measurements"][0]["budget"]["exact"] = "1"  # no longer what the mechanism spends
    with pytest.raises(ValueError, match="not the requested budget"):
        PrivacyAccountant.from_dict(data)
    data = accountant.to_dict()
    data["spent"]["exact"] = "1"
    with pytest.raises(ValueError, match="does not match"):
        PrivacyAccountant.from_dict(data)
    data = accountant.to_dict()
    data["total"]["exact"] = "1"  # the ledger would now overspend
    with pytest.raises(BudgetExceededError):
        PrivacyAccountant.from_dict(data)
    with pytest.raises(ValueError, match="format"):
        PrivacyAccountant.from_dict({"definition": "zcdp"})


def test_exact_json_helpers() -> None:
    assert exact_to_json(Fraction(1, 3)) == {"exact": "1/3", "float": 1 / 3}
    assert exact_to_json(math.inf) == {"exact": "Infinity", "float": None}
    assert exact_from_json({"exact": "159/1000"}) == Fraction("0.159")
    assert exact_from_json("Infinity") == math.inf


# ----------------------------------------------------------------------------- totals


def test_bounded_is_twice_unbounded() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction(10))
    accountant.charge(_zcdp("a", Fraction("2.134")))
    assert accountant.bounded_total() == Fraction("4.268")
    assert accountant.bounded_limit() == 20
    assert bounded_budget(math.inf) == math.inf


def test_zcdp_summary() -> None:
    accountant = PrivacyAccountant("zcdp", Fraction("1.41"))
    accountant.charge(_zcdp("all", Fraction("1.41")))
    summary = summarize(accountant, delta=1e-10)
    assert summary.unbounded == Fraction("1.41") and summary.bounded == Fraction("2.82")
    assert summary.epsilon_analytic == pytest.approx(12.806, abs=1e-3)
    assert summary.epsilon_optimal == cv.zcdp_to_approx_dp_optimal(1.41, 1e-10)
    assert summary.epsilon_optimal <= summary.epsilon_optimal_grid < summary.epsilon_analytic
    report = summary.to_dict()
    assert report["rho"] == 1.41 and report["bounded_rho"] == 2.82
    assert report["rho_exact"] == "141/100" and "epsilon_rdp" not in report
    json.dumps(report, allow_nan=False)


def test_pure_dp_ledger_rdp_matches_the_paper_structure() -> None:
    # GvG Table 4 levels (ε totals), each with two-stage and total-only groups: the ledger's
    # Rényi curve must equal eq. 39 with the exact divergence.
    budgets = [Fraction(v) for v in ("4.27", "4.27", "2.49", "2.49", "0.59", "0.59", "0.59")]
    accountant = PrivacyAccountant("puredp", sum(budgets))
    for i, budget in enumerate(budgets):
        for m in _safetab_level(f"L{i}", "puredp", budget, total_only=True):
            accountant.charge(m)
    alphas = np.array([1.5, 3.0, 6.0])
    np.testing.assert_allclose(
        accountant.rdp_curve(alphas), cv.safetab_geometric_rdp(alphas, budgets), rtol=1e-12
    )
    summary = summarize(accountant)
    assert summary.unbounded == Fraction("15.29")
    assert summary.epsilon_rdp == pytest.approx(14.165, abs=2e-3)
    report = summary.to_dict()
    assert report["epsilon"] == 15.29 and report["bounded_epsilon"] == 30.58
    assert "epsilon_optimal" not in report


def test_pure_dp_rdp_without_unit_cells_is_conservative() -> None:
    accountant = PrivacyAccountant("puredp", Fraction(10))
    items = _safetab_level("L", "puredp", Fraction(2), total_only=True)
    unknown = [
        Measurement(m.name, m.budget, m.sensitivity, m.mechanism, partition="L", branch=m.branch)
        for m in items
    ]
    for m in unknown:
        accountant.charge(m)
    alphas = np.array([2.0, 8.0])
    summed = sum(cv.geometric_worst_case_rdp(alphas, m.mechanism.scale, 9, 9) for m in unknown)
    np.testing.assert_allclose(accountant.rdp_curve(alphas), summed)
    with pytest.raises(ValueError, match="pure-DP"):
        PrivacyAccountant("zcdp", 1).rdp_curve(alphas)


def test_empty_and_unlimited_summaries() -> None:
    assert summarize(PrivacyAccountant("puredp", Fraction(1))).epsilon_rdp == 0.0
    assert summarize(PrivacyAccountant("zcdp", Fraction(1))).epsilon_optimal == 0.0
    unlimited = PrivacyAccountant("puredp", math.inf)
    unlimited.charge(Measurement.create("golden", "puredp", math.inf, 9))
    summary = summarize(unlimited)
    assert summary.epsilon_rdp == math.inf
    assert summary.to_dict()["epsilon"] is None  # JSON has no Infinity
    assert isinstance(unlimited.get("golden").measurement.mechanism, GeometricMechanism)


def test_safetab_production_ledger(census_specs) -> None:
    """US pass of the 2020 production config: every level charged, total 4.944, bounded 9.888."""
    config = json.loads((census_specs / "safetab_p/production_2020/config.json").read_text())
    accountant = PrivacyAccountant(config["privacy_defn"], Fraction("4.944"))
    gamma = Fraction(str(config["privacy_budget_p_stage_1_fraction"]))
    assert gamma == GAMMA
    for key, value in config.items():
        if key.startswith("privacy_budget_p_level_") and "_pr_" not in key and value:
            level = key.removeprefix("privacy_budget_p_level_")
            for m in _safetab_level(f"US/{level}", "zcdp", Fraction(str(value)), True):
                accountant.charge(m)
    assert accountant.spent == Fraction("4.944") and accountant.remaining == 0
    assert accountant.bounded_total() == Fraction("9.888")
    assert len(accountant) == 3 * 11  # 11 tabulated US levels (AIANNH regional is 0)
