"""postprocess_phsafe: end to end on the Census toy inputs and on a hand-made release."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from toy_configs import phsafe_toy_config

from das.phsafe.tables import SHELLS
from das.postprocess.phsafe import postprocess_phsafe
from das.specs.config import PHSafeConfig

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "phsafe" / "toy"
COUNT_COLUMNS = ["ESTIMATE", "CI_LOWER_90", "CI_UPPER_90"]
AVERAGE_COLUMNS = [*COUNT_COLUMNS, "NUMERATOR_ESTIMATE", "DENOMINATOR_ESTIMATE", "ESS"]


@pytest.fixture(scope="module")
def toy_release(tmp_path_factory: pytest.TempPathFactory):
    if not TOY.is_dir():
        pytest.skip("shared census specs not available")
    from das.io.phsafe import input_paths, read_geo, read_persons, read_units
    from das.phsafe.engine import run_phsafe
    from das.privacy.noise import seeded_rng
    from das.specs.config import load_phsafe_config

    paths = input_paths(TOY)
    config = load_phsafe_config(phsafe_toy_config("zcdp", tmp_path_factory.mktemp("toy")))
    inputs = read_persons(paths["persons"]), read_units(paths["units"]), read_geo(paths["geo"])
    return config, run_phsafe(config, *inputs, rng=seeded_rng(2020)).tables


@pytest.fixture(scope="module")
def toy_output(toy_release):
    config, tables = toy_release
    return postprocess_phsafe(tables, config, seed=1)


def test_toy_count_tables(toy_release, toy_output) -> None:
    _, tables = toy_release
    assert set(toy_output) == {"PH1", "PH2", "PH3", "PH4", "PH5", "PH6", "PH7", "PH8"}
    for table in ("PH2", "PH3", "PH4", "PH6", "PH7"):
        frame, shell = toy_output[table], SHELLS[table]
        keys = [c for c in ("REGION_ID", "REGION_TYPE", "ITERATION_CODE") if c in tables[table]]
        assert list(frame.columns) == [*keys, shell.cell_column, *COUNT_COLUMNS]
        groups = len(tables[table]) // len(shell.basis_codes)
        assert len(frame) == groups * len(shell.cells)
        assert (frame["CI_LOWER_90"] >= 0).all()
        assert (frame["CI_LOWER_90"] <= frame["ESTIMATE"]).all()
        assert (frame["ESTIMATE"] <= frame["CI_UPPER_90"]).all()
        assert frame.attrs["diagnostics"]["aggregate_method"] == "direct"


def test_toy_average_tables(toy_release, toy_output) -> None:
    config, _ = toy_release
    for name, c, tau in [
        ("PH1", 1, config.tau["PH1_num"]),
        ("PH5", 2, config.tau["PH4"]),
        ("PH8", 1, config.tau["PH7"]),
    ]:
        frame = toy_output[name]
        assert list(frame.columns[-6:]) == AVERAGE_COLUMNS
        total = frame.loc[frame[f"{name}_DATA_CELL"] == 1]
        assert ((c <= total["CI_LOWER_90"]) & (total["CI_UPPER_90"] <= tau)).all()
        assert (total["CI_LOWER_90"] <= total["ESTIMATE"] + 1e-9).all()
        assert (total["ESTIMATE"] <= total["CI_UPPER_90"] + 1e-9).all()
        assert (frame["DENOMINATOR_ESTIMATE"] >= 1).all()
        diagnostics = frame.attrs["diagnostics"]
        assert diagnostics["min_ess"] >= 400 and diagnostics["converged"]
        assert diagnostics["groups"] * 3 == len(frame)
    ph8 = toy_output["PH8"]
    numerator = ph8["NUMERATOR_ESTIMATE"].to_numpy().reshape(-1, 3)
    denominator = ph8["DENOMINATOR_ESTIMATE"].to_numpy().reshape(-1, 3)
    np.testing.assert_allclose(numerator[:, 0], numerator[:, 1] + numerator[:, 2])
    np.testing.assert_allclose(denominator[:, 0], denominator[:, 1] + denominator[:, 2])


def test_seed_reproduces(toy_release, toy_output) -> None:
    config, tables = toy_release
    again = postprocess_phsafe(tables, config, seed=1)
    other = postprocess_phsafe(
        {"PH1_num": tables["PH1_num"], "PH1_denom": tables["PH1_denom"]}, config, seed=2
    )
    pd.testing.assert_frame_equal(again["PH1"], toy_output["PH1"])
    assert not np.allclose(other["PH1"]["ESTIMATE"], toy_output["PH1"]["ESTIMATE"], rtol=1e-12)


def _release(table: str, groups: list[str], counts: np.ndarray, variance: float) -> pd.DataFrame:
    shell = SHELLS[table]
    basis = shell.basis_codes.astype(np.int64)
    return pd.DataFrame(
        {
            "REGION_ID": np.repeat(groups, len(basis)),
            "REGION_TYPE": "STATE",
            "ITERATION_CODE": "*",
            shell.cell_column: np.tile(basis, len(groups)),
            "COUNT": counts.ravel().astype(np.int64),
            "NOISE_DISTRIBUTION": "Discrete Gaussian",
            "VARIANCE": variance,
        }
    )


def test_precise_release_recovers_averages_and_joins_groups() -> None:
    config = PHSafeConfig.model_validate(
        {
            "privacy_budget": {"PH1_num": {"state_*": 1.0}, "PH1_denom": {"state_*": 1.0}},
            "tau": {"PH1_num": 10},
            "state_filter": ["01", "02"],
            "privacy_defn": "zcdp",
        }
    )
    num = _release("PH1_num", ["01", "02", "44"], np.array([[300, 700], [0, 50], [1, 1]]), 1.0)
    den = _release("PH1_denom", ["01", "02"], np.array([[400], [50]]), 1.0)
    out = postprocess_phsafe({"PH1_num": num, "PH1_denom": den}, config, seed=0)
    ph1 = out["PH1"]
    assert ph1["REGION_ID"].tolist() == ["01"] * 3 + ["02"] * 3  # only groups in both tables
    # Group 02 has no child (0 ± 1): the flat prior on n ≥ 0 lifts it to ~0.8 persons.
    np.testing.assert_allclose(ph1["ESTIMATE"], [2.5, 0.75, 1.75, 1.0, 0.0, 1.0], atol=0.04)
    assert set(out) == {"PH1"}
