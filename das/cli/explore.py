"""`das explore [--port P] [--no-browser]`: the tuning explorer, a local page (127.0.0.1 only).

The explorer is its own package (``explorer/``), imported here only when the command runs, so
the rest of the CLI does not load FastAPI or uvicorn.

Exit codes: 0 stopped (Ctrl-C), 2 the port is invalid or in use.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import webbrowser
from pathlib import Path

from das.cli.arguments import positive_int, resolved_path

HOST = "127.0.0.1"  # never another interface: the page reads and writes files on this machine
DEFAULT_PORT = 8765


def register(subparsers: argparse._SubParsersAction) -> None:
    explore = subparsers.add_parser(
        "explore",
        help="the tuning page: privacy parameters, plots, simulation, export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explore.add_argument("--port", type=positive_int, default=DEFAULT_PORT, help="TCP port")
    explore.add_argument(
        "--no-browser", action="store_true", help="print the URL without opening a browser"
    )
    explore.add_argument(
        "--workspace",
        type=resolved_path,
        help="where synthetic populations are written (default: a folder in the temp dir)",
    )
    explore.set_defaults(handler=_explore)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _explore(args: argparse.Namespace) -> int:
    if args.port > 65535:
        print(f"error: invalid port {args.port}", file=sys.stderr)
        return 2
    if not _port_free(args.port):
        print(f"error: port {args.port} on {HOST} is in use (try --port)", file=sys.stderr)
        return 2
    # FastAPI's OpenTelemetry hooks stay off: nothing leaves this machine.
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    import uvicorn

    from explorer.app import create_app

    workspace = args.workspace or Path(tempfile.gettempdir()) / "das-explore"
    app = create_app(workspace.resolve())
    url = f"http://{HOST}:{args.port}/"
    print(f"das explore: {url}  (synthetic populations in {workspace}; Ctrl-C stops)", flush=True)
    if not args.no_browser:
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    uvicorn.run(app, host=HOST, port=args.port, log_level="warning", access_log=False)
    return 0
