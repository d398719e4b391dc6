"""Time of a deployment run from its trigger to its first measure task, on a real local stack.

Starts ``prefect server`` (authenticated, as in production), ``das deploy --local`` (20,000
synthetic persons) and a process worker (tests/prefect_stack.py), then triggers
``safetab-p/safetab-p-us-pr`` and ``phsafe/phsafe-us`` one after the other, ``--runs`` times
each, and prints per run: trigger → flow running, → validation done, → first measure task
started, → completed (seconds, from the API's timestamps). ``--warm`` first starts a Dask
scheduler and two worker processes from the checkout and gives the Prefect worker
``DAS_DASK_ADDRESS`` (a warm cluster shared by the runs).

    python benchmarks/deployment.py [--runs 2] [--warm]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from prefect_stack import (
    VENV_BIN,
    PrefectStack,
    epoch,
    free_port,
    local_stack,
    start_worker,
)

DEPLOYMENTS = ("safetab-p/safetab-p-us-pr", "phsafe/phsafe-us")


def timings(stack: PrefectStack, flow_run_id: str) -> dict[str, float]:
    run = stack.flow_run(flow_run_id)
    created = epoch(run["created"])
    tasks = stack.task_runs(flow_run_id)
    validated = [epoch(t["end_time"]) for t in tasks if t["name"].startswith("validate")]
    measures = [epoch(t["start_time"]) for t in tasks
                if t["name"].startswith("measure") and t["start_time"]]  # fmt: skip
    return {
        "running": epoch(run["start_time"]) - created,
        "validated": min(validated) - created if validated else float("nan"),
        "first measure": min(measures) - created,
        "completed": epoch(run["end_time"]) - created,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--warm", action="store_true", help="runs share a running Dask cluster")
    args = parser.parse_args()
    with local_stack(worker=False) as stack:
        if args.warm:
            address = f"tcp://127.0.0.1:{free_port()}"
            stack.start("dask-scheduler", [str(VENV_BIN / "dask"), "scheduler", "--host",
                        "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                        "--dashboard-address", ":0"])  # fmt: skip
            # The preload gives the workers the server's auth string (DAS_PREFECT_AUTH_FILE):
            # their task runs report to the authenticated server.
            workers = ["--nworkers", "2", "--nthreads", "1", "--dashboard-address", ":0",
                       "--preload", "das.prefect_auth"]  # fmt: skip
            stack.start("dask-workers", [str(VENV_BIN / "dask"), "worker", address, *workers])
            stack.env["DAS_DASK_ADDRESS"] = address
        start_worker(stack)
        for name in DEPLOYMENTS:
            rows = []
            for index in range(args.runs):
                output = stack.base / "bench" / f"{name.replace('/', '-')}-{index}"
                # Outside production, each run with its own ledger: the same inputs are
                # released again and again here (production would refuse the second spend).
                env = {"DAS_PRODUCTION": "0", "DAS_LEDGER_DIR": str(output) + ".ledger"}
                run = stack.trigger(name, {"output": str(output)}, {"env": env})
                state = stack.wait(run)
                if state != "COMPLETED":
                    raise SystemExit(f"{name}: {state}\n{stack.log_tail('worker')}")
                rows.append(timings(stack, run))
                print(name, {k: round(v, 1) for k, v in rows[-1].items()}, flush=True)
            medians = {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}
            print(f"{name} median of {args.runs}: {medians}", flush=True)


if __name__ == "__main__":
    main()
