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
start a server without an auth string (run ``prefect server start`` itself for that), and says
how to log in to the UI without typing the secret. The process becomes ``prefect`` (exec): a
service manager sees and signals Prefect itself.

``das ui-login`` hands the auth string to a clipboard, never to the screen: piped
(``das ui-login | xclip -selection clipboard``, ``| wl-copy``, ``| pbcopy``) it writes the
string for the clipboard tool; with ``--osc52`` it asks the terminal itself to copy it (OSC 52:
kitty, WezTerm, iTerm2, foot, Windows Terminal, xterm when allowed; through tmux with ``set -g
set-clipboard on``). Either way the secret is on no command line and in no shell history.

Exit codes: Prefect's own (the process becomes ``prefect``); 2 when a secret file is refused.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from das.prefect_auth import AUTH_FILE_ENV, CLIENT_AUTH, SecretError, configure_prefect_server

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
    login = subparsers.add_parser(
        "ui-login",
        help="copy the Prefect UI's login string (DAS_PREFECT_AUTH_FILE) without showing it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    login.add_argument(
        "--osc52",
        action="store_true",
        help="on a terminal: ask the terminal to copy it (OSC 52 escape sequence)",
    )
    login.set_defaults(handler=ui_login)


def prefect_command() -> list[str]:
    """The ``prefect`` command of this interpreter's environment (the project's virtualenv)."""
    script = Path(sys.executable).with_name("prefect")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "prefect"]


def das_command(checkout: Path) -> str:
    """How the operator calls this ``das``: ``.venv/bin/das`` from the checkout when it is the
    checkout's virtualenv, else its full path."""
    script = Path(sys.executable).with_name("das")
    try:
        return str(script.relative_to(checkout))
    except ValueError:
        return str(script)


def subcommand(args: Sequence[str]) -> str | None:
    """The prefect sub-command (``server``, ``worker``...), past its global options."""
    for arg in args:
        if not arg.startswith("-"):
            return arg
    return None


def prefect_command_line(args: Sequence[str]) -> int:
    """Exec ``prefect args...`` (``das.cli.main`` has already read ``DAS_PREFECT_AUTH_FILE``).
    Returns only on a usage error."""
    if subcommand(args) == "server":
        try:
            configure_prefect_server()
        except SecretError as exc:
            print(f"das prefect: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if "start" in args:
            print(login_hint(ui_address(args), das_command(Path.cwd())), file=sys.stderr)
    command = [*prefect_command(), *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return EXIT_USAGE  # not reached


def ui_address(args: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """The UI's address of ``prefect server start ARGS``: its ``--host``/``--port`` options,
    else the server settings of the environment, else Prefect's defaults."""
    environ = os.environ if environ is None else environ
    values = {"--host": environ.get("PREFECT_SERVER_API_HOST") or "127.0.0.1",
              "--port": environ.get("PREFECT_SERVER_API_PORT") or "4200"}  # fmt: skip
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in values:
            if equals:
                values[name] = value
            elif index + 1 < len(args):
                values[name] = args[index + 1]
    host = values["--host"]
    host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    return f"http://{host}:{values['--port']}"


def login_hint(address: str, das: str = "das") -> str:
    """How an operator logs in to the UI without typing or showing the secret (``das``: how
    the operator calls this command)."""
    return (
        f"das prefect: the UI is at {address}/login (open that address: the front page shows "
        "an 'Authentication failed' notice first). It asks for the auth string of "
        f"{AUTH_FILE_ENV}: copy it without showing it, with `{das} ui-login | xclip -selection "
        f"clipboard` (or `| wl-copy`, `| pbcopy`; in a terminal that allows it, `{das} ui-login "
        "--osc52`), paste it into the field, press Enter.\n"
        "das prefect: Prefect's own banner follows, written for a server without "
        "authentication: its `prefect config set PREFECT_API_URL=…` is not needed (`das` reads "
        f"PREFECT_API_URL from the environment; the plain `prefect` has no auth string: use "
        f"`{das} prefect …`), and the dashboard to open is {address}/login, not the front page "
        "it names"
    )


def ui_login(args: argparse.Namespace) -> int:
    """``das ui-login``: the auth string to a clipboard tool (stdout not a terminal) or, with
    ``--osc52``, to the terminal's clipboard; never shown on a terminal."""
    auth = os.environ.get(CLIENT_AUTH)
    if not auth:
        print(f"das ui-login: error: no auth string: set {AUTH_FILE_ENV} to the file holding "
              "it (user:password, chmod 600)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if args.osc52:
        encoded = base64.b64encode(auth.encode("utf-8")).decode("ascii")
        sequence = f"\033]52;c;{encoded}\a"
        if os.environ.get("TMUX"):  # tmux passes the sequence on to its own terminal
            sequence = f"\033Ptmux;\033{sequence}\033\\"
        try:
            if sys.stdout.isatty():
                sys.stdout.write(sequence)
                sys.stdout.flush()
            else:
                with open("/dev/tty", "w", encoding="ascii") as terminal:
                    terminal.write(sequence)
        except OSError as exc:
            print(f"das ui-login: error: no terminal to copy through ({exc.strerror})",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        print("das ui-login: asked the terminal to copy the auth string (OSC 52): paste it "
              "into the UI's login field. Nothing pasted? This terminal does not allow OSC 52: "
              "use `das ui-login | xclip -selection clipboard`", file=sys.stderr)  # fmt: skip
        return 0
    if sys.stdout.isatty():
        print("das ui-login: error: refusing to show the auth string on a terminal: pipe it "
              "into a clipboard tool (`das ui-login | xclip -selection clipboard`, `| wl-copy`, "
              "`| pbcopy`) or use --osc52", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    sys.stdout.write(auth)
    sys.stdout.flush()
    return 0
