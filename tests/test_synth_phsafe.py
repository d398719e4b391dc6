"""`generate_phsafe`: a complete, consistent, reproducible PHSafe input folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from das.io.phsafe import GEO, UNITS, read_geo, read_persons, read_units
from das.io.tables import read_raw
from das.resources import demo_specs
from das.specs.config import load_phsafe_config
from das.synth import generate_phsafe
from das.synth.states import STATES

DEMO_CONFIG = demo_specs("phsafe") / "config.json"
N = 20_000


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("phsafe")
    folders = {}
    for seed in (1, 2, 3):
        folders[seed] = root / f"seed{seed}"
        generate_phsafe(folders[seed], N, seed, DEMO_CONFIG)
    return folders


def _read(folder: Path, suffix: str = ".csv"):
    return (
        read_persons(folder / f"persons{suffix}"),
        read_units(folder / f"units{suffix}"),
        read_geo(folder / f"geo{suffix}"),
    )


def test_layout_and_determinism(outputs, tmp_path: Path) -> None:
    assert {p.name for p in outputs[1].iterdir()} == {
        "persons.csv",
        "units.csv",
        "geo.csv",
        "config.json",
    }
    assert (outputs[1] / "config.json").read_bytes() == DEMO_CONFIG.read_bytes()
    again = tmp_path / "again"
    generate_phsafe(again, N, 1, DEMO_CONFIG)
    assert _files(again) == _files(outputs[1])
    assert _files(outputs[2])["persons.csv"] != _files(outputs[1])["persons.csv"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_units_persons_and_geo_agree(outputs, seed: int) -> None:
    persons, units, geo = _read(outputs[seed])
    assert len(persons) == N
    assert units.MAFID.is_unique
    assert (units.MAFID >= 100_000_001).all() and (units.MAFID <= 999_999_999).all()
    np.testing.assert_array_equal(geo.MAFID, units.MAFID)  # one geo row per unit
    np.testing.assert_array_equal(geo.RTYPE, units.RTYPE)
    assert np.isin(persons.MAFID, units.MAFID).all()

    counts = persons.groupby("MAFID").size().reindex(units.MAFID, fill_value=0)
    np.testing.assert_array_equal(counts.to_numpy(), units.FINAL_POP.to_numpy())

    rtype = units.set_index("MAFID").RTYPE
    person_rtype = persons.MAFID.map(rtype)
    assert ((person_rtype == 2) == (persons.RTYPE == 3)).all()
    assert ((person_rtype == 4) == (persons.RTYPE == 5)).all()
    assert set(persons[persons.RTYPE == 5].RELSHIP.unique()) == {37, 38}
    assert persons[persons.RTYPE == 3].RELSHIP.between(20, 36).all()

    occupied = units[(units.RTYPE == 2) & (units.FINAL_POP > 0)]
    vacant = units[(units.RTYPE == 2) & (units.FINAL_POP == 0)]
    gq = units[units.RTYPE == 4]
    assert len(vacant) > 0 and len(gq) > 0
    codes = ["NPF", "HHSPAN", "HHRACE", "TEN", "HHT", "HHT2", "CPLT"]
    assert (vacant[codes] == 0).all().all() and (gq[codes] == 0).all().all()
    householders = persons[persons.RELSHIP == 20]
    assert householders.MAFID.is_unique
    assert set(householders.MAFID) == set(occupied.MAFID)  # exactly one per occupied unit
    head = householders.set_index("MAFID").loc[occupied.MAFID]
    np.testing.assert_array_equal(occupied.HHRACE.to_numpy(), head.CENRACE.to_numpy())
    np.testing.assert_array_equal(occupied.HHSPAN.to_numpy(), head.CENHISP.to_numpy())
    assert occupied.TEN.between(1, 4).all() and occupied.HHT.between(1, 7).all()
    assert occupied.HHT2.between(1, 12).all() and occupied.CPLT.between(1, 5).all()
    assert ((occupied.HHT == 1) == occupied.CPLT.isin([1, 2])).all()
    assert (occupied[occupied.HHT.isin([4, 6])].FINAL_POP == 1).all()
    assert (occupied.NPF <= occupied.FINAL_POP).all()
    assert ((occupied.NPF > 0) == occupied.HHT.isin([1, 2, 3])).all()
    assert (occupied.FINAL_POP > 10).sum() >= 2  # truncation at tau = 10 matters

    assert persons.QAGE.between(0, 115).all()
    assert persons.CENHISP.isin([1, 2]).all() and persons.CENRACE.between(1, 63).all()
    assert 0.05 < (persons.CENRACE >= 7).mean() < 0.2

    states = {int(s) for s in load_phsafe_config(DEMO_CONFIG).state_filter}
    assert set(geo.TABBLKST.unique()) <= states and geo.TABBLKST.nunique() > 40
    expected_region = geo.TABBLKST.map({int(f): s.region for f, s in STATES.items()})
    np.testing.assert_array_equal(geo.REGIONCE, expected_region)
    np.testing.assert_array_equal(geo.TABBLKGRPCE, geo.TABBLK // 1000)
    assert (geo.PLACEFP == 99_999).any() and (geo.PLACEFP != 99_999).any()
    assert (geo.AIANNHCE == 9_999).any()


def test_text_codes_look_like_the_census_files(outputs) -> None:
    units = read_raw(outputs[1] / "units.csv", UNITS)
    assert units.HHRACE.str.len().eq(2).all() and units.HHT2.str.len().eq(2).all()
    assert units.FINAL_POP.str.fullmatch(r"0|[1-9][0-9]*").all()
    geo = read_raw(outputs[1] / "geo.csv", GEO)
    assert geo.TABTRACTCE.str.len().eq(6).all() and geo.TABBLKCOU.str.len().eq(3).all()
    header = (outputs[1] / "persons.csv").read_text().splitlines()[0]
    assert header == "RTYPE,MAFID,QAGE,CENHISP,CENRACE,RELSHIP"


def test_puerto_rico_pass_and_parquet(tmp_path: Path) -> None:
    config = json.loads(DEMO_CONFIG.read_text())
    config["state_filter"] = ["72"]
    config_file = tmp_path / "pr.json"
    config_file.write_text(json.dumps(config))
    text, parquet = tmp_path / "text", tmp_path / "parquet"
    generate_phsafe(text, 5_000, 8, config_file)
    generate_phsafe(parquet, 5_000, 8, config_file, file_format="parquet")
    assert {p.name for p in parquet.iterdir()} == {
        "persons.parquet",
        "units.parquet",
        "geo.parquet",
        "config.json",
    }
    for a, b in zip(_read(text), _read(parquet, ".parquet"), strict=True):
        pd.testing.assert_frame_equal(a, b)
    persons, _, geo = _read(text)
    assert set(geo.TABBLKST.unique()) == {72}
    assert (geo.REGIONCE == 9).all() and (geo.DIVISIONCE == 0).all()
    assert (persons.CENHISP == 2).mean() > 0.9
