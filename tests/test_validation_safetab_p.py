"""SafeTab-P input validation (engine layer, no GX): every check fails on a broken fixture.

Clean inputs come from the synthetic generator (a small US + PR population on the demo specs,
three states); each test copies them, breaks one thing and asserts the exact check, column,
failing count and first row. Great Expectations itself is exercised in test_validation_gx.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from spec_fixtures import DEMO_SPECS

from das.synth import generate_safetab_p
from das.validation import validate_safetab_p

STATES = ["01", "02", "11"]
PERSONS = 1_500


# ------------------------------------------------------------------------------------------------
# Fixtures and text helpers
# ------------------------------------------------------------------------------------------------


def _specs_dir(root: Path, **config_changes) -> Path:
    specs = root / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    config = json.loads((specs / "config.json").read_text())
    config.update({"state_filter_us": STATES, "run_us": True, "run_pr": True}, **config_changes)
    (specs / "config.json").write_text(json.dumps(config, indent=2))
    return specs


@pytest.fixture(scope="session")
def clean_inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("safetab_p_clean")
    generate_safetab_p(root / "inputs", PERSONS, 11, _specs_dir(root))
    return root / "inputs"


@pytest.fixture
def inputs(clean_inputs, tmp_path) -> Path:
    target = tmp_path / "inputs"
    shutil.copytree(clean_inputs, target)
    return target


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    delimiter = "," if path.suffix == ".csv" else "|"
    return lines[0].split(delimiter), [line.split(delimiter) for line in lines[1:] if line]


def write_rows(path: Path, header: list[str], rows: list[list[str]]) -> None:
    delimiter = "," if path.suffix == ".csv" else "|"
    text = "\n".join(delimiter.join(fields) for fields in [header, *rows]) + "\n"
    path.write_text(text, encoding="utf-8")


def set_field(path: Path, row: int, column: str, value: str) -> str:
    """Set one field (row 1 = first record); return the old text."""
    header, rows = read_rows(path)
    index = header.index(column)
    old = rows[row - 1][index]
    rows[row - 1][index] = value
    write_rows(path, header, rows)
    return old


def first_row(path: Path, predicate) -> int:
    header, rows = read_rows(path)
    for number, fields in enumerate(rows, start=1):
        if predicate(dict(zip(header, fields, strict=True))):
            return number
    raise AssertionError("no row matches")


def edit_config(inputs: Path, **changes) -> None:
    path = inputs / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def validate(inputs: Path, tmp_path: Path):
    return validate_safetab_p(inputs / "config.json", inputs, tmp_path / "report", run_gx=False)


def only(report, check: str, file: str | None = None, column: str | None = None):
    found = report.find(check, file, column)
    assert len(found) == 1, [f.line() for f in report.failures]
    return found[0]


# ------------------------------------------------------------------------------------------------
# Clean inputs, Census toy inputs
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_synthetic_inputs_validate_cleanly(seed, tmp_path) -> None:
    generate_safetab_p(tmp_path / "in", 2_000, seed, _specs_dir(tmp_path))
    report = validate(tmp_path / "in", tmp_path)
    assert report.ok, report.summary_lines()
    assert report.failures == []
    assert all(summary.scanned for summary in report.files)
    assert report.skipped == []
    assert {"block_in_grf_c", "race_null_order", "code_single_iteration"} <= set(report.checks_run)


def test_synthetic_parquet_inputs_validate_cleanly(tmp_path) -> None:
    generate_safetab_p(tmp_path / "in", 2_000, 5, _specs_dir(tmp_path), file_format="parquet")
    report = validate(tmp_path / "in", tmp_path)
    assert report.ok, report.summary_lines()
    assert {s.file for s in report.files} >= {"person-records.parquet", "GRF-C.parquet"}


@pytest.mark.parametrize("variant", ["input_dir_zcdp", "input_dir_puredp"])
def test_census_toy_inputs_validate_with_one_warning(census_specs, variant, tmp_path) -> None:
    toy = census_specs / "safetab_p" / "toy"
    report = validate_safetab_p(
        toy / variant / "config.json", toy, tmp_path / "report", run_gx=False
    )
    assert report.ok
    assert report.errors == []
    # The toy persons include Puerto Rico (rows 7 and 10) while the toy configs set run_pr false.
    (warning,) = report.warnings
    assert (warning.check, warning.file, warning.column) == (
        "state_not_tabulated",
        "person-records.txt",
        "TABBLKST",
    )
    assert (warning.count, warning.rows, warning.values) == (2, [7, 10], ["72", "72"])


def test_production_spec_files_pass_the_spec_checks(census_specs, tmp_path) -> None:
    """The real 2020 spec files: every suite rule and metadata rule holds (h = 1)."""
    specs = tmp_path / "specs"
    shutil.copytree(census_specs / "safetab_p" / "production_2020", specs)
    toy = census_specs / "safetab_p" / "toy"
    report = validate_safetab_p(specs / "config.json", toy, tmp_path / "report", run_gx=False)
    spec_files = {
        "race-and-ethnicity-codes.txt",
        "race-characteristic-iterations.txt",
        "ethnicity-characteristic-iterations.txt",
        "race-and-ethnicity-code-to-iteration.txt",
    }
    assert [f.line() for f in report.failures if f.file in spec_files] == []
    assert "spec_files_load" in report.checks_run


# ------------------------------------------------------------------------------------------------
# Suite rules on every row (the engine twin of the GX suites)
# ------------------------------------------------------------------------------------------------


REGEX = "expect_column_values_to_match_regex"
IN_SET = "expect_column_values_to_be_in_set"
CODES = "race-and-ethnicity-codes.txt"
RACE = "race-characteristic-iterations.txt"
ETHNICITY = "ethnicity-characteristic-iterations.txt"
PAIRS = "race-and-ethnicity-code-to-iteration.txt"


@pytest.mark.parametrize(
    ("file", "row", "column", "value", "check"),
    [
        ("person-records.txt", 3, "QAGE", "116", REGEX),
        ("person-records.txt", 4, "QAGE", "0028", REGEX),
        ("person-records.txt", 5, "QSEX", "3", IN_SET),
        ("person-records.txt", 6, "HOUSEHOLDER", "true", IN_SET),
        ("person-records.txt", 7, "CENRACE", "64", REGEX),
        ("person-records.txt", 8, "QRACE2", "NULL", REGEX),
        ("person-records.txt", 9, "QSPAN", "Null", REGEX),
        ("person-records.txt", 10, "TABTRACTCE", "12345", REGEX),
        ("person-records.txt", 11, "TABBLKST", "03", IN_SET),
        ("GRF-C.txt", 12, "PLACEFP", "9999", REGEX),
        ("GRF-C.txt", 13, "AIANNHCE", "", REGEX),
        (CODES, 2, "RACE_ETH_CODE", "100", REGEX),
        (CODES, 3, "RACE_ETH_NAME", "  ", REGEX),
        (RACE, 4, "LEVEL", "3", IN_SET),
        (RACE, 5, "ALONE", "Null", IN_SET),
        (ETHNICITY, 6, "COARSE_ONLY", "false", IN_SET),
        (PAIRS, 7, "ITERATION_CODE", "x001", REGEX),
    ],
)
def test_suite_rule_fails_on_one_bad_value(inputs, tmp_path, file, row, column, value, check):
    set_field(inputs / file, row, column, value)
    report = validate(inputs, tmp_path)
    assert not report.ok
    failure = only(report, check, file, column)
    assert (failure.count, failure.rows, failure.values) == (1, [row], [value])


def test_header_order_and_missing_columns(inputs, tmp_path) -> None:
    path = inputs / "person-records.txt"
    header, rows = read_rows(path)
    swapped = [header[1], header[0], *header[2:]]
    write_rows(path, swapped, [[r[1], r[0], *r[2:]] for r in rows])
    report = validate(inputs, tmp_path)
    failure = only(report, "expect_table_columns_to_match_ordered_list", "person-records.txt")
    assert failure.count == 1 and "wrong order" in failure.message
    assert [s.scanned for s in report.files if s.file == "person-records.txt"] == [True]

    write_rows(path, header[:-1], [r[:-1] for r in rows])
    report = validate(inputs, tmp_path)
    failure = only(report, "expect_table_columns_to_match_ordered_list", "person-records.txt")
    assert "missing QSPAN" in failure.message
    assert [s.scanned for s in report.files if s.file == "person-records.txt"] == [False]


def test_grf_c_extra_columns_are_allowed_missing_ones_are_not(inputs, tmp_path) -> None:
    path = inputs / "GRF-C.txt"
    header, rows = read_rows(path)
    write_rows(path, [*header, "COUSUBFP"], [[*r, "00000"] for r in rows])
    assert validate(inputs, tmp_path).ok
    write_rows(path, header[:-1], [r[:-1] for r in rows])
    report = validate(inputs, tmp_path)
    failure = only(report, "expect_table_columns_to_match_set", "GRF-C.txt")
    assert "missing AIANNHCE" in failure.message
    # Without a readable GRF-C the block check cannot run: skipped, and the run is not ok.
    assert "block_in_grf_c" in {s.check for s in report.skipped}


def test_duplicate_grf_c_block_and_duplicate_code(inputs, tmp_path) -> None:
    path = inputs / "GRF-C.txt"
    header, rows = read_rows(path)
    write_rows(path, header, [*rows, list(rows[4])])
    codes = inputs / "race-and-ethnicity-codes.txt"
    code_header, code_rows = read_rows(codes)
    write_rows(codes, code_header, [*code_rows, [code_rows[1][0], "Another name"]])
    report = validate(inputs, tmp_path)
    failure = only(
        report,
        "expect_compound_columns_to_be_unique",
        "GRF-C.txt",
        "TABBLKST,TABBLKCOU,TABTRACTCE,TABBLK",
    )
    assert (failure.count, failure.rows) == (2, [5, len(rows) + 1])
    assert failure.values[0] == "|".join(rows[4][:4])
    failure = only(report, "expect_column_values_to_be_unique", "race-and-ethnicity-codes.txt")
    assert (failure.count, failure.rows, failure.values) == (
        2,
        [2, len(code_rows) + 1],
        [code_rows[1][0]] * 2,
    )


def test_unreadable_and_missing_files(inputs, tmp_path) -> None:
    path = inputs / "person-records.txt"
    header, rows = read_rows(path)
    rows[20] = rows[20][:-1]
    write_rows(path, header, rows)
    (inputs / "GRF-C.txt").unlink()
    report = validate(inputs, tmp_path)
    failure = only(report, "file_readable", "person-records.txt")
    assert "21" in failure.message  # the row with the wrong number of fields
    only(report, "file_present", "GRF-C.txt")
    assert not report.ok


# ------------------------------------------------------------------------------------------------
# Cross-file and semantic checks
# ------------------------------------------------------------------------------------------------


def test_block_in_grf_c(inputs, tmp_path) -> None:
    path = inputs / "person-records.txt"
    set_field(path, 14, "TABBLKCOU", "999")
    report = validate(inputs, tmp_path)
    failure = only(report, "block_in_grf_c", column="TABBLKST,TABBLKCOU,TABTRACTCE,TABBLK")
    assert (failure.count, failure.rows) == (1, [14])
    assert failure.values[0].split("|")[1] == "999"


def test_race_code_rules(inputs, tmp_path) -> None:
    path = inputs / "person-records.txt"
    single = first_row(path, lambda r: r["QRACE1"] != "Null" and r["QRACE2"] == "Null")
    code = set_field(path, single, "QRACE1", "Null")
    second = first_row(path, lambda r: r["QRACE1"] not in ("Null",) and r["QRACE2"] == "Null")
    set_field(path, second, "QRACE3", code)
    third = first_row(path, lambda r: r["QRACE1"] != "Null" and r["QRACE3"] == "Null")
    set_field(path, third, "QRACE1", "9998")
    set_field(path, 30, "QSPAN", "9997")
    report = validate(inputs, tmp_path)
    assert (only(report, "race_code_present", column="QRACE1").rows) == [single]
    failure = only(report, "race_null_order")
    assert (failure.count, failure.rows) == (1, [second])
    assert failure.values[0].split("|")[2] == code
    failure = only(report, "race_code_in_code_list", column="QRACE1")
    assert (failure.count, failure.rows, failure.values) == (1, [third], ["9998"])
    failure = only(report, "qspan_in_code_list", column="QSPAN")
    assert (failure.count, failure.rows, failure.values) == (1, [30], ["9997"])


def test_race_codes_within_max(inputs, tmp_path) -> None:
    edit_config(inputs, max_race_codes=1)
    header, rows = read_rows(inputs / "person-records.txt")
    two_or_more = [n for n, r in enumerate(rows, 1) if r[header.index("QRACE2")] != "Null"]
    assert two_or_more
    report = validate(inputs, tmp_path)
    failure = only(report, "race_codes_within_max")
    assert (failure.count, failure.rows) == (len(two_or_more), two_or_more[:10])


def test_state_filter_checks(inputs, tmp_path) -> None:
    header, rows = read_rows(inputs / "person-records.txt")
    state = header.index("TABBLKST")
    in_02 = [n for n, r in enumerate(rows, 1) if r[state] == "02"]
    in_pr = [n for n, r in enumerate(rows, 1) if r[state] == "72"]
    assert in_02 and in_pr
    edit_config(inputs, state_filter_us=["01", "11", "04"], run_pr=False)
    report = validate(inputs, tmp_path)
    failure = only(report, "state_in_filter", "person-records.txt", "TABBLKST")
    assert (failure.count, failure.rows[:3], set(failure.values)) == (len(in_02), in_02[:3], {"02"})
    warning = only(report, "state_not_tabulated")
    assert (warning.severity, warning.count, warning.rows[0]) == ("warning", len(in_pr), in_pr[0])
    missing = only(report, "filter_state_in_grf_c", "config.json", "state_filter_us")
    assert (missing.count, missing.values) == (1, ["04"])


def test_warnings_alone_keep_the_inputs_valid(inputs, tmp_path) -> None:
    edit_config(inputs, run_pr=False)
    report = validate(inputs, tmp_path)
    assert report.ok
    assert [f.check for f in report.failures] == ["state_not_tabulated"]


def test_config_that_does_not_parse(inputs, tmp_path) -> None:
    edit_config(inputs, privacy_defn="approximate", max_race_codes=0)
    report = validate(inputs, tmp_path)
    failure = only(report, "config_parses", "config.json")
    assert failure.count == 2
    assert any("privacy_defn" in line for line in failure.values)
    skipped = {s.check for s in report.skipped}
    assert {"race_codes_within_max", "state_in_filter", "filter_state_in_grf_c"} <= skipped


# ------------------------------------------------------------------------------------------------
# Spec-file metadata rules
# ------------------------------------------------------------------------------------------------


def _iteration_row(path: Path, **wanted) -> int:
    return first_row(path, lambda r: all(r[k] == v for k, v in wanted.items()))


def test_level_zero_iff_null_flags(inputs, tmp_path) -> None:
    race = inputs / "race-characteristic-iterations.txt"
    level0 = _iteration_row(race, LEVEL="0")
    level2 = _iteration_row(race, LEVEL="2", DETAILED_ONLY="False")
    set_field(race, level0, "COARSE_ONLY", "False")
    set_field(race, level2, "COARSE_ONLY", "Null")
    report = validate(inputs, tmp_path)
    failure = only(report, "level0_flags_null", race.name, "COARSE_ONLY")
    assert (failure.count, failure.rows) == (2, sorted([level0, level2]))
    assert "spec_files_load" in {s.check for s in report.skipped}


def test_flags_not_both_true_and_disjoint_codes(inputs, tmp_path) -> None:
    race = inputs / "race-characteristic-iterations.txt"
    ethnicity = inputs / "ethnicity-characteristic-iterations.txt"
    row = _iteration_row(race, LEVEL="2", DETAILED_ONLY="False", COARSE_ONLY="False")
    set_field(race, row, "DETAILED_ONLY", "True")
    set_field(race, row, "COARSE_ONLY", "True")
    race_code = read_rows(race)[1][0][0]
    set_field(ethnicity, 3, "ITERATION_CODE", race_code)
    report = validate(inputs, tmp_path)
    failure = only(report, "flags_not_both_true", race.name, "DETAILED_ONLY,COARSE_ONLY")
    assert (failure.count, failure.rows) == (1, [row])
    failure = only(report, "iteration_codes_disjoint", ethnicity.name, "ITERATION_CODE")
    assert (failure.count, failure.rows, failure.values) == (1, [3], [race_code])


def test_pairs_reference_known_iterations_and_codes(inputs, tmp_path) -> None:
    pairs = inputs / "race-and-ethnicity-code-to-iteration.txt"
    set_field(pairs, 5, "ITERATION_CODE", "9990")
    set_field(pairs, 6, "RACE_ETH_CODE", "9991")
    report = validate(inputs, tmp_path)
    failure = only(report, "pair_iteration_known", pairs.name, "ITERATION_CODE")
    assert (failure.count, failure.rows, failure.values) == (1, [5], ["9990"])
    failure = only(report, "pair_code_known", pairs.name, "RACE_ETH_CODE")
    assert (failure.count, failure.rows, failure.values) == (1, [6], ["9991"])


def test_code_maps_to_one_iteration_per_level_alone_and_filter(inputs, tmp_path) -> None:
    race = inputs / "race-characteristic-iterations.txt"
    pairs = inputs / "race-and-ethnicity-code-to-iteration.txt"
    _, iterations = read_rows(race)
    plain_level2_alone = [
        r[0]
        for r in iterations
        if r[2] == "2" and r[3] == "True" and r[4] == "False" and r[5] == "False"
    ]
    pair_header, pair_rows = read_rows(pairs)
    row, (iteration, code) = next(
        (n, r) for n, r in enumerate(pair_rows, 1) if r[0] in plain_level2_alone
    )
    other = next(i for i in plain_level2_alone if i != iteration)
    write_rows(pairs, pair_header, [*pair_rows, [other, code]])
    report = validate(inputs, tmp_path)
    failure = only(report, "code_single_iteration", pairs.name, "RACE_ETH_CODE")
    assert (failure.count, failure.rows) == (2, [row, len(pair_rows) + 1])
    assert failure.values == [f"{iteration}|{code}", f"{other}|{code}"]


def test_missing_spec_file_skips_the_dependent_checks(inputs, tmp_path) -> None:
    (inputs / "ethnicity-characteristic-iterations.txt").unlink()
    report = validate(inputs, tmp_path)
    only(report, "file_present", "ethnicity-characteristic-iterations.txt")
    assert {"code_single_iteration", "spec_files_load"} <= {s.check for s in report.skipped}
    assert not report.ok


def test_report_files_are_always_written(inputs, tmp_path) -> None:
    set_field(inputs / "person-records.txt", 2, "QSEX", "9")
    report = validate(inputs, tmp_path)
    folder = tmp_path / "report"
    written = json.loads((folder / "report.json").read_text())
    assert written["ok"] is False and written["product"] == "safetab-p"
    (entry,) = [f for f in written["failures"] if f["column"] == "QSEX"]
    assert (entry["rows"], entry["values"], entry["count"]) == ([2], ["9"], 1)
    assert "QSEX" in (folder / "report.html").read_text()
    log = (folder / "validation.log").read_text()
    assert (
        "expect_column_values_to_be_in_set: 1 failing; data row 2 (the header line is row 0)" in log
    )
    assert report.to_dict()["errors"] == 1


def test_crlf_bom_and_trailing_blank_line_are_tolerated(inputs, tmp_path) -> None:
    path = inputs / "person-records.txt"
    text = path.read_text(encoding="utf-8").replace("\n", "\r\n") + "\r\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    set_field(inputs / "GRF-C.txt", 2, "AIANNHCE", "99999")
    report = validate(inputs, tmp_path)
    assert [(f.file, f.column, f.rows) for f in report.failures] == [("GRF-C.txt", "AIANNHCE", [2])]
    assert {s.file: s.rows for s in report.files}["person-records.txt"] == PERSONS
