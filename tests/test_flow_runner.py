"""flows.runner: which task runner a run gets; flows.dask_runner.EagerDaskTaskRunner: the
cluster starts with the flow run, not at the first task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.dask_runner import EagerDaskTaskRunner
from flows.runner import task_runner_from_env

pytestmark = pytest.mark.usefixtures("prefect_server")

REPO = Path(__file__).resolve().parents[1]
IN_PROCESS = {"n_workers": 1, "threads_per_worker": 1, "processes": False}


def test_cluster_is_started_when_the_runner_is_entered() -> None:
    with EagerDaskTaskRunner(cluster_kwargs=IN_PROCESS) as runner:
        runner._starting.join(timeout=120)
        assert runner._client is not None  # before any task was submitted
        assert runner.client.run_on_scheduler(lambda: 42) == 42
    assert runner._starting is None


def test_flow_tasks_run_on_the_eagerly_started_cluster() -> None:
    from prefect import flow, task

    @task
    def double(x: int) -> int:
        return 2 * x

    @flow(task_runner=EagerDaskTaskRunner(cluster_kwargs=IN_PROCESS))
    def doubled() -> list[int]:
        return [f.result() for f in [double.submit(i) for i in range(3)]]

    assert doubled() == [0, 2, 4]


def test_a_failed_start_is_raised_by_the_first_task() -> None:
    from prefect import flow, task

    @task
    def one() -> int:
        return 1

    broken = EagerDaskTaskRunner(address="tcp://127.0.0.1:1", client_kwargs={"timeout": "2s"})

    @flow(task_runner=broken)
    def uses_it() -> int:
        return one.submit().result()

    with pytest.raises(OSError):
        uses_it()


def test_environment_chooses_the_eager_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAS_TASK_RUNNER", raising=False)
    monkeypatch.setenv("DAS_DASK_ADDRESS", "tcp://127.0.0.1:8786")
    runner = task_runner_from_env()
    assert isinstance(runner, EagerDaskTaskRunner) and runner.address == "tcp://127.0.0.1:8786"


def test_a_runs_own_cluster_listens_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduler, workers and the dashboard (which has no login) bind to 127.0.0.1 unless the
    operator exposes them on purpose; the dashboard can be turned off."""
    import socket

    import distributed
    import psutil

    for name in ("DAS_TASK_RUNNER", "DAS_DASK_ADDRESS", "DAS_DASK_HOST", "DAS_DASK_DASHBOARD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")  # worker processes
    kwargs = task_runner_from_env().cluster_kwargs
    assert kwargs["host"] == "127.0.0.1" and kwargs["dashboard_address"] == "127.0.0.1:0"
    with distributed.LocalCluster(**{**kwargs, "n_workers": 1}) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        mine = {p.pid for p in [psutil.Process(), *psutil.Process().children(recursive=True)]}
        listening = [
            c.laddr.ip
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in mine and c.family == socket.AF_INET
        ]
        assert listening and set(listening) == {"127.0.0.1"}, listening
        # its worker started with the allocator settings (das.allocator), Dask's others kept,
        # and without the profiler nor the 20 ms tick (flows.dask_runner.QUIET)
        with distributed.Client(cluster) as client:
            (seen,) = client.run(lambda: {k: os.environ.get(k) for k in WORKER_ENV}).values()
            (quiet,) = client.run(_quiet_settings).values()
        assert seen == WORKER_ENV
        assert quiet == {"distributed.worker.profile.enabled": False,
                         "distributed.admin.tick.interval": "1s", "profiling": False}  # fmt: skip
    monkeypatch.setenv("DAS_DASK_DASHBOARD", "")
    assert task_runner_from_env().cluster_kwargs["dashboard_address"] is None
    monkeypatch.setenv("DAS_DASK_DASHBOARD", "0.0.0.0:8787")
    assert task_runner_from_env().cluster_kwargs["dashboard_address"] == "0.0.0.0:8787"


def _quiet_settings(dask_worker: object) -> dict[str, object]:
    """In a worker: its Dask settings of flows.dask_runner.QUIET, and whether it profiles."""
    import dask.config

    return {
        "distributed.worker.profile.enabled": dask.config.get("distributed.worker.profile.enabled"),
        "distributed.admin.tick.interval": dask.config.get("distributed.admin.tick.interval"),
        "profiling": dask_worker.periodic_callbacks.get("profile") is not None,
    }


WORKER_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    "MALLOC_TRIM_THRESHOLD_": "67108864",  # not Dask's 65536: it fixes the mmap threshold
    "OMP_NUM_THREADS": "1",
}


def test_this_process_allocator_takes_the_settings() -> None:
    """glibc accepts both values (mallopt refuses an mmap threshold above 32 MiB: then nothing
    would change)."""
    from das import allocator

    allocator.tune.cache_clear()
    assert allocator.tune() is True
    assert {k: str(v) for k, v in allocator.SETTINGS.items()} == {
        k: v for k, v in WORKER_ENV.items() if k.startswith("MALLOC")
    }


def test_a_runs_own_cluster_has_the_workers_the_operator_asks_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("DAS_TASK_RUNNER", "DAS_DASK_ADDRESS", "DAS_DASK_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")  # worker processes
    assert task_runner_from_env().cluster_kwargs["n_workers"] == 2
    monkeypatch.setenv("DAS_DASK_WORKERS", "5")
    kwargs = task_runner_from_env().cluster_kwargs
    assert kwargs["n_workers"] == 5 and kwargs["threads_per_worker"] == 1
    for wrong in ("0", "-1", "two", "1.5", "²"):
        monkeypatch.setenv("DAS_DASK_WORKERS", wrong)
        with pytest.raises(ValueError, match="DAS_DASK_WORKERS"):
            task_runner_from_env()


