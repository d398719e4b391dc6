"""The tuning explorer against the engine: presets, evaluation, export, API, simulation."""

from __future__ import annotations

import json
import re
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from das.budget.config_report import budget_report
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


def test_simulation_cancels(preset: dict, synthetic_stp: Path) -> None:
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
    assert re.fullmatch(r"Simulation cancelled after \d+\.\d s \(during: .+\)", job.summary())


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


# ------------------------------------------------------------------ hostile or careless operator
HEADERS = {"X-Explorer-Token": "secret"}
# Run in a child process: on code that opens a pipe or reads /dev/zero the request never ends,
# and a thread cannot be stopped; the child is killed at the timeout (its memory capped).
LOAD_PROBE = r"""
import json, sys, time
from pathlib import Path
from fastapi.testclient import TestClient
from explorer.app import create_app
client = TestClient(create_app(Path(sys.argv[1]), token="t"), raise_server_exceptions=False)
for name, path in json.loads(sys.argv[2]).items():
    started = time.monotonic()
    response = client.post("/api/load", headers={"X-Explorer-Token": "t"}, json={"path": path})
    error = response.json().get("error", "")
    print(json.dumps([name, response.status_code, error, time.monotonic() - started]), flush=True)
"""
LOAD_PROBE_TIMEOUT = 60


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.integration  # a probe process: a load that hangs on a pipe must be killable
def test_load_refuses_pipes_devices_and_big_files_at_once(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    spec_pipe = tmp_path / "spec-pipe"
    shutil.copytree(DEMO_SPECS, spec_pipe)
    (spec_pipe / "race-and-ethnicity-codes.txt").unlink()
    os.mkfifo(spec_pipe / "race-and-ethnicity-codes.txt")
    zero_config = tmp_path / "zero-config"
    zero_config.mkdir()
    (zero_config / "config.json").symlink_to("/dev/zero")
    folder_config = tmp_path / "folder-config"
    (folder_config / "config.json").mkdir(parents=True)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (params.MAX_PARAMETER_FILE_BYTES + 1))
    paths = {  # the pipe first: on code that blocks, nothing after it runs (no /dev/zero read)
        "fifo": str(fifo),
        "spec pipe": str(spec_pipe),
        "dev zero": "/dev/zero",
        "link to dev zero": str(zero_config),
        "folder as config": str(folder_config),
        "dangling link": str(dangling),
        "big": str(big),
    }
    try:
        probe = subprocess.run(
            [sys.executable, "-c", LOAD_PROBE, str(tmp_path / "ws"), json.dumps(paths)],
            capture_output=True,
            text=True,
            timeout=LOAD_PROBE_TIMEOUT,
            preexec_fn=_cap_memory,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired as exc:
        done = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"/api/load blocked (answered before the timeout: {done or 'none'})")
    assert probe.returncode == 0, probe.stderr[-2000:]
    answers = {name: rest for name, *rest in map(json.loads, probe.stdout.splitlines())}
    expected = {
        "fifo": "is a named pipe (FIFO)",
        "spec pipe": "race-and-ethnicity-codes.txt is a named pipe (FIFO)",
        "dev zero": "/dev/zero is a character device",
        "link to dev zero": "config.json is a character device",
        "folder as config": "config.json is a directory, not a file",
        "dangling link": "is a symbolic link to a missing target",
        "big": f"over the {params.MAX_PARAMETER_FILE_BYTES:,}-byte cap",
    }
    for name, text in expected.items():
        status, error, seconds = answers[name]
        assert status == 422 and text in error, (name, status, error)
        assert seconds < 2, (name, seconds)


def _budget_state(preset: dict, product: str, value: object) -> dict:
    state = json.loads(json.dumps(preset["safetab_p" if product == "safetab-p" else "phsafe"]))
    if product == "safetab-p":
        state["config"]["privacy_budget_p_level_2_county"] = value
    else:
        state["passes"]["US"]["privacy_budget"]["PH1_num"]["usa_*"] = value
    return state


UNEVALUABLE = [1e308, 1e-300, -1, -1e308, "NaN", "nan", "-Infinity", "abc", None, [], {}]


@pytest.mark.parametrize("product", ["safetab-p", "phsafe"])
@pytest.mark.parametrize("value", UNEVALUABLE, ids=repr)
def test_unevaluable_budgets_answer_422(
    client: TestClient, preset: dict, product: str, value: object
) -> None:
    state = _budget_state(preset, product, value)
    other = "safetab-p" if product == "safetab-p" else "phsafe"
    base = preset["safetab_p" if product == "safetab-p" else "phsafe"]
    requests = [
        (f"/api/{product}/evaluate", {"state": state}),
        ("/api/compare", {"product": other, "a": base, "b": state}),
    ]
    for path, body in requests:
        response = client.post(path, headers=HEADERS, json=body)
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert error and "Traceback" not in error


