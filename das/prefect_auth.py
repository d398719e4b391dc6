"""The Prefect server's secrets for this pipeline's processes: from a 0600 file, never a
command line or a committed file.

- ``DAS_PREFECT_AUTH_FILE``: a file holding the server's basic-auth string (one line,
  ``user:password``), readable by its owner only. Every ``das`` command reads it at start
  (:func:`configure_prefect_auth`) and puts it in ``PREFECT_API_AUTH_STRING`` for its own
  Prefect client and its child processes (``prefect deploy``, a worker's flow runs, their
  Dask workers). ``das prefect server start`` also makes it the server's
  ``PREFECT_SERVER_API_AUTH_STRING`` and turns CSRF protection on
  (:func:`configure_prefect_server`).
- ``DAS_PREFECT_DATABASE_PASSWORD_FILE`` (server only): the PostgreSQL password of the
  server's database, for a connection URL that names it as ``${PREFECT_SERVER_DATABASE_PASSWORD}``.

A Dask worker of an existing cluster is not a ``das`` command: start it with
``--preload das.prefect_auth`` (:func:`dask_setup`) so that its task runs report to an
authenticated server.

Without ``DAS_PREFECT_AUTH_FILE``, Prefect's own ``PREFECT_API_AUTH_STRING`` (environment) is
used as is. Never imports Prefect (the engine does not).
"""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.request
from collections.abc import MutableMapping

from das.secret_files import SecretError, read_secret_file

AUTH_FILE_ENV = "DAS_PREFECT_AUTH_FILE"
DATABASE_PASSWORD_FILE_ENV = "DAS_PREFECT_DATABASE_PASSWORD_FILE"
CLIENT_AUTH = "PREFECT_API_AUTH_STRING"
SERVER_AUTH = "PREFECT_SERVER_API_AUTH_STRING"
SERVER_CSRF = "PREFECT_SERVER_CSRF_PROTECTION_ENABLED"
SERVER_DATABASE_PASSWORD = "PREFECT_SERVER_DATABASE_PASSWORD"
UNREACHABLE = "the Prefect API could not be reached"


def configure_prefect_auth(environ: MutableMapping[str, str] | None = None) -> None:
    """``PREFECT_API_AUTH_STRING`` from ``DAS_PREFECT_AUTH_FILE`` when that is set (the file
    wins over an inherited value); nothing otherwise. Raises :class:`SecretError`."""
    environ = os.environ if environ is None else environ
    path = environ.get(AUTH_FILE_ENV)
    if path:
        environ[CLIENT_AUTH] = read_secret_file(path, AUTH_FILE_ENV)


def configure_prefect_server(environ: MutableMapping[str, str] | None = None) -> None:
    """The environment of ``das prefect server ...``: the server's auth string (from
    ``DAS_PREFECT_AUTH_FILE``, else an inherited ``PREFECT_SERVER_API_AUTH_STRING`` or
    ``PREFECT_API_AUTH_STRING``), CSRF protection on unless set otherwise, and the database
    password from ``DAS_PREFECT_DATABASE_PASSWORD_FILE``. Refuses an unauthenticated server."""
    environ = os.environ if environ is None else environ
    configure_prefect_auth(environ)
    if environ.get(AUTH_FILE_ENV):
        auth = environ.get(CLIENT_AUTH)
    else:
        auth = environ.get(SERVER_AUTH) or environ.get(CLIENT_AUTH)
    if not auth:
        raise SecretError(
            f"refusing to start a Prefect server without authentication: set {AUTH_FILE_ENV} "
            "to a file (chmod 600) holding its auth string user:password"
        )
    environ[SERVER_AUTH] = auth
    environ.setdefault(SERVER_CSRF, "true")
    path = environ.get(DATABASE_PASSWORD_FILE_ENV)
    if path:
        environ[SERVER_DATABASE_PASSWORD] = read_secret_file(path, DATABASE_PASSWORD_FILE_ENV)


def basic_authorization(auth_string: str) -> str:
    """The ``Authorization`` header value Prefect's clients send for ``auth_string``."""
    return "Basic " + base64.b64encode(auth_string.encode("utf-8")).decode("ascii")


def _get(url: str, auth_string: str | None, timeout: float) -> int:
    headers = {"Authorization": basic_authorization(auth_string)} if auth_string else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def check_api(
    api_url: str, auth_string: str | None, timeout: float = 15
) -> tuple[str | None, bool]:
    """Ask the server at ``api_url`` an authenticated question (its version). Returns (the
    problem in one line or None, whether the server also answers anonymous calls)."""
    url = api_url.rstrip("/") + "/admin/version"
    try:
        status = _get(url, auth_string, timeout)
    except (OSError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{UNREACHABLE} at {api_url} ({reason})", False
    if status == 401:
        given = "refused the auth string" if auth_string else "requires authentication"
        return (
            f"the Prefect server at {api_url} {given} (HTTP 401): set {AUTH_FILE_ENV} to the "
            "file holding its auth string (user:password, chmod 600)"
        ), False
    if status >= 500:
        return f"{UNREACHABLE} at {api_url}: it answered HTTP {status} (busy or failing)", False
    if status != 200:
        return f"the Prefect server at {api_url} answered HTTP {status} to {url}", False
    if not auth_string:
        return None, True
    try:
        anonymous = _get(url, None, timeout) == 200
    except (OSError, urllib.error.URLError):
        anonymous = False
    return None, anonymous


def server_accepts(prog: str) -> int:
    """Before ``prog`` (``das deploy``, ``das run``) talks to the server of
    ``PREFECT_API_URL``: 0 when it may; else the problem on stderr in one line and the exit
    code — 3 (an infrastructure fault) when the server cannot be reached or is failing, 2 when
    it refuses the credentials. A warning when it answers anonymous calls."""
    import sys

    api_url = os.environ["PREFECT_API_URL"]
    problem, anonymous = check_api(api_url, os.environ.get(CLIENT_AUTH))
    if problem:
        if problem.startswith(UNREACHABLE):
            print(f"{prog}: FAILED — {problem}: start or check the server (PREFECT_API_URL), "
                  "then run again; nothing was drawn", file=sys.stderr)  # fmt: skip
            return 3
        print(f"{prog}: error: {problem}", file=sys.stderr)
        return 2
    if anonymous:
        print(
            f"{prog}: warning: the Prefect server at {api_url} answers anonymous calls: anyone "
            "who reaches it can trigger a release. Start it with `das prefect server start` and "
            f"{AUTH_FILE_ENV} (docs/how-to/secure-the-prefect-server.md)",
            file=sys.stderr,
        )
    return 0


def dask_setup(worker: object = None) -> None:
    """``dask worker ... --preload das.prefect_auth``: the worker's task runs authenticate to
    the Prefect server with the auth string of ``DAS_PREFECT_AUTH_FILE``, and its allocator
    reuses the engine's large arrays (:mod:`das.allocator`)."""
    from das import allocator

    allocator.tune()
    configure_prefect_auth()
