"""A throwaway PostgreSQL cluster for tests and CI, from Debian's ``postgresql`` package.

``initdb`` into a new temporary folder, ``postgres`` on a free local port (127.0.0.1 only)
with its unix socket in a private folder of that cluster, one database and one role with a
random password; stopped and removed at the end, even on failure. fsync is off: test data only.

PostgreSQL refuses to run as root: as root the cluster runs as the ``postgres`` user of
Debian's package (``nobody`` when there is none), in a folder that user owns; the server
process gets SIGQUIT (immediate shutdown) if the process that started it dies, so a killed test
session leaves no server behind (its folder under the temporary directory stays). When no
PostgreSQL is installed and we are root, ``apt-get install postgresql`` first, as ``.ci/run``
does for chromium.

Three ways to use it:

- Python: ``with PostgresCluster.started() as pg: pg.async_url, pg.sync_url``;
- pytest: the session fixture ``postgres_cluster`` (registered by ``conftest.py``). It FAILS
  when PostgreSQL cannot be started, unless ``DAS_TEST_POSTGRES_SKIP=1`` allows a skip. When
  ``DAS_TEST_POSTGRES_URL`` and ``DAS_TEST_POSTGRES_SYNC_URL`` are set (the CLI below sets them
  for its command), it uses that cluster instead of starting one;
- command line: ``python tests/pg_cluster.py`` prints the URLs as ``export`` lines and keeps the
  cluster until Ctrl-C / SIGTERM; ``python tests/pg_cluster.py -- COMMAND ...`` runs COMMAND
  with ``DAS_TEST_POSTGRES_URL`` (``postgresql+asyncpg://``, for Prefect) and
  ``DAS_TEST_POSTGRES_SYNC_URL`` (``postgresql+psycopg://``, for SQLAlchemy) in its environment,
  then removes the cluster and exits with COMMAND's exit code.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

ASYNC_URL_ENV = "DAS_TEST_POSTGRES_URL"
SYNC_URL_ENV = "DAS_TEST_POSTGRES_SYNC_URL"
SKIP_ENV = "DAS_TEST_POSTGRES_SKIP"
BINDIR_ENV = "DAS_PG_BINDIR"  # another PostgreSQL's bin folder (default: Debian's newest)
DEBIAN_BINDIRS = Path("/usr/lib/postgresql")
DATABASE = "das"
ROLE = "das"
SUPERUSER = "postgres"  # the bootstrap superuser inside the cluster (not an OS user)
START_TIMEOUT = 60.0
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",  # throwaway test data
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}


def wait_or_kill(process: subprocess.Popen, timeout: float = 30) -> None:
    """Wait for a process asked to stop; kill its process group if it does not in time."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


class PostgresUnavailable(RuntimeError):
    """PostgreSQL could not be installed, initialised or started (the message says why)."""


