"""The coterminous-geographies spec file: derivation from the GRF-C, file format, CLI, engine."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pytest

from das.cli import coterminous as cli
from das.io.safetab_p import read_grf_c, read_person_records
from das.privacy.rng import seeded_rng
from das.safetab_p.coterminous import (
    CoterminousFileError,
    coterminous_sets,
    derive_coterminous,
    read_coterminous_file,
    restrict_sets,
    write_coterminous_file,
)
from das.safetab_p.engine import run_safetab_p
from das.safetab_p.keys import geography_entities, pass_blocks
from das.specs.config import SafeTabGeography as G
from das.specs.config import load_safetab_p_config
from das.specs.race_specs import load_race_specs

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "safetab_p" / "toy"
TOY_CONFIG_DIR = TOY / "input_dir_zcdp"
needs_toy = pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")

HEADER = "SET_ID|REGION_TYPE|REGION_ID"
TOY_US_SETS = [
    "0|STATE|01",
    "0|PLACE|0122800",
    "1|STATE|02",
    "1|PLACE|0222800",
    "2|STATE|11",
    "2|COUNTY|11001",
    "2|TRACT|11001000100",
    "3|COUNTY|01001",
    "3|AIANNH|0001",
]
TOY_PR_SETS = [
    "4|PR-STATE|72",
    "4|PR-COUNTY|72031",
    "5|PR-TRACT|72031050902",
    "5|PR-PLACE|7210001",
]

# Hand-made GRF-C: D.C.-like state 11 = county 11001 = place 1150000 (two tracts); county 01003
# has one tract; AIANNH 0100 is exactly county 01005; PR state = county = tract; place 0100100
# straddles two tracts of county 01001 (coterminous with nothing).
HAND_GRFC = """TABBLKST|TABBLKCOU|TABTRACTCE|TABBLK|PLACEFP|AIANNHCE
01|001|000100|0001|00100|9999
01|001|000100|0002|99999|9999
01|001|000200|0001|00100|9999
01|001|000200|0002|99999|9999
01|003|000100|0001|99999|9999
01|003|000100|0002|00300|9999
01|005|000100|0001|99999|0100
01|005|000200|0001|99999|0100
11|001|000100|0001|50000|9999
11|001|000200|0001|50000|9999
72|001|000100|0001|99999|9999
72|001|000100|0002|99999|9999
"""


def _members(sets: pd.DataFrame) -> set[frozenset[tuple[str, str]]]:
    """Sets as frozensets of (REGION_TYPE, REGION_ID): independent of SET_ID numbering."""
    return {
        frozenset(zip(group["REGION_TYPE"], group["REGION_ID"], strict=True))
        for _, group in sets.groupby("SET_ID")
    }


@pytest.fixture
def hand_grfc(tmp_path: Path) -> pd.DataFrame:
    path = tmp_path / "GRF-C.txt"
    path.write_text(HAND_GRFC)
    return read_grf_c(path)


def _toy_config(**changes):
    return load_safetab_p_config(TOY_CONFIG_DIR / "config.json").model_copy(update=changes)


# ------------------------------------------------------------------ derivation
def test_hand_made_grfc_sets(hand_grfc: pd.DataFrame) -> None:
    sets = derive_coterminous(hand_grfc)
    assert _members(sets) == {
        frozenset({("STATE", "11"), ("COUNTY", "11001"), ("PLACE", "1150000")}),
        frozenset({("COUNTY", "01003"), ("TRACT", "01003000100")}),
        frozenset({("COUNTY", "01005"), ("AIANNH", "0100")}),
        frozenset({("PR-STATE", "72"), ("PR-COUNTY", "72001"), ("PR-TRACT", "72001000100")}),
    }
    # Rows sorted by set, then level order; SET_IDs 0.. with the US pass first.
    assert sets["SET_ID"].tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    for _, group in sets.groupby("SET_ID"):
        assert group["RANK"].is_monotonic_increasing
    assert sets.loc[sets["REGION_TYPE"] == "PR-STATE", "RANK"].item() == list(G).index(G.PR_STATE)


def test_config_state_filter_changes_the_sets(hand_grfc: pd.DataFrame) -> None:
    # With only D.C. in the US pass, the USA joins D.C.'s set; run_pr false drops the PR pass.
    config = _toy_config(state_filter_us=("11",), run_pr=False) if TOY.is_dir() else None
    if config is None:
        pytest.skip("/work/shared toy config absent")
    assert _members(derive_coterminous(hand_grfc, config)) == {
        frozenset({("USA", "1"), ("STATE", "11"), ("COUNTY", "11001"), ("PLACE", "1150000")})
    }


def test_restrict_sets_equals_deriving_on_fewer_levels(hand_grfc: pd.DataFrame) -> None:
    config = _toy_config() if TOY.is_dir() else None
    if config is None:
        pytest.skip("/work/shared toy config absent")
    levels = [G.STATE, G.TRACT, G.PLACE, G.AIANNH]
    blocks = pass_blocks(hand_grfc, config, "US")
    derived = coterminous_sets([geography_entities(blocks, g) for g in levels])
    restricted = restrict_sets(derive_coterminous(hand_grfc, config), levels)
    assert _members(restricted) == _members(derived)
    assert _members(restricted) == {frozenset({("STATE", "11"), ("PLACE", "1150000")})}


@needs_toy
def test_toy_grfc_sets_and_round_trip(tmp_path: Path) -> None:
    sets = derive_coterminous(read_grf_c(TOY / "GRF-C.txt"))
    path = tmp_path / "coterminous-geographies.txt"
    assert write_coterminous_file(sets, path) == len(TOY_US_SETS) + len(TOY_PR_SETS)
    assert path.read_text().splitlines() == [HEADER, *TOY_US_SETS, *TOY_PR_SETS]
    back = read_coterminous_file(path)
    pd.testing.assert_frame_equal(back, sets)


def test_read_tolerates_bom_crlf_blank_lines_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(
        ("\ufeff" + HEADER + "\r\n7|COUNTY|01003\r\n\r\n7|TRACT|01003000100\r\n").encode()
    )
    back = read_coterminous_file(path)
    assert back.to_dict("list") == {
        "REGION_TYPE": ["COUNTY", "TRACT"],
        "REGION_ID": ["01003", "01003000100"],
        "SET_ID": [7, 7],
        "RANK": [2, 3],
    }
    path.write_text(HEADER + "\n")
    assert read_coterminous_file(path).empty


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["0|COUNTY|01003", "0|TRACTS|01003000100"], "line 3 ('TRACTS')"),
        (["", "0|COUNTY|01003", "0|TRACTS|01003000100"], "line 4 ('TRACTS')"),  # blank skipped
        (["0|COUNTY|1003", "0|TRACT|01003000100"], "line 2 ('1003')"),
        (["x|COUNTY|01003", "x|TRACT|01003000100"], "SET_ID is not a whole number: line 2"),
        (["0|COUNTY|01003", "0|TRACT|01003000100|9"], "expected 3 fields: line 3"),
        (["0|COUNTY|01003", "0|TRACT|01003000100", "1|COUNTY|01003", "1|STATE|01"], "twice"),
        (
            ["0|COUNTY|01003", "0|TRACT|01003000100", "1|STATE|02"],
            "single member (a set needs at least two): line 4",
        ),
        (["0|STATE|72", "0|PR-STATE|72"], "mixes US and PR"),
        (["0|COUNTY|01003", "0|COUNTY|01005"], "same level: line 3"),
        (["0|TRACT|01003000100", "0|COUNTY|01003"], "not in level order"),
    ],
)
def test_malformed_files_are_rejected(tmp_path: Path, rows: list[str], message: str) -> None:
    path = tmp_path / "c.txt"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    with pytest.raises(CoterminousFileError) as info:
        read_coterminous_file(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_bad_header_and_bad_frame_on_write(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("REGION_TYPE|REGION_ID|SET_ID\nCOUNTY|01003|0\n")
    with pytest.raises(CoterminousFileError, match="header SET_ID"):
        read_coterminous_file(path)
    bad = pd.DataFrame({"SET_ID": [0], "REGION_TYPE": ["COUNTY"], "REGION_ID": ["01003"]})
    with pytest.raises(CoterminousFileError, match="single member"):
        write_coterminous_file(bad, tmp_path / "out.txt")
    assert not (tmp_path / "out.txt").exists()


# ------------------------------------------------------------------ CLI
def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="das")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


@needs_toy
def test_cli_derive_with_and_without_config(tmp_path: Path, capsys) -> None:
    out = tmp_path / "coterminous-geographies.txt"
    assert _run(["coterminous", "derive", "--data", str(TOY), "--output", str(out)]) == 0
    assert out.read_text().splitlines() == [HEADER, *TOY_US_SETS, *TOY_PR_SETS]
    assert "6 sets, 13 entities" in capsys.readouterr().out
    config = str(TOY_CONFIG_DIR / "config.json")  # run_pr false: US sets only
    argv = ["coterminous", "derive", "--data", str(TOY), "--config", config, "--output", str(out)]
    assert _run(argv) == 0
    assert out.read_text().splitlines() == [HEADER, *TOY_US_SETS]


def test_cli_file_name_matches_engine() -> None:
    from das.safetab_p import coterminous

    assert cli.COTERMINOUS_FILE_NAME == coterminous.COTERMINOUS_FILE_NAME


def test_cli_errors(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.txt"
    assert (
        _run(["coterminous", "derive", "--data", str(tmp_path / "no"), "--output", str(out)]) == 2
    )
    assert "data folder not found" in capsys.readouterr().err
    assert _run(["coterminous", "derive", "--data", str(tmp_path), "--output", str(out)]) == 1
    assert "GRF-C" in capsys.readouterr().err
    (tmp_path / "GRF-C.txt").write_text(HAND_GRFC + HAND_GRFC.splitlines()[1] + "\n")
    assert _run(["coterminous", "derive", "--data", str(tmp_path), "--output", str(out)]) == 1
    assert "twice" in capsys.readouterr().err
    argv = ["coterminous", "derive", "--data", str(tmp_path), "--output", str(tmp_path / "x/y")]
    assert _run(argv) == 2
    assert not out.exists()


# ------------------------------------------------------------------ engine
@needs_toy
def test_engine_with_file_equals_engine_deriving(tmp_path: Path) -> None:
    config = _toy_config(run_pr=True, zero_suppression_chance=1e-12)
    specs = load_race_specs(TOY_CONFIG_DIR)
    persons = read_person_records(TOY / "person-records.txt")
    grfc = read_grf_c(TOY / "GRF-C.txt")
    path = tmp_path / "coterminous-geographies.txt"
    write_coterminous_file(derive_coterminous(grfc), path)
    derived = run_safetab_p(config, specs, persons, grfc, seeded_rng(11))
    from_file = run_safetab_p(config, specs, persons, grfc, seeded_rng(11), coterminous_file=path)
    key = ["REGION_TYPE", "REGION_ID", "ITERATION_CODE"]
    for ours, theirs in ((from_file.t1, derived.t1), (from_file.t2, derived.t2)):
        columns = list(ours.columns)
        pd.testing.assert_frame_equal(
            ours.sort_values(columns).reset_index(drop=True),
            theirs.sort_values(columns).reset_index(drop=True),
        )
    # The file matters: without the D.C. set, the tract keeps its own noisy counts.
    path.write_text("\n".join([HEADER, *TOY_US_SETS[:4], *TOY_US_SETS[7:]]) + "\n")
    no_dc = run_safetab_p(config, specs, persons, grfc, seeded_rng(11), coterminous_file=path)
    t1 = no_dc.t1.set_index(key)["COUNT"]
    tract = t1.xs(("TRACT", "11001000100"), level=[0, 1])
    county = t1.xs(("COUNTY", "11001"), level=[0, 1]).reindex(tract.index)
    assert not tract.equals(county)
