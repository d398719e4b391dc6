"""Benchmark small runs as a user types them: `das run` on 100 k synthetic persons (validation
included, secure noise, no server configured), the first run of a fresh home and a later run in
the same home, and `das --help`.

Each figure is the median of ``--repeat`` runs (3), with the machine's load average (1 min)
beside it and the goal of issue 39. A *first run* gets a new home (HOME and XDG_* in a temporary
folder): it creates the per-user privacy ledger and starts the local Prefect API (`das server`),
whose new database is migrated. A *later run* reuses both (each on another synthetic dataset of
the same size: the ledger would refuse a second spend on the same records without
``--cumulative-total``).
CPU-seconds are the whole process tree's: the `das` process and every process it started, the
local API included (psutil, sampled every 50 ms: a process that lives less than that is missed).
The stage breakdown is of the median later run: *before the flow* (imports, the start checks,
the ledger, finding the API, the task runner) and the flow's stages from the run log, each with
its wall and CPU seconds. Every local API is stopped at the end. Usage::

    .venv/bin/python benchmarks/small_runs.py [--persons 100000] [--repeat 3]
                                              [--products phsafe safetab-p]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DAS = [sys.executable, "-m", "das"]
GOALS = {  # issue 39: (first run of a fresh home, later run) in seconds
    "phsafe": (10.0, 5.0),
    "safetab-p": (10.0, 5.0),
}
HELP_GOAL = 0.5
STAGE = re.compile(r"^(\S+ \S+) INFO prefect\.flow_runs: progress \d+%: (\w[\w-]*) 0/")
DONE = re.compile(r"^(\S+ \S+) INFO prefect\.flow_runs: progress 100%")


def load() -> float:
    return os.getloadavg()[0]


def home_environment(home: Path) -> dict[str, str]:
    """A new user's environment in ``home``: no DAS_ or PREFECT_ setting of the caller."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DAS_", "PREFECT_", "XDG_"))}
    return {
        **keep,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(home / "tmp"),
    }


class TreeCpu:
    """CPU-seconds of a process and all its descendants (those that outlive it too, such as
    the local API it starts), sampled until :meth:`stop`; with the time of each sample."""

    def __init__(self, pid: int, *others: int) -> None:
        self.root = psutil.Process(pid)
        self.seen: dict[int, tuple[psutil.Process, float]] = {}
        self.base: dict[int, float] = {}  # CPU a process had spent before it was counted
        for other in others:
            self.add(other)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu(self) -> float:
        with contextlib.suppress(psutil.Error):
            for process in [self.root, *self.root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    self.seen[process.pid] = (process, times.user + times.system)
        return sum(cpu - self.base.get(pid, 0.0) for pid, (_, cpu) in self.seen.items())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._cpu()))
            time.sleep(0.05)

    def add(self, pid: int) -> None:
        """Count the CPU ``pid`` spends from now on (a process that runs already: the local
        API a later run reuses)."""
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            times = process.cpu_times()
            self.seen[pid] = (process, times.user + times.system)
            self.base[pid] = times.user + times.system

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self._cpu()))
        return self.samples[-1][1]

    def between(self, start: float, end: float) -> float:
        """CPU-seconds spent between two times (interpolated between samples)."""

        def at(moment: float) -> float:
            before = [s for s in self.samples if s[0] <= moment]
            after = [s for s in self.samples if s[0] >= moment]
            if not before:
                return self.samples[0][1] if self.samples else 0.0
            if not after:
                return self.samples[-1][1]
            (t0, c0), (t1, c1) = before[-1], after[0]
            return c0 if t1 == t0 else c0 + (c1 - c0) * (moment - t0) / (t1 - t0)

        return at(end) - at(start)


def local_api_pid(env: dict[str, str]) -> int | None:
    record = Path(env["XDG_STATE_HOME"]) / "das" / "local-api" / "server.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        return int(json.loads(record.read_text())["pid"])
    return None


