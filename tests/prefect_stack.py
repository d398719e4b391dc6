"""A real local Prefect stack from this checkout, as an operator runs it
(docs/tutorials/first-production-release.md): ``das prefect server start`` on a free port with basic
authentication and CSRF protection (the auth string in a 0600 file named by
``DAS_PREFECT_AUTH_FILE``), ``das deploy --local`` (work pool and every deployment, small synthetic
inputs), and a process worker (``das prefect worker start``) from the project's virtualenv. Used by
the end-to-end and browser tests (``-m e2e``) and by ``benchmarks/deployment.py``.

The server's database is SQLite in its ``PREFECT_HOME``, or PostgreSQL when
``DAS_E2E_DATABASE=postgresql`` (``.ci/e2e-prefect`` sets it): the ``prefect_stack`` fixture then
starts a private cluster (``tests/pg_cluster.py``) and gives the server its asyncpg URL, with
the password in a 0600 file (``DAS_PREFECT_DATABASE_PASSWORD_FILE``) as in production.

The test process talks to the server over its REST API with plain HTTP, the way the UI does
(the auth header, a CSRF token on every change), so what a test does is what an operator's
clicks do.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
DATABASE_ENV = "DAS_E2E_DATABASE"  # sqlite (default) or postgresql
AUTH_USER = "das-e2e"
CHANGES = {"POST", "PUT", "PATCH", "DELETE"}  # the methods the server's CSRF check covers


def run_folder(root: Path, run_id: str) -> Path:
    """The run folder (noise, accountants, validation, run.log) of a deployment run: under the
    deployments' state root, ``<das_root>/state/runs/<run-id>/`` (das.runs.folder)."""
    return root / "state" / "runs" / run_id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_secret(path: Path, secret: str) -> Path:
    """``secret`` in a new file that only its owner can read or write (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secret + "\n")
    return path


def password_placeholder_url(url: str) -> str:
    """``url`` with its password replaced by ``${PREFECT_SERVER_DATABASE_PASSWORD}``: Prefect
    fills it in from that setting, so the URL itself holds no secret."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    name = user.split(":", 1)[0]
    netloc = f"{name}:${{PREFECT_SERVER_DATABASE_PASSWORD}}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def stack_environment(home: Path, port: int, auth_file: Path | None = None) -> dict[str, str]:
    """Offline, isolated Prefect settings for the server, the worker and ``das deploy``; the
    auth string comes from ``auth_file`` (``DAS_PREFECT_AUTH_FILE``), read by ``das``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DAS_"))}
    if auth_file is not None:
        env["DAS_PREFECT_AUTH_FILE"] = str(auth_file)
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
        PREFECT_SERVER_API_HOST="127.0.0.1",
        PREFECT_SERVER_API_PORT=str(port),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT="false",
        DO_NOT_TRACK="1",
        GX_ANALYTICS_ENABLED="false",
        # Short loops so that a test sees the scheduler and the worker act within seconds.
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2",
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_WORKER_HEARTBEAT_SECONDS="10",
        # One Dask worker process per run's own cluster, not two: the stack shares 2 cores with
        # the integration tier (.ci/test), and a run's Dask path (its cluster started and
        # stopped with the flow process) is the same with one worker.
        DAS_DASK_WORKERS="1",
        # `das run` outside production keeps its per-user ledger here, not in the real home.
        XDG_DATA_HOME=str(home / "xdg-data"),
    )
    return env


@dataclass
class PrefectStack:
    """A running server + deployments + worker; ``api`` is an HTTP client on its API (with
    the auth header; ``request`` adds the CSRF token to changes)."""

    base: Path
    port: int
    env: dict[str, str]
    root: Path
    auth_string: str | None = None
    database: str = "sqlite"
    postgres: Any = None  # pg_cluster.PostgresURLs of a PostgreSQL server database
    server_env: dict[str, str] = field(default_factory=dict)  # the server's only
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    csrf_client: str = field(default_factory=lambda: secrets.token_hex(16))
    _csrf: tuple[str, float] | None = None  # token, expiry (monotonic)
    _session: httpx.Client | None = None  # request()'s client, kept (see _client)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth_headers(self) -> dict[str, str]:
        from das.prefect_auth import basic_authorization

        return {"Authorization": basic_authorization(self.auth_string)} if self.auth_string else {}

    @property
    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.api_url, timeout=120, headers=self.auth_headers)

    @property
    def anonymous(self) -> httpx.Client:
        """An HTTP client on the API without credentials (what anyone on the network has)."""
        return httpx.Client(base_url=self.api_url, timeout=120)

    # -- processes ---------------------------------------------------------------------------
    def start(
        self, name: str, argv: list[str], extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log = self.base / f"{name}.log"
        self.logs[name] = log
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**self.env, **(extra_env or {})},
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole, by its id
        )
        self.processes[name] = process
        return process

    def run(
        self, argv: list[str], timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=REPO, env=self.env if env is None else env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def prefect(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``das prefect --no-prompt ARGS``: the operator's ``prefect`` command, authenticated
        by the auth file."""
        return self.run([str(VENV_BIN / "das"), "prefect", "--no-prompt", *args], timeout)

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        from pg_cluster import wait_or_kill  # a pytest plugin: imported once pytest has it

        for process in self.processes.values():
            wait_or_kill(process)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs.get(name)
        if path is None or not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # -- API -----------------------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        """One client for every call of :meth:`request`: each new ``httpx.Client`` builds an
        SSL context from the system's CA bundle, and the polls of :meth:`wait` made that 57% of
        this module's CPU time (py-spy: 60 of 104 CPU-s of the e2e tests' process)."""
        if self._session is None:
            self._session = self.api
        return self._session

    def csrf_headers(self, refresh: bool = False) -> dict[str, str]:
        """The CSRF headers a change needs, as Prefect's clients and the UI send them: a token
        the server issued for this client id (``GET /csrf-token``), kept until it expires."""
        if refresh or self._csrf is None or time.monotonic() > self._csrf[1]:
            response = self._client().get("/csrf-token", params={"client": self.csrf_client})
            response.raise_for_status()
            self._csrf = (response.json()["token"], time.monotonic() + 600)
        return {"Prefect-Csrf-Token": self._csrf[0], "Prefect-Csrf-Client": self.csrf_client}

    def request(self, method: str, path: str, body: Any = None, attempts: int = 5) -> Any:
        """One API call, its JSON. A server busy on its SQLite database answers 503 or late;
        the call is repeated then (a 503 is a rolled-back transaction: nothing was done)."""
        for attempt in range(attempts):
            try:
                headers = self.csrf_headers() if method.upper() in CHANGES else {}
                response = self._client().request(method, path, json=body, headers=headers)
                if response.status_code == 403 and "Invalid CSRF token" in response.text:
                    headers = self.csrf_headers(refresh=True)
                    response = self._client().request(method, path, json=body, headers=headers)
            except httpx.TransportError:
                if attempt == attempts - 1:
                    raise
            else:
                if response.status_code != 503 or attempt == attempts - 1:
                    response.raise_for_status()
                    return response.json()
            time.sleep(2 * (attempt + 1))
        raise AssertionError("unreachable")

    def deployment(self, name: str) -> dict[str, Any]:
        """``name`` is ``flow/deployment``, as in the UI and the CLI."""
        return self.request("GET", f"/deployments/name/{name}")

    def trigger(
        self,
        name: str,
        parameters: dict[str, Any] | None = None,
        job_variables: dict[str, Any] | None = None,
    ) -> str:
        """A run of deployment ``name`` (the UI's Quick/Custom Run); its flow-run id."""
        body: dict[str, Any] = {"parameters": parameters or {}}
        if job_variables:
            body["job_variables"] = job_variables
        deployment_id = self.deployment(name)["id"]
        return self.request("POST", f"/deployments/{deployment_id}/create_flow_run", body)["id"]

    def flow_run(self, flow_run_id: str) -> dict[str, Any]:
        return self.request("GET", f"/flow_runs/{flow_run_id}")

    def state(self, flow_run_id: str) -> str:
        state = self.flow_run(flow_run_id).get("state") or {}
        return state.get("type", "PENDING")

    def wait(self, flow_run_id: str, states: set[str] = TERMINAL, timeout: float = 900) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(flow_run_id)
            if state in states:
                return state
            time.sleep(1)
        raise TimeoutError(
            f"flow run {flow_run_id} still {self.state(flow_run_id)} after {timeout:.0f} s\n"
            f"worker log:\n{self.log_tail('worker')}"
        )

    def worker_logs_since(self, flow_run_id: str, since: float) -> list[dict[str, Any]]:
        """The flow run's log records from its worker (``prefect.flow_runs.worker``) after
        ``since`` (epoch seconds)."""
        body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}}
        return [
            log
            for log in self.request("POST", "/logs/filter", body)
            if log["name"] == "prefect.flow_runs.worker" and epoch(log["timestamp"]) > since
        ]

    def wait_for_worker_release(self, flow_run_id: str, since: float, timeout: float = 180) -> None:
        """Wait until the worker has finished with a killed flow process: it reports the exit
        (a log line of the run) only after the run already shows Crashed, and a Retry made in
        between is marked Crashed by that late report (Prefect 3.8.8's process worker)."""
        deadline = time.monotonic() + timeout
        while not self.worker_logs_since(flow_run_id, since):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker never reported the end of {flow_run_id}")
            time.sleep(1)

    def resume_as_the_ui_does(
        self, flow_run_id: str, run_input: dict[str, Any], expect: str = "ACCEPT"
    ) -> dict[str, Any]:
        """The UI's *Resume* of a paused run, with the values of its input form (the server
        checks them against the form's schema: ``expect`` REJECT for values it refuses)."""
        response = self.request("POST", f"/flow_runs/{flow_run_id}/resume",
                                {"run_input": run_input})  # fmt: skip
        assert response["status"] == expect, response
        return response

    def ledger(self) -> Any:
        """The privacy ledger the deployments use (a folder under the root, or PostgreSQL)."""
        from das.trust import LedgerStore, PrivacyLedger, configured_store

        store = configured_store(self.env) or LedgerStore.in_directory(self.root / "ledger")
        return PrivacyLedger(store)

    def retry_as_the_ui_does(self, flow_run_id: str) -> None:
        """The Prefect UI's Retry button: force the run into Scheduled/AwaitingRetry."""
        state = {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}
        body = {"state": state, "force": True}
        response = self.request("POST", f"/flow_runs/{flow_run_id}/set_state", body)
        assert response["status"] == "ACCEPT", response

    def artifacts(self, flow_run_id: str) -> list[dict[str, Any]]:
        body = {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "CREATED_DESC"}
        return self.request("POST", "/artifacts/filter", body)

    def task_runs(self, flow_run_id: str) -> list[dict[str, Any]]:
        body = {"task_runs": {"flow_run_id": {"any_": [flow_run_id]}}}
        return self.request("POST", "/task_runs/filter", body)

    def flow_runs_of(self, deployment_id: str, state: str | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"deployments": {"id": {"any_": [deployment_id]}}}
        if state:
            body["flow_runs"] = {"state": {"type": {"any_": [state]}}}
        return self.request("POST", "/flow_runs/filter", body)