@pytest.mark.parametrize("product", ["safetab-p", "phsafe"])
@pytest.mark.parametrize("value", [1e300, 0, 1e-12, 1e20, "Infinity"], ids=repr)
def test_extreme_budgets_answer_figures_or_422(
    client: TestClient, preset: dict, product: str, value: object
) -> None:
    """Budgets the engine may evaluate or refuse (its bounds are its own): never a 500, and a
    200 is strict JSON."""
    response = client.post(
        f"/api/{product}/evaluate",
        headers=HEADERS,
        json={"state": _budget_state(preset, product, value)},
    )
    assert response.status_code in (200, 422), response.text
    if response.status_code == 422:
        assert response.json()["error"]
    else:
        json.loads(response.text, parse_constant=lambda name: pytest.fail(f"JSON has {name}"))


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        ({"targets": {"(COUNTY, 2)": 1e-300}}, "floating-point range"),
        ({"targets": {"(COUNTY, 2)": -3}}, "MOE target must be a number > 0"),
        ({"targets": {"(NOWHERE, 9)": 3}}, "unknown population-group level"),
        ({"delta": "abc"}, "δ must be a number"),
        ({"delta": 0}, "δ must be strictly between 0 and 1"),
        ({"decimals": "x"}, "decimals must be a whole number"),
        ({"decimals": 1e308}, "decimals must be a whole number"),
        ({"state": "not a state"}, "cannot evaluate these parameters"),
    ],
)
def test_unevaluable_settings_answer_422(
    client: TestClient, preset: dict, extra: dict, text: str
) -> None:
    body = {"state": preset["safetab_p"], **extra}
    response = client.post("/api/safetab-p/evaluate", headers=HEADERS, json=body)
    assert response.status_code == 422 and text in response.json()["error"]


def test_every_endpoint_answers_422_to_a_malformed_body(client: TestClient) -> None:
    for path in (
        "/api/safetab-p/evaluate",
        "/api/phsafe/evaluate",
        "/api/compare",
        "/api/export",
        "/api/load",
        "/api/import",
        "/api/synth",
        "/api/simulate",
        "/api/phsafe/truncation",
    ):
        for value in (None, 1e308, "x", [1], {"a": 1}):
            body = dict.fromkeys(("state", "config", "product", "a", "b", "path", "text"), value)
            response = client.post(path, headers=HEADERS, json=body)
            assert response.status_code == 422, (path, value, response.text)


def test_exports_are_named_by_product_and_pass(client: TestClient, preset: dict) -> None:
    names = {}
    for product, config in [
        ("safetab-p", preset["safetab_p"]["config"]),
        ("phsafe", preset["phsafe"]["passes"]["US"]),
        ("phsafe", preset["phsafe"]["passes"]["PR"]),
    ]:
        response = client.post(
            "/api/export", headers=HEADERS, json={"product": product, "config": config}
        )
        assert response.status_code == 200
        names[response.headers["content-disposition"]] = json.loads(response.text)
    assert sorted(names) == [
        f'attachment; filename="{name}"'
        for name in ("phsafe-pr-config.json", "phsafe-us-config.json", "safetab-p-config.json")
    ]


