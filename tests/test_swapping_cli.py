"""`das swap` end to end on tiny PHSafe-style unit files, and the unit-file reader/writer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from das.cli import main
from das.io.tables import InputFormatError
from das.swapping.files import read_unit_data
from das.swapping.run import SwapRequest, parse_two_way, run_swap

SWAP = "TABBLKCOU,TABTRACTCE,TABBLK,TABBLKGRPCE,PLACEFP"
MATCH = "TABBLKST,FINAL_POP"


def write_unit_folder(folder: Path, n: int = 300, seed: int = 0, parquet: bool = False) -> Path:
    """units/geo/persons with zero-padded codes, geo rows in a different order than units."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    mafid = np.arange(100_000_001, 100_000_001 + n)
    size = rng.integers(1, 4, n)
    county = rng.integers(1, 5, n)
    units = pd.DataFrame(
        {
            "RTYPE": "2",
            "MAFID": mafid.astype(str),
            "FINAL_POP": size.astype(str),
            "NPF": np.where(size > 1, size, 0).astype(str),
            "HHSPAN": rng.integers(1, 3, n).astype(str),
            "HHRACE": [f"{r:02d}" for r in rng.integers(1, 8, n)],
            "TEN": rng.integers(1, 5, n).astype(str),
            "HHT": rng.integers(1, 8, n).astype(str),
            "HHT2": [f"{r:02d}" for r in rng.integers(1, 13, n)],
            "CPLT": rng.integers(1, 6, n).astype(str),
        }
    )
    state = rng.choice(["01", "44"], n)
    geo = pd.DataFrame(
        {
            "RTYPE": "2",
            "MAFID": mafid.astype(str),
            "TABBLKST": state,
            "TABBLKCOU": [f"{c:03d}" for c in county],
            "TABTRACTCE": [f"{c:04d}00" for c in county],
            "TABBLK": [f"{b:04d}" for b in rng.integers(1000, 1010, n)],
            "TABBLKGRPCE": "1",
            "REGIONCE": np.where(state == "01", "3", "1"),
            "DIVISIONCE": np.where(state == "01", "6", "1"),
            "PLACEFP": np.where(county == 1, "99999", "19828"),
            "AIANNHCE": "9999",
        }
    ).iloc[rng.permutation(n)]
    persons = pd.DataFrame({"RTYPE": "3", "MAFID": mafid.astype(str), "QAGE": "040",
                            "CENHISP": "1", "CENRACE": "01", "RELSHIP": "20"})  # fmt: skip
    for name, frame in (("units", units), ("geo", geo), ("persons", persons)):
        if parquet:
            table = pa.Table.from_pandas(frame, preserve_index=False)
            pq.write_table(table, folder / f"{name}.parquet")
        else:
            frame.to_csv(folder / f"{name}.csv", index=False)
    return folder


def _run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["swap", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_unit_folder(tmp_path / "in")
    out = tmp_path / "out"
    args = ["--data", str(data), "--match", MATCH, "--swap", SWAP, "--rate", "0.3",
            "--output", str(out), "--seed", "7", "--json"]  # fmt: skip
    code, stdout, _ = _run_cli(capsys, *args)
    assert code == 0
    result = json.loads(stdout)
    assert result["invariants_exact"] is True
    assert result["records"] == 300 and result["rate"] == 0.3
    assert result["records_selected"] > 0 and 0 < result["mape"] < 1
    assert result["epsilon"] == pytest.approx(np.log(result["b"] + 1) - np.log(0.3 / 0.7))
    assert sorted(p.name for p in out.iterdir()) == [
        "contingency.csv", "geo.csv", "persons.csv", "report.json", "report.md", "units.csv",
    ]  # fmt: skip
    # Units and persons unchanged byte for byte; geo keeps its order, header and zero padding.
    for name in ("units.csv", "persons.csv"):
        assert (out / name).read_bytes() == (data / name).read_bytes()
    geo_in = pd.read_csv(data / "geo.csv", dtype=str)
    geo_out = pd.read_csv(out / "geo.csv", dtype=str)
    assert list(geo_out.columns) == list(geo_in.columns)
    held = [c for c in geo_in.columns if c not in SWAP.split(",")]
    pd.testing.assert_frame_equal(geo_out[held], geo_in[held])
    assert (geo_out["TABBLKCOU"].str.len() == 3).all()
    moved = (geo_out[SWAP.split(",")] != geo_in[SWAP.split(",")]).any(axis=1)
    assert 0 < moved.sum() <= result["records_selected"]
    # The report: strict JSON, hashes, invariants, definitions, randomness.
    report = json.loads((out / "report.json").read_text())
    assert report["b"] == result["b"] and report["invariants"]["exact"] is True
    assert report["randomness"] == {
        "secure": False, "seed": 7, "description": report["randomness"]["description"],
    }  # fmt: skip
    assert "seeded" in report["randomness"]["description"]
    assert report["inputs"]["units"]["rows"] == 300 and len(report["inputs"]["geo"]["sha256"]) == 64
    assert report["mape"]["rows"] == ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]
    assert report["mape"]["cols"] == ["TEN"]
    mechanisms = [row["mechanism"] for row in report["privacy_definitions"]]
    assert mechanisms[0].startswith("Swapping") and "TopDown" in mechanisms
    assert set(report["timings_seconds"]) >= {"load", "swap", "check", "write"}
    contingency = pd.read_csv(out / "contingency.csv", dtype=str)
    assert contingency["COUNT"].astype(int).sum() == 300
    assert "MAFID" not in contingency.columns
    markdown = (out / "report.md").read_text()
    assert "## Invariants" in markdown and "epsilon" in markdown
    # Reproducible with the same seed; a second run refuses the existing folder.
    again = tmp_path / "again"
    code, _, _ = _run_cli(capsys, *args[:-4], str(again), "--seed", "7")
    assert code == 0
    assert (again / "geo.csv").read_bytes() == (out / "geo.csv").read_bytes()
    code, _, stderr = _run_cli(capsys, *args)
    assert code == 1 and "already exists" in stderr