def one_run(product: str, data: Path, output: Path, env: dict[str, str]) -> dict:
    """`das run PRODUCT` as typed; its wall and tree CPU, its stages from its run log."""
    argv = [*DAS, "run", product, "--config", str(data / "config.json"), "--data", str(data),
            "--output", str(output)]  # fmt: skip
    before = load()
    server = local_api_pid(env)
    started = time.time()
    child = subprocess.Popen(argv, env=env, cwd=output.parent, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    tree = TreeCpu(child.pid, *([] if server is None else [server]))
    _, err = child.communicate()
    wall = time.time() - started
    cpu = tree.stop()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {child.returncode}:\n{err[-3000:]}")
    audit = json.loads((output / "audit.json").read_text())
    run_log = Path(env["XDG_STATE_HOME"]) / "das" / "runs" / audit["run_id"] / "run.log"
    return {"wall": wall, "cpu": cpu, "load": before,
            "stages": stages(run_log, started, wall, tree)}  # fmt: skip


def stages(run_log: Path, started: float, wall: float, tree: TreeCpu) -> list[tuple]:
    """(stage, wall s, CPU s) from the command's start: before the flow, each flow stage (from
    its first progress line to the next stage's), after the flow."""
    marks: list[tuple[str, float]] = []
    end = None
    for line in run_log.read_text().splitlines():
        match = STAGE.match(line)
        done = DONE.match(line)
        if match or done:
            stamp = (match or done).group(1).replace(",", ".")
            moment = datetime.datetime.fromisoformat(stamp).timestamp()
            if match and (not marks or marks[-1][0] != match.group(2)):
                marks.append((match.group(2), moment))
            if done:
                end = moment
    finished = started + wall
    points = [("before the flow", started), *marks, ("after the flow", end or finished)]
    rows = []
    for (name, begin), (_, until) in zip(points, [*points[1:], ("", finished)], strict=True):
        rows.append((name, until - begin, tree.between(begin, until)))
    return rows


def help_time(repeat: int) -> tuple[float, float, float]:
    """`das --help`: median wall and CPU seconds of ``repeat`` runs, and the load."""
    walls, cpus, before = [], [], load()
    for _ in range(repeat):
        started = time.perf_counter()
        child = subprocess.Popen([str(Path(sys.executable).with_name("das")), "--help"],
                                 stdout=subprocess.DEVNULL)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        walls.append(time.perf_counter() - started)
        cpus.append(usage.ru_utime + usage.ru_stime)
        child.returncode = os.waitstatus_to_exitcode(status)
    return statistics.median(walls), statistics.median(cpus), before


def stop_api(env: dict[str, str], cwd: Path) -> None:
    subprocess.run([*DAS, "server", "stop"], env=env, cwd=cwd, capture_output=True, check=False)


def bench_product(product: str, persons: int, repeat: int, scratch: Path) -> None:
    # A dataset per later run: the same home's ledger refuses a second spend on the same records
    # without --cumulative-total (the first runs each have a new home, hence a new ledger).
    datasets = [scratch / f"{product}-data-{number}" for number in range(repeat + 1)]
    for number, data in enumerate(datasets):
        subprocess.run([*DAS, "synth", product, "--output", str(data), "--persons",
                        str(persons), "--seed", str(2026 + number)],
                       check=True, capture_output=True, cwd=REPO)  # fmt: skip
    firsts, laters = [], []
    for attempt in range(repeat):
        home = scratch / f"{product}-home-{attempt}"
        (home / "tmp").mkdir(parents=True)
        env = home_environment(home)
        try:
            firsts.append(one_run(product, datasets[0], home / "first", env))
            if attempt == 0:  # the later runs, in the first home
                for number in range(repeat):
                    output = home / f"later-{number}"
                    laters.append(one_run(product, datasets[number + 1], output, env))
        finally:
            stop_api(env, home)
    goal_first, goal_later = GOALS[product]
    for name, runs, goal in (("first run, fresh home", firsts, goal_first),
                             ("later run, same home", laters, goal_later)):  # fmt: skip
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        loads = ", ".join(f"{r['load']:.1f}" for r in runs)
        mark = "met" if wall <= goal else "NOT met"
        print(f"{product:>9} {persons:,} persons, {name}: {wall:.1f} s wall, {cpu:.1f} CPU-s "
              f"(median of {len(runs)}; load {loads}); goal <= {goal:.0f} s: {mark}")  # fmt: skip
    median = sorted(laters, key=lambda r: r["wall"])[len(laters) // 2]
    print(f"{'':>9} stages of the median later run ({median['wall']:.1f} s, load "
          f"{median['load']:.1f}): " + "; ".join(
              f"{name} {wall:.1f} s / {cpu:.1f} CPU-s" for name, wall, cpu in median["stages"]
          ))  # fmt: skip


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the local APIs are stopped on the way out


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--products", nargs="+", default=["phsafe", "safetab-p"],
                        choices=sorted(GOALS))  # fmt: skip
    args = parser.parse_args()
    wall, cpu, before = help_time(max(9, args.repeat))
    mark = "met" if wall <= HELP_GOAL else "NOT met"
    print(f"das --help: {wall:.2f} s wall, {cpu:.2f} CPU-s (median of {max(9, args.repeat)}; "
          f"load {before:.1f}); goal <= {HELP_GOAL} s: {mark}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="das-small-runs-") as scratch:
        for product in args.products:
            bench_product(product, args.persons, args.repeat, Path(scratch))


if __name__ == "__main__":
    main()