def test_job_status_texts_say_what_happened(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = simulate.JobManager()

    def finish(progress, checkpoint):
        progress(0.5, "replicate 1/2: release run")
        return {"ok": True}

    def fail(progress, checkpoint):
        raise params.ParameterError("no US pass in the PHSafe parameters")

    for work, pattern in [
        (finish, r"SafeTab-P simulation finished: 2 replicates in \d+\.\d s"),
        (fail, r"SafeTab-P simulation failed after \d+\.\d s: no US pass in the PHSafe parameters"),
    ]:
        job = jobs.start("safetab-p", work, "SafeTab-P simulation", "2 replicates")
        deadline = time.monotonic() + 10
        while job.status == "running" and time.monotonic() < deadline:
            time.sleep(0.01)
        status = job.to_dict()
        assert re.fullmatch(pattern, status["summary"]), status["summary"]
        # The clock stops at the end: an hour later, the job still took what it took.
        with monkeypatch.context() as later:
            now = time.monotonic()
            later.setattr(simulate.time, "monotonic", lambda now=now: now + 3600)
            assert job.to_dict()["seconds"] == status["seconds"] < 60
            assert job.to_dict()["summary"] == status["summary"]


# ------------------------------------------------------------------ synthetic populations only
@pytest.fixture(scope="module")
def workspace_client(tmp_path_factory) -> tuple[TestClient, Path, dict, dict]:
    """A workspace with one SafeTab-P and one PHSafe population synthesized through the API."""
    workspace = tmp_path_factory.mktemp("explorer-ws")
    client = TestClient(create_app(workspace, token="secret"))
    preset = params.load_preset()
    made = {}
    for product in ("safetab-p", "phsafe"):
        response = client.post(
            "/api/synth",
            headers=HEADERS,
            json={
                "product": product,
                "persons": 3000,
                "seed": 4,
                "safetab_p": preset["safetab_p"],
                "phsafe": preset["phsafe"],
            },
        )
        assert response.status_code == 200, response.text
        made[product] = response.json()
    return client, workspace, made, preset


def _truncation(client: TestClient, preset: dict, data_dir: object, **extra) -> object:
    body = {"state": preset["phsafe"], "data_dir": data_dir, **extra}
    return client.post("/api/phsafe/truncation", headers=HEADERS, json=body)


def _simulate(client: TestClient, preset: dict, data_dir: object, **extra) -> object:
    body = {
        "product": "safetab-p",
        "state": preset["safetab_p"],
        "data_dir": data_dir,
        "replicates": 1,
        **extra,
    }
    return client.post("/api/simulate", headers=HEADERS, json=body)


def test_populations_synthesized_earlier_are_listed(workspace_client) -> None:
    client, workspace, made, _ = workspace_client
    listed = client.get("/api/populations", headers=HEADERS).json()
    assert {p["path"] for p in listed["populations"]} == {m["path"] for m in made.values()}
    again = TestClient(create_app(workspace, token="other"))  # a new server, same workspace
    relisted = again.get("/api/populations", headers={"X-Explorer-Token": "other"}).json()
    assert relisted["populations"] == listed["populations"]


def test_truncation_runs_on_a_population_the_explorer_wrote(workspace_client) -> None:
    client, _, made, preset = workspace_client
    response = _truncation(client, preset, made["phsafe"]["path"])
    assert response.status_code == 200, response.text
    assert set(response.json()["tables"]) >= {"PH2", "PH3"}


def _copy(source: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(source, target)
    return target


def test_a_copied_or_forged_manifest_is_refused(workspace_client, tmp_path: Path) -> None:
    """The marker is bound to the files it describes; the confirm bypass is gone."""
    import hashlib

    from explorer import populations

    client, workspace, made, preset = workspace_client
    stp = Path(made["safetab-p"]["path"])
    ph = Path(made["phsafe"]["path"])
    manifest = populations.MANIFEST

    # The marker next to other records (same names, one digit changed: same size).
    tampered = _copy(stp, workspace / "tampered")
    records = tampered / "person-records.txt"
    text = records.read_text()
    records.write_text(text[:-3] + ("1" if text[-3] != "1" else "2") + text[-2:])
    # The marker copied next to files it never described (PHSafe records under it).
    foreign = workspace / "foreign"
    foreign.mkdir()
    for name in ("persons.csv", "units.csv", "geo.csv"):
        (foreign / name).write_bytes((ph / name).read_bytes())
    (foreign / manifest).write_bytes((stp / manifest).read_bytes())
    # The manifest edited to describe the other files (digests recomputed, no key).
    forged = _copy(ph, workspace / "forged")
    (forged / "persons.csv").write_text((forged / "persons.csv").read_text() + "\n")
    described = json.loads((forged / manifest).read_text())
    data = (forged / "persons.csv").read_bytes()
    described["files"]["persons.csv"] = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (forged / manifest).write_text(json.dumps(described))
    # A file added; a file swapped for a link; an exact copy outside the workspace.
    added = _copy(stp, workspace / "added")
    (added / "person-records.parquet").write_bytes(b"PAR1")
    linked = _copy(stp, workspace / "linked")
    (linked / "GRF-C.txt").unlink()
    (linked / "GRF-C.txt").symlink_to(stp / "GRF-C.txt")
    outside = _copy(stp, tmp_path / "outside")
    # A marker of the earlier explorer (no digests).
    old = _copy(stp, workspace / "old")
    (old / manifest).write_text(json.dumps({"product": "safetab-p", "persons": 3000, "seed": 4}))

    cases = {
        tampered: "person-records.txt differs from the file the explorer wrote (SHA-256)",
        foreign: "not written by the explorer: geo.csv, persons.csv, units.csv",
        forged: "not signed by this workspace's explorer",
        added: "not written by the explorer: person-records.parquet",
        linked: "GRF-C.txt is no longer a regular file",
        outside: "not a population folder of the workspace",
        old: "not one this explorer writes",
    }
    for folder, reason in cases.items():
        for response in (
            _simulate(client, preset, str(folder)),
            _simulate(client, preset, str(folder), confirm=True),
            _truncation(client, preset, str(folder), confirm=True),
        ):
            assert response.status_code == 422, (folder.name, response.text)
            assert reason in response.json()["error"], (folder.name, response.text)
    listed = client.get("/api/populations", headers=HEADERS).json()
    assert {p["path"] for p in listed["populations"]} == {str(stp), str(ph)}
    refused = {Path(r["path"]).name for r in listed["refused"]}
    assert refused >= {"foreign", "forged", "added", "linked", "old"}
    # No simulation was started by any of those requests.
    first = _simulate(client, preset, str(stp))
    assert first.status_code == 200 and first.json()["status"] == "running"
    client.post(f"/api/jobs/{first.json()['id']}/cancel", headers=HEADERS)


def test_the_confirm_bypass_is_gone(workspace_client, synthetic_stp: Path) -> None:
    """A folder the explorer did not write (here a `das synth`-style output) is refused
    whatever the request says."""
    client, _, _, preset = workspace_client
    for extra in ({}, {"confirm": True}, {"confirm": "yes"}):
        response = _simulate(client, preset, str(synthetic_stp), **extra)
        assert response.status_code == 422
        assert "explorer synthesized in its workspace" in response.json()["error"]
    page = client.get("/").text
    assert "confirm" not in page
