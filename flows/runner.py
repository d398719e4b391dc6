"""The task runner of the product flows, chosen by the environment and the inputs' size (one
home for both flows): Prefect's thread pool for a small run, Dask worker processes for a large
one or an existing cluster (flows/dask_runner.py, imported only then)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402
from uuid import UUID  # noqa: E402

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner  # noqa: E402

from das import allocator  # noqa: E402
from flows.sizing import IN_PROCESS_BELOW_BYTES, input_bytes  # noqa: E402

DASK_WORKERS_ENV = "DAS_DASK_WORKERS"  # its worker processes (default 2)
TASK_RUNNER_ENV = "DAS_TASK_RUNNER"  # threads or dask: the choice by the inputs' size overridden
FLOW_RUN_ENV = "PREFECT__FLOW_RUN_ID"  # set by Prefect's worker in a deployment run's process


def chosen_runner() -> str:
    """``DAS_TASK_RUNNER``: ``threads``, ``dask`` or empty (by the inputs' size); any other
    value is refused, not read as unset."""
    chosen = os.environ.get(TASK_RUNNER_ENV, "").strip()
    if chosen not in ("", "threads", "dask"):
        raise ValueError(
            f"{TASK_RUNNER_ENV}={chosen!r}: expected threads or dask "
            "(or unset: chosen by the inputs' size)"
        )
    return chosen


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
    * ``DAS_TASK_RUNNER=threads`` (tests, and whoever wants no cluster);

    and a local cluster whatever the inputs' size with ``DAS_TASK_RUNNER=dask``.
    """
    allocator.tune()  # this process's arrays too (validation's read, the thread pool's tasks)
    address = os.environ.get("DAS_DASK_ADDRESS")
    if workers is None:
        workers = local_workers()
    chosen = chosen_runner()
    small = chosen != "dask" and inputs is not None and inputs < IN_PROCESS_BELOW_BYTES
    if not address and (chosen == "threads" or small or not os.environ.get("PREFECT_API_URL")):
        return ThreadPoolTaskRunner(max_workers=workers)
    from flows import dask_runner

    if address:
        return dask_runner.existing_cluster(address)
    return dask_runner.local_cluster(workers)


class RunnerChosenAtStart(TaskRunner):
    """The flows' task runner until a run starts: Prefect enters a ``duplicate()`` of a flow's
    runner for each run, and this one's is :func:`task_runner_from_env` as the environment is
    then (a deployment's worker sets it) and the run's inputs (a deployment run's ``data``
    parameter: :func:`deployment_run_inputs`). Importing a flow thus starts and imports nothing of
    Dask; `das run` gives its flow the runner sized to its inputs (``with_options``)."""

    def duplicate(self) -> TaskRunner:
        return task_runner_from_env(inputs=deployment_run_inputs())

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a flow's task runner is chosen when its run starts (duplicate())")


def deployment_run_inputs() -> int | None:
    """The input files' bytes of the deployment run this process was started for (its ``data``
    parameter, read from the server: the flow run's parameters are not yet in any context when
    its task runner is chosen), so that a small deployment run gets the thread pool as a small
    `das run` does, not two worker processes that each import the pipeline. None when this is
    no deployment run's process or the size cannot be known (then a cluster, as before)."""
    run_id = os.environ.get(FLOW_RUN_ENV)
    if not run_id or not os.environ.get("PREFECT_API_URL"):
        return None
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            data = client.read_flow_run(UUID(run_id)).parameters.get("data")
        return input_bytes(data) if isinstance(data, str) and data else None
    except Exception as exc:  # sizing is an optimisation: a cluster still runs it
        logging.getLogger("das.flows").warning(
            "the size of this deployment run's inputs is unknown (%s): its tasks run on a "
            "local Dask cluster",
            type(exc).__name__,
        )
        return None


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
