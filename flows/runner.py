"""The task runner of the product flows, chosen by the environment (one home for both flows)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import multiprocessing  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

import dask.config  # noqa: E402
import distributed  # noqa: E402
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner  # noqa: E402
from prefect_dask import DaskTaskRunner  # noqa: E402
from prefect_dask.client import PrefectDaskClient  # noqa: E402

from das import allocator  # noqa: E402
from flows.sizing import IN_PROCESS_BELOW_BYTES, input_bytes  # noqa: E402, F401


def inside_dask_worker() -> bool:
    """True in a task running on a Dask worker (a daemonic process: it may not start one)."""
    try:
        distributed.get_worker()
    except ValueError:
        return multiprocessing.current_process().daemon
    return True


class EagerDaskTaskRunner(DaskTaskRunner):
    """A Dask task runner that starts its cluster (or connects to ``DAS_DASK_ADDRESS``) as soon
    as the flow run starts, in a background thread, instead of at the first submitted task.

    prefect-dask creates the cluster on first use, after validation and loading; starting
    worker processes then took ~10-20 s on the critical path of every deployment run. Here it
    overlaps with hashing and validating the inputs. The first task waits for the start-up;
    a start-up error is raised there (the cluster is created again, as prefect-dask would).
    """

    _starting: threading.Thread | None = None

    def __enter__(self) -> EagerDaskTaskRunner:
        super().__enter__()
        # Prefect also enters a copy of the flow's task runner around every task it runs on a
        # Dask worker (the hydrated flow-run context); only the flow's own process starts one.
        if not inside_dask_worker():
            self._starting = threading.Thread(target=self._start, name="das-dask-start")
            self._starting.start()
        return self

    def _start(self) -> None:
        try:
            DaskTaskRunner.client.fget(self)
        except Exception:  # the first task creates it again and raises there
            self.logger.warning("starting the Dask cluster in the background failed", exc_info=True)

    def _wait_for_start(self) -> None:
        starting = self._starting
        if starting is not None and starting is not threading.current_thread():
            starting.join()

    @property
    def client(self) -> PrefectDaskClient:
        self._wait_for_start()
        return DaskTaskRunner.client.fget(self)

    def __exit__(self, *args: Any) -> None:
        self._wait_for_start()  # never close the exit stack while the cluster is being entered
        self._starting = None
        super().__exit__(*args)


DASK_HOST_ENV = "DAS_DASK_HOST"  # where a run's own local cluster listens (default loopback)
DASK_DASHBOARD_ENV = "DAS_DASK_DASHBOARD"  # its dashboard: "HOST:PORT", or "" for none
DASK_WORKERS_ENV = "DAS_DASK_WORKERS"  # its worker processes (default 2)


def local_workers(default: int = 2) -> int:
    """How many worker processes a run's own local cluster starts: ``DAS_DASK_WORKERS``, else
    ``default``. A value that is not a whole number of at least 1 is refused, not guessed."""
    value = os.environ.get(DASK_WORKERS_ENV, "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise ValueError(
            f"{DASK_WORKERS_ENV}={value!r}: expected the number of worker processes of a run's "
            "own Dask cluster, a whole number of at least 1"
        )
    return int(value)


def task_runner_from_env(workers: int | None = None, inputs: int | None = None) -> TaskRunner:
    """The Dask task runner (started with the flow run: :class:`EagerDaskTaskRunner`):
    ``DAS_DASK_ADDRESS`` when set, else a local cluster of ``workers`` worker processes
    (default :func:`local_workers`: ``DAS_DASK_WORKERS``, else 2) — or of one in-process
    worker with as many threads when ``inputs`` (the input files' bytes, when the caller
    knows them) is under :data:`IN_PROCESS_BELOW_BYTES`.

    ``DAS_TASK_RUNNER=threads`` runs the tasks on Prefect's thread pool instead (tests and
    small runs: no cluster start-up, about 5 s less per run on the toy inputs).

    The local cluster uses worker *processes* only when a Prefect API server is configured
    (``PREFECT_API_URL``): without one each worker process would start its own temporary
    server (docs/explanation/architecture.md#prefect), so the ephemeral/offline mode uses
    threads (numpy releases the GIL in the counting and sampling kernels).
    """
    allocator.tune()  # this process's arrays too (validation's read, an in-process cluster)
    address = os.environ.get("DAS_DASK_ADDRESS")
    if not address and os.environ.get("DAS_TASK_RUNNER") == "threads":
        return ThreadPoolTaskRunner(max_workers=workers or 2)
    if address:
        return EagerDaskTaskRunner(address=address)
    if workers is None:
        workers = local_workers()
    small = inputs is not None and inputs < IN_PROCESS_BELOW_BYTES
    processes = bool(os.environ.get("PREFECT_API_URL")) and not small
    kwargs: dict[str, Any] = {
        "n_workers": workers if processes else 1,
        "threads_per_worker": 1 if processes else workers,
        "processes": processes,
        # Nothing listens beyond loopback unless the operator says so: the dashboard has no
        # login, and the scheduler takes work from anyone who reaches it.
        "dashboard_address": os.environ.get(DASK_DASHBOARD_ENV, "127.0.0.1:0") or None,
    }
    if processes:  # an in-process cluster talks in memory, no scheduler port
        kwargs["host"] = os.environ.get(DASK_HOST_ENV, "127.0.0.1")
    if processes:
        # The workers' allocator reuses the engine's large arrays (das.allocator): Dask's own
        # pre-spawn setting would have every one of them faulted in afresh.
        dask.config.set({"distributed.nanny.pre-spawn-environ": _worker_environment()})
        # Dask's default: the machine's memory shared between the workers. A worker holds the
        # pass's records and one table's truncate-and-join (1.9 GiB at 10 M persons); a fixed
        # small limit would have the nanny kill it mid-table.
        kwargs["memory_limit"] = "auto"
    return EagerDaskTaskRunner(cluster_kwargs=kwargs)


def _worker_environment() -> dict[str, str]:
    """Dask's ``distributed.nanny.pre-spawn-environ`` with :data:`das.allocator.SETTINGS` in
    place of its trim threshold: what a local cluster's worker processes start with."""
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ") or {})
    environ.update({name: str(value) for name, value in allocator.SETTINGS.items()})
    return environ


def task_slots(runner: TaskRunner | None) -> int:
    """How many tasks ``runner`` (the flow run's task runner) runs at once: its Dask cluster's
    worker threads (a cluster of other hosts included), its thread pool's size, else 1."""
    try:
        if isinstance(runner, DaskTaskRunner):
            return max(1, sum(runner.client.nthreads().values()))
        if isinstance(runner, ThreadPoolTaskRunner):
            return max(1, min(int(runner._max_workers), os.cpu_count() or 1))
    except Exception:  # a cluster that cannot say: one task at a time is still correct
        return 1
    return 1
