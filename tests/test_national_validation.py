"""Validation at national scale: bounded memory by MAFID buckets, the same report whatever
the number of buckets, and reports that stay small however many rows fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from toy_configs import phsafe_toy_config

import das.validation.phsafe as phsafe_validation
from das.synth import generate_phsafe
from das.validation import validate_phsafe
from das.validation.findings import MAX_ROWS, MAX_VALUES, FailureCollector

REPO = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"
TOY = Path(__file__).resolve().parents[2] / "shared" / "census_specs" / "phsafe" / "toy"


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic inputs with cross-file failures spread over every MAFID bucket."""
    root = tmp_path_factory.mktemp("national_validation") / "inputs"
    generate_phsafe(root, 3_000, 4, DEMO_CONFIG)
    units = pd.read_csv(root / "units.csv", dtype=str, keep_default_na=False)
    occupied = units.index[units["RTYPE"] == "2"]
    units.loc[occupied[::7], "FINAL_POP"] = "99"  # final_pop_matches_persons, many rows
    units.loc[occupied[3::11], "HHRACE"] = "63"  # some hhrace mismatches
    units.loc[len(units)] = units.loc[occupied[5]]  # a repeated MAFID, at the end
    units.to_csv(root / "units.csv", index=False)
    persons = pd.read_csv(root / "persons.csv", dtype=str, keep_default_na=False)
    persons.loc[persons.index[::13], "MAFID"] = "999999999"  # person_unit_exists
    persons.to_csv(root / "persons.csv", index=False)
    return root


def _report(inputs: Path, tmp_path: Path, bucket_rows: int, monkeypatch) -> dict:
    monkeypatch.setattr(phsafe_validation, "BUCKET_ROWS", bucket_rows)
    report = validate_phsafe(inputs / "config.json", inputs, tmp_path / "report", run_gx=False)
    assert not list((tmp_path / "report").glob(".spill-*"))  # the spill is removed
    return {(f.file, f.column, f.check): (f.count, f.rows, f.values) for f in report.failures}


@pytest.mark.parametrize("bucket_rows", [50, 700])
def test_report_is_the_same_whatever_the_buckets(
    broken: Path, tmp_path: Path, bucket_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = _report(broken, tmp_path / "one", 10**9, monkeypatch)
    many = _report(broken, tmp_path / "many", bucket_rows, monkeypatch)
    assert phsafe_validation._buckets_for(broken) > 3  # really bucketed (last call)
    assert many == one
    checks = {check for _, _, check in one}
    assert {"final_pop_matches_persons", "person_unit_exists", "hhrace_matches_householder",
            "expect_column_values_to_be_unique"} <= checks  # fmt: skip
    count, rows, values = one[("units.csv", "FINAL_POP", "final_pop_matches_persons")]
    assert count > MAX_ROWS and len(rows) == MAX_ROWS and rows == sorted(rows)
    assert len(values) == MAX_VALUES and values[0] == "99"


@pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")
def test_census_toy_report_is_the_same_in_buckets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = tmp_path / "toy"
    shutil.copytree(TOY, inputs)
    shutil.copy(phsafe_toy_config("zcdp", tmp_path / "config"), inputs / "config.json")
    assert _report(inputs, tmp_path / "a", 10**9, monkeypatch) == _report(
        inputs, tmp_path / "b", 1, monkeypatch
    )


def test_collector_keeps_the_smallest_rows_of_out_of_order_adds() -> None:
    collector = FailureCollector()
    for rows in ([50, 40, 900], [3, 700, 41], list(range(1000, 2000))):
        collector.add("f", "c", "check", "m", rows=rows, value_columns=("c",))
    (failure,) = collector.failures()
    assert failure.count == 1006
    assert failure.rows == [3, 40, 41, 50, 700, 900, 1000, 1001, 1002, 1003]
    report = json.dumps(failure.to_dict())
    assert len(report) < 1_000  # small whatever the number of failing rows


def test_buckets_without_units_are_checked(tmp_path: Path, monkeypatch) -> None:
    """Persons and geography rows whose MAFIDs fall in a bucket no unit reaches."""
    inputs = tmp_path / "inputs"
    generate_phsafe(inputs, 300, 2, DEMO_CONFIG)
    units = pd.read_csv(inputs / "units.csv", dtype=str, keep_default_na=False)
    mafids = units["MAFID"].astype(int)
    keep = units.loc[mafids % 2 == 0]  # odd MAFIDs: no unit in their bucket (2 buckets)
    keep.to_csv(inputs / "units.csv", index=False)
    report = _report(inputs, tmp_path, 1, monkeypatch)  # rows 1 → buckets by the largest file
    assert phsafe_validation._buckets_for(inputs) > 2
    checks = {check for _, _, check in report}
    assert {"person_unit_exists", "geo_has_unit"} <= checks


def test_the_one_read_raises_a_low_limit_of_open_files_it_needs(
    broken: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every bucket's column files stay open while a file is read: a process started with a
    soft limit below that (1,024 on many systems; about 2,300 files for the national units)
    raises it (das.io.open_files) instead of failing with EMFILE half-way."""
    import resource

    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    if before[1] != resource.RLIM_INFINITY and before[1] < 4096:
        pytest.skip(f"the hard limit ({before[1]}) leaves no room to test")
    monkeypatch.setattr(phsafe_validation, "BUCKET_ROWS", 50)
    assert phsafe_validation._buckets_for(broken) * len(phsafe_validation._SPILLS["units"]) > 512
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, before[1]))
    try:
        report = validate_phsafe(broken / "config.json", broken, tmp_path / "r", run_gx=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    assert {f.check for f in report.failures} >= {"final_pop_matches_persons"}
