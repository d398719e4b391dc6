"""`das run` usage errors exit 2 before anything is created (no Prefect run starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from das.cli.run import EXIT_USAGE, main


def _args(tmp_path: Path, *extra: str) -> list[str]:
    config = tmp_path / "config.json"
    config.write_text("{}")
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    out = tmp_path / "out"
    return ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output",
            str(out), *extra]  # fmt: skip


def test_seed_is_refused_in_production(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DAS_PRODUCTION", "1")
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "ledger"))
    assert main(_args(tmp_path, "--seed", "3")) == EXIT_USAGE
    assert "refused under DAS_PRODUCTION=1: a seed was given" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.das").exists()


def test_production_requires_a_ledger_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DAS_PRODUCTION", "1")
    monkeypatch.delenv("DAS_LEDGER_DIR", raising=False)
    assert main(_args(tmp_path)) == EXIT_USAGE
    assert "neither DAS_LEDGER_DIR nor DAS_LEDGER_URL is set" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.das").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(("--seed", "-1"), "non-negative"), (("--run-id", "../x"), "--run-id")],
)
def test_bad_seed_or_run_id(tmp_path: Path, capsys, extra, message) -> None:
    assert main(_args(tmp_path, *extra)) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_config_or_data(tmp_path: Path, capsys) -> None:
    args = _args(tmp_path)
    args[3] = str(tmp_path / "nope.json")
    assert main(args) == EXIT_USAGE
    args = _args(tmp_path)
    args[5] = str(tmp_path / "nodata")
    assert main(args) == EXIT_USAGE
    assert "no such folder" in capsys.readouterr().err


def test_argparse_usage_errors_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "safetab-p", "--config", "x"])
    assert exit_info.value.code == 2


TOY = Path(__file__).resolve().parents[2] / "shared" / "census_specs" / "safetab_p" / "toy"


@pytest.mark.skipif(not TOY.is_dir(), reason="../shared toy inputs absent")
@pytest.mark.parametrize(
    ("environ", "code", "message"),
    [
        ({"DAS_LEDGER_URL": "garbage"}, 2, "is not a database URL"),
        ({"DAS_LEDGER_URL": "sqlite:///{tmp}/l.sqlite", "DAS_LEDGER_DIR": "{tmp}/l"}, 2,
         "both DAS_LEDGER_URL and DAS_LEDGER_DIR are set"),
        ({"DAS_LEDGER_DIR": "{tmp}/folder-named-like-the-file"}, 3,
         "cannot be read: unable to open database file: check the ledger's database"),
    ],
)  # fmt: skip
def test_a_ledger_setting_that_is_wrong_or_unreachable_is_one_line_before_any_run(
    tmp_path: Path, monkeypatch, capsys, environ, code, message
) -> None:
    """Refused (2) when the setting is wrong, an infrastructure fault (3) when the ledger
    cannot be read; either way one line, no traceback, nothing created. `das ledger` too."""
    from das.cli import main as das_main

    (tmp_path / "folder-named-like-the-file" / "ledger.sqlite").mkdir(parents=True)
    for name, value in environ.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    data = tmp_path / "data"
    data.mkdir()
    for name in ("person-records.txt", "GRF-C.txt"):
        (data / name).write_bytes((TOY / name).read_bytes())
    argv = ["run", "safetab-p", "--config", str(TOY / "input_dir_zcdp" / "config.json"),
            "--data", str(data), "--output", str(tmp_path / "out"), "--seed", "1"]  # fmt: skip
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.das").exists()
    assert das_main(["ledger", "show"]) == code
    assert message.split(":")[0] in capsys.readouterr().err
