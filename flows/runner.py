"""The task runner of the product flows, chosen by the environment (one home for both flows)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import os  # noqa: E402
from typing import Any  # noqa: E402

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner  # noqa: E402
from prefect_dask import DaskTaskRunner  # noqa: E402


def task_runner_from_env(workers: int = 2) -> TaskRunner:
    """The Dask task runner: ``DAS_DASK_ADDRESS`` when set, else a local cluster.

    ``DAS_TASK_RUNNER=threads`` runs the tasks on Prefect's thread pool instead (tests and
    small runs: no cluster start-up, about 5 s less per run on the toy inputs).

    The local cluster uses worker *processes* only when a Prefect API server is configured
    (``PREFECT_API_URL``): without one each worker process would start its own temporary
    server (DESIGN §8), so the ephemeral/offline mode uses threads (numpy releases the GIL in
    the counting and sampling kernels).
    """
    address = os.environ.get("DAS_DASK_ADDRESS")
    if not address and os.environ.get("DAS_TASK_RUNNER") == "threads":
        return ThreadPoolTaskRunner(max_workers=workers)
    if address:
        return DaskTaskRunner(address=address)
    processes = bool(os.environ.get("PREFECT_API_URL"))
    kwargs: dict[str, Any] = {
        "n_workers": workers if processes else 1,
        "threads_per_worker": 1 if processes else workers,
        "processes": processes,
        "dashboard_address": ":0",
    }
    if processes:
        # Dask's default: the machine's memory shared between the workers. A worker holds the
        # pass's records and one table's truncate-and-join (1.9 GiB at 10 M persons); a fixed
        # small limit would have the nanny kill it mid-table.
        kwargs["memory_limit"] = "auto"
    return DaskTaskRunner(cluster_kwargs=kwargs)
