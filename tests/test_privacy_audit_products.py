"""Product audits: the neighbour each builds, what it moves, and bounds within the claims."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from das.io.phsafe import read_persons, read_units
from das.privacy.noise import seeded_rng
from das.privacy_audit.audit import AuditReport
from das.privacy_audit.broken import noise_halved
from das.privacy_audit.phsafe import FEMALE, MALE, Member, audit_phsafe, household_codes
from das.privacy_audit.safetab_p import audit_safetab_p
from das.synth.phsafe import generate_phsafe

REPO = Path(__file__).resolve().parents[1]
DEMO_SAFETAB_P = REPO / "data_specs" / "safetab_p" / "demo" / "config.json"
DEMO_PHSAFE = REPO / "data_specs" / "phsafe" / "demo" / "config.json"


def _within_claims(report: AuditReport) -> None:
    assert report.ok
    for row in report.rows:
        assert row.epsilon_lower_bound <= row.claimed_epsilon
        assert row.budget_lower_bound <= row.realised + 1e-12 or not row.cells_moved
        assert row.realised <= float(row.claimed) * (1 + 1e-12)


def _check_safetab_p(report: AuditReport, passes: tuple[str, ...]) -> None:
    _within_claims(report)
    assert [n["pass"] for n in report.neighbours] == list(passes)
    for neighbour in report.neighbours:
        groups = neighbour["groups_per_level"]
        assert set(groups.values()) == {neighbour["stability"]} == {9}
        assert neighbour["levels_moved"] == len(groups)
    for row in report.rows:
        if " pass" in row.name:
            continue
        # Nine groups: nine stage-1 totals and nine stage-2 answers (a detailed-only group at
        # state-or-above is one total-only answer instead of two).
        assert 9 <= row.cells_moved <= 18
        assert row.realised == pytest.approx(float(row.claimed))  # the neighbour is the worst


@pytest.mark.slow
def test_safetab_p_demo_specs_worst_case_person_and_bounds() -> None:
    report = audit_safetab_p(DEMO_SAFETAB_P, trials=20_000, rng=seeded_rng(7))
    _check_safetab_p(report, ("US", "PR"))
    us_pass = next(row for row in report.rows if row.name == "US pass")
    assert float(us_pass.claimed) == pytest.approx(4.944)
    assert us_pass.rho_lower_bound > 0.3 * 4.944  # the audit has power on the pass


@pytest.mark.slow
def test_safetab_p_production_2020_config(census_specs: Path) -> None:
    config = census_specs / "safetab_p" / "production_2020" / "config.json"
    report = audit_safetab_p(config, trials=10_000, rng=seeded_rng(8))
    _check_safetab_p(report, ("US", "PR"))
    assert {row.name for row in report.rows} >= {"US/AIANNH/2", "PR/PR-PLACE/2", "PR pass"}


def test_safetab_p_pure_dp_toy_config(census_specs: Path) -> None:
    config = census_specs / "safetab_p" / "toy" / "input_dir_puredp" / "config.json"
    report = audit_safetab_p(config, trials=20_000, rng=seeded_rng(9), persons=1500)
    _within_claims(report)
    assert {row.definition for row in report.rows} == {"puredp"}
    assert any(row.epsilon_lower_bound > 0 for row in report.rows)


def test_phsafe_demo_config_adds_a_spouse_to_the_household_at_tau() -> None:
    report = audit_phsafe(DEMO_PHSAFE, trials=20_000, rng=seeded_rng(10))
    _within_claims(report)
    (neighbour,) = report.neighbours
    assert neighbour["added"]["relationship"] == "spouse"
    assert neighbour["unit_before"]["HHT2"] == 6 and neighbour["unit_after"]["HHT2"] == 1
    tau = neighbour["tau"]
    # PH2: all τ members move from "female householder, with others" to "married couple".
    assert sorted(neighbour["moved"]["US/PH2/usa/*"]) == [-tau["PH2"], tau["PH2"]]
    assert sorted(neighbour["moved"]["US/PH3/state/*"]) == [-tau["PH3"], tau["PH3"]]
    rows = {row.name: row for row in report.rows}
    assert rows["PH1_denom"].cells_moved == 0 and rows["PH1_denom"].budget_lower_bound == 0
    assert rows["PH3"].rho_lower_bound > 0.3 * rows["PH3"].realised
    # 2τ² of the (2τ + 2)² the plan charges: the claim is conservative for this neighbour.
    ph2 = rows["PH2"]
    assert ph2.realised == pytest.approx(
        float(ph2.claimed) * 2 * tau["PH2"] ** 2 / (2 * tau["PH2"] + 2) ** 2
    )


@pytest.mark.parametrize("name", ["us", "pr"])
def test_phsafe_production_2020_configs(census_specs: Path, name: str) -> None:
    config = census_specs / "phsafe" / "production_2020" / name / "config.json"
    report = audit_phsafe(config, trials=20_000, rng=seeded_rng(12))
    _within_claims(report)
    assert report.rows[-1].name == f"{name.upper()} pass"
    assert report.rows[-1].rho_lower_bound > 0


def test_phsafe_pure_dp_toy_config(census_specs: Path) -> None:
    report = audit_phsafe(
        census_specs / "phsafe" / "toy" / "config_puredp.json", trials=20_000, rng=seeded_rng(13)
    )
    _within_claims(report)
    assert {row.definition for row in report.rows} == {"puredp"}
    assert report.rows[-1].epsilon_lower_bound > 0


def test_household_codes_match_the_synthetic_units(tmp_path: Path) -> None:
    """The unit codes the audit derives for D′ follow the rules the synthetic units obey."""
    generate_phsafe(tmp_path / "d", 3000, 4, DEMO_PHSAFE)
    persons = read_persons(tmp_path / "d" / "persons.csv")
    units = read_units(tmp_path / "d" / "units.csv")
    occupied = units.loc[units["HHT"].between(1, 7)].set_index("MAFID")
    columns = ["FINAL_POP", "NPF", "HHT", "HHT2", "CPLT"]
    checked = 0
    for mafid, members in persons.loc[persons["RTYPE"] == 3].groupby("MAFID"):
        unit = occupied.loc[mafid]
        # Householder sex: HHT 2/4/5 or HHT2 9–12 male (married couples do not depend on it).
        male = unit["HHT"] in (2, 4, 5) or 9 <= unit["HHT2"] <= 12
        pairs = zip(members["RELSHIP"], members["QAGE"], strict=True)
        people = [Member(int(relship), int(age)) for relship, age in pairs]
        codes = household_codes(people, MALE if male else FEMALE)
        assert [codes[c] for c in columns] == [int(unit[c]) for c in columns], mafid
        checked += 1
    assert checked > 500


def test_household_codes_of_the_audit_neighbour() -> None:
    mother = [Member(20, 40), *(Member(25, 12) for _ in range(9))]
    assert household_codes(mother, FEMALE) == {
        "FINAL_POP": 10, "NPF": 10, "HHT": 3, "HHT2": 6, "CPLT": 5,
    }  # fmt: skip
    assert household_codes([*mother, Member(21, 41)], FEMALE) == {
        "FINAL_POP": 11, "NPF": 11, "HHT": 1, "HHT2": 1, "CPLT": 1,
    }  # fmt: skip
    assert household_codes([*mother, Member(22, 41)], FEMALE)["HHT2"] == 3
    assert household_codes([Member(20, 70)], MALE)["HHT"] == 4
    roommates = [Member(20, 30), Member(34, 31)]
    assert household_codes(roommates, FEMALE) == {
        "FINAL_POP": 2, "NPF": 0, "HHT": 7, "HHT2": 8, "CPLT": 5,
    }  # fmt: skip


def test_product_audit_reports_are_json_ready() -> None:
    import json

    report = audit_phsafe(DEMO_PHSAFE, trials=2_000, rng=seeded_rng(1), persons=800)
    payload = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert payload["subject"] == "phsafe" and payload["trials"] == 2_000
    assert {"family", "claimed", "lower_bound", "rho", "rho_lower_bound"} <= set(payload["rows"][0])
    # One row per audited family, its figures numbers (not text) that survive the round trip.
    assert [row["family"] for row in payload["rows"]] == [row.name for row in report.rows]
    for row, original in zip(payload["rows"], report.rows, strict=True):
        assert row["lower_bound"] == original.epsilon_lower_bound
        assert row["rho_lower_bound"] == original.rho_lower_bound
        assert type(row["claimed"]) is float and type(row["rho"]) is float
    assert np.isfinite(payload["seconds_per_million_trials"])


def test_safetab_p_drawing_with_half_the_noise_is_caught() -> None:
    """The audit sees what the mechanisms draw: the release path with σ/2 beats every claim."""
    report = audit_safetab_p(
        DEMO_SAFETAB_P, trials=10_000, rng=seeded_rng(14), draw=lambda m: noise_halved(m.mechanism)
    )
    assert not report.ok
    pass_row = next(row for row in report.rows if row.name == "US pass")
    assert pass_row.realised == pytest.approx(4 * float(pass_row.claimed))
    assert pass_row.exceeded and pass_row.rho_lower_bound > float(pass_row.claimed)
