"""Infrastructure faults an operator meets, caused for real: each ends `das run` in one line
naming the cause and what to do, with exit code 3 (not 1, invalid input), no traceback; the
Dask workers lost is in tests/test_dask_cluster.py."""

from __future__ import annotations

import errno
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from das.runs.faults import DASK, DISK, EXIT_INFRASTRUCTURE, LEDGER, PREFECT, explain

REPO = Path(__file__).resolve().parents[1]
TOY = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy"


def _das(tmp_path: Path, *args: str, env: dict[str, str], prefix: tuple[str, ...] = ()):
    command = [*prefix, sys.executable, "-m", "das", *args]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DAS_"))}
    return subprocess.run(
        command, cwd=tmp_path,
        # its temporary Prefect API's database in the test's folder, not the user's ~/.prefect
        env={**base, "DAS_TASK_RUNNER": "threads", "PREFECT_HOME": str(tmp_path / "prefect"),
             **env},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _run_args(output: Path, ledger: Path | None = None) -> list[str]:
    ledger = ledger or output.parent / "ledger"
    return ["run", "safetab-p", "--config", str(TOY / "input_dir_zcdp" / "config.json"),
            "--data", str(TOY), "--output", str(output), "--seed", "1", "--skip-validation",
            "--ledger", str(ledger)]  # fmt: skip


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _one_line(done: subprocess.CompletedProcess, cause: str) -> str:
    assert done.returncode == EXIT_INFRASTRUCTURE, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "FAILED" in line]
    assert cause in line
    return line


# --- the explanation ---------------------------------------------------------------------------


def test_the_faults_are_recognized_anywhere_in_the_chain() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/out.das/runs/r/noise/x.npy")
    assert explain(full, "Retry").kind == DISK
    assert "writing /out.das/runs/r/noise/x.npy" in explain(full, "Retry").line
    namespace: dict = {}
    exec(compile("def f():\n    raise UnboundLocalError('result')\n",
                 "/venv/site-packages/distributed/utils.py", "exec"), namespace)  # fmt: skip
    try:
        namespace["f"]()
    except UnboundLocalError as exc:
        lost = exc
    try:
        raise RuntimeError("task failed") from lost
    except RuntimeError as exc:
        fault = explain(exc, "Retry the flow run")
    assert fault.kind == DASK and "Retry the flow run" in fault.line
    assert explain(UnboundLocalError("x"), "r") is None  # not raised inside distributed
    killed = type("KilledWorker", (Exception,), {})("('measure-level-1', <WorkerState>)")
    assert explain(killed, "r").kind == DASK

    class Response:
        status_code = 503

    busy = type("PrefectHTTPStatusError", (Exception,), {"response": Response()})("503")
    assert explain(busy, "r", "http://srv/api").kind == PREFECT
    Response.status_code = 404
    assert explain(busy, "r") is None  # a client error is not the infrastructure
    timed_out = RuntimeError("Timed out while attempting to connect to ephemeral Prefect API")
    assert explain(ExceptionGroup("x", [ValueError(), timed_out]), "r").kind == PREFECT
    assert explain(ValueError("a bad value"), "r") is None
    from das.trust import LedgerUnavailable

    gone = LedgerUnavailable("privacy ledger postgresql://h/db cannot be read: connection refused")
    try:
        raise RuntimeError("draw failed") from gone
    except RuntimeError as exc:
        fault = explain(exc, "Retry the flow run")
    assert fault.kind == LEDGER and fault.line.startswith("privacy ledger postgresql://h/db")
    assert "then resume: Retry the flow run; no draw goes unrecorded" in fault.line


# --- caused for real -----------------------------------------------------------------------------


@pytest.mark.slow
def test_an_unreachable_prefect_api(tmp_path: Path) -> None:
    api = f"http://127.0.0.1:{_closed_port()}/api"
    done = _das(tmp_path, *_run_args(tmp_path / "out"), env={"PREFECT_API_URL": api})
    line = _one_line(done, "the Prefect API could not be reached")
    assert api in line and "nothing was drawn" in line
    assert not (tmp_path / "out").exists()


class _Busy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_a_prefect_server_too_busy_to_answer(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}/api"
        done = _das(tmp_path, *_run_args(tmp_path / "out"), env={"PREFECT_API_URL": api})
    finally:
        server.shutdown()
    line = _one_line(done, "HTTP 503")
    assert "start or check the server" in line


@pytest.mark.slow
def test_a_temporary_prefect_api_that_does_not_start_in_time(tmp_path: Path) -> None:
    """With DAS_LOCAL_API=temporary `das run` starts a temporary API; on a machine too loaded
    to start it within the timeout (here: none at all) the run says so and how to resume."""
    env = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "0", "DAS_LOCAL_API": "temporary"}
    done = _das(tmp_path, *_run_args(tmp_path / "out"), "--run-id", "slow", env=env)
    line = _one_line(done, "the Prefect API")
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in line and "--run-id slow" in line


def _mount_namespaces() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_server")
def test_a_full_disk(tmp_path: Path) -> None:
    """The run folder on a tmpfs with no room left: the run stops saying so, exit 3. (Against
    the session's Prefect API: a temporary one would add its start, and on a loaded machine its
    own SQLite "database is locked" tracebacks, to what this test reads.)"""
    from prefect.settings import PREFECT_API_URL

    if not _mount_namespaces():
        pytest.skip("no mount namespaces here (unshare -m): cannot give the run a full disk")
    small = tmp_path / "small"
    small.mkdir()
    # Mount a 1 MiB tmpfs over it (in this command's own mount namespace), fill it up but
    # for a few kilobytes, then run: the spilled records no longer fit.
    script = (
        'mount -t tmpfs -o size=1m none "$0" && '
        'dd if=/dev/zero of="$0/filler" bs=4k count=250 2>/dev/null; '
        'exec "$@"'
    )
    done = _das(tmp_path, *_run_args(small / "releases" / "out", tmp_path / "ledger"),
                env={"PREFECT_API_URL": str(PREFECT_API_URL.value()),
                     "DAS_STATE_DIR": str(small / "state")},  # the run folder on that disk
                prefix=("unshare", "-m", "sh", "-c", script, str(small)))  # fmt: skip
    line = _one_line(done, "the disk is full")
    assert "free space there" in line and "resume" in line
