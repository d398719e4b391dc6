"""The tuning explorer against the engine: presets, evaluation, export, API, simulation."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from das.budget.report import budget_report
from das.phsafe.truncate import truncate_per_key, truncation_profile
from das.privacy import calculators
from das.privacy.distributions import DiscreteGaussian
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import load_phsafe_config, load_safetab_p_config
from das.specs.race_specs import load_race_specs
from das.synth import generate_safetab_p
from explorer import params, phsafe, safetab, simulate
from explorer.app import create_app

REPO = Path(__file__).resolve().parents[1]
PRESET = REPO / "data_specs" / "presets" / "production_2020"
DEMO_SPECS = REPO / "data_specs" / "safetab_p" / "demo"


@pytest.fixture(scope="module")
def preset() -> dict:
    return params.load_preset()


def test_preset_totals_are_the_2020_totals(preset: dict) -> None:
    result = safetab.evaluate(preset["safetab_p"])
    passes = result["report"]["passes"]
    assert (passes["US"]["rho_exact"], passes["PR"]["rho_exact"]) == ("618/125", "2643/1000")
    ph = phsafe.evaluate(preset["phsafe"])["passes"]
    assert ph["US"]["totals"]["rho_exact"] == "1257281/1000000"
    assert ph["PR"]["totals"]["rho_exact"] == "1226649/1000000"
    manifest = json.loads((PRESET / "preset.json").read_text())
    assert manifest["totals"]["safetab_p"] == {"US": "618/125", "PR": "2643/1000"}


def test_preset_structure_is_that_of_the_spec_files(census_specs: Path) -> None:
    manifest = json.loads((PRESET / "preset.json").read_text())["safetab_p"]
    for folder in (DEMO_SPECS, census_specs / "safetab_p/production_2020"):
        specs = load_race_specs(folder)
        assert stability(specs, 8) == manifest["stability"]
        assert sorted(detailed_only_levels(specs)) == manifest["detailed_only_iteration_levels"]


def test_preset_parameters_equal_the_census_files(census_specs: Path) -> None:
    ours = load_safetab_p_config(PRESET / "safetab_p/config.json")
    theirs = load_safetab_p_config(census_specs / "safetab_p/production_2020/config.json")
    assert ours == theirs
    for name in ("us", "pr"):
        ours = load_phsafe_config(PRESET / f"phsafe/{name}/config.json")
        theirs = load_phsafe_config(census_specs / f"phsafe/production_2020/{name}/config.json")
        assert ours.privacy_budget == theirs.privacy_budget and ours.tau == theirs.tau
        assert sorted(ours.state_filter) == sorted(theirs.state_filter)


def test_safetab_levels_match_the_calculators(preset: dict) -> None:
    result = safetab.evaluate(preset["safetab_p"])
    row = next(r for r in result["levels"] if r["key"] == "(COUNTY, 2)")
    assert row["moe"] == pytest.approx(calculators.moe_for_rho(0.159, 0.95, 3, 0.9))
    assert row["stage_2"]["value"] == pytest.approx(9 / (2 * 0.159 * 0.9))
    assert row["stage_1"]["value"] == pytest.approx(9 / (2 * 0.159 * 0.1))
    assert row["suppression_threshold"] == calculators.suppression_threshold(
        Fraction("0.159"), Fraction(1, 10), 0.9999, 3
    )
    assert row["workload_total_moe"][3] == pytest.approx(row["moe"] * np.sqrt(46))
    usa = next(r for r in result["levels"] if r["key"] == "(USA, 2)")
    assert usa["total_only"]["value"] == pytest.approx(9 / (2 * 2.134))
    assert "suppression_threshold" not in usa
    curve = result["curves"]["workload"]["(COUNTY, 2)"]
    expected = calculators.threshold_class_probabilities(
        DiscreteGaussian(Fraction(9, 2) / Fraction("0.0159")), (971, 4971, 19971), curve["n"]
    )
    np.testing.assert_allclose(np.array(curve["p"]).T, expected)
    supp = result["curves"]["suppression"]["(COUNTY, 2)"]
    assert supp["threshold"] == 21 and supp["p_given_total_only"][0] >= 0.9999


def test_moe_target_solves_the_budget(preset: dict) -> None:
    result = safetab.evaluate(preset["safetab_p"], targets={"(TRACT, 2)": 20}, decimals=None)
    rho = result["state"]["config"]["privacy_budget_p_level_2_tract"]
    assert rho == calculators.rho_for_moe(20, 0.95, 3, stage_fraction=Fraction(9, 10)).rho_total
    row = next(r for r in result["levels"] if r["key"] == "(TRACT, 2)")
    assert row["moe"] == pytest.approx(20)
    total = Fraction(result["report"]["passes"]["US"]["rho_exact"])
    assert total == Fraction("4.944") - Fraction("0.159") + Fraction(repr(rho))
    rounded = safetab.evaluate(preset["safetab_p"], targets={"(TRACT, 2)": 20}, decimals=3)
    assert rounded["state"]["config"]["privacy_budget_p_level_2_tract"] == round(rho, 3)
    with pytest.raises(params.ParameterError, match="rounds to 0"):
        safetab.evaluate(preset["safetab_p"], targets={"(TRACT, 2)": 1e6}, decimals=3)


def test_puredp_targets_use_the_geometric(preset: dict) -> None:
    state = json.loads(json.dumps(preset["safetab_p"]))
    state["config"]["privacy_defn"] = "puredp"
    result = safetab.evaluate(state, targets={"(COUNTY, 2)": 30}, decimals=None)
    epsilon = result["state"]["config"]["privacy_budget_p_level_2_county"]
    assert epsilon == pytest.approx(calculators.epsilon_for_moe(30, 0.95, 9, 0.9).epsilon_total)
    row = next(r for r in result["levels"] if r["key"] == "(COUNTY, 2)")
    assert row["moe"] == calculators.moe_for_epsilon(epsilon, 0.95, 9, 0.9) <= 30
    assert "epsilon_rdp" in result["curves"]["epsilon_delta"]["US"]


def test_phsafe_targets_and_tau(preset: dict) -> None:
    state = json.loads(json.dumps(preset["phsafe"]))
    state["passes"]["US"]["tau"]["PH3"] = 4
    result = phsafe.evaluate(state, targets={"US": {"PH3/state_A-G": 15}}, decimals=None)
    rows = {r["key"]: r for r in result["passes"]["US"]["rows"]}
    assert rows["PH3/state_A-G"]["sensitivity"] == 10  # 2τ + 2
    rho = result["state"]["passes"]["US"]["privacy_budget"]["PH3"]["state_A-G"]
    assert rho == calculators.rho_for_moe(15, 0.90, 10).rho
    assert rows["PH1_num/usa_*"]["moe"] == pytest.approx(500, abs=0.01)  # PHSafe Table 10


def test_export_round_trips_to_the_same_totals(preset: dict, tmp_path: Path) -> None:
    result = safetab.evaluate(preset["safetab_p"], targets={"(PLACE, 2)": 13})
    exported = tmp_path / "config.json"
    exported.write_text(params.export_text("safetab-p", result["state"]["config"]))
    raw = json.loads(exported.read_text())
    assert list(raw) == list(json.loads((PRESET / "safetab_p/config.json").read_text()))
    report = budget_report(exported, specs_dir=DEMO_SPECS)
    for name, summary in report["passes"].items():
        assert summary["rho_exact"] == result["report"]["passes"][name]["rho_exact"]
        assert summary["rho"] == result["report"]["passes"][name]["rho"]
    ph = phsafe.evaluate(preset["phsafe"], targets={"PR": {"PH2/state_*": 150}})
    exported.write_text(params.export_text("phsafe", ph["state"]["passes"]["PR"]))
    assert budget_report(exported)["passes"]["PR"]["rho"] == ph["passes"]["PR"]["totals"]["rho"]
    with pytest.raises(params.ParameterError, match="stage_1"):
        params.export_text("safetab-p", {**raw, "privacy_budget_p_stage_1_fraction": 1.5})


def test_load_a_real_parameters_folder(census_specs: Path) -> None:
    loaded = params.load_path(census_specs / "safetab_p/production_2020")["safetab_p"]
    assert loaded["stability"] == 9
    assert safetab.evaluate(loaded)["report"]["passes"]["US"]["rho"] == 4.944
    both = params.load_path(census_specs / "phsafe/production_2020")["phsafe"]
    assert set(both["passes"]) == {"US", "PR"}


def test_infinite_budgets_travel_as_text(tmp_path: Path, preset: dict) -> None:
    state = json.loads(json.dumps(preset["safetab_p"]))
    state["config"]["privacy_budget_p_level_2_usa"] = "Infinity"
    result = params.to_transport(safetab.evaluate(state))
    json.dumps(result, allow_nan=False)
    assert result["report"]["passes"]["US"]["rho"] is None
    assert "Infinity" in params.export_text("safetab-p", state["config"])


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    return TestClient(create_app(tmp_path_factory.mktemp("workspace"), token="secret"))


def test_api_needs_the_token_and_a_loopback_host(client: TestClient) -> None:
    assert client.get("/api/presets").status_code == 403
    assert client.get("/api/presets", headers={"X-Explorer-Token": "wrong"}).status_code == 403
    evil = {"X-Explorer-Token": "secret", "Host": "attacker.example:8765"}
    assert client.get("/api/presets", headers=evil).status_code == 403
    assert client.get("/api/presets", headers={"X-Explorer-Token": "secret"}).status_code == 200
    page = client.get("/")
    assert 'content="secret"' in page.text and "https://" not in page.text
    assert client.get("/vendor/plotly.min.js").content.startswith(b"/**")
    assert client.get("/docs").status_code == 404  # Swagger UI would load from a CDN


def test_api_reports_every_config_problem(client: TestClient, preset: dict) -> None:
    state = json.loads(json.dumps(preset["safetab_p"]))
    state["config"]["privacy_budget_p_stage_1_fraction"] = 2
    state["config"]["zero_suppression_chance"] = 1
    response = client.post(
        "/api/safetab-p/evaluate", headers={"X-Explorer-Token": "secret"}, json={"state": state}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert "stage_1_fraction" in error and "zero_suppression_chance" in error


def test_api_refuses_absurd_budgets_with_the_limits_message(
    client: TestClient, preset: dict
) -> None:
    """The explorer parses with the same config parser: 1e300 and 1e-300 are refused."""
    headers = {"X-Explorer-Token": "secret"}
    state = json.loads(json.dumps(preset["safetab_p"]))
    state["config"]["privacy_budget_p_level_2_county"] = 1e300
    state["config"]["privacy_budget_p_level_2_tract"] = 1e-300
    response = client.post("/api/safetab-p/evaluate", headers=headers, json={"state": state})
    assert response.status_code == 422
    error = response.json()["error"]
    assert "privacy_budget_p_level_2_county: ρ 1e300 is above the largest total" in error
    assert "privacy_budget_p_level_2_tract (1e-300), its stage-1 query" in error


def test_truncation_profile_counts_what_truncation_drops() -> None:
    generator = np.random.default_rng(4)
    persons = pd.DataFrame(
        {"MAFID": generator.integers(0, 300, 2000), "QAGE": generator.integers(0, 99, 2000)}
    )
    units = pd.DataFrame({"MAFID": np.r_[np.arange(300), 7]})  # MAFID 7 is not unique
    profile = truncation_profile(persons, units, (1, 3, 6, 10))
    kept_persons = persons.loc[persons["MAFID"] != 7]
    for tau, dropped in zip((1, 3, 6, 10), profile["persons_dropped"], strict=True):
        assert dropped == len(kept_persons) - len(truncate_per_key(kept_persons, tau))
    assert profile["persons"] == len(kept_persons)


@pytest.fixture(scope="module")
def synthetic_stp(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pop") / "stp"
    generate_safetab_p(folder, 15_000, 3, DEMO_SPECS)
    (folder / simulate.SYNTHETIC_MARKER).write_text("{}")
    return folder


def test_simulation_matches_the_predictions(preset: dict, synthetic_stp: Path) -> None:
    result = simulate.simulate_safetab_p(
        preset["safetab_p"], synthetic_stp, 2, 11, lambda *_: None, lambda: None
    )
    tract = result["levels"]["(TRACT, 2)"]
    assert tract["cells"]["predicted_moe"] == 11
    assert 0.93 < tract["cells"]["within_moe"] < 0.98  # 95% MOE, thousands of answers
    supp = tract["suppression"]
    empirical, predicted = np.array(supp["empirical"][0]), np.array(supp["predicted"][0])
    groups = np.array(supp["groups"])
    busy = groups >= 200
    assert np.all(np.abs(empirical[busy] - predicted[busy]) < 0.05)


def test_simulation_refuses_unmarked_folders_and_cancels(
    preset: dict, synthetic_stp: Path, tmp_path: Path
) -> None:
    with pytest.raises(params.ParameterError, match="not synthesized"):
        simulate.require_synthetic(tmp_path, confirmed=False)
    assert simulate.require_synthetic(tmp_path, confirmed=True) == tmp_path
    jobs = simulate.JobManager()

    def work(progress, checkpoint):
        return simulate.simulate_safetab_p(
            preset["safetab_p"], synthetic_stp, 50, 1, progress, checkpoint
        )

    job = jobs.start("safetab-p", work)
    with pytest.raises(params.ParameterError, match="already running"):
        jobs.start("safetab-p", work)
    jobs.cancel(job.id)
    deadline = time.monotonic() + 60
    while job.status == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.status == "cancelled"


@pytest.mark.slow
def test_phsafe_simulation_runs_the_engine_and_postprocessing(preset: dict, tmp_path: Path) -> None:
    from das.synth import generate_phsafe

    folder = tmp_path / "ph"
    config = tmp_path / "config.json"
    config.write_text(params.export_text("phsafe", preset["phsafe"]["passes"]["US"]))
    generate_phsafe(folder, 8_000, 5, config)
    result = simulate.simulate_phsafe(
        preset["phsafe"], folder, 1, 3, "US", "hpd", lambda *_: None, lambda: None
    )
    queries = {q["key"]: q for q in result["queries"]}
    assert queries["PH1_num/usa_*"]["predicted_moe"] == 500
    pooled = result["accuracy"]["moe_within_overall"]
    assert 0.85 < pooled["fraction"] < 0.95  # 90% MOE over thousands of cells
