"""`das layout` builds the root `das deploy` reads from an operator's files, refuses before
making anything when it cannot, and ends with the check `das deploy` runs (issue 26).

Inputs are small `das synth` folders (a few hundred persons); where only names matter (a
missing file, a FIFO, a name in the wrong case) the files are a line of text each.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from das.cli import layout
from das.cli import main as das
from das.cli.deploy import check_root, local_phsafe_config
from das.cli.deploy_layout import PRODUCTS, layout_problems, select_products
from das.specs.race_specs import SPEC_FILES


@pytest.fixture(autouse=True)
def no_ledger_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The next command's ledger and run key come from these when set (the run key also from
    the service account's home): here they are found or placeholders."""
    for name in ("DAS_LEDGER_DIR", "DAS_LEDGER_URL", "DAS_RUN_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`das synth` folders as an operator has them, and a Puerto Rico config apart."""
    base = tmp_path_factory.mktemp("sources")
    synth = ["--persons", "300", "--seed", "5"]
    assert das(["synth", "safetab-p", "--output", str(base / "st"), *synth]) == 0
    assert das(["synth", "phsafe", "--output", str(base / "ph"), *synth]) == 0
    pr_config = base / "pr-config.json"
    pr_config.write_text(json.dumps(local_phsafe_config("pr")))
    return {"safetab-p": base / "st", "phsafe": base / "ph", "pr-config": pr_config}


def _copy(sources: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """The source folders copied, for a test that changes them."""
    copied = {}
    for name, path in sources.items():
        target = tmp_path / "src" / path.name
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
        copied[name] = target
    return copied


def _argv(root: Path, sources: dict[str, Path], *extra: str) -> list[str]:
    ph = str(sources["phsafe"])
    return [
        "layout", "--root", str(root), "--safetab-p", str(sources["safetab-p"]),
        "--phsafe-us", ph, "--phsafe-pr", ph, "--phsafe-pr-config", str(sources["pr-config"]),
        "--swap", ph, *extra,
    ]  # fmt: skip


def test_built_from_synth_output_it_passes_the_check_of_das_deploy(
    tmp_path: Path, sources: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "root"
    assert das(_argv(root, sources)) == layout.EXIT_OK
    assert check_root(root, PRODUCTS) is None
    out = capsys.readouterr().out.splitlines()
    made = [line.split()[0] for line in out if line.startswith("  ") and "copy of" in line]
    assert made == [
        "safetab-p/params/config.json", *(f"safetab-p/params/{name}" for name in SPEC_FILES),
        "safetab-p/input/person-records.txt", "safetab-p/input/GRF-C.txt",
        *(f"phsafe/{p}/{name}" for p in ("us", "pr") for name in (
            "config.json", "input/persons.csv", "input/units.csv", "input/geo.csv")),
        "swap/input/units.csv", "swap/input/geo.csv", "swap/input/persons.csv",
    ]  # fmt: skip
    assert '[Puerto Rico: state_filter ["72"]]' in next(x for x in out if "phsafe/pr/config" in x)
    assert out[-1].startswith("  ") and f" deploy --root {root} --checkout " in out[-1]
    assert "--products" not in out[-1] and out[-1].split()[-2:] == ["--ledger", "LEDGER_DIR"]
    assert " --run-key RUN_KEY " in out[-1]
    assert any(line.startswith("Next (RUN_KEY: the service account's run key") for line in out)
    record = root / "safetab-p" / "input" / "person-records.txt"
    assert not os.path.samefile(record, sources["safetab-p"] / "person-records.txt")  # a copy
    # Run again: nothing to do, every file already in place; a changed source is refused.
    assert das(_argv(root, sources)) == layout.EXIT_OK
    assert all("already in place" in line for line in capsys.readouterr().out.splitlines()
               if line.startswith("  safetab-p/"))  # fmt: skip


def test_link_makes_hard_links_that_outlive_their_source_folder(
    tmp_path: Path, sources: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    """Hard links, not symbolic ones: the root keeps working when the operator's folder moves
    (a symbolic link would dangle, and `das deploy` refuses a dangling link)."""
    mine = _copy(sources, tmp_path)
    root = tmp_path / "root"
    assert das(_argv(root, mine, "--link")) == layout.EXIT_OK
    record = root / "phsafe" / "pr" / "input" / "persons.csv"
    assert os.path.samefile(record, mine["phsafe"] / "persons.csv") and not record.is_symlink()
    config = root / "safetab-p" / "params" / "config.json"
    assert not os.path.samefile(config, mine["safetab-p"] / "config.json")  # parameters: copied
    assert "hard link to" in capsys.readouterr().out
    shutil.rmtree(tmp_path / "src")
    assert layout_problems(root, PRODUCTS) == []


def test_a_missing_input_is_named_and_nothing_is_made(
    tmp_path: Path, sources: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    mine = _copy(sources, tmp_path)
    (mine["safetab-p"] / "GRF-C.txt").unlink()
    (mine["safetab-p"] / SPEC_FILES[0]).unlink()
    root = tmp_path / "root"
    assert das(_argv(root, mine)) == layout.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"safetab-p: {mine['safetab-p'] / SPEC_FILES[0]} is missing" in err
    assert f"safetab-p: {mine['safetab-p'] / 'GRF-C.txt'} (or GRF-C.parquet) is missing" in err
    assert "nothing was made" in err and not root.exists()


def test_inputs_it_cannot_take_are_named_by_path(
    tmp_path: Path, sources: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    """A FIFO (never opened), a records file in a text format its reader does not take, a
    name in the wrong case, both formats of one input, a US config for Puerto Rico."""
    mine = _copy(sources, tmp_path)
    st, ph = mine["safetab-p"], mine["phsafe"]
    (ph / "units.csv").unlink()
    os.mkfifo(ph / "units.csv")
    (ph / "geo.csv").rename(ph / "geo.txt")
    (st / "GRF-C.txt").rename(st / "grf-c.txt")
    (st / "person-records.parquet").write_text("x")
    argv = ["layout", "--root", str(tmp_path / "root"), "--safetab-p", str(st),
            "--phsafe-pr", str(ph)]  # fmt: skip
    assert das(argv) == layout.EXIT_USAGE
    err = capsys.readouterr().err
    for expected in (
        f"{st}/person-records.txt and person-records.parquet both exist",
        f"{st}/GRF-C.txt (or GRF-C.parquet) is missing (found grf-c.txt: the name must be "
        "exactly GRF-C.txt)",
        f"phsafe-pr: {ph}/config.json is the US pass's config; phsafe-pr needs Puerto Rico's",
    ):
        assert expected in err
    assert das([*argv[:3], "--phsafe-us", str(ph)]) == layout.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{ph}/units.csv is a named pipe (FIFO), not a regular file" in err
    assert f"{ph}/geo.txt: the geo records are read as geo.csv or geo.parquet" in err
    assert not (tmp_path / "root").exists()


def test_files_in_the_root_are_replaced_only_when_asked(
    tmp_path: Path, sources: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    st = ["layout", "--root", str(root), "--safetab-p", str(sources["safetab-p"])]
    other = root / "safetab-p" / "input" / "GRF-C.parquet"  # the other format of an input
    other.parent.mkdir(parents=True)
    other.write_text("an earlier GRF-C")
    config = root / "safetab-p" / "params" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text("{}")
    assert das(st) == layout.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{other} already in the root (--replace to replace)" in err
    assert f"{config} already in the root (--replace to replace)" in err
    assert other.read_text() == "an earlier GRF-C" and config.read_text() == "{}"
    (root / "ledger").mkdir()  # where README's `das ledger init` puts the ledger
    assert das([*st, "--replace"]) == layout.EXIT_OK
    out = capsys.readouterr().out
    assert "GRF-C.txt" in out and "removing GRF-C.parquet" in out
    assert "replacing the file there" in out
    assert not other.exists() and layout_problems(root, select_products(["safetab-p"])) == []
    # only SafeTab-P is in the root: the next command registers only it, with that ledger
    assert out.splitlines()[-1].endswith(f"--ledger {root}/ledger --products safetab-p")


def test_the_next_command_names_the_run_key_and_the_ledger_of_the_tutorial(
    tmp_path: Path, sources: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The production tutorial's `das deploy` takes --run-key (the service account's
    ~/.das/run-key) and, on PostgreSQL, --ledger-url (DAS_LEDGER_URL): the command `das
    layout` prints is that one, with nothing left to fill in."""
    key = tmp_path / "home" / ".das" / "run-key"
    key.parent.mkdir(parents=True)
    key.write_text("a key")
    url = "postgresql+psycopg://das_ledger@127.0.0.1:5433/das_ledger"
    monkeypatch.setenv("DAS_LEDGER_URL", url)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # as the tutorial sets it
    root = tmp_path / "root"
    assert das(["layout", "--root", str(root), "--safetab-p", str(sources["safetab-p"])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "Next:"
    assert out[-1].endswith(f" --run-key {key} --ledger-url {url} --products safetab-p")
    monkeypatch.setenv("DAS_RUN_KEY", "/srv/keys/run-key")  # named: it wins
    assert das(["layout", "--root", str(root), "--safetab-p", str(sources["safetab-p"])]) == 0
    assert " --run-key /srv/keys/run-key " in capsys.readouterr().out.splitlines()[-1]


def test_a_dry_run_makes_nothing_and_a_failed_copy_leaves_no_partial_file(
    tmp_path: Path, sources: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    assert das([*_argv(root, sources), "--dry-run"]) == layout.EXIT_OK
    assert "would copy" in capsys.readouterr().out and not root.exists()
    real = shutil.copyfile

    def copyfile(source, target, *args, **kwargs):
        if Path(source).name == "GRF-C.txt":
            Path(target).write_text("half")
            raise OSError(28, "No space left on device")
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(layout.shutil, "copyfile", copyfile)
    assert das(_argv(root, sources)) == layout.EXIT_FAILED
    assert "GRF-C.txt: [Errno 28] No space left on device" in capsys.readouterr().err
    names = [path.name for path in (root / "safetab-p" / "input").iterdir()]
    assert names == ["person-records.txt"]  # no GRF-C, not even a temporary one


def test_links_across_file_systems_and_copies_too_big_are_refused_first(
    tmp_path: Path, sources: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    monkeypatch.setattr(layout, "_device", lambda path: int("sources" in str(path)))
    assert das(_argv(root, sources, "--link")) == layout.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{sources['phsafe']}/persons.csv is on another file system than {root}" in err
    monkeypatch.setattr(layout.shutil, "disk_usage", lambda path: SimpleNamespace(free=9))
    assert das(_argv(root, sources)) == layout.EXIT_USAGE
    assert "needs that much free space; 9 B is free there" in capsys.readouterr().err
    assert not root.exists()


def test_usage_errors_and_a_flag_per_product(capsys: pytest.CaptureFixture, tmp_path) -> None:
    assert das(["layout", "--root", str(tmp_path)]) == layout.EXIT_USAGE
    assert "--safetab-p DIR, --phsafe-us DIR, --phsafe-pr DIR, --swap DIR" in (
        capsys.readouterr().err
    )
    assert das(["layout", "--root", str(tmp_path), "--safetab-p-params", str(tmp_path)]) == 2
    assert "--safetab-p-params needs --safetab-p DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        das(["layout", "--help"])
    text = capsys.readouterr().out
    for product in PRODUCTS:  # the flags come from the layout table
        assert f"--{product.name} DIR" in text
