"""`das prefect ARGS...`: this virtualenv's ``prefect ARGS...`` with the server's secrets.

The ``prefect`` command reads its auth string from the environment only; this runs it with
``PREFECT_API_AUTH_STRING`` taken from ``DAS_PREFECT_AUTH_FILE`` (a file that only its owner
can read), so the secret is never typed, never on a command line and never in a shell's
history:

    das prefect server start                  # the server: basic auth and CSRF protection on
    das prefect worker start --pool das-enclave
    das prefect deployment run safetab-p/safetab-p-us-pr

For ``server ...`` it also sets the server's ``PREFECT_SERVER_API_AUTH_STRING`` (the same
string), ``PREFECT_SERVER_CSRF_PROTECTION_ENABLED=true`` (unless set otherwise) and, from
``DAS_PREFECT_DATABASE_PASSWORD_FILE``, ``PREFECT_SERVER_DATABASE_PASSWORD``; it refuses to
start a server without an auth string (run ``prefect server start`` itself for that).
The process becomes ``prefect`` (exec): a service manager sees and signals Prefect itself.

Exit codes: Prefect's own (the process becomes ``prefect``); 2 when a secret file is refused.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from das.prefect_auth import SecretError, configure_prefect_server

EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    wrapper = subparsers.add_parser(
        "prefect",
        help="this virtualenv's `prefect` with the server's auth string (DAS_PREFECT_AUTH_FILE)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    wrapper.add_argument("args", nargs=argparse.REMAINDER, help="the prefect command")
    wrapper.set_defaults(handler=lambda args: prefect_command_line(args.args))


def subcommand(args: Sequence[str]) -> str | None:
    """The prefect sub-command (``server``, ``worker``...), past its global options."""
    for arg in args:
        if not arg.startswith("-"):
            return arg
    return None


def prefect_command_line(args: Sequence[str]) -> int:
    """Exec ``prefect args...`` (``das.cli.main`` has already read ``DAS_PREFECT_AUTH_FILE``).
    Returns only on a usage error."""
    from das.cli.deploy import prefect_command

    if subcommand(args) == "server":
        try:
            configure_prefect_server()
        except SecretError as exc:
            print(f"das prefect: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    command = [*prefect_command(), *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return EXIT_USAGE  # not reached
