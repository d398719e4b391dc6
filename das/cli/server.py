"""`das server {start|status|stop}`: the local Prefect API that `das run` and `das demo` use when
no Prefect server is configured (no ``PREFECT_API_URL`` in the environment or the active
Prefect profile).

The first such run starts it in the background and says so; later runs find it and reuse it,
so that only the first run of a home waits for a Prefect server to start (its new database a
copy of one migrated once per installation): every run is still a real Prefect flow run, with
its logs and artifacts on that server. It stays up until ``das server stop`` (or the machine
restarts).

- **Where it lives**: ``DAS_LOCAL_API_DIR``, else
  ``${XDG_STATE_HOME:-~/.local/state}/das/local-api``, a folder only its owner can open:
  ``server.json`` (its process id, port and Prefect version), ``auth`` (its auth string,
  ``das:`` and a random password, mode 0600), ``server.log``, ``client-trust.pem`` (the
  one-certificate trust store of its clients' TLS contexts: :func:`_client_trust`) and
  Prefect's home with its SQLite database (``prefect/prefect.db``).
- **Loopback only, authenticated**: it listens on ``127.0.0.1`` on a free port and answers
  nobody without its auth string (basic auth, CSRF protection on), as `das prefect server
  start` does; each run reads the string from ``auth``. Telemetry off.
- **Seen and stopped**: ``das server status`` prints its address, process id, version and how
  to log in to its UI; in ``ps`` it is ``prefect server start --host 127.0.0.1 --port PORT``;
  ``das server stop`` stops it (SIGTERM, then SIGKILL after 20 s).
- **A new database in milliseconds**: a new home's database is a copy of an empty one
  migrated once per installation (:mod:`das.cli.server_database`), not migrated again.
- **Two runs at once** share it: the one that finds no server starts it under a lock and the
  other waits for it to answer. A ``server.json`` whose process is gone, or is no longer that
  server, is stale and replaced; a server of another Prefect version is stopped and started
  again with this one (its database is migrated by the newer version).

`das ledger verify` (which checks the ledger against the heads the runs posted there, and
starts it when it is not running), `das ledger approve` and `das runs list` use it too when no
other Prefect API is configured.

``DAS_LOCAL_API=temporary`` restores the earlier behaviour: each run starts a temporary API of
its own and stops it when it ends (20-40 s more per run on 2 cores).

Exit codes: 0 done (``status``: running); 1 ``status``: not running, or ``start``: it did not
answer (the end of its log is shown); 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from das.prefect_auth import CLIENT_AUTH, basic_authorization, check_api

LOCAL_API_DIR_ENV = "DAS_LOCAL_API_DIR"
LOCAL_API_ENV = "DAS_LOCAL_API"  # "temporary": a temporary API per run, as before
HOST = "127.0.0.1"
USER = "das"
# A first start migrates a new database: ~10 s on an idle 2-core machine, more when loaded.
# The same setting as Prefect's temporary API (set to 180 s by every `das` command when unset).
STARTUP_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_SECONDS = 180.0
STOP_SECONDS = 20.0
# The server's database waits this long for a lock rather than fail a call with "database is
# locked" (Prefect's default is 10 s; two runs at once write task states and logs together).
DATABASE_TIMEOUT_SECONDS = "60"

EXIT_OK, EXIT_NOT_RUNNING, EXIT_USAGE = 0, 1, 2


class LocalApiError(RuntimeError):
    """The local API could not be started or reached; the message says what to do."""


@dataclass(frozen=True)
class LocalApi:
    """One local API as ``server.json`` records it."""

    pid: int
    port: int
    prefect: str  # the Prefect version that started it
    started: float  # time.time() of the start

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/api"


def api_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``DAS_LOCAL_API_DIR``, else ``${XDG_STATE_HOME:-~/.local/state}/das/local-api``."""
    environ = os.environ if environ is None else environ
    named = environ.get(LOCAL_API_DIR_ENV)
    if named:
        return Path(named).expanduser().absolute()
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser().absolute() / "das" / "local-api"


def prefect_version() -> str:
    """This virtualenv's Prefect version (from its metadata: importing Prefect takes 1-2 s)."""
    return version("prefect")


