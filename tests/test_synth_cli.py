"""`das synth ...` end to end through the CLI dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from das.cli import main
from das.io.phsafe import input_paths, read_units
from das.io.safetab_p import grf_c_path, person_records_path, read_person_records


def test_safetab_p_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sp"
    assert (
        main(["synth", "safetab-p", "--output", str(out), "--persons", "3_000", "--seed", "5"]) == 0
    )
    line = capsys.readouterr().out.strip()
    assert line.count("\n") == 0 and "3,000 persons" in line and "seed 5" in line
    assert len(read_person_records(person_records_path(out))) == 3_000
    assert grf_c_path(out).name == "GRF-C.txt"
    assert (out / "config.json").is_file() and (out / "race-and-ethnicity-codes.txt").is_file()


def test_phsafe_command_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ph"
    args = ["synth", "phsafe", "--output", str(out), "--persons", "2000", "--format", "parquet"]
    assert main(args) == 0
    line = capsys.readouterr().out
    assert "2,000 persons" in line and "(seed " in line  # the random seed is printed
    paths = input_paths(out)
    assert paths["units"].suffix == ".parquet"
    assert len(read_units(paths["units"])) > 500


def test_existing_output_and_bad_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sp"
    base = ["synth", "safetab-p", "--output", str(out), "--persons", "500", "--seed", "1"]
    assert main(base) == 0
    first = (out / "person-records.txt").read_bytes()
    capsys.readouterr()
    assert main(base) == 1
    assert "already exists" in capsys.readouterr().err
    assert main([*base[:-1], "2", "--overwrite"]) == 0
    assert (out / "person-records.txt").read_bytes() != first
    missing = ["synth", "safetab-p", "--output", str(tmp_path / "x"), "--specs", str(tmp_path)]
    assert main(missing) == 1
    assert "das synth: error" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        main(["synth", "phsafe", "--output", str(tmp_path / "y"), "--persons", "0"])


def test_production_specs_command(census_specs: Path, tmp_path: Path) -> None:
    specs = census_specs / "safetab_p" / "production_2020"
    out = tmp_path / "prod"
    assert (
        main(
            [
                "synth",
                "safetab-p",
                "--output",
                str(out),
                "--persons",
                "2000",
                "--seed",
                "3",
                "--specs",
                str(specs),
            ]
        )
        == 0
    )
    persons = read_person_records(out / "person-records.txt")
    assert 72 in set(persons.TABBLKST.unique())


def test_an_output_it_cannot_make_is_one_line(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent folder it may not write in says so in one line, not in a traceback (a newcomer
    met PermissionError's). As root no permission stops it: the refusal is the OS's, stood in."""
    import das.io.atomic

    def refused(path, mode=0o777):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(das.io.atomic.os, "mkdir", refused)
    code = main(["synth", "safetab-p", "--output", str(tmp_path / "out"), "--persons", "50"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("das synth: error: [Errno 13] Permission denied") and err.count("\n") == 1
