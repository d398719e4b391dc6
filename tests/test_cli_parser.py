"""`das COMMAND ...` builds the parser of that command alone: one module imported, not all
sixteen with everything they import (pandas, SQLAlchemy, SciPy, ...), and the same parse."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from test_cli_paths import COMMANDS

from das.cli import COMMAND_HELP, COMMAND_MODULES, build_parser, command_module, help_parser

REPO = Path(__file__).resolve().parents[1]


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(commands.choices)


def test_each_command_is_registered_by_its_module_alone() -> None:
    every = _commands(build_parser())
    by_module: dict[str | None, set[str]] = defaultdict(set)
    for command in every:
        by_module[command_module(command)].add(command)
    assert set(by_module) == set(COMMAND_MODULES)  # no command unmapped, no module unused
    for command in every:
        assert _commands(build_parser(command)) == by_module[command_module(command)], command
    assert command_module("--help") is None and command_module("nonsense") is None
    assert _commands(build_parser("nonsense")) == every  # argparse lists every choice


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_a_command_parses_as_the_whole_parser_parses_it(argv: list[str]) -> None:
    def parsed(parser: argparse.ArgumentParser) -> dict[str, object]:
        values = vars(parser.parse_args(argv))
        handler = values.pop("handler")  # a closure made at each registration
        return values | {"handler": (handler.__module__, handler.__qualname__)}

    assert parsed(build_parser(argv[0])) == parsed(build_parser())


@pytest.mark.integration  # a fresh interpreter: what `das ledger ...` imports
def test_a_ledger_command_imports_no_engine() -> None:
    code = (
        "import sys, das.cli; das.cli.build_parser('ledger'); "
        "print(sorted(m for m in ('pandas', 'scipy', 'prefect', 'sqlalchemy', "
        "'great_expectations') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def test_the_help_list_is_what_the_modules_register() -> None:
    """`das --help` shows :data:`COMMAND_HELP` without importing the modules: the same
    commands, in the same order, with the same help lines as the whole parser."""
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {a.dest: a.help for a in commands._choices_actions} == COMMAND_HELP
    assert [a.dest for a in commands._choices_actions] == list(COMMAND_HELP)
    assert build_parser().format_help() == help_parser().format_help()


@pytest.mark.integration  # a fresh interpreter: what `das --help` and `das run --help` import
@pytest.mark.parametrize(
    ("argv", "heavy"),
    [
        (["--help"], ("das.cli.", "numpy", "pandas", "prefect")),
        (["bogus"], ("das.cli.", "numpy", "pandas", "prefect")),
        (["run", "phsafe", "--help"], ("numpy", "pandas", "scipy", "prefect")),
    ],
)
def test_help_imports_no_command_stack(argv: list[str], heavy: tuple[str, ...]) -> None:
    code = (
        "import sys, das.cli\n"
        "try:\n"
        f"    das.cli.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"
