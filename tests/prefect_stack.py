"""A real local Prefect stack from this checkout, as an operator runs it (README "Run it in
production"): ``prefect server start`` on a free port, ``das deploy --local`` (work pool and
every deployment, small synthetic inputs), and a process worker started from the project's
virtualenv. Used by the end-to-end and browser tests (``-m e2e``) and by
``benchmarks/deployment.py``.

The test process talks to the server over its REST API with plain HTTP, the way the UI does,
so what a test does is what an operator's clicks do.
"""

from __future__ import annotations

import contextlib
import os
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

import httpx

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def run_folders(output: Path) -> list[Path]:
    """The run folders (noise, ledger, validation, run.log) of the runs released into
    ``output``: ``OUT.das/runs/<run-id>/``, beside the release (das.runs.folder)."""
    runs = output.parent / f"{output.name}.das" / "runs"
    return sorted(path for path in runs.glob("*") if path.is_dir())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stack_environment(home: Path, port: int) -> dict[str, str]:
    """Offline, isolated Prefect settings for the server, the worker and ``das deploy``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DAS_"))}
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
    )
    return env


@dataclass
class PrefectStack:
    """A running server + deployments + worker; ``api`` is an HTTP client on its API."""

    base: Path
    port: int
    env: dict[str, str]
    root: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.api_url, timeout=120)

    # -- processes ---------------------------------------------------------------------------
    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = self.base / f"{name}.log"
        self.logs[name] = log
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=self.env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole, by its id
        )
        self.processes[name] = process
        return process

    def run(self, argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs.get(name)
        if path is None or not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # -- API -----------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, attempts: int = 5) -> Any:
        """One API call, its JSON. A server busy on its SQLite database answers 503 or late;
        the call is repeated then (a 503 is a rolled-back transaction: nothing was done)."""
        for attempt in range(attempts):
            try:
                with self.api as api:
                    response = api.request(method, path, json=body)
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
def local_stack(base: Path | None = None, worker: bool = True) -> Iterator[PrefectStack]:
    """Server, ``das deploy --local`` into ``<base>/root``, and (``worker``) a worker."""
    base = Path(base or tempfile.mkdtemp(prefix="das-e2e-"))
    port = free_port()
    stack = PrefectStack(base=base, port=port, env=stack_environment(base / "home", port),
                         root=base / "root")  # fmt: skip
    try:
        stack.start("server", [str(VENV_BIN / "prefect"), "server", "start",
                               "--host", "127.0.0.1", "--port", str(port)])  # fmt: skip
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
    stack.start("worker", [str(VENV_BIN / "prefect"), "worker", "start", "--pool", "das-enclave"])


# -- pytest fixtures (registered by conftest.py; instantiated by the e2e tests only) ------------
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def prefect_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectStack]:
    """One real server, deployments and worker for the e2e session."""
    with local_stack(tmp_path_factory.mktemp("e2e")) as stack:
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
