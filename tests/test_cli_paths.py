"""Relative paths work from any working directory: resolved at the CLI edge, and at the source
where Great Expectations needs an absolute folder (a Python caller may pass a relative one)."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pytest

from das.cli import build_parser, main
from das.cli.arguments import resolved_path

# One command line per command whose arguments include paths.
COMMANDS = [
    [
        "run",
        "safetab-p",
        "--config",
        "c.json",
        "--data",
        "d",
        "--output",
        "o",
        "--coterminous",
        "x.txt",
    ],
    ["run", "phsafe", "--config", "c.json", "--data", "d", "--output", "o"],
    ["ledger", "show", "--output", "o"],
    ["ledger", "show", "--ledger", "l"],
    ["ledger", "verify", "--ledger", "l", "--release", "r"],
    ["ledger", "approve", "--ledger", "l", "--product", "phsafe", "--config", "c", "--data", "d"],
    ["run", "phsafe", "--config", "c", "--data", "d", "--output", "o", "--ledger", "l"],
    ["explore", "--workspace", "w"],
    ["audit-privacy", "safetab-p", "--config", "c.json", "--report", "r.md"],
    ["deploy", "--checkout", "c", "--root", "r", "--ledger", "l"],
    [
        "layout",
        "--root",
        "r",
        "--safetab-p",
        "s",
        "--safetab-p-params",
        "p",
        "--phsafe-us",
        "u",
        "--phsafe-us-config",
        "u.json",
        "--phsafe-pr",
        "pr",
        "--phsafe-pr-config",
        "pr.json",
        "--swap",
        "w",
    ],
    ["synth", "safetab-p", "--output", "o", "--specs", "s"],
    ["synth", "phsafe", "--output", "o", "--config", "c.json"],
    ["validate", "safetab-p", "--config", "c.json", "--data", "d", "--report", "r"],
    ["validate", "phsafe", "--config", "c.json", "--data", "d", "--report", "r"],
    ["budget", "report", "--config", "c.json", "--specs", "s"],
    ["coterminous", "derive", "--data", "d", "--config", "c.json", "--output", "x.txt"],
    ["swap", "--data", "d", "--match", "", "--swap", "TEN", "--rate", "0.1", "--output", "o"],
    ["demo", "--output", "o"],
    ["demo"],
]


def test_resolved_path_is_absolute_and_normalised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolved_path("out") == tmp_path / "out"
    assert resolved_path("a/../b/./c") == tmp_path / "b" / "c"
    assert resolved_path("~/x") == tmp_path / "home" / "x"
    assert resolved_path("/abs/x") == Path("/abs/x")
    with pytest.raises(argparse.ArgumentTypeError):
        resolved_path("")


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_every_path_argument_is_absolute(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(argv)
    paths = {name: value for name, value in vars(args).items() if isinstance(value, Path)}
    assert paths, "the command has path arguments"
    assert all(value.is_absolute() for value in paths.values()), paths  # defaults too
    given = {
        flag[2:].replace("-", "_"): value
        for flag, value in itertools.pairwise(argv)
        if flag.startswith("--")
    }
    for name, value in paths.items():
        if name in given:
            assert value == tmp_path / given[name], name
    if argv == ["demo"]:
        assert args.output == tmp_path / "demo"


def _path_arguments(parser: argparse.ArgumentParser, prefix: str = "das") -> dict[str, object]:
    """Every option of every sub-command whose value is a path: "das synth phsafe --output" →
    its argparse type."""
    found: dict[str, object] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _path_arguments(sub, f"{prefix} {name}")
        elif action.type in (Path, resolved_path):
            option = action.option_strings[0] if action.option_strings else action.dest
            found[f"{prefix} {option}"] = action.type
    return found


def test_no_command_takes_a_raw_path() -> None:
    # A new command (or option) with type=Path would reach the engine relative again.
    found = _path_arguments(build_parser())
    assert any(name.startswith("das validate") for name in found)
    raw = [name for name, kind in found.items() if kind is Path]
    assert raw == []


def test_synth_and_validate_with_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's demo used to stop here: GX Data Docs refused the relative report folder.
    monkeypatch.chdir(tmp_path)
    assert main(["synth", "phsafe", "--output", "in", "--persons", "600", "--seed", "3"]) == 0
    code = main(
        ["validate", "phsafe", "--config", "in/config.json", "--data", "in", "--report", "rep"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "great_expectations_run" not in out
    assert (tmp_path / "rep" / "data_docs" / "index.html").is_file()
    assert (tmp_path / "rep" / "report.json").is_file()


def test_python_caller_with_relative_report_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from das.synth import generate_phsafe
    from das.validation import validate_phsafe

    generate_phsafe(tmp_path / "in", 600, 4, _demo_phsafe_config())
    monkeypatch.chdir(tmp_path)
    report = validate_phsafe(Path("in/config.json"), Path("in"), Path("rep"))
    assert report.ok, [failure.line() for failure in report.failures]
    assert Path(report.report_dir) == tmp_path / "rep"
    assert (tmp_path / "rep" / "data_docs" / "index.html").is_file()
    # The default report folder (<data>/validation/) from a relative data folder, too.
    report = validate_phsafe("in/config.json", "in")
    assert report.ok
    assert (tmp_path / "in" / "validation" / "data_docs" / "index.html").is_file()


def _demo_phsafe_config() -> Path:
    from das.cli.synth import DEFAULT_PHSAFE_CONFIG

    return DEFAULT_PHSAFE_CONFIG
