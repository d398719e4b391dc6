"""Typed configs: the Census production and toy configs parse; every problem gets one line."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from das.specs.config import (
    ConfigError,
    PHSafeGeography,
    PHSafeIterationLevel,
    PHSafeQueryKey,
    PopulationGroupLevel,
    SafeTabGeography,
    detect_product,
    load_phsafe_config,
    load_safetab_p_config,
)


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def safetab_2020(census_specs: Path) -> dict:
    return json.loads((census_specs / "safetab_p/production_2020/config.json").read_text())


def test_safetab_2020_totals_are_exact(census_specs: Path) -> None:
    config = load_safetab_p_config(census_specs / "safetab_p/production_2020/config.json")
    by_pass = {"US": Fraction(0), "PR": Fraction(0)}
    for level in config.tabulated_levels():
        by_pass[level.geography.pass_name] += config.budgets[level]
    assert by_pass == {"US": Fraction("4.944"), "PR": Fraction("2.643")}
    assert config.stage_1_fraction == Fraction(1, 10)
    level = PopulationGroupLevel(SafeTabGeography.COUNTY, 2)
    assert config.thresholds[level] == (971, 4971, 19971)
    # AIANNH regional has budget 0: not tabulated.
    assert PopulationGroupLevel(SafeTabGeography.AIANNH, 1) not in config.tabulated_levels()


@pytest.mark.parametrize("variant", ["input_dir_zcdp", "input_dir_puredp"])
def test_safetab_toy_configs_parse(census_specs: Path, variant: str) -> None:
    path = census_specs / "safetab_p/toy" / variant / "config.json"
    assert detect_product(path) == "safetab-p"
    config = load_safetab_p_config(path)
    assert config.privacy_defn.value == variant.split("_")[-1]


@pytest.mark.parametrize(
    ("folder", "total", "pass_name"), [("us", "1.257281", "US"), ("pr", "1.226649", "PR")]
)
def test_phsafe_2020_totals(census_specs: Path, folder: str, total: str, pass_name: str) -> None:
    path = census_specs / "phsafe/production_2020" / folder / "config.json"
    assert detect_product(path) == "phsafe"
    config = load_phsafe_config(path)
    assert config.pass_name == pass_name
    assert sum(config.privacy_budget[k] for k in config.measured_queries()) == Fraction(total)
    key = PHSafeQueryKey("PH1_num", PHSafeGeography.STATE, PHSafeIterationLevel.RACE)
    assert config.privacy_budget[key] == Fraction("0.141622")
    # The PR pass has no nation level: its usa_* budgets are 0 and are skipped.
    if pass_name == "PR":
        assert all(k.geography is PHSafeGeography.STATE for k in config.measured_queries())


def test_infinity_budget_means_no_noise(tmp_path: Path, safetab_2020: dict) -> None:
    safetab_2020["privacy_budget_p_level_2_usa"] = math.inf  # json writes Infinity
    config = load_safetab_p_config(_write(tmp_path, safetab_2020))
    assert math.isinf(config.budgets[PopulationGroupLevel(SafeTabGeography.USA, 2)])


def test_every_problem_reported_once(tmp_path: Path, safetab_2020: dict) -> None:
    safetab_2020["privacy_budget_p_level_1_usa"] = -1
    safetab_2020["privacy_defn"] = "gaussian"
    safetab_2020["thresholds_p"]["(COUNTY, 2)"] = [3, 2, 1]
    del safetab_2020["run_us"]
    safetab_2020["bogus_key"] = 1
    with pytest.raises(ConfigError) as caught:
        load_safetab_p_config(_write(tmp_path, safetab_2020))
    lines = str(caught.value).splitlines()
    assert "5 problem(s)" in lines[0]
    text = str(caught.value)
    for fragment in (
        "privacy_budget_p_level_1_usa: must be >= 0",
        "privacy_defn",
        "(COUNTY, 2)",
        "run_us",
        "bogus_key",
    ):
        assert fragment in text


def test_unknown_and_missing_budget_keys(tmp_path: Path, safetab_2020: dict) -> None:
    del safetab_2020["privacy_budget_p_level_2_tract"]
    with pytest.raises(ConfigError, match="missing budget keys: privacy_budget_p_level_2_tract"):
        load_safetab_p_config(_write(tmp_path, safetab_2020))
    safetab_2020["privacy_budget_p_level_2_tract"] = 0.1
    safetab_2020["privacy_budget_p_level_3_tract"] = 0.1
    with pytest.raises(ConfigError, match="unknown budget key 'privacy_budget_p_level_3_tract'"):
        load_safetab_p_config(_write(tmp_path, safetab_2020))


def test_stage_fraction_range(tmp_path: Path, safetab_2020: dict) -> None:
    safetab_2020["privacy_budget_p_stage_1_fraction"] = 1.0
    with pytest.raises(ConfigError, match="strictly between 0 and 1"):
        load_safetab_p_config(_write(tmp_path, safetab_2020))


@pytest.mark.parametrize(("chance", "ok"), [(0, True), (0.5, True), (-0.1, False), (1, False)])
def test_zero_suppression_chance_range(
    tmp_path: Path, safetab_2020: dict, chance: float, ok: bool
) -> None:
    # The Census's range: 0 <= p < 1 (0 = no suppression).
    safetab_2020["zero_suppression_chance"] = chance
    if ok:
        config = load_safetab_p_config(_write(tmp_path, safetab_2020))
        assert config.zero_suppression_chance == chance
    else:
        with pytest.raises(ConfigError, match="zero_suppression_chance"):
            load_safetab_p_config(_write(tmp_path, safetab_2020))


def test_missing_thresholds_for_tabulated_level(tmp_path: Path, safetab_2020: dict) -> None:
    del safetab_2020["thresholds_p"]["(TRACT, 2)"]
    with pytest.raises(ConfigError, match=r"thresholds_p missing .*\(TRACT, 2\)"):
        load_safetab_p_config(_write(tmp_path, safetab_2020))


def test_phsafe_rejections(tmp_path: Path, census_specs: Path) -> None:
    base = json.loads((census_specs / "phsafe/production_2020/us/config.json").read_text())
    cases = [
        (lambda d: d["privacy_budget"].update(PH9={"usa_*": 1}), "unknown table 'PH9'"),
        (lambda d: d["privacy_budget"]["PH2"].update({"state_A-G": 1}), "'*' only"),
        (lambda d: d["privacy_budget"]["PH3"].update({"county_*": 1}), "unknown level"),
        (lambda d: d["tau"].pop("PH3"), "tau missing for measured joined tables: PH3"),
        (lambda d: d["tau"].update(PH1_denom=3), "not a joined table"),
        (lambda d: d.update(state_filter=["72", "01"]), "mixes Puerto Rico"),
        (lambda d: d.update(state_filter=["1"]), "2-digit"),
    ]
    for mutate, message in cases:
        data = json.loads(json.dumps(base))
        mutate(data)
        with pytest.raises(ConfigError, match=message):
            load_phsafe_config(_write(tmp_path, data))


def test_not_json_and_missing(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_safetab_p_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_phsafe_config(tmp_path / "missing.json")
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="neither a SafeTab-P nor a PHSafe"):
        detect_product(bad)