def test_cli_rate_zero_reports_no_finite_epsilon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_unit_folder(tmp_path / "in", n=50)
    out = tmp_path / "out"
    code, stdout, _ = _run_cli(
        capsys, "--data", str(data), "--match", MATCH, "--swap", SWAP, "--rate", "0",
        "--output", str(out),
    )  # fmt: skip
    assert code == 0
    assert "epsilon = inf" in stdout and "no finite epsilon" in stdout
    assert (out / "geo.csv").read_bytes() == (data / "geo.csv").read_bytes()
    report = json.loads((out / "report.json").read_text())
    assert report["epsilon"] is None and report["randomness"]["secure"] is True


def test_cli_errors_name_the_problem_not_the_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_unit_folder(tmp_path / "in", n=20)
    geo = pd.read_csv(data / "geo.csv", dtype=str)
    geo.iloc[3, geo.columns.get_loc("MAFID")] = "999999999"
    geo.to_csv(data / "geo.csv", index=False)
    base = ["--data", str(data), "--swap", SWAP, "--rate", "0.1", "--output", str(tmp_path / "o")]
    code, _, stderr = _run_cli(capsys, *base, "--match", MATCH)
    assert code == 1
    assert (
        "no geo.csv row" in stderr
        and "match no unit" in stderr
        and "data row 4 (the header line is row 0)" in stderr
    )
    assert "999999999" not in stderr and "1000000" not in stderr
    assert not (tmp_path / "o").exists()
    write_unit_folder(data, n=20)
    code, _, stderr = _run_cli(capsys, *base, "--match", "TABBLKST,SIZE")
    assert code == 1 and "unknown variable(s) SIZE" in stderr
    code, _, stderr = _run_cli(capsys, *base[:-4], "--rate", "2", "--output", "x", "--match", "")
    assert code == 1 and "swap rate" in stderr


def test_duplicate_mafid_is_refused(tmp_path: Path) -> None:
    data = write_unit_folder(tmp_path / "in", n=10)
    units = pd.read_csv(data / "units.csv", dtype=str)
    pd.concat([units, units.iloc[[2]]]).to_csv(data / "units.csv", index=False)
    with pytest.raises(
        InputFormatError,
        match=r"repeats in 1 row\(s\) \(data row 11 \(the header line is row 0\)\)",
    ):
        read_unit_data(data)


def test_parquet_in_parquet_out(tmp_path: Path) -> None:
    data = write_unit_folder(tmp_path / "in", n=120, parquet=True)
    request = SwapRequest(match=("TABBLKST",), swap=("TABBLKCOU",), rate="0.5", seed=3)
    report = run_swap(data, tmp_path / "out", request)
    assert report["invariants"]["exact"]
    assert "units.parquet" in report["outputs"] and "geo.parquet" in report["outputs"]
    geo_in = pq.read_table(data / "geo.parquet")
    geo_out = pq.read_table(tmp_path / "out" / "geo.parquet")
    assert geo_out.schema.equals(geo_in.schema)
    assert sorted(geo_out.column("TABBLKCOU").to_pylist()) == sorted(
        geo_in.column("TABBLKCOU").to_pylist()
    )
    assert geo_out.column("MAFID").equals(geo_in.column("MAFID"))


def test_explicit_hold_and_two_way(tmp_path: Path) -> None:
    data = write_unit_folder(tmp_path / "in", n=80)
    request = SwapRequest(
        match=("TABBLKST", "FINAL_POP"), swap=("TABBLKCOU",), rate="0.5", hold=("TEN",),
        two_way=parse_two_way("TABBLKST+TABBLKCOU,TEN"), seed=1,
    )  # fmt: skip
    report = run_swap(data, tmp_path / "out", request)
    assert report["scheme"]["hold"] == ["TEN"]
    assert report["mape"]["rows"] == ["TABBLKST", "TABBLKCOU"]
    table = pd.read_csv(tmp_path / "out" / "contingency.csv", dtype=str)
    assert list(table.columns) == ["TABBLKST", "FINAL_POP", "TABBLKCOU", "TEN", "COUNT"]
    with pytest.raises(ValueError, match="ROW,COL"):
        parse_two_way("TEN")
