"""`generate_safetab_p`: a complete, valid, reproducible SafeTab-P input folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from spec_fixtures import DEMO_SPECS, group_of_code

from das.io.safetab_p import (
    block_key,
    race_code_matrix,
    read_grf_c,
    read_person_records,
)
from das.io.tables import read_raw
from das.specs.race_specs import SPEC_FILES, load_race_specs
from das.synth import generate_safetab_p
from das.synth.race import CENRACE_OF_MASK

N = 20_000


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("safetab_p")
    return {seed: _generate(root / f"seed{seed}", seed) for seed in (1, 2)}


def _generate(folder: Path, seed: int, **kwargs) -> Path:
    generate_safetab_p(folder, N, seed, DEMO_SPECS, **kwargs)
    return folder


def test_folder_layout_and_copied_specs(outputs) -> None:
    folder = outputs[1]
    names = {path.name for path in folder.iterdir()}
    assert names == {"person-records.txt", "GRF-C.txt", "config.json", *SPEC_FILES}
    for name in (*SPEC_FILES, "config.json"):
        assert (folder / name).read_bytes() == (DEMO_SPECS / name).read_bytes()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_same_seed_is_byte_identical_other_seed_differs(outputs, tmp_path: Path) -> None:
    again = _generate(tmp_path / "again", 1)
    assert _files(again) == _files(outputs[1])
    other = _files(outputs[2])
    assert other["person-records.txt"] != _files(outputs[1])["person-records.txt"]
    assert other["GRF-C.txt"] != _files(outputs[1])["GRF-C.txt"]


def test_chunking_does_not_break_invariants(tmp_path: Path) -> None:
    folder = tmp_path / "chunked"
    generate_safetab_p(folder, 5_000, 9, DEMO_SPECS, chunk_persons=700)
    persons = read_person_records(folder / "person-records.txt")
    assert len(persons) == 5_000
    assert persons.HOUSEHOLDER.sum() > 1_500


@pytest.mark.parametrize("seed", [1, 2])
def test_records_parse_and_hold_the_invariants(outputs, seed: int) -> None:
    folder = outputs[seed]
    persons = read_person_records(folder / "person-records.txt")
    grf = read_grf_c(folder / "GRF-C.txt")
    raw = read_raw(folder / "person-records.txt", _person_spec())
    assert len(persons) == N
    assert raw.QAGE.str.len().eq(3).all()  # zero-padded like the Census toy file
    blocks = block_key(grf)
    assert len(np.unique(blocks)) == len(blocks)
    assert np.isin(block_key(persons), blocks).all()
    assert persons.QAGE.between(0, 115).all() and persons.QAGE.max() > 90
    assert set(persons.QSEX.unique()) == {1, 2}
    assert 0.3 < persons.HOUSEHOLDER.mean() < 0.45

    specs = load_race_specs(DEMO_SPECS)
    codes = race_code_matrix(persons)
    present = codes != 0
    assert present[:, 0].all() and not (~present[:, :-1] & present[:, 1:]).any()
    assert np.isin(codes[present], specs.code).all()
    truth = group_of_code(specs)
    lookup = np.full(10_000, -1)
    for code, group in truth.items():
        lookup[code] = group
    groups = np.where(present, lookup[codes], -1)
    assert (groups[present] >= 0).all()
    mask = np.zeros(len(persons), dtype=np.int64)
    for j in range(8):
        mask |= np.where(groups[:, j] >= 0, 1 << np.maximum(groups[:, j], 0), 0)
    np.testing.assert_array_equal(persons.CENRACE.to_numpy(), CENRACE_OF_MASK[mask])
    several = present.sum(axis=1) >= 2
    assert 0.15 < several.mean() < 0.45
    assert 0.05 < (persons.CENRACE >= 7).mean() < 0.2
    ethnicity_codes = specs.pair_code[
        np.isin(specs.pair_iteration, specs.iteration_code[specs.is_ethnicity])
    ]
    assert np.isin(persons.QSPAN, ethnicity_codes).all()
    hispanic = (persons.QSPAN >= 2000) & (persons.QSPAN < 3000)
    assert 0.1 < hispanic.mean() < 0.3

    in_place = grf.PLACEFP != 99_999
    assert in_place.any() and not in_place.all()
    assert (grf.AIANNHCE != 9_999).any() and (grf.AIANNHCE == 9_999).any()
    dc = grf[grf.TABBLKST == 11]
    assert dc.TABBLKCOU.nunique() == 1 and dc.PLACEFP.nunique() == 1
    assert (dc.PLACEFP != 99_999).all()


def _person_spec():
    from das.io.safetab_p import PERSON_RECORDS

    return PERSON_RECORDS


def test_parquet_holds_the_same_records(outputs, tmp_path: Path) -> None:
    folder = _generate(tmp_path / "parquet", 1, file_format="parquet")
    names = {path.name for path in folder.iterdir()}
    assert {"person-records.parquet", "GRF-C.parquet"} <= names
    assert "person-records.txt" not in names
    text = read_person_records(outputs[1] / "person-records.txt")
    parquet = read_person_records(folder / "person-records.parquet")
    pd.testing.assert_frame_equal(text, parquet)
    pd.testing.assert_frame_equal(
        read_grf_c(outputs[1] / "GRF-C.txt"), read_grf_c(folder / "GRF-C.parquet")
    )


def test_config_picks_states_and_max_codes(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    config = json.loads((specs / "config.json").read_text())
    config.update(state_filter_us=["04", "11"], run_pr=True, max_race_codes=3)
    (specs / "config.json").write_text(json.dumps(config))
    folder = tmp_path / "out"
    generate_safetab_p(folder, 8_000, 3, specs)
    persons = read_person_records(folder / "person-records.txt")
    grf = read_grf_c(folder / "GRF-C.txt")
    assert set(grf.TABBLKST.unique()) == {4, 11, 72}
    assert set(persons.TABBLKST.unique()) == {4, 11, 72}
    assert (race_code_matrix(persons) != 0).sum(axis=1).max() == 3
    pr = persons[persons.TABBLKST == 72]
    assert ((pr.QSPAN >= 2000) & (pr.QSPAN < 3000)).mean() > 0.9


def test_existing_output_is_refused(outputs) -> None:
    before = _files(outputs[2])
    with pytest.raises(FileExistsError):
        generate_safetab_p(outputs[2], 100, 5, DEMO_SPECS)
    assert _files(outputs[2]) == before


def test_production_specs(census_specs: Path, tmp_path: Path) -> None:
    specs_dir = census_specs / "safetab_p" / "production_2020"
    folder = tmp_path / "production"
    generate_safetab_p(folder, 10_000, 4, specs_dir)
    persons = read_person_records(folder / "person-records.txt")
    grf = read_grf_c(folder / "GRF-C.txt")
    specs = load_race_specs(specs_dir)
    codes = race_code_matrix(persons)
    assert np.isin(codes[codes != 0], specs.code).all()
    assert np.isin(persons.QSPAN, specs.code).all()
    assert len(np.unique(codes[codes != 0])) > 100  # the detailed long tail shows up
    assert 72 in set(grf.TABBLKST.unique()) and grf.TABBLKST.nunique() == 52
    assert (folder / "config.json").read_bytes() == (specs_dir / "config.json").read_bytes()
