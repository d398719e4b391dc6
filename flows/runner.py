"""The task runner of the product flows, chosen by the environment and the inputs' size (one
home for both flows): Prefect's thread pool for a small run, Dask worker processes for a large
one or an existing cluster (flows/dask_runner.py, imported only then)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner  # noqa: E402

from das import allocator  # noqa: E402
from flows.sizing import IN_PROCESS_BELOW_BYTES, input_bytes  # noqa: E402, F401

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
    """The task runner of a flow run: an existing Dask cluster at ``DAS_DASK_ADDRESS`` when
    set; else a local cluster of ``workers`` worker processes (default :func:`local_workers`:
    ``DAS_DASK_WORKERS``, else 2), started with the flow run
    (:class:`flows.dask_runner.EagerDaskTaskRunner`); or Prefect's thread pool with as many
    threads, in this process, when

    * ``inputs`` (the input files' bytes, when the caller knows them) is under
      :data:`IN_PROCESS_BELOW_BYTES`: starting two worker processes, each importing the
      pipeline, cost a 100 k-person run more than its work (numpy releases the GIL in the
      counting and sampling kernels, so threads keep both cores busy), and an in-process Dask
      cluster cost it ~2.7 CPU-s of scheduler, monitors and task serialization;
    * no Prefect API server is configured (``PREFECT_API_URL``): each worker process would
      start a temporary server of its own (docs/explanation/architecture.md#prefect);
    * ``DAS_TASK_RUNNER=threads`` (tests, and whoever wants no cluster).
    """
    allocator.tune()  # this process's arrays too (validation's read, the thread pool's tasks)
    address = os.environ.get("DAS_DASK_ADDRESS")
    if workers is None:
        workers = local_workers()
    small = inputs is not None and inputs < IN_PROCESS_BELOW_BYTES
    threads = os.environ.get("DAS_TASK_RUNNER") == "threads"
    if not address and (threads or small or not os.environ.get("PREFECT_API_URL")):
        return ThreadPoolTaskRunner(max_workers=workers)
    from flows import dask_runner

    if address:
        return dask_runner.existing_cluster(address)
    return dask_runner.local_cluster(workers)


class RunnerChosenAtStart(TaskRunner):
    """The flows' task runner until a run starts: Prefect enters a ``duplicate()`` of a flow's
    runner for each run, and this one's is :func:`task_runner_from_env` as the environment is
    then (a deployment's worker sets it). Importing a flow thus starts and imports nothing of
    Dask; `das run` gives its flow the runner sized to its inputs (``with_options``)."""

    def duplicate(self) -> TaskRunner:
        return task_runner_from_env()

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a flow's task runner is chosen when its run starts (duplicate())")


def task_slots(runner: TaskRunner | None) -> int:
    """How many tasks ``runner`` (the flow run's task runner) runs at once: its Dask cluster's
    worker threads (a cluster of other hosts included), its thread pool's size, else 1."""
    try:
        if isinstance(runner, ThreadPoolTaskRunner):
            return max(1, min(int(runner._max_workers), os.cpu_count() or 1))
        if "flows.dask_runner" in sys.modules:  # else no Dask runner exists in this process
            return sys.modules["flows.dask_runner"].cluster_threads(runner) or 1
    except Exception:  # a cluster that cannot say: one task at a time is still correct
        return 1
    return 1
