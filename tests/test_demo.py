"""`das demo` chains real commands; each step must parse against the current CLI."""

import json
import shlex
from pathlib import Path

import pytest

from das.cli import build_parser
from das.cli import main as das
from das.cli.demo import PRODUCTS, demo_steps, write_budget_report


def test_demo_steps_are_valid_commands(tmp_path: Path) -> None:
    parser = build_parser()
    steps = demo_steps(tmp_path, persons=1000, seed=3)
    commands = [argv[:2] for _, argv in steps]
    assert ["run", "safetab-p"] in commands and ["run", "phsafe"] in commands
    assert commands.index(["validate", "phsafe"]) < commands.index(["run", "phsafe"])
    assert commands.index(["synth", "safetab-p"]) < commands.index(["validate", "safetab-p"])
    for _, argv in steps:
        args = parser.parse_args(argv)
        assert callable(args.handler)


def test_the_budget_reports_are_what_the_command_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo/budget/<product>.txt and .json, byte for byte `das budget report` (and --json)."""
    for product in PRODUCTS:
        folder = tmp_path / product
        assert das(["synth", product, "--output", str(folder), "--persons", "200"]) == 0
        capsys.readouterr()
        config = folder / "config.json"
        text, json_file = write_budget_report(config, tmp_path / "budget")
        assert (text, json_file) == (tmp_path / "budget" / f"{product}.txt",
                                     tmp_path / "budget" / f"{product}.json")  # fmt: skip
        assert das(["budget", "report", "--config", str(config)]) == 0
        assert text.read_text() == capsys.readouterr().out
        assert das(["budget", "report", "--config", str(config), "--json"]) == 0
        assert json_file.read_text() == capsys.readouterr().out
        assert json.loads(json_file.read_text())["passes"]


def test_the_demo_writes_its_guide_and_budget_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`das demo`'s own loop, with only the quick steps run for real (synth, budget report):
    the guide is written first, each budget report saved beside the printed one."""
    ran: list[list[str]] = []

    def quick(argv: list[str]) -> int:
        ran.append(argv)
        return das(argv) if argv[0] in ("synth", "budget") else 0

    monkeypatch.setattr("das.cli.main", quick)  # what the demo's loop calls
    output = tmp_path / "demo"
    (output / "stale").mkdir(parents=True)  # an earlier demo's folder is replaced
    assert das(["demo", "--output", str(output), "--persons", "200", "--seed", "5"]) == 0
    assert ran == [argv for _, argv in demo_steps(output, persons=200, seed=5)]
    assert not (output / "stale").exists()
    assert sorted(p.name for p in (output / "budget").iterdir()) == [
        "phsafe.json", "phsafe.txt", "safetab-p.json", "safetab-p.txt"]  # fmt: skip
    guide = (output / "README.md").read_text()
    for folder in ("safetab-p/", "phsafe/", "validation/<product>/", "budget/<product>.txt",
                   "ledger/", "release/<product>/", "release/<product>.das/"):  # fmt: skip
        assert f"| `{folder}" in guide, folder
    for title, argv in demo_steps(output, persons=200, seed=5):  # every step, as run
        assert f"{title}: `das {shlex.join(argv)}`" in guide
    assert guide.count("**confidential**") == 4
    # Each step's header is its command as it would be typed (`--note 'das demo'`, quoted).
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("== ")]
    assert [h.split(": das ", 1)[1] for h in headers] == [shlex.join(argv) for argv in ran]
    assert any(header.endswith(" --note 'das demo'") for header in headers)


def test_the_guide_survives_a_failed_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("das.cli.main", lambda argv: 1 if argv[0] == "validate" else 0)
    output = tmp_path / "demo"
    assert das(["demo", "--output", str(output), "--persons", "200"]) == 1
    assert "## The steps: the commands, in order" in (output / "README.md").read_text()
    assert not (output / "budget").exists()


def test_the_demo_says_where_its_runs_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Its runs went to the local Prefect API (still up): the last lines say where, and how to
    see and stop it."""
    from das.cli import server as local_api

    api = local_api.LocalApi(123, 41873, local_api.prefect_version(), 0.0)
    monkeypatch.setattr(local_api, "_in_use", local_api.Found(api, "das:x", started=True))
    monkeypatch.setenv("PREFECT_API_URL", api.url)
    monkeypatch.setattr(  # the quick steps for real (the budget report reads their files)
        "das.cli.main", lambda argv: das(argv) if argv[0] in ("synth", "budget") else 0
    )
    assert das(["demo", "--output", str(tmp_path / "demo"), "--persons", "200"]) == 0
    out = capsys.readouterr().out
    assert "its flow runs are on the local Prefect API at http://127.0.0.1:41873" in out
    assert "`das server stop` stops it" in out
