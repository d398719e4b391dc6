"""Race/ethnicity spec loader (real 2020, Census toy, the project's demo set); demo configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from das.io import InputFormatError
from das.resources import demo_specs
from das.specs.race_specs import (
    CODE_TO_ITERATION_FILE,
    CODES_FILE,
    ETHNICITY_ITERATIONS_FILE,
    FALSE,
    NULL,
    RACE_ITERATIONS_FILE,
    TRUE,
    RaceEthnicitySpecs,
    SpecFileError,
    load_race_specs,
)

DEMO = demo_specs("safetab_p")
PHSAFE_DEMO_CONFIG = demo_specs("phsafe") / "config.json"


def max_iterations_per_code(specs: RaceEthnicitySpecs, ethnicity: bool) -> int:
    """h: most iterations one code reaches within a (level 1/2, alone, geography filter).

    USA/STATE/PR-STATE drop COARSE_ONLY iterations, sub-state levels drop DETAILED_ONLY ones.
    """
    index = specs.pair_iteration_index
    known = (index >= 0) & (specs.pair_code_index >= 0)
    index, code = index[known], specs.pair_code_index[known]
    h = 0
    for level in (1, 2):
        for alone in (NULL,) if ethnicity else (TRUE, FALSE):
            for dropped in (specs.coarse_only, specs.detailed_only):
                mask = (
                    (specs.is_ethnicity[index] == ethnicity)
                    & (specs.level[index] == level)
                    & (specs.alone[index] == alone)
                    & (dropped[index] != TRUE)
                )
                if mask.any():
                    h = max(h, int(np.bincount(code[mask]).max()))
    return h


@pytest.fixture
def production(census_specs: Path) -> Path:
    return census_specs / "safetab_p" / "production_2020"


# ------------------------------------------------------------------------------------------------
# Real 2020 and Census toy spec files
# ------------------------------------------------------------------------------------------------


def test_production_2020_spec_files(production: Path) -> None:
    specs = load_race_specs(production)
    # 3016 race iterations: the file has 3018 lines = header + 3016 + a trailing CRLF blank line.
    assert (specs.n_codes, specs.n_race_iterations, specs.n_ethnicity_iterations) == (
        1755,
        3016,
        38,
    )
    assert specs.pair_code.size == 14088
    assert (specs.pair_iteration_index >= 0).all() and (specs.pair_code_index >= 0).all()
    assert np.unique(specs.iteration_code).size == specs.iteration_code.size
    first = 0
    assert specs.iteration_code[first] == 1001 and specs.iteration_name[first] == "White alone"
    assert (specs.level[first], specs.alone[first], specs.detailed_only[first]) == (0, TRUE, NULL)
    latino = int(np.flatnonzero(specs.iteration_code == 4048)[0])
    assert specs.is_ethnicity[latino] and specs.iteration_file(latino) == ETHNICITY_ITERATIONS_FILE
    assert (specs.level[latino], specs.detailed_only[latino], specs.alone[latino]) == (
        2,
        TRUE,
        NULL,
    )
    assert specs.iteration_row[latino] == 36
    assert specs.iteration_name[np.flatnonzero(specs.iteration_code == 4043)[0]] == (
        "Spanish American "  # trailing space kept exactly
    )
    assert (specs.detailed_only[specs.level > 0] != NULL).all()
    assert specs.code[-1] == 9950 and specs.code_row[-1] == 1755
    assert max_iterations_per_code(specs, ethnicity=False) == 1
    assert max_iterations_per_code(specs, ethnicity=True) == 1


def test_census_toy_spec_files(census_specs: Path) -> None:
    specs = load_race_specs(census_specs / "safetab_p" / "toy" / "input_dir_zcdp")
    assert (specs.n_codes, specs.n_race_iterations, specs.n_ethnicity_iterations) == (27, 32, 8)
    assert specs.pair_code.size == 87
    coarse = specs.iteration_code[specs.coarse_only == TRUE].tolist()
    assert coarse == [7000, 1810, 3040]


def test_parsed_arrays_are_read_only_and_typed(production: Path) -> None:
    specs = load_race_specs(production)
    assert specs.code.dtype == np.int16 and specs.level.dtype == np.uint8
    assert specs.alone.dtype == np.int8 and specs.pair_row.dtype == np.int32
    with pytest.raises(ValueError, match="read-only"):
        specs.code[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        specs.pair_iteration_index[0] = 1


# ------------------------------------------------------------------------------------------------
# Malformed files: file, row, column and the offending text
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    target = tmp_path / "params"
    shutil.copytree(DEMO, target)
    return target


def replace_line(path: Path, row: int, new: str) -> None:
    """Replace data row ``row`` (1 = first after the header)."""
    lines = path.read_text().splitlines()
    lines[row] = new
    path.write_text("\n".join(lines) + "\n")


def test_bad_booleans_levels_and_codes_are_all_reported(demo_copy: Path) -> None:
    path = demo_copy / RACE_ITERATIONS_FILE
    replace_line(path, 2, "1002|European alone|1|true|False|False")
    replace_line(path, 3, "1003|Demo Nation A alone|3|True|False|False")
    replace_line(path, 4, "1004|Demo Nation B alone|2|True|Null|False")
    replace_line(path, 5, "10050|Demo Nation D alone|2|True|True|False")
    with pytest.raises(SpecFileError) as caught:
        load_race_specs(demo_copy)
    message = str(caught.value)
    assert str(path) in message and "4 malformed value(s)" in message
    assert "row 2, ALONE: 'true' is not True, False or Null" in message
    assert "row 3, LEVEL: '3' is not 0, 1 or 2" in message
    assert "row 4, DETAILED_ONLY: 'Null' is not allowed here (Null only on LEVEL 0 rows)" in message
    assert "row 5, ITERATION_CODE: '10050' is not a 4-digit code" in message


def test_bad_code_and_pair_files(demo_copy: Path) -> None:
    replace_line(demo_copy / CODES_FILE, 7, "1O13|Demo Nation B")
    with pytest.raises(
        SpecFileError, match=r"(?s)codes\.txt: 1 malformed.*row 7, RACE_ETH_CODE: '1O13'"
    ):
        load_race_specs(demo_copy)
    shutil.copy(DEMO / CODES_FILE, demo_copy / CODES_FILE)
    replace_line(demo_copy / CODE_TO_ITERATION_FILE, 10, "1001|")
    with pytest.raises(SpecFileError, match=r"row 10, RACE_ETH_CODE: '' is not a 4-digit code"):
        load_race_specs(demo_copy)


def test_empty_name_and_wrong_header(demo_copy: Path) -> None:
    replace_line(demo_copy / ETHNICITY_ITERATIONS_FILE, 1, "1103||0|Null|Null")
    with pytest.raises(SpecFileError, match="row 1, ITERATION_NAME: '' is not a non-empty name"):
        load_race_specs(demo_copy)
    shutil.copy(DEMO / RACE_ITERATIONS_FILE, demo_copy / ETHNICITY_ITERATIONS_FILE)
    with pytest.raises(InputFormatError, match="unexpected column\\(s\\) ALONE"):
        load_race_specs(demo_copy)


def test_missing_spec_file(demo_copy: Path) -> None:
    (demo_copy / CODE_TO_ITERATION_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=CODE_TO_ITERATION_FILE):
        load_race_specs(demo_copy)


def test_crlf_and_trailing_blank_line_are_tolerated(demo_copy: Path) -> None:
    for name in (CODES_FILE, RACE_ITERATIONS_FILE):
        path = demo_copy / name
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n") + b"\r\n")
    crlf, lf = load_race_specs(demo_copy), load_race_specs(DEMO)
    assert crlf.code_name.tolist() == lf.code_name.tolist()
    assert np.array_equal(crlf.coarse_only, lf.coarse_only)


# ------------------------------------------------------------------------------------------------
# The project's demo spec set
# ------------------------------------------------------------------------------------------------


def test_demo_specs_are_complete_and_consistent() -> None:
    specs = load_race_specs(DEMO)
    assert (specs.n_codes, specs.n_race_iterations, specs.n_ethnicity_iterations) == (73, 102, 17)
    assert 60 <= specs.n_codes <= 150 and 40 <= specs.iteration_code.size <= 120
    assert np.unique(specs.code).size == specs.n_codes
    assert np.unique(specs.iteration_code).size == specs.iteration_code.size
    assert ((specs.code >= 1000) & (specs.code <= 9999)).all()
    assert (specs.pair_iteration_index >= 0).all() and (specs.pair_code_index >= 0).all()
    pairs = np.stack([specs.pair_iteration, specs.pair_code], axis=1)
    assert np.unique(pairs, axis=0).shape[0] == pairs.shape[0]  # no duplicated pair
    assert np.isin(specs.code, specs.pair_code).all()  # every code is used


def test_demo_specs_cover_every_structural_case() -> None:
    specs = load_race_specs(DEMO)
    race, eth = ~specs.is_ethnicity, specs.is_ethnicity
    level0 = specs.level == 0
    assert (specs.detailed_only[level0] == NULL).all() and (specs.coarse_only[level0] == NULL).all()
    assert (specs.detailed_only[~level0] != NULL).all() and (
        specs.coarse_only[~level0] != NULL
    ).all()
    assert not ((specs.detailed_only == TRUE) & (specs.coarse_only == TRUE)).any()
    for part in (race, eth):
        for level in (0, 1, 2):
            assert (part & (specs.level == level)).any()
        assert (part & (specs.detailed_only == TRUE)).any()
        assert (part & (specs.coarse_only == TRUE)).any()
    for alone in (TRUE, FALSE):  # six major groups at LEVEL 0; regions and details both ways
        assert (race & (specs.alone == alone) & level0).sum() == 6
        assert (race & (specs.alone == alone) & (specs.level == 1)).sum() >= 10
        assert (race & (specs.alone == alone) & (specs.level == 2)).sum() >= 20
    assert (race & (specs.level == 1) & (specs.detailed_only == TRUE)).any()
    # Every code reaches exactly one LEVEL 0 ethnicity iteration: Hispanic iff 2xxx.
    index = specs.pair_iteration_index
    eth0 = specs.is_ethnicity[index] & (specs.level[index] == 0)
    assert (
        np.bincount(specs.pair_code_index[eth0], minlength=specs.n_codes).tolist()
        == [1] * specs.n_codes
    )
    hispanic = specs.iteration_code[eth & level0 & (np.char.find(specs.iteration_name, "Not") < 0)]
    hispanic_codes = np.sort(specs.pair_code[specs.pair_iteration == hispanic[0]])
    assert np.array_equal(hispanic_codes, np.sort(specs.code[(specs.code // 1000) == 2]))


def test_demo_stability_is_nine_like_the_real_specs() -> None:
    specs = load_race_specs(DEMO)
    h_race = max_iterations_per_code(specs, ethnicity=False)
    h_eth = max_iterations_per_code(specs, ethnicity=True)
    assert (h_race, h_eth) == (1, 1)
    assert h_race * max(2, 8) + h_eth == 9


def test_stability_check_detects_a_second_iteration(demo_copy: Path) -> None:
    """The h computation above can fail: map Demo Nation A's code to Demo Nation B alone too."""
    with (demo_copy / CODE_TO_ITERATION_FILE).open("a") as handle:
        handle.write("1004|1011\n")
    assert max_iterations_per_code(load_race_specs(demo_copy), ethnicity=False) == 2


