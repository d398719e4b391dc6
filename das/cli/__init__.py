"""The `das` command line: one module per command group, each with `register(subparsers)`."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

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
    "server",
)
# The commands whose module is not named after them (tests/test_cli_parser.py checks this
# against what each module registers): `das COMMAND ...` imports that one module only.
MODULE_OF = {
    "audit-privacy": "audit_privacy",
    "prefect": "prefect_wrapper",
    "ui-login": "prefect_wrapper",
}


# Every command's one-line help, in the order the modules register them: `das`, `das --help`
# and a mistyped command show this list without importing any command module (all of them
# took 1.1-1.3 s of imports; tests/test_cli_parser.py checks it against the registrations).
COMMAND_HELP = {
    "budget": "privacy-budget calculators and reports",
    "synth": "write a synthetic input folder of any size",
    "validate": "check inputs before a run (exit 0 valid, 1 not valid, 2 usage error)",
    "run": "run a product end to end (exit 0 released, 1 failed, 2 refused, 3 infrastructure)",
    "ledger": "the privacy ledger: init, charter, approve, show, verify",
    "release": "prove a release outside the enclave (das release verify)",
    "runs": "run state: clean what the ledger no longer needs",
    "coterminous": "SafeTab-P coterminous-geography spec file (derive it from the GRF-C)",
    "swap": "permutation swapping of unit records (comparison with the DP products)",
    "demo": "run the demo job on synthetic data",
    "explore": "the tuning page: privacy parameters, plots, simulation, export",
    "audit-privacy": "empirical lower bounds on the privacy loss of the released mechanisms",
    "layout": "build the production layout `das deploy --root` reads, from your files",
    "deploy": "create the work pool and register every Prefect deployment",
    "prefect": "this virtualenv's `prefect` with the server's auth string (DAS_PREFECT_AUTH_FILE)",
    "ui-login": "copy the Prefect UI's login string (DAS_PREFECT_AUTH_FILE) without showing it",
    "docs": "build this documentation site if needed and open it locally (no network)",
    "server": "the local Prefect API that `das run` starts and reuses: start, status, stop",
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


def help_parser() -> argparse.ArgumentParser:
    """The parser of `das` without a known command (``--help``, nothing, a typo): every
    command with its help line from :data:`COMMAND_HELP`, no command module imported."""
    parser = argparse.ArgumentParser(
        prog="das", description="Disclosure avoidance for detailed census tables."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, text in COMMAND_HELP.items():
        subparsers.add_parser(name, help=text)
    return parser


def _exit_now(code: int) -> NoReturn:
    """End a `das run` process that has finished: the interpreter's exit steps that matter
    run (threads joined and their exit hooks: Prefect's log and event workers drain to the
    server; then atexit: logging flushed, temporary files removed), but not its teardown of
    every module and object, which cost a 100 k-person run 1-2 s of wall and up to 6 CPU-s on a
    loaded machine, after its last line."""
    import atexit
    import threading

    threading._shutdown()  # the interpreter's first exit step
    atexit._run_exitfuncs()  # its second
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `das` console script; returns the process exit code."""
    whole_process = argv is None  # the console script or `python -m das`, not a caller
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
    if not argv or command_module(argv[0]) is None:
        help_parser().parse_args(argv)  # prints the help or the usage error, and exits
    parser = build_parser(argv[0])
    args = parser.parse_args(argv)
    # Commands that read what runs posted to a Prefect API (the ledger's witnessed heads, the
    # runs) read the local API the runs reported to, when no other is configured; `das ledger
    # verify` starts it (the witness it checks is there).
    if args.command in ("ledger", "runs") and not os.environ.get("PREFECT_API_URL"):
        from das.cli import server as local_api

        verify = getattr(args, "ledger_command", None) == "verify" and not args.no_prefect
        try:
            local_api.use_for_reading(start=verify)
        except (local_api.LocalApiError, OSError) as exc:
            print(f"das {args.command}: error: the local Prefect API: {exc}", file=sys.stderr)
            return 3
    # `das run` against a server: refused credentials stop here, in one line (exit 2, nothing
    # drawn), not in a traceback from the flow's first API call. (`das deploy` asks itself.)
    api = os.environ.get("PREFECT_API_URL")
    if args.command == "run" and api:
        refused = server_accepts("das run")
        if refused:
            return refused
    code = int(args.handler(args) or 0)
    if whole_process and args.command == "run":
        _exit_now(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
