"""Benchmark PHSafe on N synthetic persons: the engine alone, and `das run phsafe` end to end.

Inputs come from ``das synth phsafe`` (the demo config's states and budgets: all 51 US states).
*Engine*: read, truncate-and-join, measure and write (no flow, no postprocessing). *End to
end*: the production command — validation (GX + cross-file checks), load, tables measured in
parallel on a local Dask cluster with the secure noise source, statistical postprocessing,
atomic writes, audit — including the temporary Prefect API it starts. Each runs in a fresh
Python process so the reported peak RSS is that run's own; the temporary folder is deleted
afterwards. ``--workers processes`` is the production mode instead: a ``prefect server`` is
started first (its start-up is not timed) and the tables run on two Dask worker processes;
the peak RSS is then given for the flow process and for the largest worker. Usage::

    .venv/bin/python benchmarks/phsafe.py [--persons 1000000 10000000] [--engine-only]
                                          [--workers threads|processes]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from das.io.phsafe import input_paths, read_geo, read_persons, read_units
from das.phsafe.engine import run_phsafe, write_release
from das.specs.config import load_phsafe_config
data, out = Path(sys.argv[1]), Path(sys.argv[2])
started = time.perf_counter()
paths = input_paths(data)
persons, units, geo = (read_persons(paths["persons"]), read_units(paths["units"]),
                       read_geo(paths["geo"]))
read = time.perf_counter()
release = run_phsafe(load_phsafe_config(data / "config.json"), persons, units, geo)
ran = time.perf_counter()
rows = write_release(release, out)
done = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"persons": len(persons), "read_s": read - started, "engine_s": ran - read,
                  "write_s": done - ran, "total_s": done - started, "peak": peak,
                  "rows": sum(rows.values())}))
"""


def run_case(persons: int) -> dict[str, float]:
    """Synthesize ``persons`` records, run the engine once in a child process, return figures."""
    with tempfile.TemporaryDirectory(prefix="das-phsafe-bench-") as scratch:
        data = Path(scratch) / "data"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "das",
                "synth",
                "phsafe",
                "--output",
                str(data),
                "--persons",
                str(persons),
                "--seed",
                "2026",
            ],
            check=True,
            capture_output=True,
            cwd=REPO,
        )
        result = subprocess.run(
            [sys.executable, "-c", _CHILD, str(data), str(Path(scratch) / "out")],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


_END_TO_END = """
import json, resource, sys, time
from das.cli import main
started = time.perf_counter()
code = main(["run", "phsafe", "--config", sys.argv[1], "--data", sys.argv[2], "--output",
             sys.argv[3], "--ledger", sys.argv[3] + ".ledger"])  # a measurement's own ledger
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"code": code, "total_s": elapsed, "peak": peak}))
"""


def tree_rss_peaks(process: subprocess.Popen, interval: float = 0.2) -> tuple[int, int]:
    """Sample until ``process`` exits: the peak RSS summed over it and its descendants (Dask
    worker processes), and the peak of any single descendant. (``RUSAGE_CHILDREN`` cannot
    give this: a spawned worker inherits its parent's high-water mark at exec.)"""
    import psutil

    root = psutil.Process(process.pid)
    total_peak = child_peak = 0
    while process.poll() is None:
        with contextlib.suppress(psutil.Error):
            children = root.children(recursive=True)
            sizes = [p.memory_info().rss for p in children if p.is_running()]
            total_peak = max(total_peak, root.memory_info().rss + sum(sizes))
            child_peak = max([child_peak, *sizes])
        time.sleep(interval)
    return total_peak, child_peak


@contextlib.contextmanager
def prefect_server() -> Iterator[str]:
    """A ``prefect server`` on a free local port with its own home; yields its API URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="das-bench-prefect-") as home:
        env = {**os.environ, "PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PREFECT_SERVER_UI_ENABLED": "false"}  # fmt: skip
        server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
             "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/api"
        try:
            for _ in range(240):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{url}/health", timeout=1).close()
                    break
                time.sleep(0.5)
            else:
                raise RuntimeError("prefect server did not start within 120 s")
            yield url
        finally:
            server.terminate()
            server.wait(timeout=30)


def run_end_to_end(persons: int, api_url: str | None = None) -> dict[str, object]:
    """Synthesize ``persons`` records, run `das run phsafe` once in a child; figures + audit.

    With ``api_url`` the child talks to that server, so the tables run on Dask worker
    processes (:func:`flows.runner.task_runner_from_env`)."""
    with tempfile.TemporaryDirectory(prefix="das-phsafe-e2e-") as scratch:
        data = Path(scratch) / "data"
        out = Path(scratch) / "out"
        subprocess.run(
            [sys.executable, "-m", "das", "synth", "phsafe", "--output", str(data),
             "--persons", str(persons), "--seed", "2026"],
            check=True, capture_output=True, cwd=REPO,
        )  # fmt: skip
        # without a server: the run's own temporary API, as measured (not `das server`'s)
        env = {**os.environ, "DAS_LOCAL_API": "temporary",
               **({"PREFECT_API_URL": api_url} if api_url else {})}  # fmt: skip
        with tempfile.TemporaryFile("w+") as stdout:
            child = subprocess.Popen(
                [sys.executable, "-c", _END_TO_END, str(data / "config.json"), str(data),
                 str(out)],
                stdout=stdout, stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=env,
            )  # fmt: skip
            figures: dict[str, object] = {}
            figures["tree_peak"], figures["worker_peak"] = tree_rss_peaks(child)
            stdout.seek(0)
            figures.update(json.loads(stdout.read().strip().splitlines()[-1]))
        audit = json.loads((out / "audit.json").read_text())
    figures["timings"] = audit["timings"]
    figures["flow_s"] = audit["seconds"]
    figures["status"] = audit["status"]
    figures["error_type"] = audit["error_type"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--engine-only", action="store_true", help="skip the end-to-end run")
    parser.add_argument("--workers", choices=("threads", "processes"), default="threads",
                        help="end to end: in-process threads (no server set), or a prefect "
                             "server and Dask worker processes (production)")  # fmt: skip
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        api_url = stack.enter_context(prefect_server()) if args.workers == "processes" else None
        for persons in args.persons:
            report(persons, args.engine_only, api_url)


def report(persons: int, engine_only: bool, api_url: str | None) -> None:
    """Print the engine figures, then (unless ``engine_only``) the end-to-end ones."""
    figures = run_case(persons)
    print(
        f"{figures['persons']:>11,} persons, engine: read {figures['read_s']:.1f} s, engine "
        f"{figures['engine_s']:.1f} s, write {figures['write_s']:.2f} s, total "
        f"{figures['total_s']:.1f} s, peak RSS {figures['peak'] / 2**20:.0f} MiB, "
        f"{figures['rows']:,} output rows"
    )
    if engine_only:
        return
    e2e = run_end_to_end(persons, api_url)
    stages = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in e2e["timings"].items())
    print(
        f"{persons:>11,} persons, das run phsafe: {e2e['status']}"
        + (f" ({e2e['error_type']})" if e2e["error_type"] else "")
        + f" in {e2e['total_s']:.1f} s wall (flow {e2e['flow_s']:.1f} s: {stages}), peak RSS "
        f"{e2e['peak'] / 2**20:.0f} MiB"
        + (
            f" (with its worker processes {e2e['tree_peak'] / 2**20:.0f} MiB, largest worker "
            f"{e2e['worker_peak'] / 2**20:.0f} MiB)"
            if api_url
            else ""
        )
    )


if __name__ == "__main__":
    main()