def epoch(timestamp: str) -> float:
    """Seconds since the epoch of an API timestamp (ISO 8601)."""
    from datetime import datetime

    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def wait_for_health(stack: PrefectStack, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    server = stack.processes["server"]
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"prefect server exited:\n{stack.log_tail('server')}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{stack.api_url}/health", timeout=5).status_code == 200:
                return
        time.sleep(1)
    raise TimeoutError(f"prefect server not healthy after {timeout} s:\n{stack.log_tail('server')}")


@contextlib.contextmanager
def local_stack(
    base: Path | None = None, worker: bool = True, postgres: Any = None
) -> Iterator[PrefectStack]:
    """Server (authenticated, CSRF protection on; its database on ``postgres``, a
    ``pg_cluster.PostgresURLs``, else SQLite), ``das deploy --local`` into ``<base>/root``,
    and (``worker``) a worker."""
    base = Path(base or tempfile.mkdtemp(prefix="das-e2e-"))
    port = free_port()
    auth_string = f"{AUTH_USER}:{secrets.token_urlsafe(24)}"
    auth_file = write_secret(base / "secrets" / "prefect-auth", auth_string)
    stack = PrefectStack(base=base, port=port, root=base / "root", auth_string=auth_string,
                         env=stack_environment(base / "home", port, auth_file))  # fmt: skip
    if postgres is not None:
        from sqlalchemy.engine import make_url

        password = make_url(postgres.async_url).password
        stack.database, stack.postgres = "postgresql", postgres
        stack.server_env = {
            "PREFECT_API_DATABASE_CONNECTION_URL": password_placeholder_url(postgres.async_url),
            "DAS_PREFECT_DATABASE_PASSWORD_FILE": str(
                write_secret(base / "secrets" / "database-password", password)
            ),
        }
        # The privacy ledger on PostgreSQL too (its own tables in the same database): the
        # deployments get its URL without the password and the path of a 0600 password file.
        stack.env.update(
            DAS_LEDGER_URL=make_url(postgres.sync_url).set(password=None).render_as_string(),
            DAS_LEDGER_PASSWORD_FILE=str(write_secret(base / "secrets" / "ledger-password",
                                                      password)),
        )  # fmt: skip
    try:
        stack.start("server", [str(VENV_BIN / "das"), "prefect", "server", "start",
                               "--host", "127.0.0.1", "--port", str(port)],
                    stack.server_env)  # fmt: skip
        wait_for_health(stack)
        deploy = [str(VENV_BIN / "das"), "deploy", "--local", "--root", str(stack.root)]
        deployed = stack.run(deploy)
        (base / "deploy.log").write_text(deployed.stdout + deployed.stderr)
        if deployed.returncode != 0:
            raise RuntimeError(f"das deploy failed:\n{deployed.stdout}\n{deployed.stderr}")
        if worker:
            start_worker(stack)
        yield stack
    finally:
        stack.stop()


