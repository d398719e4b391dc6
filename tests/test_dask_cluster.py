"""Both product flows on an existing Dask cluster (``DAS_DASK_ADDRESS``): a real ``dask
scheduler`` and separately started ``dask worker`` processes on localhost, as an operator runs
them, against the session's Prefect server.

Each seeded release on the cluster, with one worker and with two, is byte for byte the release
of the same run in process; a worker killed with SIGKILL after it persisted a draw and before
its task ended is survived: Dask runs the task again on a live worker, which reuses the draw
from the run folder (no measurement is drawn twice, no noise file rewritten). The workers load
``tests/dask_draw_log.py``, which logs every draw and every unit of work with the worker's pid.
A worker that does not see the run's files is refused before anything is drawn. The tests share
one scheduler and its first worker; no worker a test starts outlives it, and no scheduler or
worker process outlives the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from das.offline import configure_offline

configure_offline()

import distributed  # noqa: E402
import psutil  # noqa: E402
from prefect_fixtures import two_state_phsafe  # noqa: E402

from das.cli import main as das_main  # noqa: E402
from das.phsafe.parameters import load_parameters as phsafe_parameters  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.safetab_p.parameters import load_parameters as safetab_p_parameters  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOY = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy"
PRELOAD = Path(__file__).with_name("dask_draw_log.py")
SEED = "11"
START_SECONDS = 90
RUN_SECONDS = 300
# Dask's monitors that nothing here reads, slowed or off in every process of these clusters:
# the event-loop health tick (every 20 ms in each scheduler, nanny, worker and client), the
# workers' statistical profiler (a thread sampling every 10 ms), the system and memory
# monitors (500 and 100 ms). What is proven (releases, draws, kills, refusals) goes through
# none of them; idle, a scheduler and one worker took 7.3 CPU-s in 60 s with Dask's defaults
# and 4.1 with these (measured 2026-12-07).
QUIET_DASK = {
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
    "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s",
}

pytestmark = [
    pytest.mark.skipif(not TOY.is_dir(), reason="../shared toy inputs absent"),
    pytest.mark.slow,
    pytest.mark.usefixtures("prefect_server", "thread_runner"),
]


def _api_url() -> str:
    import prefect.settings

    return str(prefect.settings.PREFECT_API_URL.value())


class OperatorCluster:
    """``dask scheduler`` and ``dask worker`` processes started as an operator would, each in
    its own session (process group), so that closing kills every process they started."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        root.mkdir(parents=True)
        self.root = root
        self.log = root / "draws.jsonl"
        self.control = root / "control.json"
        self.scheduler_file = root / "scheduler.json"
        self.env = {
            **os.environ,
            "PREFECT_API_URL": _api_url(),
            "DAS_TEST_DRAW_LOG": str(self.log),
            "DAS_TEST_DRAW_CONTROL": str(self.control),
            **QUIET_DASK,
            **(env or {}),
        }
        self.env.pop("DAS_DASK_ADDRESS", None)
        self.processes: dict[str, subprocess.Popen] = {}
        self.groups: set[int] = set()
        self.since = 0.0  # events() are those logged from then on
        self._start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
                    "--no-dashboard", "--scheduler-file", str(self.scheduler_file))  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while not self._address():
            self._check_alive("scheduler")
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
        self.address = self._address()

    def _address(self) -> str | None:
        try:
            return json.loads(self.scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            return None

    def _start(self, name: str, *args: str) -> None:
        with (self.root / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "dask", *args],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[name] = process
        self.groups.add(process.pid)

    def _check_alive(self, name: str) -> None:
        if self.processes[name].poll() is not None:
            raise AssertionError((self.root / f"{name}.log").read_text()[-3000:])

    def start_worker(self, name: str, *, wrapper: tuple[str, ...] = ()) -> None:
        """A worker process (with its nanny) on the scheduler; waits until it is connected."""
        expected = len(self.workers()) + 1
        args = ("worker", "--scheduler-file", str(self.scheduler_file), "--name", name,
                "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                "--preload", str(PRELOAD))  # fmt: skip
        if wrapper:
            with (self.root / f"{name}.log").open("ab") as log:
                process = subprocess.Popen(
                    [*wrapper, sys.executable, "-m", "dask", *args],
                    cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            self.processes[name] = process
            self.groups.add(process.pid)
        else:
            self._start(name, *args)
        deadline = time.monotonic() + START_SECONDS
        while len(self.workers()) < expected:
            self._check_alive(name)
            assert time.monotonic() < deadline, f"worker {name} did not connect"
            time.sleep(0.3)

    @contextlib.contextmanager
    def client(self):
        with distributed.Client(self.address, timeout=30) as client:
            yield client

    @contextlib.contextmanager
    def allowed_failures(self, count: int):
        """The scheduler's ``allowed_failures`` (how many workers may die running a task before
        it is lost: ``distributed.scheduler.allowed-failures`` at its start) ``count`` for a
        while."""

        def swap(dask_scheduler: distributed.Scheduler, value: int) -> int:
            before, dask_scheduler.allowed_failures = dask_scheduler.allowed_failures, value
            return before

        with self.client() as client:
            before = client.run_on_scheduler(swap, value=count)
        try:
            yield
        finally:
            with self.client() as client:
                client.run_on_scheduler(swap, value=before)

    def workers(self) -> dict[str, int]:
        """name → pid of each connected worker process."""
        with self.client() as client:
            pids = client.run(os.getpid)
            names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
        return {str(names[address]): pid for address, pid in pids.items()}

    def pause_after(self, measurement: str | None, seconds: float = RUN_SECONDS) -> None:
        self.control.write_text(json.dumps({"pause_after": measurement, "seconds": seconds}))

    def events(self) -> list[dict[str, Any]]:
        if not self.log.is_file():
            return []
        events = (json.loads(line) for line in self.log.read_text().splitlines() if line)
        return [e for e in events if e["t"] >= self.since]

    def wait_for(
        self, event: str, name: str, process: subprocess.Popen, since: float
    ) -> dict[str, Any]:
        """The first ``event`` of ``name`` logged at or after ``since`` (waits for it)."""
        deadline = time.monotonic() + RUN_SECONDS
        while True:
            found = [
                e for e in self.events()
                if e["event"] == event and e["name"] == name and e["t"] >= since
            ]  # fmt: skip
            if found:
                return found[0]
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"no {event} {name}"
            time.sleep(0.1)

    def wait_for_workers(self, names: set[str]) -> None:
        """Until the connected workers are ``names`` (a killed one restarted by its nanny)."""
        deadline = time.monotonic() + START_SECONDS
        while set(self.workers()) != names:
            assert time.monotonic() < deadline, f"workers {set(self.workers())}, not {names}"
            time.sleep(0.3)

    def stop_worker(self, name: str) -> list[int]:
        """Stop one worker started by :meth:`start_worker`, as :meth:`close` stops them all."""
        return self._stop([self.processes.pop(name)])

    def close(self) -> list[int]:
        """Stop every process; the pids still alive in their process groups afterwards."""
        return self._stop(list(reversed(self.processes.values())))

    def _stop(self, processes: list[subprocess.Popen]) -> list[int]:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        groups = {process.pid for process in processes}
        deadline = time.monotonic() + 30
        while (left := self.leftovers(groups)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        return left

    def leftovers(self, groups: set[int] | None = None) -> list[int]:
        """The live processes of ``groups`` (default: every group this cluster started)."""
        groups = self.groups if groups is None else groups
        alive = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(process.pid) in groups and process.status() != "zombie":
                    alive.append(process.pid)
        return alive


@pytest.fixture(scope="module")
def operator_cluster(tmp_path_factory: pytest.TempPathFactory, prefect_server: None):
    """The scheduler and its first worker, ``w1``, started once for the tests, which leave the
    cluster as they found it (:func:`cluster`): a scheduler and a worker took ~4 CPU-s to
    start, and the tests started 4 schedulers and 5 such workers more. Its own per-user
    folders: nothing a worker does may depend on a test's (the runs' folders reach the
    workers as absolute paths, which each test checks)."""
    root = tmp_path_factory.mktemp("operator-cluster")
    xdg = {"XDG_DATA_HOME": str(root / "data"), "XDG_STATE_HOME": str(root / "state")}
    started = OperatorCluster(root / "cluster", xdg)
    try:
        started.start_worker("w1")
        yield started
    finally:
        left = started.close()
    assert left == [], f"processes left behind by the cluster: {left}"


@pytest.fixture
def cluster(operator_cluster: OperatorCluster):
    """The module's cluster with its one worker ``w1``, its draw log from the test's start;
    the workers the test starts are stopped after it (no process of theirs may be left), and
    ``w1`` is connected again (a test may have killed its process: its nanny starts another)."""
    operator_cluster.since = time.time()
    operator_cluster.pause_after(None)
    before = set(operator_cluster.processes)
    yield operator_cluster
    left = [
        pid
        for name in set(operator_cluster.processes) - before
        for pid in operator_cluster.stop_worker(name)
    ]
    assert left == [], f"processes left behind by the test's workers: {left}"
    operator_cluster.wait_for_workers({"w1"})


def _das_on_cluster(
    cluster: OperatorCluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``das run ...`` in its own process, its tasks on the cluster (as an operator runs it);
    ``env`` adds to the environment."""
    env = {
        **os.environ,
        "PREFECT_API_URL": _api_url(),
        "DAS_DASK_ADDRESS": cluster.address,
        **QUIET_DASK,  # its client's event loop
        **(env or {}),
    }
    env.pop("DAS_TASK_RUNNER", None)
    return subprocess.Popen(
        [sys.executable, "-m", "das", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finished(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=RUN_SECONDS)
    assert process.returncode == 0, out + err
    return out


def _release(output: Path) -> dict[str, bytes]:
    """Every file of a release but the audit, manifest and certificate (timings, paths and run
    ids)."""
    return {
        path.relative_to(output).as_posix(): path.read_bytes()
        for path in sorted(output.rglob("*"))
        if path.is_file()
        and path.name not in ("audit.json", "MANIFEST.json", "CERTIFICATE.intoto.json")
    }


def _noise_files(folder: RunFolder) -> dict[str, tuple[int, int, int]]:
    """name → (inode, mtime_ns, size) of every persisted noise vector."""
    return {
        path.name: (path.stat().st_ino, path.stat().st_mtime_ns, path.stat().st_size)
        for path in folder.noise_dir.glob("*.npy")
    }


def _work_units(events: list[dict[str, Any]], since: float = 0.0) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] not in ("fresh", "reused") and e["t"] >= since]


def _assert_killed_run_drew_each_measurement_once(
    cluster: OperatorCluster,
    output: Path,
    run_id: str,
    planned: list[str],
    paused: str,
    killed: dict[str, Any],
    noise_at_kill: dict[str, tuple[int, int, int]],
) -> None:
    events = [e for e in cluster.events() if e["t"] >= killed["started"]]
    fresh = Counter(e["name"] for e in events if e["event"] == "fresh")
    assert fresh == Counter(planned)  # every measurement drawn, none twice (across processes)
    reuses = [e for e in events if e["event"] == "reused" and e["name"] == paused]
    assert reuses and all(e["pid"] != killed["pid"] for e in reuses)  # taken over, not redrawn
    folder = RunFolder(output, run_id)
    after = _noise_files(folder)
    assert {name: after[name] for name in noise_at_kill} == noise_at_kill  # none rewritten
    assert len(after) == len(planned)
    audit = json.loads((output / "audit.json").read_text())
    assert audit["draws"]["fresh"] + audit["draws"]["reused"] == len(planned)
    assert audit["draws"]["reused"] >= 1
    ledger_entries = [
        entry for path in folder.accountants_dir.glob("*.json")
        for entry in json.loads(path.read_text())["measurements"]
    ]  # fmt: skip
    assert sorted(e["name"] for e in ledger_entries) == sorted(planned)
    assert all(e["noise_digest"] for e in ledger_entries)
    pids = {e["pid"] for e in _work_units(cluster.events(), killed["started"])}
    assert killed["pid"] in pids and len(pids) >= 2  # both workers worked, then a third


def _kill_after_draw(
    cluster: OperatorCluster,
    process: subprocess.Popen,
    paused: str,
    folder: RunFolder,
    since: float,
) -> tuple[dict[str, Any], dict[str, tuple[int, int, int]]]:
    """SIGKILL the worker process that has just persisted the draw of ``paused`` (it sleeps
    in its task right after the draw); what was on disk at that instant."""
    event = cluster.wait_for("fresh", paused, process, since)
    noise = _noise_files(folder)
    # One file per draw, named <measurement>.<token>.npy (the ledger records which).
    assert any(name.startswith(f"{paused.replace('/', '__')}.") for name in noise)
    os.kill(event["pid"], signal.SIGKILL)
    cluster.pause_after(None)
    return event, noise


def _one_then_two_workers(
    tmp_path: Path,
    cluster: OperatorCluster,
    args: Callable[[Path, str], list[str]],
    planned: list[str],
    paused: str,
) -> tuple[Counter, dict[str, Any]]:
    """The seeded run in process, then on one worker (``w1``), then on two with the worker that
    draws ``paused`` killed after the draw: both cluster releases are the in-process one.
    Returns the units of work of the one-worker run (by function) and its ``spill`` step
    marker."""
    reference = tmp_path / "in-process" / "out"
    assert das_main(args(reference, "here")) == 0

    one = tmp_path / "one-worker" / "out"
    started = time.time()
    _finished(_das_on_cluster(cluster, *args(one, "one")))
    assert _release(one) == _release(reference)
    units = _work_units(cluster.events(), started)
    assert {e["pid"] for e in units} == {cluster.workers()["w1"]}  # none in the flow's process
    spill = json.loads((RunFolder(one, "one").root / "steps" / "spill.json").read_text())

    cluster.start_worker("w2")
    two = tmp_path / "two-workers" / "out"
    cluster.pause_after(paused)
    started = time.time()
    process = _das_on_cluster(cluster, *args(two, "two"))
    killed, noise_at_kill = _kill_after_draw(
        cluster, process, paused, RunFolder(two, "two"), started
    )
    _finished(process)
    assert _release(two) == _release(reference)
    _assert_killed_run_drew_each_measurement_once(
        cluster, two, "two", planned, paused, {**killed, "started": started}, noise_at_kill
    )
    return Counter(e["event"] for e in units), spill


def test_safetab_p_on_an_existing_cluster_is_the_in_process_release(
    tmp_path: Path, cluster: OperatorCluster
) -> None:
    params = tmp_path / "params"
    shutil.copytree(TOY / "input_dir_zcdp", params)
    config = params / "config.json"
    planned = [m.name for m in safetab_p_parameters(config).plan]

    def args(output: Path, run_id: str) -> list[str]:
        # Three runs of the same records to compare: each in a ledger of its own.
        return ["run", "safetab-p", "--config", str(config), "--data", str(TOY), "--output",
                str(output), "--seed", SEED, "--run-id", run_id, "--skip-validation",
                "--ledger", str(output.parent / "ledger")]  # fmt: skip

    units, spill = _one_then_two_workers(tmp_path, cluster, args, planned, "US/COUNTY/2/stage-1")
    assert units == {
        "count_state_totals": len(spill["result"]["states"]),
        "count_state_cells": len(spill["result"]["states"]),
        "measure_level_streamed": len({name.rsplit("/", 1)[0] for name in planned}),
    }


def test_phsafe_on_an_existing_cluster_is_the_in_process_release(
    tmp_path: Path, cluster: OperatorCluster
) -> None:
    config, data = two_state_phsafe(tmp_path)
    planned = [m.name for m in phsafe_parameters(config).plan]

    def args(output: Path, run_id: str) -> list[str]:
        return ["run", "phsafe", "--config", str(config), "--data", str(data), "--output",
                str(output), "--seed", SEED, "--run-id", run_id, "--skip-validation",
                "--ledger", str(output.parent / "ledger")]  # fmt: skip

    units, spill = _one_then_two_workers(tmp_path, cluster, args, planned, "US/PH1_num/usa/A-G")
    assert units == {
        "count_bucket": spill["result"]["buckets"],
        "measure_table_streamed": len({name.split("/")[1] for name in planned}),
    }


def test_a_worker_that_does_not_see_the_run_folder_is_refused_before_any_draw(
    tmp_path: Path, cluster: OperatorCluster
) -> None:
    """A worker on a "host" whose view of the run's folder is its own (a private tmpfs mounted
    over it in the worker's mount namespace, as a local disk of another machine would be)."""
    private = tmp_path / "private"
    private.mkdir()
    own_disk = ("unshare", "-m", "--propagation", "private", "sh", "-c")
    probe = subprocess.run([*own_disk, 'mount -t tmpfs none "$0"', str(private)], check=False)
    if probe.returncode != 0:
        pytest.skip("no mount namespaces here (unshare -m): cannot give a worker its own disk")
    params = private / "params"
    shutil.copytree(TOY / "input_dir_zcdp", params)
    config = params / "config.json"
    cluster.start_worker(
        "own-disk",
        wrapper=(*own_disk, 'mount -t tmpfs none "$0" && shift && exec "$@"', str(private), "--"),
    )
    output = private / "releases" / "out"  # its folder of releases beside the state root
    process = _das_on_cluster(
        cluster, "run", "safetab-p", "--config", str(config), "--data", str(TOY),
        "--output", str(output), "--seed", SEED, "--run-id", "r",
        env={"DAS_STATE_DIR": str(private / "state")},  # the run's state on that disk too
    )  # fmt: skip
    out, err = process.communicate(timeout=RUN_SECONDS)
    assert process.returncode == 2, out + err
    assert "worker own-disk" in err and "worker w1" not in err
    assert "not on a shared file system" in err, err[-1500:]
    assert "Traceback" not in err
    assert [e for e in cluster.events() if e["event"] == "fresh"] == []
    assert list(RunFolder(output, "r", private / "state").noise_dir.glob("*.npy")) == []
    assert not output.exists()


def test_the_deployment_entrypoint_runs_on_the_cluster_and_a_flow_loaded_by_file_is_refused(
    tmp_path: Path, cluster: OperatorCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Prefect worker loads a deployment's entrypoint *file* as a module of its own. The
    flows' entrypoint (deploy/das_entrypoints.py) keeps each flow in its package module, which
    the scheduler and the workers import; a flow loaded straight from ``flows/safetab_p.py``
    (module ``safetab_p``) is refused at start, before anything is drawn, instead of failing
    at its first task ("No module named 'safetab_p'" in the scheduler)."""
    from prefect.flows import load_flow_from_entrypoint

    params = tmp_path / "params"
    shutil.copytree(TOY / "input_dir_zcdp", params)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DAS_DASK_ADDRESS", cluster.address)
    monkeypatch.setenv("PREFECT_API_URL", _api_url())

    def run(flow: Any, output: Path, run_id: str) -> Any:
        return flow(config=str(params / "config.json"), data=str(TOY), output=str(output),
                    seed=int(SEED), run_id=run_id, skip_validation=True,
                    return_state=True)  # fmt: skip

    try:
        by_file = load_flow_from_entrypoint("flows/safetab_p.py:safetab_p_flow")
        assert by_file.fn.__module__ == "safetab_p"
        refused = run(by_file, tmp_path / "by-file" / "out", "r-file")
        assert refused.name == "Refused" and "cannot import safetab_p" in refused.message
    finally:
        sys.modules.pop("safetab_p", None)
    assert [e for e in cluster.events() if e["event"] == "fresh"] == []

    deployed = load_flow_from_entrypoint("deploy/das_entrypoints.py:safetab_p_flow")
    assert deployed.fn.__module__ == "flows.safetab_p"
    output = tmp_path / "deployed" / "out"
    # (its task runner chosen as the run starts, from DAS_DASK_ADDRESS: as a worker sets it)
    audit = run(deployed, output, "r").result()
    assert audit["status"] == "succeeded"
    planned = safetab_p_parameters(params / "config.json").plan
    assert audit["draws"] == {"fresh": len(planned), "reused": 0}
    assert {e["pid"] for e in cluster.events() if e["event"] == "fresh"} == {
        cluster.workers()["w1"]
    }


def test_workers_lost_mid_run_end_it_in_one_line_and_a_resume_redraws_nothing(
    tmp_path: Path, cluster: OperatorCluster
) -> None:
    """The worker drawing a level is killed; with no retry left on the scheduler (allowed
    failures 0: a cluster whose workers keep dying) the task is lost. `das run` ends in one
    line naming the cause and the resume, exit 3 (not 1: nothing is wrong with the inputs);
    the same command with the run id then completes, reusing every draw the ledger holds."""
    params = tmp_path / "params"
    shutil.copytree(TOY / "input_dir_zcdp", params)
    output = tmp_path / "out"
    args = ["run", "safetab-p", "--config", str(params / "config.json"), "--data",
            str(TOY), "--output", str(output), "--seed", SEED, "--run-id", "lost",
            "--skip-validation", "--ledger", str(tmp_path / "ledger")]  # fmt: skip
    with cluster.allowed_failures(0):
        paused = "US/COUNTY/2/stage-1"
        cluster.pause_after(paused)
        started = time.time()
        process = _das_on_cluster(cluster, *args)
        event = cluster.wait_for("fresh", paused, process, started)
        os.kill(event["pid"], signal.SIGKILL)
        cluster.pause_after(None)
        out, err = process.communicate(timeout=RUN_SECONDS)
        assert process.returncode == 3, out + err[-3000:]
        assert "Traceback" not in err
        (line,) = [line for line in err.splitlines() if "FAILED" in line]
        assert "the Dask task runner lost its workers" in line and "--run-id lost" in line
        drawn = {e["name"] for e in cluster.events() if e["event"] == "fresh"}
        assert paused in drawn and not output.exists()

        again = time.time()
        _finished(_das_on_cluster(cluster, *args))
        fresh = {e["name"] for e in cluster.events() if e["event"] == "fresh" and e["t"] >= again}
        assert not fresh & drawn  # nothing drawn twice
        audit = json.loads((output / "audit.json").read_text())
        assert audit["draws"]["reused"] >= 1 and audit["parameters"]["attempt"] == 2
