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
    parser = build_parser()
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