def start_worker(stack: PrefectStack) -> None:
    stack.start("worker", [str(VENV_BIN / "das"), "prefect", "worker", "start",
                           "--pool", "das-enclave"])  # fmt: skip


# -- pytest fixtures (registered by conftest.py; instantiated by the e2e tests only) ------------
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def prefect_stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[PrefectStack]:
    """One real server, deployments and worker for the e2e session; the server's database is
    PostgreSQL when DAS_E2E_DATABASE=postgresql (a private cluster), else SQLite."""
    database = os.environ.get(DATABASE_ENV, "sqlite")
    if database not in {"sqlite", "postgresql"}:
        pytest.fail(f"{DATABASE_ENV}={database}: expected sqlite or postgresql")
    postgres = request.getfixturevalue("postgres_cluster") if database == "postgresql" else None
    with local_stack(tmp_path_factory.mktemp("e2e"), postgres=postgres) as stack:
        yield stack


@pytest.fixture(scope="session")
def first_runs(prefect_stack: PrefectStack) -> dict[str, str]:
    """What an operator does first: validate, then release SafeTab-P and PHSafe (US), each by
    a Quick Run of its deployment as registered (production mode, secure noise, no run id).
    Flow-run ids by deployment; every run is waited for (the tests check the states)."""
    runs = {
        name: prefect_stack.trigger(name)
        for name in (
            "validate/validate-safetab-p",
            "safetab-p/safetab-p-us-pr",
            "phsafe/phsafe-us",
        )
    }
    for flow_run_id in runs.values():
        prefect_stack.wait(flow_run_id)
    return runs


