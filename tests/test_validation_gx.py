"""The reviewed suites, Great Expectations runs and Data Docs, `das validate` exit codes.

Tests that import Great Expectations (about 10 s once per process on this machine) are marked
slow; the suite-format, fail-closed and usage tests are fast.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from spec_fixtures import DEMO_SPECS
from toy_configs import phsafe_toy_config

from das.cli import main
from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.safetab_p import GRF_C, PERSON_RECORDS
from das.synth import generate_safetab_p
from das.validation import validate_safetab_p
from das.validation.specs import SPEC_TABLES
from das.validation.suites import (
    COLUMN_TYPES,
    EXPECTATIONS_DIR,
    SuiteError,
    failing_mask,
    load_suite,
)

TABLES = {
    **{spec.stem: spec for spec in (PERSON_RECORDS, GRF_C, PERSONS, UNITS, GEO)},
    **{spec.stem: spec for spec in SPEC_TABLES.values()},
}


@pytest.fixture(scope="module")
def clean_inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gx_clean")
    specs = root / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    config = json.loads((specs / "config.json").read_text())
    config.update(state_filter_us=["01", "11"], run_pr=False)
    (specs / "config.json").write_text(json.dumps(config))
    generate_safetab_p(root / "inputs", 1_500, 7, specs)
    return root / "inputs"


@pytest.fixture
def inputs(clean_inputs, tmp_path) -> Path:
    shutil.copytree(clean_inputs, tmp_path / "inputs")
    return tmp_path / "inputs"


def set_field(path: Path, row: int, column: str, value: str) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    fields = lines[row].split("|")
    fields[header.index(column)] = value
    lines[row] = "|".join(fields)
    path.write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------
# The suites (no GX import)
# ------------------------------------------------------------------------------------------------


def test_one_suite_per_input_file_and_every_column_checked() -> None:
    assert sorted(p.stem for p in EXPECTATIONS_DIR.glob("*.json")) == sorted(TABLES)
    for name, spec in TABLES.items():
        suite = load_suite(name)
        for column in spec.column_names:
            rules = [
                e["type"]
                for e in suite.of_types(COLUMN_TYPES)
                if e["kwargs"].get("column") == column
            ]
            assert "expect_column_values_to_be_of_type" in rules, (name, column)
            assert len(rules) >= 2, (name, column)  # the type plus a value rule
        assert all(e.get("meta", {}).get("rule") for e in suite.expectations), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"type": "expect_column_mean_to_be_between"}, "not supported"),
        ({"kwargs": {"column": "QAGE", "regex": "^[0-9]+$", "mostly": 0.9}}, "mostly"),
        ({"kwargs": {"column": "QAGE", "regex": "[0-9]+"}}, "anchored"),
    ],
)
def test_suite_loader_refuses_rules_the_engine_cannot_enforce(tmp_path, change, message):
    data = json.loads((EXPECTATIONS_DIR / "person-records.json").read_text())
    data["expectations"][2].update(change)
    (tmp_path / "person-records.json").write_text(json.dumps(data))
    with pytest.raises(SuiteError, match=message):
        load_suite("person-records", tmp_path)


def test_engine_twin_of_the_age_and_race_rules() -> None:
    suite = load_suite("person-records")
    (age,) = [e for e in suite.expectations if e["kwargs"].get("column") == "QAGE"][1:]
    values = ["0", "5", "05", "028", "115", "116", "1150", "-1", "", " 5", "5 ", "x"]
    mask = failing_mask(age, pa.chunked_array([values], pa.large_string()))
    assert [v for v, bad in zip(values, mask, strict=True) if bad] == values[5:]
    (race,) = [e for e in suite.expectations if e["kwargs"].get("column") == "QRACE2"][1:]
    values = ["1010", "Null", "null", "NULL", "101", "0101", "10100", None]
    mask = failing_mask(race, pa.chunked_array([values], pa.large_string()))
    assert np.flatnonzero(mask).tolist() == [2, 3, 4, 5, 6, 7]  # null fails closed


# ------------------------------------------------------------------------------------------------
# Fail closed, usage errors (no GX import)
# ------------------------------------------------------------------------------------------------


def test_an_internal_error_fails_closed_and_still_writes_the_report(
    inputs, tmp_path, monkeypatch
) -> None:
    import das.validation.safetab_p as module

    def broken(*args, **kwargs):
        raise RuntimeError("secret value 4242")

    monkeypatch.setattr(module, "_persons", broken)
    report = validate_safetab_p(inputs / "config.json", inputs, tmp_path / "report", run_gx=False)
    assert not report.ok
    (failure,) = report.find("internal_error")
    assert "RuntimeError" in failure.message
    for name in ("report.json", "report.html", "validation.log"):
        text = (tmp_path / "report" / name).read_text()
        assert "RuntimeError" in text
        assert "4242" not in text  # the exception's message could quote data: never written


def test_usage_errors_exit_2_and_write_nothing(tmp_path, capsys) -> None:
    assert main(["validate", "phsafe", "--config", str(tmp_path / "no.json"), "--data", "."]) == 2
    config = tmp_path / "config.json"
    config.write_text("{}")
    missing = tmp_path / "missing"
    assert main(["validate", "safetab-p", "--config", str(config), "--data", str(missing)]) == 2
    assert "data folder not found" in capsys.readouterr().err
    assert not missing.exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", "safetab-p", "--config", str(config)])
    assert exit_info.value.code == 2


# ------------------------------------------------------------------------------------------------
# Great Expectations (slow: imports GX)
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_suites_load_into_great_expectations() -> None:
    import great_expectations as gx

    for name in TABLES:
        suite = load_suite(name)
        loaded = gx.ExpectationSuite(**json.loads(suite.path.read_text()))
        assert loaded.name == name
        assert [(e["type"], e["kwargs"]) for e in loaded.to_json_dict()["expectations"]] == [
            (e["type"], e["kwargs"]) for e in suite.expectations
        ]


@pytest.mark.slow
def test_gx_and_engine_agree_and_data_docs_are_built(inputs, tmp_path) -> None:
    set_field(inputs / "person-records.txt", 5, "QSEX", "0")
    set_field(inputs / "person-records.txt", 9, "QRACE1", "Zq9x")
    set_field(inputs / "GRF-C.txt", 3, "PLACEFP", "1234")
    report = validate_safetab_p(inputs / "config.json", inputs, tmp_path / "report")
    assert not report.ok
    by_file = {s.file: s for s in report.files}
    assert by_file["person-records.txt"].gx_success is False
    assert by_file["GRF-C.txt"].gx_success is False
    assert by_file["race-and-ethnicity-codes.txt"].gx_success is True
    assert by_file["person-records.txt"].gx_failed_expectations == 2
    assert not by_file["person-records.txt"].gx_sampled
    # Everything GX found, the engine found too (no GX-only failures).
    assert [f for f in report.failures if f.source == "great_expectations"] == []
    assert report.find("expect_column_values_to_be_in_set", column="QSEX")[0].rows == [5]
    docs = tmp_path / "report" / "data_docs"
    assert (docs / "index.html").is_file()
    pages = [p.name for p in (docs / "validations").rglob("*.html")]
    assert any("person-records" in page for page in pages)
    assert report.artifacts["data_docs"] == "data_docs/index.html"


@pytest.mark.slow
def test_big_files_get_a_sample_plus_the_flagged_rows(inputs, tmp_path) -> None:
    set_field(inputs / "person-records.txt", 1_001, "QAGE", "200")
    report = validate_safetab_p(
        inputs / "config.json", inputs, tmp_path / "report", sample_rows=100
    )
    summary = {s.file: s for s in report.files}["person-records.txt"]
    assert summary.rows == 1_500 and summary.scanned
    assert summary.gx_sampled and 50 <= summary.gx_rows <= 101
    assert summary.gx_success is False  # the flagged row went into GX's sample
    failure = report.find("expect_column_values_to_match_regex", column="QAGE")[0]
    assert (failure.count, failure.rows, failure.values) == (1, [1_001], ["200"])
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert written["great_expectations"]["sample_rows"] == 100


@pytest.mark.slow
def test_cli_exit_codes_files_and_private_values(inputs, tmp_path, capsys) -> None:
    arguments = ["validate", "safetab-p", "--config", str(inputs / "config.json")]
    assert main([*arguments, "--data", str(inputs)]) == 0
    out = capsys.readouterr().out
    assert "VALID" in out and "NOT VALID" not in out
    default = inputs / "validation"
    for name in ("report.json", "report.html", "validation.log", "data_docs/index.html"):
        assert (default / name).is_file(), name

    set_field(inputs / "person-records.txt", 9, "QRACE1", "Zq9x")
    report_dir = tmp_path / "elsewhere"
    assert main([*arguments, "--data", str(inputs), "--report", str(report_dir)]) == 1
    out = capsys.readouterr().out
    assert "NOT VALID" in out and "expect_column_values_to_match_regex" in out
    assert "data row 9 (the header line is row 0)" in out
    assert "Zq9x" not in out
    assert "Zq9x" not in (report_dir / "validation.log").read_text()
    assert "Zq9x" in (report_dir / "report.json").read_text()  # the curator's local report
    assert json.loads((report_dir / "report.json").read_text())["ok"] is False


@pytest.mark.slow
def test_cli_on_the_census_phsafe_toy_set(census_specs, tmp_path, capsys) -> None:
    toy = census_specs / "phsafe" / "toy"
    config = phsafe_toy_config("zcdp", tmp_path / "config")  # scaled within the ceiling
    arguments = ["validate", "phsafe", "--config", str(config)]
    assert main([*arguments, "--data", str(toy), "--report", str(tmp_path)]) == 1
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["errors"] == 5 and written["warnings"] == 1
    assert (tmp_path / "data_docs" / "index.html").is_file()
    assert "final_pop_matches_persons" in capsys.readouterr().out


def _page_text(path: Path) -> str:
    """A Data Docs page without what differs between two builds (times, run ids)."""
    text = path.read_text()
    text = re.sub(r"\d{8}T\d{6}\.\d+Z", "", text)
    text = re.sub(r"\b\d{4}-\d{2}-\d{2}[T ][\d:.+]+", "", text)
    return re.sub(r"'_run_time_sort': [\d.]+", "", text)


@pytest.fixture
def gx_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """GX runs at every validation: nothing remembered from an earlier one in this process."""
    from das.validation import gx_runner

    monkeypatch.setattr(gx_runner, "REMEMBERED", 0)
    monkeypatch.setattr(gx_runner, "_remembered", type(gx_runner._remembered)())


def test_a_sample_is_known_again_only_by_its_exact_values_types_and_rows() -> None:
    """The key of a remembered GX verdict: equal samples under one suite meet, and any
    difference of value, missing value, type, row number or rule does not."""
    import pandas as pd

    from das.validation.gx_runner import _sample_key

    suite = load_suite("person-records")
    frame = pd.DataFrame({"QAGE": ["7", "", "42"]}, dtype=object)

    def key(sample: pd.DataFrame, rules=suite) -> str:
        return _sample_key([(rules, sample)], docs=True)

    assert key(frame) == key(frame.copy())
    others = [
        frame.assign(QAGE=["7", "", "43"]),
        frame.assign(QAGE=["7", None, "42"]),
        frame.assign(QAGE=[7, "", "42"]),
        frame.set_axis([1, 2, 3]),
    ]
    assert len({key(frame), *map(key, others)}) == 5
    other_rules = load_suite("GRF-C")
    assert key(frame, other_rules) != key(frame)
    assert _sample_key([(suite, frame)], docs=False) != key(frame)


@pytest.mark.slow
def test_the_same_samples_again_reuse_the_verdicts_and_pages(inputs, tmp_path, monkeypatch):
    """A second validation of the same records in one process gives the first one's GX
    verdicts, failures and Data Docs without running GX; one changed value is checked anew."""
    from das.validation import gx_runner

    monkeypatch.setattr(gx_runner, "_remembered", type(gx_runner._remembered)())
    ran: list[int] = []
    run_suites = gx_runner._run_suites

    def counted(batches, docs_dir):
        ran.append(len(batches))
        return run_suites(batches, docs_dir)

    monkeypatch.setattr(gx_runner, "_run_suites", counted)
    set_field(inputs / "person-records.txt", 5, "QSEX", "0")

    def validated(name: str):
        report = validate_safetab_p(inputs / "config.json", inputs, tmp_path / name)
        docs = tmp_path / name / "data_docs"
        pages = {p.relative_to(docs): p.read_bytes() for p in docs.rglob("*") if p.is_file()}
        return report, pages

    def verdicts(report) -> list:
        gx = [(s.file, s.gx_success, s.gx_failed_expectations, s.gx_rows) for s in report.files]
        found = [(f.check, f.column, f.rows, f.values, f.source) for f in report.failures]
        return [gx, found]

    first, first_pages = validated("first")
    again, again_pages = validated("again")
    assert ran == [6] and not again.ok
    assert verdicts(again) == verdicts(first) and again_pages == first_pages
    assert (tmp_path / "again" / "data_docs" / "index.html").is_file()
    set_field(inputs / "person-records.txt", 9, "QSEX", "0")  # one more bad value
    changed, _ = validated("changed")
    assert ran == [6, 6]
    assert changed.find("expect_column_values_to_be_in_set", column="QSEX")[0].rows == [5, 9]


@pytest.mark.slow
def test_data_docs_templates_compile_once_per_process(
    inputs, tmp_path, monkeypatch, gx_every_time
) -> None:
    """GX makes new Jinja environments at each Data Docs build; the site's views
    (das.validation.data_docs) share one bytecode cache: a second build compiles no template,
    and its pages are the first build's."""
    import jinja2

    validate_safetab_p(inputs / "config.json", inputs, tmp_path / "first")
    compiled: list[str | None] = []
    compile_template = jinja2.Environment.compile

    def counted(self, source, name=None, *args, **kwargs):
        compiled.append(name)
        return compile_template(self, source, name, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    validate_safetab_p(inputs / "config.json", inputs, tmp_path / "second")
    assert compiled == []
    first, second = tmp_path / "first" / "data_docs", tmp_path / "second" / "data_docs"
    pages = sorted(
        p.relative_to(first) for p in first.rglob("*.html") if "validations" not in p.parts
    )
    assert len(pages) >= 7  # the index and a page per suite
    for page in pages:
        assert _page_text(second / page) == _page_text(first / page), page


@pytest.mark.slow
@pytest.mark.integration  # the prewarmed GX process
def test_the_prewarmed_process_gives_the_same_verdicts_and_data_docs(
    inputs, tmp_path, caplog, gx_every_time
) -> None:
    """`das run` imports GX in a process of its own ahead of time (gx_runner.prewarm): the
    same report and the same Data Docs pages as in this process, failures included."""
    from das.validation import gx_runner

    set_field(inputs / "person-records.txt", 5, "QSEX", "0")
    set_field(inputs / "GRF-C.txt", 3, "PLACEFP", "1234")
    here = validate_safetab_p(inputs / "config.json", inputs, tmp_path / "here")
    gx_runner.prewarm()
    worker = gx_runner._prewarmed
    assert worker is not None and worker.process.poll() is None
    there = validate_safetab_p(inputs / "config.json", inputs, tmp_path / "there")
    assert gx_runner._prewarmed is None and worker.process.returncode == 0  # used, once
    # its answer, not the fallback in this process (which logs a warning)
    assert "prewarmed Great Expectations process failed" not in caplog.text

    def verdicts(report) -> list:
        return [(s.file, s.gx_success, s.gx_failed_expectations, s.gx_rows) for s in report.files]

    assert verdicts(there) == verdicts(here) and not there.ok
    assert [(f.check, f.column, f.rows, f.values) for f in there.failures] == [
        (f.check, f.column, f.rows, f.values) for f in here.failures
    ]

    def pages(root: Path) -> list[str]:
        docs = root / "data_docs"
        return sorted(p.relative_to(docs).parts[0] for p in docs.rglob("*.html"))

    assert pages(tmp_path / "there") == pages(tmp_path / "here") and pages(tmp_path / "here")
