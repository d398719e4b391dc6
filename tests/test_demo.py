"""`das demo` chains real commands; each step must parse against the current CLI."""

from pathlib import Path

from das.cli import build_parser
from das.cli.demo import demo_steps


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