TERMINAL_STATES = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def flow_process(stack: PrefectStack, flow_run_id: str) -> Any:
    """The flow run's process (``psutil.Process``), once the worker has recorded it."""
    import psutil

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = stack.flow_run(flow_run_id).get("infrastructure_pid")
        if pid:
            return psutil.Process(int(str(pid).rsplit(":", 1)[-1]))
        time.sleep(0.2)
    raise TimeoutError("the worker never recorded the flow run's process id")


def paused(stack: PrefectStack, flow_run_id: str, timeout: float = 600) -> dict[str, Any]:
    """Wait until the run suspends for its spend approval; the run."""
    state = stack.wait(flow_run_id, {"PAUSED", *TERMINAL_STATES}, timeout=timeout)
    assert state == "PAUSED", (state, stack.log_tail("worker"))
    return stack.flow_run(flow_run_id)


def sweep(stack: PrefectStack) -> list[str]:
    """A run of the approvals sweep (its Quick Run, as its schedule makes one); its log lines."""
    run = stack.trigger("approval-sweep/approval-sweep")
    assert stack.wait(run, timeout=300) == "COMPLETED", stack.log_tail("worker")
    body = {"logs": {"flow_run_id": {"any_": [run]}}, "sort": "TIMESTAMP_ASC"}
    return [log["message"] for log in stack.request("POST", "/logs/filter", body)]


