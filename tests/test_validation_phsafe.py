"""PHSafe input validation (engine layer, no GX): every check fails on a broken fixture.

Clean inputs come from the synthetic generator (demo US config); each test copies them, breaks
one thing and asserts the exact check, column, failing count and first row. The Census toy set
is deliberately inconsistent: its exact list of failures is pinned here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from toy_configs import phsafe_toy_config

from das.resources import demo_specs
from das.synth import generate_phsafe
from das.validation import validate_phsafe

DEMO_CONFIG = demo_specs("phsafe") / "config.json"
PERSONS = 2_000
REGEX = "expect_column_values_to_match_regex"
IN_SET = "expect_column_values_to_be_in_set"


@pytest.fixture(scope="session")
def clean_inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("phsafe_clean")
    generate_phsafe(root / "inputs", PERSONS, 21, DEMO_CONFIG)
    return root / "inputs"


@pytest.fixture
def inputs(clean_inputs, tmp_path) -> Path:
    target = tmp_path / "inputs"
    shutil.copytree(clean_inputs, target)
    return target


def frame(path: Path) -> pd.DataFrame:
    """The CSV as text, indexed by 1-based row number."""
    data = pd.read_csv(path, dtype=str, keep_default_na=False)
    data.index = pd.RangeIndex(1, len(data) + 1)
    return data


def write(path: Path, data: pd.DataFrame) -> None:
    data.to_csv(path, index=False)


def set_field(path: Path, row: int, column: str, value: str) -> None:
    data = frame(path)
    data.loc[row, column] = value
    write(path, data)


def validate(inputs: Path, tmp_path: Path):
    return validate_phsafe(inputs / "config.json", inputs, tmp_path / "report", run_gx=False)


def only(report, check: str, file: str | None = None, column: str | None = None):
    found = report.find(check, file, column)
    assert len(found) == 1, [f.line() for f in report.failures]
    return found[0]


def household(inputs: Path, size: int, *relationships: str) -> tuple[int, pd.DataFrame]:
    """(units row, its persons) of the first occupied unit of ``size`` persons with these
    RELSHIP codes among them."""
    units = frame(inputs / "units.csv")
    persons = frame(inputs / "persons.csv")
    grouped = persons.groupby("MAFID")
    for row, unit in units[(units["RTYPE"] == "2") & (units["FINAL_POP"] == str(size))].iterrows():
        members = grouped.get_group(unit["MAFID"])
        if all((members["RELSHIP"] == code).any() for code in relationships):
            return row, members
    raise AssertionError("no such household in the fixture")


# ------------------------------------------------------------------------------------------------
# Clean inputs and the Census toy set
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_synthetic_inputs_validate_cleanly(seed, tmp_path) -> None:
    generate_phsafe(tmp_path / "in", 3_000, seed, DEMO_CONFIG)
    report = validate(tmp_path / "in", tmp_path)
    assert report.ok, report.summary_lines()
    assert report.failures == [] and report.skipped == []
    assert {"hht2_matches_relship", "final_pop_matches_persons", "unit_has_geo"} <= set(
        report.checks_run
    )


def test_synthetic_parquet_and_puerto_rico_inputs_validate_cleanly(tmp_path) -> None:
    config = json.loads(DEMO_CONFIG.read_text())
    config["state_filter"] = ["72"]
    pr_config = tmp_path / "pr.json"
    pr_config.write_text(json.dumps(config))
    generate_phsafe(tmp_path / "pr", 1_000, 4, pr_config, file_format="parquet")
    report = validate(tmp_path / "pr", tmp_path)
    assert report.ok, report.summary_lines()
    assert {s.file for s in report.files} == {"persons.parquet", "units.parquet", "geo.parquet"}


TOY_FAILURES = [
    # (check, file, column, count, first rows, values)
    ("state_in_filter", "geo.csv", "TABBLKST", 3, [3, 4, 5], ["29", "29", "29"]),
    ("state_not_tabulated", "geo.csv", "TABBLKST", 1, [6], ["72"]),
    ("expect_column_values_to_be_unique", "geo.csv", "MAFID", 2, [2, 6], ["100000002"] * 2),
    ("householder_unique", "persons.csv", "RELSHIP", 2, [4, 7], ["100000002,20"] * 2),
    ("partner_unique", "persons.csv", "RELSHIP", 2, [2, 3], ["100000001,21"] * 2),
    ("final_pop_matches_persons", "units.csv", "FINAL_POP", 2, [1, 2], ["2", "1"]),
]


@pytest.mark.parametrize("definition", ["zcdp", "puredp"])
def test_census_toy_set_fails_exactly_these_checks(census_specs, definition, tmp_path) -> None:
    toy = census_specs / "phsafe" / "toy"
    config = phsafe_toy_config(definition, tmp_path)  # zCDP scaled within the ceiling
    report = validate_phsafe(config, toy, tmp_path / "report", run_gx=False)
    assert not report.ok
    found = [(f.check, f.file, f.column, f.count, f.rows, f.values) for f in report.failures]
    assert sorted(found) == sorted(TOY_FAILURES)
    assert [f.check for f in report.warnings] == ["state_not_tabulated"]


# ------------------------------------------------------------------------------------------------
# Suite rules
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "row", "column", "value", "check"),
    [
        ("persons.csv", 3, "RTYPE", "4", IN_SET),
        ("persons.csv", 4, "MAFID", "10000001", REGEX),
        ("persons.csv", 5, "QAGE", "120", REGEX),
        ("persons.csv", 6, "CENHISP", "0", IN_SET),
        ("persons.csv", 7, "CENRACE", "1", REGEX),
        ("persons.csv", 8, "RELSHIP", "39", REGEX),
        ("units.csv", 3, "FINAL_POP", "-1", REGEX),
        ("units.csv", 4, "HHT2", "13", REGEX),
        ("units.csv", 5, "TEN", "5", IN_SET),
        ("units.csv", 6, "CPLT", "6", IN_SET),
        ("units.csv", 7, "HHRACE", "64", REGEX),
        ("geo.csv", 8, "REGIONCE", "5", IN_SET),
        ("geo.csv", 9, "TABBLK", "123", REGEX),
        ("geo.csv", 10, "TABBLKST", "00", IN_SET),
    ],
)
def test_suite_rule_fails_on_one_bad_value(inputs, tmp_path, file, row, column, value, check):
    set_field(inputs / file, row, column, value)
    report = validate(inputs, tmp_path)
    failure = only(report, check, file, column)
    assert (failure.count, failure.rows, failure.values) == (1, [row], [value])


def test_duplicate_unit_mafid(inputs, tmp_path) -> None:
    units = frame(inputs / "units.csv")
    write(inputs / "units.csv", pd.concat([units, units.loc[[9]]]))
    report = validate(inputs, tmp_path)
    failure = only(report, "expect_column_values_to_be_unique", "units.csv", "MAFID")
    assert (failure.count, failure.rows) == (2, [9, len(units) + 1])
    assert failure.values == [units.loc[9, "MAFID"]] * 2


# ------------------------------------------------------------------------------------------------
# Persons against units
# ------------------------------------------------------------------------------------------------


def test_person_unit_exists(inputs, tmp_path) -> None:
    set_field(inputs / "persons.csv", 12, "MAFID", "999999999")
    report = validate(inputs, tmp_path)
    failure = only(report, "person_unit_exists", "persons.csv", "MAFID")
    assert (failure.count, failure.rows, failure.values) == (1, [12], ["999999999"])


def test_person_rtype_and_relship_match_the_unit(inputs, tmp_path) -> None:
    persons = frame(inputs / "persons.csv")
    housed = persons.index[persons["RELSHIP"] == "25"][0]
    set_field(inputs / "persons.csv", housed, "RTYPE", "5")
    report = validate(inputs, tmp_path)
    failure = only(report, "person_rtype_matches_unit", "persons.csv", "RTYPE")
    assert (failure.count, failure.rows) == (1, [housed])
    failure = only(report, "relship_matches_rtype", "persons.csv", "RELSHIP")
    assert (failure.count, failure.rows, failure.values) == (1, [housed], ["5,25"])


def test_householder_unique_and_present(inputs, tmp_path) -> None:
    _, members = household(inputs, 3, "25")
    child = members.index[members["RELSHIP"] == "25"][0]
    householder = members.index[members["RELSHIP"] == "20"][0]
    set_field(inputs / "persons.csv", child, "RELSHIP", "20")
    unit_row, other = household(inputs, 2, "34")
    set_field(inputs / "persons.csv", other.index[other["RELSHIP"] == "20"][0], "RELSHIP", "36")
    report = validate(inputs, tmp_path)
    failure = only(report, "householder_unique", "persons.csv", "RELSHIP")
    assert (failure.count, failure.rows) == (2, sorted([householder, child]))
    failure = only(report, "householder_present", "units.csv", "MAFID")
    assert (failure.count, failure.rows) == (1, [unit_row])


def test_partner_unique(inputs, tmp_path) -> None:
    _, members = household(inputs, 3, "21", "25")
    child = members.index[members["RELSHIP"] == "25"][0]
    spouse = members.index[members["RELSHIP"] == "21"][0]
    set_field(inputs / "persons.csv", child, "RELSHIP", "21")
    report = validate(inputs, tmp_path)
    failure = only(report, "partner_unique", "persons.csv", "RELSHIP")
    assert (failure.count, failure.rows) == (2, sorted([spouse, child]))


# ------------------------------------------------------------------------------------------------
# Units against their persons
# ------------------------------------------------------------------------------------------------


def _alone(inputs: Path) -> int:
    row, _ = household(inputs, 1, "20")
    return row


def test_final_pop_matches_persons(inputs, tmp_path) -> None:
    row = _alone(inputs)
    set_field(inputs / "units.csv", row, "FINAL_POP", "2")
    report = validate(inputs, tmp_path)
    failure = only(report, "final_pop_matches_persons", "units.csv", "FINAL_POP")
    assert (failure.count, failure.rows, failure.values) == (1, [row], ["2"])


def test_householder_race_and_origin(inputs, tmp_path) -> None:
    row, members = household(inputs, 1, "20")
    race = members["CENRACE"].iloc[0]
    set_field(inputs / "units.csv", row, "HHRACE", "63" if race != "63" else "01")
    set_field(
        inputs / "units.csv", row, "HHSPAN", "2" if members["CENHISP"].iloc[0] == "1" else "1"
    )
    report = validate(inputs, tmp_path)
    assert only(report, "hhrace_matches_householder", "units.csv", "HHRACE").rows == [row]
    assert only(report, "hhspan_matches_householder", "units.csv", "HHSPAN").rows == [row]


def test_not_in_universe_codes_and_tenure(inputs, tmp_path) -> None:
    units = frame(inputs / "units.csv")
    vacant = units.index[(units["RTYPE"] == "2") & (units["FINAL_POP"] == "0")][0]
    quarters = units.index[units["RTYPE"] == "4"][0]
    set_field(inputs / "units.csv", vacant, "TEN", "1")
    set_field(inputs / "units.csv", quarters, "HHT", "4")
    occupied = _alone(inputs)
    set_field(inputs / "units.csv", occupied, "TEN", "0")
    report = validate(inputs, tmp_path)
    failure = only(report, "niu_code_zero", "units.csv", "TEN")
    assert (failure.count, failure.rows, failure.values) == (1, [vacant], ["1"])
    assert only(report, "niu_code_zero", "units.csv", "HHT").rows == [quarters]
    assert only(report, "tenure_in_universe", "units.csv", "TEN").rows == [occupied]


@pytest.mark.parametrize(
    ("column", "value", "check"),
    [
        ("CPLT", "1", "cplt_matches_relship"),
        ("HHT", "1", "hht_matches_relship"),
        ("HHT2", "01", "hht2_matches_relship"),
        ("NPF", "2", "npf_matches_relship"),
    ],
)
def test_household_type_codes_match_relationships(inputs, tmp_path, column, value, check):
    row = _alone(inputs)
    set_field(inputs / "units.csv", row, column, value)
    report = validate(inputs, tmp_path)
    failure = only(report, check, "units.csv", column)
    assert (failure.count, failure.rows, failure.values) == (1, [row], [value])
    assert len(report.errors) == 1


def test_householder_sex_consistent(inputs, tmp_path) -> None:
    units = frame(inputs / "units.csv")
    row = units.index[(units["HHT"] == "4") & (units["HHT2"] == "09")][0]
    set_field(inputs / "units.csv", row, "HHT2", "05")  # female living alone; HHT 4 says male
    report = validate(inputs, tmp_path)
    failure = only(report, "householder_sex_consistent", "units.csv", "HHT,HHT2")
    assert (failure.count, failure.rows, failure.values) == (1, [row], ["4,05"])
    assert len(report.errors) == 1


def test_cohabiting_couple_with_own_children(inputs, tmp_path) -> None:
    row, _ = household(inputs, 3, "22", "25")
    units = frame(inputs / "units.csv")
    assert units.loc[row, "CPLT"] == "3"
    set_field(inputs / "units.csv", row, "CPLT", "1")
    report = validate(inputs, tmp_path)
    assert only(report, "cplt_matches_relship", "units.csv", "CPLT").rows == [row]


# ------------------------------------------------------------------------------------------------
# geo against units, state filter, config
# ------------------------------------------------------------------------------------------------


def test_geo_and_units_hold_the_same_units(inputs, tmp_path) -> None:
    geo = frame(inputs / "geo.csv")
    dropped = geo.loc[15, "MAFID"]
    write(inputs / "geo.csv", geo.drop(index=15))
    set_field(inputs / "geo.csv", 20, "MAFID", "999999998")  # row 20 of the shortened file
    units = frame(inputs / "units.csv")
    replaced = geo.loc[21, "MAFID"]
    report = validate(inputs, tmp_path)
    failure = only(report, "geo_has_unit", "geo.csv", "MAFID")
    assert (failure.count, failure.rows, failure.values) == (1, [20], ["999999998"])
    failure = only(report, "unit_has_geo", "units.csv", "MAFID")
    expected = sorted(units.index[units["MAFID"].isin([dropped, replaced])])
    assert (failure.count, failure.rows) == (2, expected)


def test_geo_rtype_matches_unit(inputs, tmp_path) -> None:
    geo = frame(inputs / "geo.csv")
    row = geo.index[geo["RTYPE"] == "2"][0]
    set_field(inputs / "geo.csv", row, "RTYPE", "4")
    report = validate(inputs, tmp_path)
    failure = only(report, "geo_rtype_matches_unit", "geo.csv", "RTYPE")
    assert (failure.count, failure.rows, failure.values) == (1, [row], ["4"])


def test_state_filter(inputs, tmp_path) -> None:
    geo = frame(inputs / "geo.csv")
    state = geo.loc[1, "TABBLKST"]
    in_state = list(geo.index[geo["TABBLKST"] == state])
    config = json.loads((inputs / "config.json").read_text())
    config["state_filter"] = [s for s in config["state_filter"] if s != state]
    (inputs / "config.json").write_text(json.dumps(config))
    set_field(inputs / "geo.csv", 30, "TABBLKST", "72")
    report = validate(inputs, tmp_path)
    failure = only(report, "state_in_filter", "geo.csv", "TABBLKST")
    assert (failure.count, failure.rows[:3]) == (len(in_state), in_state[:3])
    warning = only(report, "state_not_tabulated", "geo.csv", "TABBLKST")
    assert (warning.severity, warning.rows, warning.values) == ("warning", [30], ["72"])


def test_config_that_does_not_parse(inputs, tmp_path) -> None:
    config = json.loads((inputs / "config.json").read_text())
    config["state_filter"] = ["72", "01"]
    (inputs / "config.json").write_text(json.dumps(config))
    report = validate(inputs, tmp_path)
    failure = only(report, "config_parses", "config.json")
    assert any("state_filter" in line for line in failure.values)
    assert {"state_in_filter", "state_not_tabulated"} <= {s.check for s in report.skipped}


def test_missing_units_file_skips_the_cross_file_checks(inputs, tmp_path) -> None:
    (inputs / "units.csv").unlink()
    report = validate(inputs, tmp_path)
    only(report, "file_present", "units.csv")
    skipped = {s.check for s in report.skipped}
    assert {"person_unit_exists", "final_pop_matches_persons", "geo_has_unit"} <= skipped
    assert {s.file for s in report.files} == {"units.csv", "geo.csv", "persons.csv"}