def api_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process already has a Prefect API to use: ``PREFECT_API_URL`` in the
    environment, in Prefect's settings when Prefect is imported (a test harness sets them
    there), or in the active profile of Prefect's profiles file."""
    environ = os.environ if environ is None else environ
    if environ.get("PREFECT_API_URL"):
        return True
    if "prefect.settings" in sys.modules:
        from prefect.settings import get_current_settings

        return bool(get_current_settings().api.url)
    return bool(_profile_api_url(environ))


def _profile_api_url(environ: Mapping[str, str]) -> str | None:
    """``PREFECT_API_URL`` of the active profile in Prefect's profiles file, if any."""
    import tomllib

    home = Path(environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    active = environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    settings = (profiles.get("profiles") or {}).get(active) or {}
    url = settings.get("PREFECT_API_URL") if isinstance(settings, dict) else None
    return str(url) if url else None


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a run of this process uses the local API: no API configured, and not
    ``DAS_LOCAL_API=temporary``."""
    environ = os.environ if environ is None else environ
    if environ.get(LOCAL_API_ENV, "").strip().lower() == "temporary":
        return False
    return not api_configured(environ)


# -- the record, the process, the lock -----------------------------------------------------------


def _folder(environ: Mapping[str, str] | None = None) -> Path:
    folder = api_dir(environ)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    return folder


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One process at a time finds, starts or stops the server of ``folder``."""
    with open(folder / "lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_record(folder: Path) -> LocalApi | None:
    try:
        data = json.loads((folder / "server.json").read_text(encoding="utf-8"))
        return LocalApi(int(data["pid"]), int(data["port"]), str(data["prefect"]),
                        float(data["started"]))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_record(folder: Path, api: LocalApi) -> None:
    staged = folder / "server.json.tmp"
    staged.write_text(json.dumps(asdict(api), indent=1) + "\n", encoding="utf-8")
    staged.replace(folder / "server.json")


def _is_server(api: LocalApi) -> bool:
    """Whether ``api.pid`` is still that server: alive, ours, and its command line names
    its port (a recycled process id is not)."""
    try:
        command = Path(f"/proc/{api.pid}/cmdline").read_bytes().split(b"\0")
        owner = os.stat(f"/proc/{api.pid}").st_uid
    except OSError:
        return False
    return (
        owner == os.getuid()
        and b"server" in command
        and b"start" in command
        and str(api.port).encode() in command
    )


def _auth(folder: Path) -> str:
    """The server's auth string (``das:`` and a random password), made once, mode 0600."""
    from das.secret_files import read_secret_file

    path = folder / "auth"
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(f"{USER}:{secrets.token_urlsafe(24)}\n")
    return read_secret_file(path, LOCAL_API_DIR_ENV + "/auth")


# Prefect's client builds a TLS context for every client it makes (28 in a 100 k-person PHSafe
# run), loading certifi's ~140 roots each time: ~20 ms CPU each, 0.6 CPU-s a run. The local API
# is plain HTTP on loopback, so its clients load this file of one certificate instead.
CLIENT_TRUST_ENV = "PREFECT_API_SSL_CERT_FILE"


def _client_trust(folder: Path) -> Path:
    """A trust store for Prefect's clients of the local API, made once: one self-signed
    certificate, valid for no time at all, whose key was never kept, so that it verifies
    nothing (the local API speaks plain HTTP on loopback; no TLS peer is ever checked
    against it)."""
    path = folder / "client-trust.pem"
    if path.exists():
        return path
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import NameOID

    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "das local API: trusts nothing")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now)
        .sign(key, None)
    )
    partial = folder / f".client-trust.{os.getpid()}.{secrets.token_hex(4)}"
    partial.write_bytes(certificate.public_bytes(Encoding.PEM))
    os.replace(partial, path)  # two runs at once: either's file, whole
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _server_environment(folder: Path, auth: str) -> dict[str, str]:
    """The server process's environment: its own Prefect home and database, auth and CSRF on,
    no analytics; none of the caller's Prefect client settings."""
    from das.offline import OFFLINE_ENVIRONMENT

    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PREFECT_") and key not in ("DAS_PREFECT_AUTH_FILE",)
    }
    environ.update(OFFLINE_ENVIRONMENT)
    environ.update({
        "PREFECT_HOME": str(folder / "prefect"),
        "PREFECT_SERVER_API_HOST": HOST,
        "PREFECT_SERVER_API_AUTH_STRING": auth,
        "PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true",
        "PREFECT_SERVER_DATABASE_TIMEOUT": DATABASE_TIMEOUT_SECONDS,
        # Prefect's block types are not used by the pipeline: not registering them spares a
        # first start ~1 CPU-s.
        "PREFECT_SERVER_API_BLOCKS_REGISTER_ON_START": "false",
        "PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
    })  # fmt: skip
    return environ


