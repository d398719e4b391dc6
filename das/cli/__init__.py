"""The `das` command line: one module per command group, each with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from das.heartbeats import HeartbeatSettingError, configure_heartbeats
from das.offline import configure_offline
from das.prefect_auth import SecretError, configure_prefect_auth, server_accepts

# Each module registers its sub-commands; a module is imported only to build the parser.
COMMAND_MODULES = (
    "budget",
    "synth",
    "validate",
    "run",
    "ledger",
    "release",
    "runs",
    "coterminous",
    "swap",
    "demo",
    "explore",
    "audit_privacy",
    "layout",
    "deploy",
    "prefect_wrapper",
    "docs",
)
# The commands whose module is not named after them (tests/test_cli_parser.py checks this
# against what each module registers): `das COMMAND ...` imports that one module only.
MODULE_OF = {
    "audit-privacy": "audit_privacy",
    "prefect": "prefect_wrapper",
    "ui-login": "prefect_wrapper",
}


def command_module(command: str) -> str | None:
    """The module of COMMAND_MODULES that registers ``command``, or None for no command."""
    module = MODULE_OF.get(command, command)
    return module if module in COMMAND_MODULES else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, only that command's module registers (each imports
    what its commands need: all of them made `das ledger --help` take 1.8 CPU-s, not 0.07)."""
    parser = argparse.ArgumentParser(
        prog="das", description="Disclosure avoidance for detailed census tables."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    module = command_module(command) if command else None
    for name in (module,) if module else COMMAND_MODULES:
        importlib.import_module(f"das.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `das` console script; returns the process exit code."""
    try:  # the flow runs' heartbeat, before Prefect reads its settings
        configure_heartbeats()
    except HeartbeatSettingError as exc:
        print(f"das: error: {exc}", file=sys.stderr)
        return 2
    configure_offline()
    try:  # the Prefect server's auth string, for this process and its children
        configure_prefect_auth()
    except SecretError as exc:
        print(f"das: error: {exc}", file=sys.stderr)
        return 2
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["prefect"]:  # passed through whole: argparse would take prefect's options
        from das.cli.prefect_wrapper import prefect_command_line

        return prefect_command_line(argv[1:])
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    # `das run` against a server: refused credentials stop here, in one line (exit 2, nothing
    # drawn), not in a traceback from the flow's first API call. (`das deploy` asks itself.)
    api = os.environ.get("PREFECT_API_URL")
    if args.command == "run" and api:
        refused = server_accepts("das run")
        if refused:
            return refused
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
