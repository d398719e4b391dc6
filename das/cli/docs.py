"""`das docs [--no-browser | --no-serve] [--port N] [--rebuild] [--site DIR]`: this project's
documentation site, built from the checkout and opened locally — no network needed.

The site is built with MkDocs (the ``docs`` extra, in the lock) from ``mkdocs.yml`` and ``docs/``
into ``site/`` in the checkout (ignored by git), when anything it is made from — the pages, the
configuration, or the code the reference pages are generated from — is newer than the last build
(``--rebuild`` forces it). Then it is served on 127.0.0.1 on a free port (``--port`` to choose)
until Ctrl-C, and opened in the browser (``--no-browser``: only the address is printed).
``--no-serve`` builds and prints the ``file://`` address of the front page, which a browser opens
from disk (the pages link as ``page.html``); a browser blocks the search box there, which the
command and the pages' header say: search needs the site served.

Exit codes: 0 served until stopped, or built (``--no-serve``); 1 the build failed; 2 no
checkout with ``mkdocs.yml`` was found, MkDocs is not installed, or the port is in use.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import subprocess
import sys
import threading
import webbrowser
from collections.abc import Iterable
from pathlib import Path

from das.cli.arguments import positive_int, resolved_path

HOST = "127.0.0.1"  # never another interface
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# What the site is made from: a change to any of them calls for a new build.
SOURCES = (
    "mkdocs.yml", "docs", "das", "flows", "tasks", "deploy", "expectations", "pyproject.toml",
)  # fmt: skip
SKIPPED = {"__pycache__", "screenshots"}
# What a page opened from disk lacks (its header says so too: docs/javascripts/file-protocol.js).
NO_SEARCH_FROM_DISK = (
    "the pages read from disk, but a browser blocks their search box there: search needs the "
    "site served (das docs)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    docs = subparsers.add_parser(
        "docs",
        help="build this documentation site if needed and open it locally (no network)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    docs.add_argument("--port", type=positive_int, default=0, help="TCP port (default: a free one)")
    show = docs.add_mutually_exclusive_group()
    show.add_argument("--no-browser", action="store_true", help="serve, print the URL only")
    show.add_argument(
        "--no-serve", action="store_true", help="build only; print the file:// address"
    )
    docs.add_argument("--rebuild", action="store_true", help="build even when nothing changed")
    docs.add_argument(
        "--site", type=resolved_path, help="where to build it (default: site/ in the checkout)"
    )
    docs.set_defaults(handler=_docs)


def checkout() -> Path | None:
    """The checkout holding ``mkdocs.yml``: the working directory or a parent, else the one
    this package was installed from (editable installs)."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents, Path(__file__).resolve().parents[2]):
        if (folder / "mkdocs.yml").is_file() and (folder / "docs").is_dir():
            return folder
    return None


def _newest(paths: Iterable[Path]) -> float:
    newest = 0.0
    for path in paths:
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = [d for d in dirs if d not in SKIPPED and not d.startswith(".")]
                for name in files:
                    newest = max(newest, (Path(root) / name).stat().st_mtime)
    return newest


def needs_build(root: Path, site: Path) -> bool:
    """Whether the site is missing or older than anything it is made from."""
    index = site / "index.html"
    if not index.is_file():
        return True
    return _newest(root / name for name in SOURCES) > index.stat().st_mtime


def build(root: Path, site: Path) -> int:
    """``mkdocs build --strict`` of the checkout into ``site``; MkDocs's exit code."""
    print(f"das docs: building the site into {site} (about half a minute)", flush=True)
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
         str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root, env=environment, check=False,
    )  # fmt: skip
    return done.returncode


def _docs(args: argparse.Namespace) -> int:
    root = checkout()
    if root is None:
        print("das docs: error: no checkout with mkdocs.yml here or above (the site is built "
              "from the repository)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        import mkdocs  # noqa: F401  (only to say what is missing)
    except ImportError:
        print("das docs: error: MkDocs is not installed: install the locked environment "
              "(requirements.lock holds the docs extra)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    site = args.site or root / "site"
    if (args.rebuild or needs_build(root, site)) and build(root, site) != 0:
        print("das docs: error: the site did not build (see above)", file=sys.stderr)
        return EXIT_FAILED
    index = site / "index.html"
    if args.no_serve:
        print(f"das docs: {NO_SEARCH_FROM_DISK}", file=sys.stderr)
        print(index.as_uri())
        return EXIT_OK
    handler = functools.partial(_QuietHandler, directory=str(site))
    try:
        server = http.server.ThreadingHTTPServer((HOST, args.port), handler)
    except OSError as exc:
        print(f"das docs: error: cannot listen on {HOST}:{args.port}: {exc.strerror}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    url = f"http://{HOST}:{server.server_address[1]}/"
    print(f"das docs: {url}  (also {index.as_uri()}; Ctrl-C stops)", flush=True)
    if not args.no_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files of the site, without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:
        return