def find_bindir() -> Path:
    """The bin folder of Debian's newest installed PostgreSQL (or ``$DAS_PG_BINDIR``)."""
    if os.environ.get(BINDIR_ENV):
        bindir = Path(os.environ[BINDIR_ENV])
        if not (bindir / "initdb").is_file():
            raise PostgresUnavailable(f"{BINDIR_ENV}={bindir} has no initdb")
        return bindir
    found = sorted(
        (path.parent for path in DEBIAN_BINDIRS.glob("*/bin/initdb")),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    raise PostgresUnavailable(
        f"no PostgreSQL under {DEBIAN_BINDIRS}: apt-get install postgresql (as root)"
    )


def install_postgresql() -> None:
    """``apt-get install postgresql`` (Debian's package) when missing and we are root; the
    cluster it creates itself (``main``) is neither used nor needed."""
    if os.environ.get(BINDIR_ENV):
        return  # the operator's choice: find_bindir() checks it
    with contextlib.suppress(PostgresUnavailable):
        find_bindir()
        return
    if os.geteuid() != 0:
        return  # find_bindir() names the fix
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "postgresql"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PostgresUnavailable(
                f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
            )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _unprivileged_user() -> pwd.struct_passwd | None:
    """The user the cluster runs as: ourselves unless root; as root Debian's ``postgres``
    (``nobody`` when the package's user is missing)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresUnavailable("running as root and neither user postgres nor nobody exists")


def _reachable_by(folder: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` can traverse every ancestor of ``folder`` (mode bits, not ACLs)."""
    for parent in folder.resolve().parents:
        mode = parent.stat()
        if mode.st_uid == user.pw_uid:
            ok = mode.st_mode & stat.S_IXUSR
        elif mode.st_gid == user.pw_gid:
            ok = mode.st_mode & stat.S_IXGRP
        else:
            ok = mode.st_mode & stat.S_IXOTH
        if not ok:
            return False
    return True


@dataclass
class PostgresCluster:
    """A running private cluster; ``async_url`` for Prefect, ``sync_url`` for SQLAlchemy."""

    folder: Path
    bindir: Path
    port: int
    password: str
    user: pwd.struct_passwd | None
    process: subprocess.Popen | None = None
    database: str = DATABASE
    role: str = ROLE
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.folder / "postgres.log"

    # -- URLs ---------------------------------------------------------------------------------
    def url(self, driver: str, password: str | None = None) -> str:
        secret = quote(self.password if password is None else password, safe="")
        return f"{driver}://{self.role}:{secret}@127.0.0.1:{self.port}/{self.database}"

    @property
    def async_url(self) -> str:
        """``postgresql+asyncpg://...`` (``PREFECT_API_DATABASE_CONNECTION_URL``)."""
        return self.url("postgresql+asyncpg")

    @property
    def sync_url(self) -> str:
        """``postgresql+psycopg://...`` (SQLAlchemy with psycopg 3, synchronous)."""
        return self.url("postgresql+psycopg")

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def socket_dir(self) -> Path:
        return self.folder / "socket"

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def started(cls, base: Path | None = None) -> Iterator[PostgresCluster]:
        """A new cluster in a new folder under ``base`` (the temporary directory); stopped
        and removed when the block ends, however it ends."""
        install_postgresql()
        bindir = find_bindir()
        user = _unprivileged_user()
        folder = cls._new_folder(base, user)
        cluster = cls(folder=folder, bindir=bindir, port=0, password=secrets.token_hex(16),
                      user=user)  # fmt: skip
        try:
            cluster._initdb()
            cluster._start()
            cluster._create_database()
            yield cluster
        finally:
            cluster.stop()
            shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _new_folder(base: Path | None, user: pwd.struct_passwd | None) -> Path:
        candidates = [Path(base)] if base else []
        candidates += [Path(tempfile.gettempdir()), Path("/tmp")]
        for candidate in candidates:
            if not candidate.is_dir():
                continue
            folder = Path(tempfile.mkdtemp(prefix="das-pg-", dir=candidate))
            if user is None:
                return folder
            if _reachable_by(folder, user):
                os.chown(folder, user.pw_uid, user.pw_gid)
                return folder
            folder.rmdir()
        raise PostgresUnavailable(
            f"no temporary folder that user {user.pw_name if user else '?'} can reach"
        )

    def _as_user(self, argv: list[str], pdeathsig: bool = False) -> list[str]:
        """``argv`` run as the cluster's user (setpriv), dying with us when ``pdeathsig``."""
        wrap = ["setpriv"] if shutil.which("setpriv") else []
        if wrap and pdeathsig:
            wrap.append("--pdeathsig=SIGQUIT")
        if self.user is not None:
            if not wrap:
                return ["runuser", "-u", self.user.pw_name, "--", *argv]
            wrap += [f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}",
                     "--clear-groups"]  # fmt: skip
        return [*wrap, *argv]

    def _run(self, argv: list[str], stdin: str | None = None) -> None:
        done = subprocess.run(self._as_user(argv), input=stdin, capture_output=True, text=True,
                              cwd=self.folder, env=self._env(), check=False)  # fmt: skip
        if done.returncode != 0:
            raise PostgresUnavailable(
                f"{Path(argv[0]).name} failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-800:]}"
            )

    def _env(self) -> dict[str, str]:
        keep = ("PATH", "TZ")
        env = {key: os.environ[key] for key in keep if key in os.environ}
        env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8", PGTZ="UTC")
        if self.user is not None:
            env["HOME"] = str(self.folder)
        return env

    def _initdb(self) -> None:
        self._run([str(self.bindir / "initdb"), "--pgdata", str(self.data), "--username",
                   SUPERUSER, "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8",
                   "--locale=C.UTF-8", "--no-instructions", "--no-sync"])  # fmt: skip
        self.socket_dir.mkdir(mode=0o700)
        if self.user is not None:
            os.chown(self.socket_dir, self.user.pw_uid, self.user.pw_gid)
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)
        os.chmod(self.folder, 0o700)

    def _start(self) -> None:
        for attempt in range(3):  # another process may take the free port first
            self.port = free_port()
            settings = [f"--{key}={value}" for key, value in SETTINGS.items()]
            argv = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                    "-k", str(self.socket_dir), *settings]  # fmt: skip
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    self._as_user(argv, pdeathsig=True), cwd=self.folder, env=self._env(),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            if self._wait_ready():
                return
            self.stop()
            if "could not bind" not in self.log.read_text(errors="replace") or attempt == 2:
                break
        raise PostgresUnavailable(f"postgres did not start:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        ready = [str(self.bindir / "pg_isready"), "-q", "-h", str(self.socket_dir),
                 "-p", str(self.port), "-U", SUPERUSER]  # fmt: skip
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return False
            if subprocess.run(ready, check=False).returncode == 0:
                return True
            time.sleep(0.2)
        return False

    def _create_database(self) -> None:
        # The password goes through psql's standard input, never a command line (ps shows those).
        sql = (
            f"CREATE ROLE {self.role} LOGIN PASSWORD '{self.password}';\n"
            f"CREATE DATABASE {self.database} OWNER {self.role};\n"
        )
        self.psql(sql, database="postgres", user=SUPERUSER)

    def psql(self, sql: str, database: str | None = None, user: str | None = None) -> str:
        """Run ``sql`` through the private socket (as the superuser by default); its output."""
        argv = [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", str(self.socket_dir), "-p", str(self.port), "-U", user or SUPERUSER,
                "-d", database or self.database, "-f", "-"]  # fmt: skip
        done = subprocess.run(self._as_user(argv), input=sql, capture_output=True, text=True,
                              cwd=self.folder, env=self._env(), check=False)  # fmt: skip
        if done.returncode != 0:
            raise PostgresUnavailable(f"psql failed: {done.stderr.strip()[-800:]}")
        return done.stdout

    def tables(self) -> set[str]:
        """The tables of the database (schema public)."""
        rows = self.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'public';")
        return {line.strip() for line in rows.splitlines() if line.strip()}

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients disconnected, no wait), then SIGKILL if need be."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGINT)
        wait_or_kill(process)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class PostgresURLs:
    """What a test needs of a cluster: its two URLs (``postgres_cluster`` fixture)."""

    async_url: str
    sync_url: str
    cluster: PostgresCluster | None = None  # None: a cluster started outside this session


