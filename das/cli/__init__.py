"""The `das` command line: one module per command group, each with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from das.offline import configure_offline

# Each module registers its sub-commands; a module is imported only to build the parser.
COMMAND_MODULES = (
    "budget",
    "synth",
    "validate",
    "run",
    "ledger",
    "coterminous",
    "swap",
    "demo",
    "explore",
    "audit_privacy",
    "deploy",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="das", description="Disclosure avoidance for detailed census tables."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"das.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `das` console script; returns the process exit code."""
    configure_offline()
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