_STARTED: list[subprocess.Popen] = []


def _spawn(folder: Path) -> LocalApi:
    """Start the server in the background (a session of its own: it outlives this process)."""
    from das.cli.prefect_wrapper import prefect_command
    from das.cli.server_database import seed

    auth = _auth(folder)
    port = _free_port()
    command = [*prefect_command(), "server", "start", "--host", HOST, "--port", str(port)]
    template = seed(folder / "prefect", prefect_version())
    with open(folder / "server.log", "ab") as log:
        if template is not None:
            log.write(f"das: a new database, copied from {template}\n".encode())
            log.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env=_server_environment(folder, auth),
            start_new_session=True,
        )
    _STARTED.append(process)  # kept, not waited for: it outlives this process
    api = LocalApi(process.pid, port, prefect_version(), time.time())
    _write_record(folder, api)
    return api


def _stop_process(api: LocalApi, seconds: float = STOP_SECONDS) -> None:
    """SIGTERM the server (and its process group), SIGKILL it after ``seconds``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _is_server(api):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(api.pid, sig)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):  # reaped when this process started it
                os.waitpid(api.pid, os.WNOHANG)
            if not _is_server(api):  # gone (a zombie's command line is empty)
                return
            time.sleep(0.1)


# -- what the commands and `das run` call -------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """The local API a run uses, and whether this process started it."""

    api: LocalApi
    auth: str
    started: bool
    replaced: str | None = None  # why an earlier record was replaced, when one was


def find(environ: Mapping[str, str] | None = None) -> LocalApi | None:
    """The running local API of this home, or None."""
    folder = api_dir(environ)
    api = _read_record(folder)
    return api if api is not None and _is_server(api) else None


def start(environ: Mapping[str, str] | None = None) -> Found:
    """The running local API, else a new one started in the background (not waited for:
    :func:`wait_ready`). A stale record or a server of another Prefect version is replaced."""
    folder = _folder(environ)
    with _locked(folder):
        api = _read_record(folder)
        replaced = None
        if api is not None:
            if not _is_server(api):
                replaced = f"its record named process {api.pid}, which is gone"
            elif api.prefect != prefect_version():
                replaced = f"it ran Prefect {api.prefect}, this is Prefect {prefect_version()}"
                _stop_process(api)
            else:
                return Found(api, _auth(folder), started=False)
        return Found(_spawn(folder), _auth(folder), started=True, replaced=replaced)


def _log_tail(environ: Mapping[str, str] | None = None, lines: int = 15) -> str:
    try:
        text = (api_dir(environ) / "server.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _health(api: LocalApi, auth: str) -> bool:
    request = urllib.request.Request(
        api.url + "/health", headers={"Authorization": basic_authorization(auth)}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def wait_ready(found: Found, seconds: float | None = None) -> None:
    """Return once the server answers an authenticated call; :class:`LocalApiError` when its
    process ends first or it does not answer within ``seconds`` (default: ``STARTUP_ENV``)."""
    if seconds is None:
        try:
            seconds = float(os.environ.get(STARTUP_ENV) or STARTUP_SECONDS)
        except ValueError:
            seconds = STARTUP_SECONDS
    deadline = time.monotonic() + seconds
    while True:
        if _health(found.api, found.auth):
            problem, _ = check_api(found.api.url, found.auth, timeout=10)
            if problem is None:
                return
        if not _is_server(found.api):
            raise LocalApiError(
                f"the local Prefect API (process {found.api.pid}) stopped while starting; the "
                f"end of its log {api_dir() / 'server.log'}:\n{_log_tail()}"
            )
        if time.monotonic() > deadline:
            raise LocalApiError(
                f"the local Prefect API at {found.api.url} did not answer within {seconds:.0f} s "
                f"({STARTUP_ENV}; see {api_dir() / 'server.log'}; `das server stop` stops it)"
            )
        time.sleep(0.1)


_in_use: Found | None = None


def use(found: Found, environ: MutableMapping[str, str] | None = None) -> None:
    """Point this process's Prefect client (and its child processes) at ``found``, with a
    trust store of one certificate for its TLS context unless one is set
    (:func:`_client_trust`)."""
    global _in_use
    environ = os.environ if environ is None else environ
    environ["PREFECT_API_URL"] = found.api.url
    environ[CLIENT_AUTH] = found.auth
    if not environ.get(CLIENT_TRUST_ENV):
        environ[CLIENT_TRUST_ENV] = str(_client_trust(_folder(environ)))
    if environ is os.environ:
        _in_use = found


def in_use() -> Found | None:
    """The local API this process already points at (an earlier step of `das demo`, `das ledger
    approve`), found again for its next run: the environment names it, but Prefect's settings,
    read once per process, may have been read before."""
    if _in_use is None or os.environ.get("PREFECT_API_URL") != _in_use.api.url:
        return None
    return Found(_in_use.api, _in_use.auth, started=False)


def use_for_reading(start: bool = False) -> LocalApi | None:
    """For a command that reads what runs posted (`das ledger verify` and `approve`, `das runs
    list`) with no Prefect API configured: the local API the runs reported to, when it runs
    (or, with ``start``, once started), pointed at like :func:`use`; else None."""
    if not wanted():
        return None
    api = find()
    if api is None and not start:
        return None
    found = Found(api, _auth(_folder()), started=False) if api is not None else start()
    wait_ready(found)
    use(found)
    return found.api


def stop(environ: Mapping[str, str] | None = None) -> LocalApi | None:
    """Stop the local API of this home; the one stopped, or None when none was running."""
    folder = api_dir(environ)
    if not folder.is_dir():
        return None
    with _locked(folder):
        api = _read_record(folder)
        running = api is not None and _is_server(api)
        if running:
            _stop_process(api)
        with contextlib.suppress(FileNotFoundError):
            (folder / "server.json").unlink()
    return api if running else None


# -- the command ---------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    server = subparsers.add_parser(
        "server",
        help="the local Prefect API that `das run` starts and reuses: start, status, stop",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = server.add_subparsers(dest="server_action", required=True)
    for name, text in (
        ("start", "start it in the background (if it is not running) and wait until it answers"),
        ("status", "say whether it runs: address, process id, Prefect version, UI login"),
        ("stop", "stop it (later runs start it again)"),
    ):
        actions.add_parser(name, help=text, description=text).set_defaults(handler=_command)


def _describe(api: LocalApi) -> str:
    folder = api_dir()
    return (
        f"{api.url} (process {api.pid}, Prefect {api.prefect}, loopback only); its UI: "
        f"http://{HOST}:{api.port}, log in with `DAS_PREFECT_AUTH_FILE={folder / 'auth'} das "
        f"ui-login --osc52`; its log and database: {folder}; stop it with `das server stop`"
    )


def _command(args: argparse.Namespace) -> int:
    action = args.server_action
    if action == "status":
        api = find()
        if api is None:
            print(f"das server: not running (started by the next `das run`; {api_dir()})")
            return EXIT_NOT_RUNNING
        print(f"das server: running at {_describe(api)}")
        return EXIT_OK
    if action == "stop":
        api = stop()
        print(f"das server: stopped process {api.pid}" if api else "das server: not running")
        return EXIT_OK
    try:
        found = start()
        wait_ready(found)
    except (LocalApiError, OSError) as exc:
        print(f"das server: error: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    said = "started" if found.started else "already running"
    print(f"das server: {said} at {_describe(found.api)}")
    return EXIT_OK