# -- pytest fixture (registered by conftest.py) -------------------------------------------------
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresURLs]:
    """A private PostgreSQL for the session: ``.async_url`` (``postgresql+asyncpg://``) and
    ``.sync_url`` (``postgresql+psycopg://``); ``.cluster`` gives ``psql()``/``tables()``.
    Fails when PostgreSQL cannot be started, unless DAS_TEST_POSTGRES_SKIP=1."""
    if os.environ.get(ASYNC_URL_ENV) and os.environ.get(SYNC_URL_ENV):
        yield PostgresURLs(os.environ[ASYNC_URL_ENV], os.environ[SYNC_URL_ENV])
        return
    try:
        with PostgresCluster.started() as cluster:
            yield PostgresURLs(cluster.async_url, cluster.sync_url, cluster)
    except PostgresUnavailable as exc:
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"PostgreSQL unavailable ({SKIP_ENV}=1): {exc}")
        pytest.fail(f"PostgreSQL could not be started: {exc} (set {SKIP_ENV}=1 to skip)")


# -- command line -------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    stop = {"signal": None}

    def on_signal(signum, _frame) -> None:
        stop["signal"] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        with PostgresCluster.started() as cluster:
            if command:
                env = {**os.environ, ASYNC_URL_ENV: cluster.async_url,
                       SYNC_URL_ENV: cluster.sync_url}  # fmt: skip
                child = subprocess.Popen(command, env=env)
                try:
                    return child.wait()
                except KeyboardInterrupt:
                    child.terminate()
                    child.wait()
                    return 130
            print(f"export {ASYNC_URL_ENV}='{cluster.async_url}'")
            print(f"export {SYNC_URL_ENV}='{cluster.sync_url}'")
            print(f"# psql: {cluster.bindir / 'psql'} -h {cluster.socket_dir} -p {cluster.port} "
                  f"-U {SUPERUSER} {cluster.database}   (Ctrl-C stops and removes the cluster)",
                  flush=True)  # fmt: skip
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
            return 0
    except KeyboardInterrupt:
        return 130
    except PostgresUnavailable as exc:
        print(f"pg_cluster: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
