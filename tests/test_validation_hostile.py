"""Validation as a careless or hostile curator meets it: empty inputs, budgets given as strings,
paths that are not files, a bad byte deep in a file, a huge bad value (issue: release integrity).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from spec_fixtures import DEMO_SPECS

from das.synth import generate_phsafe, generate_safetab_p
from das.validation import validate_phsafe, validate_safetab_p

REPO = Path(__file__).resolve().parents[1]
PHSAFE_DEMO_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"


@pytest.fixture(scope="module")
def safetab_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-safetab")
    specs = root / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    config = json.loads((specs / "config.json").read_text())
    config.update(state_filter_us=["01", "11"], run_pr=False)
    (specs / "config.json").write_text(json.dumps(config))
    generate_safetab_p(root / "clean", 800, 3, specs)
    return root / "clean"


@pytest.fixture
def inputs(safetab_inputs: Path, tmp_path: Path) -> Path:
    target = tmp_path / "inputs"
    shutil.copytree(safetab_inputs, target)
    return target


def _validate(inputs: Path, tmp_path: Path):
    return validate_safetab_p(inputs / "config.json", inputs, tmp_path / "report")


def _failure(report, check: str):
    found = [f for f in report.errors if f.check == check]
    assert found, [f.line() for f in report.errors]
    return found[0]


def test_a_person_file_with_a_header_and_no_records_is_an_error(
    inputs: Path, tmp_path: Path
) -> None:
    people = inputs / "person-records.txt"
    people.write_text(people.read_text().splitlines()[0] + "\n")
    report = _validate(inputs, tmp_path)
    assert not report.ok
    assert _failure(report, "file_has_records").file == "person-records.txt"


def test_phsafe_zero_persons_or_units_is_an_error(tmp_path: Path) -> None:
    data = tmp_path / "ph"
    generate_phsafe(data, 300, 4, PHSAFE_DEMO_CONFIG)
    for name in ("persons.csv", "units.csv"):
        path = data / name
        path.write_text(path.read_text().splitlines()[0] + "\n")
    report = validate_phsafe(data / "config.json", data, tmp_path / "report")
    assert not report.ok
    empty = {f.file for f in report.errors if f.check == "file_has_records"}
    assert empty == {"persons.csv", "units.csv"}


def test_a_budget_written_as_a_json_string_is_refused(inputs: Path, tmp_path: Path) -> None:
    config_path = inputs / "config.json"
    config = json.loads(config_path.read_text())
    config["privacy_budget_p_level_1_state"] = "0.5"
    config_path.write_text(json.dumps(config))
    failure = _failure(_validate(inputs, tmp_path), "config_parses")
    assert "must be a JSON number, not a JSON str" in failure.message


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling symlink"])
def test_an_input_path_that_is_not_a_file_is_named_for_what_it_is(
    inputs: Path, tmp_path: Path, kind: str
) -> None:
    people = inputs / "person-records.txt"
    people.unlink()
    if kind == "directory":
        people.mkdir()
        expected = "is a directory, not a file"
    elif kind == "fifo":
        os.mkfifo(people)
        expected = "is a named pipe (FIFO), not a regular file"
    else:
        people.symlink_to(tmp_path / "gone.txt")
        expected = "is a symbolic link to a missing target"
    report = _validate(inputs, tmp_path)  # returns: a FIFO is never opened
    assert not report.ok
    messages = " ".join(f.message for f in report.errors)
    assert expected in messages and "not found" not in messages


def test_an_invalid_byte_is_reported_at_its_row(inputs: Path, tmp_path: Path) -> None:
    people = inputs / "person-records.txt"
    lines = people.read_bytes().split(b"\n")
    lines[5] = lines[5].replace(b"|", b"|\xff", 1)  # record row 5 (line 0 is the header)
    people.write_bytes(b"\n".join(lines))
    failure = _failure(_validate(inputs, tmp_path), "file_readable")
    assert "invalid UTF-8 data" in failure.message and failure.message.endswith(
        "in data row 5 (the header line is row 0)"
    )


def test_a_huge_bad_value_is_cut_to_a_prefix_in_every_report(inputs: Path, tmp_path: Path) -> None:
    people = inputs / "person-records.txt"
    lines = people.read_text().split("\n")
    fields = lines[1].split("|")
    fields[0] = "9" * 1_000_000  # QAGE, one megabyte long
    lines[1] = "|".join(fields)
    people.write_text("\n".join(lines))
    report = _validate(inputs, tmp_path)
    assert not report.ok
    shown = [value for f in report.errors for value in f.values]
    assert shown and max(len(value) for value in shown) < 80
    assert any("(1,000,000 characters)" in value for value in shown)
    for path in (tmp_path / "report").rglob("*"):
        if path.is_file():
            assert "9" * 1000 not in path.read_text(errors="replace"), path


def test_a_phsafe_budget_written_as_a_string_is_refused_but_python_callers_may_use_text(
    tmp_path: Path,
) -> None:
    from das.specs.config import ConfigError, PHSafeConfig, load_phsafe_config

    settings = json.loads(PHSAFE_DEMO_CONFIG.read_text())
    settings["privacy_budget"]["PH2"]["usa_*"] = "0.01"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match=r"privacy_budget\.PH2\.usa_\*: must be a JSON number"):
        load_phsafe_config(path)
    # The typed model itself takes exact decimal text from Python code (not from a file).
    assert PHSafeConfig.model_validate(settings).privacy_budget
