"""The Dask task runners of the product flows: imported only by a run whose tasks go to Dask
worker processes (its own local cluster, or an existing cluster at ``DAS_DASK_ADDRESS``), so
that a small run, on Prefect's thread pool, never imports Dask (flows/runner.py chooses)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import multiprocessing  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

import dask.config  # noqa: E402
import distributed  # noqa: E402
from prefect_dask import DaskTaskRunner  # noqa: E402
from prefect_dask.client import PrefectDaskClient  # noqa: E402

from das import allocator  # noqa: E402

# A run's own cluster without the statistical profiler (a thread in every worker sampling every
# thread's stack each 10 ms: the dashboard's "Profile" page) and with the event loop's health
# tick at 1 s instead of 20 ms, in the scheduler, the nannies and the workers: idle, a scheduler
# and a worker took 7.3 CPU-s a minute with Dask's defaults and 4.1 with these and two slower
# monitors (measured 2026-12-07). The memory monitor, which enforces the workers' memory limit,
# and the dashboard's other pages are as Dask has them. An operator's own cluster
# (DAS_DASK_ADDRESS) keeps the settings its operator gave it.
QUIET = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s"}

DASK_HOST_ENV = "DAS_DASK_HOST"  # where a run's own local cluster listens (default loopback)
DASK_DASHBOARD_ENV = "DAS_DASK_DASHBOARD"  # its dashboard: "HOST:PORT", or "" for none


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


def existing_cluster(address: str) -> EagerDaskTaskRunner:
    """The runner of a flow whose tasks go to the cluster whose scheduler is at ``address``."""
    return EagerDaskTaskRunner(address=address)


def local_cluster(workers: int) -> EagerDaskTaskRunner:
    """The runner of a flow run's own cluster of ``workers`` worker processes on this machine,
    each of one thread, listening on loopback unless ``DAS_DASK_HOST`` says otherwise."""
    # The workers' allocator reuses the engine's large arrays (das.allocator): Dask's own
    # pre-spawn setting would have every one of them faulted in afresh. And the monitors that
    # only a developer reads are off or slowed (QUIET): the nannies pass this process's Dask
    # settings to the workers they start.
    dask.config.set({"distributed.nanny.pre-spawn-environ": _worker_environment(), **QUIET})
    return EagerDaskTaskRunner(
        cluster_kwargs={
            "n_workers": workers,
            "threads_per_worker": 1,
            "processes": True,
            # Nothing listens beyond loopback unless the operator says so: the dashboard has
            # no login, and the scheduler takes work from anyone who reaches it.
            "host": os.environ.get(DASK_HOST_ENV, "127.0.0.1"),
            "dashboard_address": os.environ.get(DASK_DASHBOARD_ENV, "127.0.0.1:0") or None,
            # Dask's default: the machine's memory shared between the workers. A worker holds
            # the pass's records and one table's truncate-and-join (1.9 GiB at 10 M persons);
            # a fixed small limit would have the nanny kill it mid-table.
            "memory_limit": "auto",
        }
    )


def _worker_environment() -> dict[str, str]:
    """Dask's ``distributed.nanny.pre-spawn-environ`` with :data:`das.allocator.SETTINGS` in
    place of its trim threshold: what a local cluster's worker processes start with."""
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ") or {})
    environ.update({name: str(value) for name, value in allocator.SETTINGS.items()})
    return environ


def cluster_threads(runner: object) -> int | None:
    """The worker threads of ``runner``'s cluster when it is a Dask runner, else None."""
    if isinstance(runner, DaskTaskRunner):
        return max(1, sum(runner.client.nthreads().values()))
    return None