def test_demo_configs_use_exactly_the_production_keys(census_specs: Path) -> None:
    safetab = json.loads((DEMO / "config.json").read_text())
    production = json.loads(
        (census_specs / "safetab_p" / "production_2020" / "config.json").read_text()
    )
    assert set(safetab) == set(production)
    assert set(safetab["thresholds_p"]) == set(production["thresholds_p"])
    us_total = sum(
        value
        for key, value in safetab.items()
        if key.startswith("privacy_budget_p_level_") and "_pr_" not in key
    )
    assert us_total == pytest.approx(4.944)
    phsafe = json.loads(PHSAFE_DEMO_CONFIG.read_text())
    phsafe_us = json.loads(
        (census_specs / "phsafe" / "production_2020" / "us" / "config.json").read_text()
    )
    assert set(phsafe) == set(phsafe_us)
    assert phsafe["privacy_budget"] == phsafe_us["privacy_budget"]
    assert phsafe["tau"] == phsafe_us["tau"]
    assert sorted(phsafe["state_filter"]) == sorted(phsafe_us["state_filter"])


def test_demo_configs_load_with_the_typed_models() -> None:
    config = pytest.importorskip("das.specs.config")
    safetab = config.load_safetab_p_config(DEMO / "config.json")
    assert safetab.max_race_codes == 8 and safetab.run_us and safetab.run_pr
    phsafe = config.load_phsafe_config(PHSAFE_DEMO_CONFIG)
    assert phsafe.pass_name == "US"