def test_small_inputs_run_on_the_thread_pool_and_large_ones_on_worker_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """With a Prefect server, inputs under IN_PROCESS_BELOW_BYTES run on Prefect's thread pool
    in this process (no process pool, no Dask cluster for 100 k persons); larger ones, or a
    caller that does not know the size (a deployment's flow), keep the worker processes. The
    same number of task slots either way."""
    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.runner import IN_PROCESS_BELOW_BYTES, input_bytes, task_slots

    for name in ("DAS_TASK_RUNNER", "DAS_DASK_ADDRESS", "DAS_DASK_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    (tmp_path / "persons.csv").write_bytes(b"x" * 1000)
    (tmp_path / "units.csv").write_bytes(b"y" * 24)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big.csv").write_bytes(b"z" * 5000)  # not an input of the folder
    assert input_bytes(tmp_path) == 1024
    small = task_runner_from_env(inputs=input_bytes(tmp_path))
    assert isinstance(small, ThreadPoolTaskRunner) and task_slots(small) == 2
    for inputs in (IN_PROCESS_BELOW_BYTES, None):
        large = task_runner_from_env(inputs=inputs).cluster_kwargs
        assert large["processes"] is True and (large["n_workers"], large["threads_per_worker"]) == (
            2, 1)  # fmt: skip
    monkeypatch.delenv("PREFECT_API_URL")  # no server: worker processes would each start one
    assert isinstance(task_runner_from_env(), ThreadPoolTaskRunner)


def test_a_flow_chooses_its_runner_when_its_run_starts_not_when_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deployment's worker sets the environment of the run it starts: the flow's runner is
    chosen then. Importing the flows imports nothing of Dask (a small run never needs it)."""
    import subprocess
    import sys

    from flows.dask_runner import EagerDaskTaskRunner
    from flows.phsafe import phsafe_flow

    for name in ("DAS_TASK_RUNNER", "DAS_DASK_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAS_DASK_ADDRESS", "tcp://127.0.0.1:8786")
    chosen = phsafe_flow.task_runner.duplicate()
    assert isinstance(chosen, EagerDaskTaskRunner) and chosen.address == "tcp://127.0.0.1:8786"
    monkeypatch.delenv("DAS_DASK_ADDRESS")
    monkeypatch.setenv("DAS_TASK_RUNNER", "threads")
    assert not isinstance(phsafe_flow.task_runner.duplicate(), EagerDaskTaskRunner)
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, flows.safetab_p, flows.phsafe, das.cli.run; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in "
         "('distributed', 'dask', 'prefect_dask')))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert imported.stdout.strip() == "[]"


def test_a_deployment_run_is_sized_by_its_data_parameter(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """A deployment run's flow process (PREFECT__FLOW_RUN_ID set by Prefect's worker) reads
    its run's ``data`` parameter from the server when its task runner is chosen: small inputs
    run on the thread pool, as with `das run`, large ones on a local cluster; DAS_TASK_RUNNER
    overrides (dask: a cluster for small inputs too; anything else is refused); a run the
    server does not know keeps the cluster."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.phsafe import phsafe_flow
    from flows.runner import IN_PROCESS_BELOW_BYTES

    for name in ("DAS_TASK_RUNNER", "DAS_DASK_ADDRESS", "DAS_DASK_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir(), large.mkdir()
    (small / "persons.csv").write_bytes(b"x" * 1000)
    with open(large / "persons.csv", "wb") as sparse:
        sparse.truncate(IN_PROCESS_BELOW_BYTES)
    with get_client(sync_client=True) as client:
        runs = {
            folder.name: client.create_flow_run(phsafe_flow, parameters={"data": str(folder)})
            for folder in (small, large)
        }

    def chosen(run: str):
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", run)
        return phsafe_flow.task_runner.duplicate()

    assert isinstance(chosen(str(runs["small"].id)), ThreadPoolTaskRunner)
    assert chosen(str(runs["large"].id)).cluster_kwargs["processes"] is True
    assert chosen("00000000-0000-4000-8000-000000000000").cluster_kwargs["processes"] is True
    monkeypatch.setenv("DAS_TASK_RUNNER", "dask")
    assert chosen(str(runs["small"].id)).cluster_kwargs["processes"] is True
    monkeypatch.setenv("DAS_TASK_RUNNER", "thread")
    with pytest.raises(ValueError, match="DAS_TASK_RUNNER='thread'"):
        chosen(str(runs["small"].id))


def test_das_run_refuses_an_unknown_task_runner_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys
) -> None:
    """`DAS_TASK_RUNNER=thread` (a typo) is refused before the run starts, in one line that
    names the values it takes, not read as unset."""
    from das.cli import main
    from das.cli.run import EXIT_USAGE

    monkeypatch.setenv("DAS_TASK_RUNNER", "thread")
    monkeypatch.setenv("DAS_LOCAL_API", "temporary")
    toy = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy" / "input_dir_zcdp"
    code = main(["run", "safetab-p", "--config", f"{toy}/config.json", "--data", str(toy),
                 "--output", str(tmp_path / "out"), "--seed", "1"])  # fmt: skip
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "das run safetab-p: REFUSED — DAS_TASK_RUNNER='thread': expected threads or dask "
        "(or unset: chosen by the inputs' size)"
    )
    assert "Traceback" not in err and not (tmp_path / "out").exists()