def rejection(reason: str, name: str) -> dict[str, Any]:
    """The *Resume* form's values for a rejection, as the UI sends them (every field)."""
    return {"reject": True, "signature": "", "reason": reason, "name": name}


@pytest.fixture(scope="session")
def waiting_runs(prefect_stack: PrefectStack, first_runs: dict[str, str]) -> dict[str, str]:
    """Two more PHSafe (US) releases, after the first spent the approval `das deploy --local`
    signed, both suspended for their approvers: ``expiring`` (its request open 10 s:
    ``DAS_APPROVAL_TIMEOUT_SECONDS``) and ``waiting``. They skip validation (production allows
    it: the first release validated these records under this config), and run their tasks on
    threads (``DAS_TASK_RUNNER``): that a suspended run's Dask cluster ends with its flow
    process is the second release's test; three clusters fewer (these two and the expiring
    run's resume) on the 2 cores. Their flow-run ids."""
    stack = prefect_stack
    threads = {"DAS_TASK_RUNNER": "threads"}
    runs = {
        "expiring": stack.trigger("phsafe/phsafe-us", {"skip_validation": True},
                                  {"env": {"DAS_APPROVAL_TIMEOUT_SECONDS": "10", **threads}}),
        "waiting": stack.trigger("phsafe/phsafe-us", {"skip_validation": True},
                                 {"env": threads}),
    }  # fmt: skip
    for run in runs.values():
        paused(stack, run)
    return runs


@pytest.fixture(scope="session")
def refused_run(prefect_stack: PrefectStack, first_runs: dict[str, str]) -> str:
    """A second PHSafe (US) release, after the first one spent the approval ``das deploy
    --local`` signed: it pauses for its approvers' signatures and *Resume* with reject ends it
    Refused. Its flow-run id (a session fixture: every test that needs a refused run, the
    browser's run list among them, gets this one, whichever runs first). Like
    ``waiting_runs``, it skips validation and runs its tasks on threads: what it proves is the
    refusal (nothing drawn, who and why recorded); the second release's run validates and
    starts its Dask cluster. Two clusters (its first attempt and its resume) and a Great
    Expectations validation fewer on the 2 cores."""
    stack = prefect_stack
    rejected = stack.trigger("phsafe/phsafe-us", {"skip_validation": True},
                             {"env": {"DAS_TASK_RUNNER": "threads"}})  # fmt: skip
    paused(stack, rejected)
    stack.resume_as_the_ui_does(rejected, rejection("not this week", "release manager"))
    assert stack.wait(rejected) == "CANCELLED"
    return rejected


@pytest.fixture(scope="session")
def crashed_run(prefect_stack: PrefectStack, first_runs: dict[str, str]) -> str:
    """A run that ended Crashed: one already on the server (test_e2e_prefect's lost host, when
    it ran first in this session), else a PHSafe (PR) release whose flow process is killed
    (SIGKILL) once it runs: it ends Crashed, and the worker says it released the run. Its
    flow-run id."""
    stack = prefect_stack
    body = {"flow_runs": {"state": {"type": {"any_": ["CRASHED"]}}}}
    found = stack.request("POST", "/flow_runs/filter", body)
    if found:
        return found[0]["id"]
    crashed = stack.trigger("phsafe/phsafe-pr")
    process = flow_process(stack, crashed)
    stack.wait(crashed, {"RUNNING", *TERMINAL_STATES}, timeout=300)
    killed_at = time.time()
    os.kill(process.pid, signal.SIGKILL)
    assert stack.wait(crashed, timeout=300) == "CRASHED"
    stack.wait_for_worker_release(crashed, killed_at)
    return crashed
