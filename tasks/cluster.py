"""The start check of a run whose tasks go to an existing Dask cluster (``DAS_DASK_ADDRESS``).

On such a cluster the workers are separate processes, possibly on other hosts, started by the
operator; they read the run's inputs and read and write its run folder by path. Before
validation and before any draw, :func:`check_cluster_shares_run` asks every connected worker
what it sees (:class:`das.runs.shared_storage.SharedView`) and refuses the run, naming each
worker and what it is missing, unless all of them see the same inputs and the same run folder,
run the same code and packages, can import the tasks and the flow's module (the scheduler
too: it unpickles the task graph), and can reach the flow's Prefect API.
Runs on a local cluster or thread pool (started by the flow itself, in this machine) are not
checked: they share this process's file system by construction.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import importlib.util  # noqa: E402
import sys  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402
from prefect.settings import PREFECT_API_URL  # noqa: E402

from das.refusal import RunRefused  # noqa: E402
from das.runs.shared_storage import SharedView  # noqa: E402
from das.trust import PrivacyLedger  # noqa: E402

if TYPE_CHECKING:
    from prefect_dask import DaskTaskRunner

WORKER_WAIT_SECONDS = 60.0
API_TIMEOUT_SECONDS = 10.0
# What a worker must import to run the tasks (and the flow's context, pickled by reference).
MODULES = ("tasks.safetab_p", "tasks.phsafe", "flows.safetab_p", "flows.phsafe")
SHARED = (
    "every worker must see the input records and the run's state folder (the state root, "
    "DAS_STATE_DIR) at the same paths on a shared file system, open the same privacy ledger "
    "(DAS_LEDGER_DIR on shared storage, or DAS_LEDGER_URL), run this checkout with its "
    "virtualenv, and reach the flow's Prefect API (docs/how-to/dask-cluster.md)"
)


class ClusterNotShared(RunRefused):
    """A worker of the run's Dask cluster does not see what the flow's process sees."""


def existing_cluster() -> DaskTaskRunner | None:
    """The flow run's task runner when it connects to an existing scheduler (an address),
    else None (a local cluster or thread pool, or no flow run). A process that never imported
    prefect-dask (a run on the thread pool) has no Dask runner: nothing to import for that."""
    context = FlowRunContext.get()
    runner = None if context is None else context.task_runner
    dask_runners = sys.modules.get("prefect_dask.task_runners")
    if dask_runners is not None and isinstance(runner, dask_runners.DaskTaskRunner):
        return runner if runner.address else None
    return None


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """Run in a cluster process: which of ``modules`` it cannot import."""
    return [
        f"cannot import {name} (start it from this checkout's virtualenv)"
        for name in modules
        if importlib.util.find_spec(name) is None
    ]


def worker_problems(view: SharedView, api_url: str, modules: tuple[str, ...]) -> list[str]:
    """Run in a worker: what it sees differently from the flow's process (empty: all good)."""
    problems = missing_modules(modules)
    problems += view.problems()
    try:
        with urllib.request.urlopen(
            api_url.rstrip("/") + "/health", timeout=API_TIMEOUT_SECONDS
        ) as response:
            response.read()
    except (OSError, urllib.error.URLError) as exc:
        problems.append(f"cannot reach the flow's Prefect API at {api_url} ({exc})")
    return problems


def check_cluster_shares_run(
    files: Mapping[str, Path], run_root: Path, ledger: PrivacyLedger | None = None
) -> None:
    """Refuse (:class:`ClusterNotShared`) unless every worker of the run's existing Dask
    cluster sees ``files``, ``run_root`` and the privacy ledger as this process does; no-op
    without one."""
    runner = existing_cluster()
    if runner is None:
        return
    address = runner.address
    api_url = PREFECT_API_URL.value()
    if not api_url:
        raise ClusterNotShared(
            f"the run's tasks go to the Dask cluster at {address} (DAS_DASK_ADDRESS), but no "
            "Prefect server is configured (PREFECT_API_URL): without one this process runs a "
            "temporary API that the workers cannot use, and each worker would start its own. "
            "Start `prefect server start`, set PREFECT_API_URL for the run, and run again. "
            "Nothing was drawn."
        )
    client = runner.client
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
    except TimeoutError:
        raise ClusterNotShared(
            f"no Dask worker is connected to the scheduler at {address} (waited "
            f"{WORKER_WAIT_SECONDS:.0f} s): start `dask worker {address}` from this checkout's "
            "virtualenv. Nothing was drawn."
        ) from None
    # The flow's own module too: what the tasks send refers to it by name (a flow loaded from a
    # file as a module of its own could not be unpickled there; deploy/das_entrypoints.py).
    flow = FlowRunContext.get().flow
    modules = (*MODULES, flow.fn.__module__) if flow is not None else MODULES
    view = SharedView.of_run(files, run_root, ledger)
    answers = client.run(worker_problems, view, api_url, modules, on_error="return")
    workers = client.scheduler_info()["workers"]
    lines = []
    for worker, answer in sorted(answers.items()):
        problems = (
            answer
            if isinstance(answer, list)
            else [f"cannot run this pipeline's code ({type(answer).__name__}: {answer})"]
        )
        if problems:
            name = (workers.get(worker) or {}).get("name", worker)
            lines.append(f"worker {name} ({worker}): " + "; ".join(problems))
    # The scheduler unpickles the task graph: it must import the same modules.
    scheduler = client.run_on_scheduler(missing_modules, modules)
    if scheduler:
        lines.append(f"the scheduler: {'; '.join(scheduler)}")
    if lines:
        raise ClusterNotShared(
            f"the Dask cluster at {address} cannot run this run: "
            + " | ".join(lines)
            + f". {SHARED[0].upper()}{SHARED[1:]}. Nothing was drawn."
        )
    get_run_logger().info(
        "Dask cluster %s: %d worker(s) see the run's %d input files and its run folder",
        address, len(answers), len(files),
    )  # fmt: skip
