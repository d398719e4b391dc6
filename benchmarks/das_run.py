"""`das run` as typed, against the floor of its input: one streaming pyarrow parse of the file.

Issue 39's goals for the engine are ratios: a SafeTab-P run within 2× one parse of its person
file (20 M persons, national), measured in the same benchmark run; PHSafe US + PR within
5 minutes. Both sides share the machine with whatever else runs on it, so each figure is
printed with the 1-minute load average beside it, and each is the median of ``--repeat`` runs
(national: one run each is what fits in an afternoon; the output says how many).

For each input folder (``--data``, or one synthesized with ``das synth --persons N`` under
``--scratch``, 2020 production specs and configs):

* **the floor**: ``pyarrow.csv.open_csv`` over the person file with pyarrow's defaults (its
  own threads, type inference, the file's delimiter), every batch read and dropped; for a
  Parquet input, ``pyarrow.parquet.ParquetFile.iter_batches``. Wall time, CPU-seconds;
* **the run**: ``das run PRODUCT --config C --data D --output O --run-id R`` as a user types it
  (validation of every row, secure noise, the privacy ledger, the audit, the atomic release;
  a temporary Prefect API unless ``PREFECT_API_URL`` is set, as for a user), in a fresh state
  folder and ledger of its own. Wall time, the CPU-seconds of the whole process tree
  (``getrusage`` of the waited-for children) and its peak resident memory (sampled every 0.2 s
  over every descendant, :class:`national.TreeSampler`), with what each process held at that
  peak (the run's own process, the Dask workers, the Prefect API);
* **the stages** of the run, from its run log: wall seconds and CPU-seconds of the run's
  process in each (``stage NAME: W s, C CPU-s``), so a stage on one core shows as ~1.0 core,
  and the time before the first stage (start-up: imports, the temporary API, the ledger).

Synthetic data are not confidential: the benchmark prints row counts (a run never logs them).
Usage::

    .venv/bin/python benchmarks/das_run.py --product safetab-p --persons 20000000 --repeat 3
    .venv/bin/python benchmarks/das_run.py --product phsafe --persons 334735000 --keep
    .venv/bin/python benchmarks/das_run.py --product safetab-p --data DIR [--config FILE]

PHSafe runs its two passes (US, then Puerto Rico: ``production_2020/{us,pr}``, persons split by
2020 population, as :mod:`national` synthesizes them); the floor is then the parse of both
person files, and the goal the two runs' sum. The input is kept with ``--keep`` (reused by the
next call with the same persons), the runs' folders are always deleted; check ``df -h`` first:
a national SafeTab-P text input takes 26 GB, its run folder about half as much again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from national import PH_CONFIGS, STP_SPECS, TreeSampler  # noqa: E402

GOALS = {"safetab-p": "run ≤ 2× the floor", "phsafe": "US + PR ≤ 300 s"}
STAGE_LINE = re.compile(r"^(\S+ \S+) INFO das\.curator: stage (\S+): ([\d.]+) s, ([\d.]+) CPU-s")


def _load() -> float:
    return os.getloadavg()[0]


def _person_file(data: Path, product: str) -> Path:
    stem = "person-records" if product == "safetab-p" else "persons"
    found = sorted(p for p in data.iterdir() if p.stem == stem)
    if len(found) != 1:
        raise SystemExit(f"{data}: expected one {stem} file, found {found}")
    return found[0]


def floor(path: Path) -> dict[str, Any]:
    """One streaming pyarrow parse of ``path`` with pyarrow's defaults, in a fresh process."""
    code = (
        "import sys, time, resource\n"
        "import pyarrow.csv as c, pyarrow.parquet as pq\n"
        "p = sys.argv[1]; rows = 0; t = time.perf_counter()\n"
        "if p.endswith('.parquet'):\n"
        "    batches = pq.ParquetFile(p).iter_batches()\n"
        "else:\n"
        "    delimiter = '|' if p.endswith('.txt') else ','\n"
        "    batches = c.open_csv(p, parse_options=c.ParseOptions(delimiter=delimiter))\n"
        "for batch in batches:\n"
        "    rows += batch.num_rows\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(rows, wall, u.ru_utime + u.ru_stime)\n"
    )
    load = _load()
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    rows, wall, cpu = done.stdout.split()
    return {"rows": int(rows), "wall_s": float(wall), "cpu_s": float(cpu), "load": load}


def das_run(
    product: str, config: Path, data: Path, folder: Path, checkout: Path = REPO
) -> dict[str, Any]:
    """``das run`` as typed, in a state folder and ledger of its own under ``folder``."""
    folder.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("DAS_")}
    env.update(DAS_STATE_DIR=str(folder / "state"), DAS_LEDGER_DIR=str(folder / "ledger"))
    command = [
        str(checkout / ".venv" / "bin" / "das"), "run", product, "--config", str(config),
        "--data", str(data), "--output", str(folder / "releases" / "out"), "--run-id", "bench",
    ]  # fmt: skip
    load = _load()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    with (folder / "console.txt").open("w") as console:
        process = subprocess.Popen(
            command, cwd=checkout, env=env, stdout=console, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        sampler = TreeSampler(process.pid)
        sampler.start()
        code = process.wait()
    ended = time.time()
    sampler.stopped.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    log = folder / "state" / "runs" / "bench" / "run.log"
    stages = {}
    for line in log.read_text().splitlines() if log.is_file() else []:
        if hit := STAGE_LINE.search(line):
            ended_at = dt.datetime.fromisoformat(hit.group(1)).timestamp()
            wall = float(hit.group(3))
            stages[hit.group(2)] = {
                "wall_s": wall,
                "cpu_s": float(hit.group(4)),
                "peak_bytes": sampler.peak(ended_at - wall, ended_at),
                "peak_by_process": sampler.composition(ended_at - wall, ended_at),
            }
    if code != 0:
        tail = (folder / "console.txt").read_text().splitlines()[-5:]
        raise SystemExit(f"das run {product} failed ({code}):\n" + "\n".join(tail))
    if not stages:  # a checkout from before the run log had them: the audit's wall times
        timings = json.loads((folder / "releases" / "out" / "audit.json").read_text())["timings"]
        stages = {name: {"wall_s": seconds, "cpu_s": None} for name, seconds in timings.items()}
    return {
        "wall_s": ended - started,
        "cpu_s": cpu,
        "peak_bytes": sampler.peak(started, ended),
        "peak_by_process": sampler.composition(started, ended),
        "load": load,
        "load_end": _load(),
        "stages": stages,
        "before_first_stage_s": (ended - started) - sum(s["wall_s"] for s in stages.values()),
    }


def inputs(args: argparse.Namespace) -> list[tuple[str, Path, Path]]:
    """(pass name, config, data folder) of each run."""
    if args.data is not None:
        data = args.data.resolve()
        return [("", (args.config or data / "config.json").resolve(), data)]
    from das.synth import generate_phsafe, generate_safetab_p
    from das.synth.states import STATES

    scratch = args.scratch.resolve()
    folder = scratch / f"{args.product}-{args.persons}-{args.format}"
    if args.product == "safetab-p":
        passes = {"": (args.persons, None)}
    else:
        pr = STATES["72"].population_thousands
        share = pr / sum(s.population_thousands for s in STATES.values())
        pr_persons = round(args.persons * share)
        passes = {"US": (args.persons - pr_persons, PH_CONFIGS["US"]),
                  "PR": (pr_persons, PH_CONFIGS["PR"])}  # fmt: skip
    runs = []
    for name, (persons, config) in passes.items():
        data = folder / name.lower() if name else folder
        if not (data / "COMPLETE").is_file():
            shutil.rmtree(data, ignore_errors=True)
            print(f"synthesizing {persons:,} persons into {data} ...", flush=True)
            if args.product == "safetab-p":
                generate_safetab_p(data, persons, 2026, STP_SPECS, args.format)
            else:
                generate_phsafe(data, persons, 2026, config, args.format)
            (data / "COMPLETE").write_text("synthesized by benchmarks/das_run.py\n")
        runs.append((name, data / "config.json", data))
    return runs


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--product", choices=("safetab-p", "phsafe"), default="safetab-p")
    parser.add_argument("--persons", type=int, help="synthesize this many (with --scratch)")
    parser.add_argument("--format", choices=("text", "parquet"), default="text")
    parser.add_argument("--data", type=Path, help="an existing input folder instead")
    parser.add_argument("--config", type=Path, help="with --data: default DATA/config.json")
    parser.add_argument("--scratch", type=Path, default=REPO.parent / "scratch-national")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (median)")
    parser.add_argument("--keep", action="store_true", help="keep a synthesized input")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--checkout", type=Path, default=REPO,
        help="the checkout whose .venv/bin/das runs (default: this one; e.g. a copy of main)",
    )  # fmt: skip
    args = parser.parse_args()
    if (args.data is None) == (args.persons is None):
        parser.error("give --persons N (synthesized) or --data DIR")
    runs = inputs(args)
    work = args.scratch.resolve() / f"das-run-{os.getpid()}"
    results: dict[str, Any] = {"product": args.product, "repeat": args.repeat, "passes": {}}
    try:
        for name, config, data in runs:
            person_file = _person_file(data, args.product)
            floors, attempts = [], []
            for attempt in range(args.repeat):  # alternate, so both sides see the same hours
                floors.append(floor(person_file))
                folder = work / f"{name}{attempt}"
                attempts.append(das_run(args.product, config, data, folder, args.checkout))
                shutil.rmtree(work / f"{name}{attempt}", ignore_errors=True)
            results["passes"][name or args.product] = {
                "input_bytes": person_file.stat().st_size, "floors": floors, "runs": attempts,
            }  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.data is None and not args.keep:
            shutil.rmtree(args.scratch.resolve() / f"{args.product}-{args.persons}-{args.format}")
    report(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


def _held(figure: dict[str, Any]) -> str:
    """Who held the peak: `` (run 1.20, dask worker 0.90, prefect api 0.30 GiB)``."""
    parts = figure.get("peak_by_process") or {}
    held = ", ".join(f"{role} {size / 2**30:.2f}" for role, size in sorted(parts.items()))
    return f" ({held} GiB)" if held else ""


def report(results: dict[str, Any]) -> None:
    product = results["product"]
    print(f"\nbenchmarks/das_run.py {product}: median of {results['repeat']} "
          f"(goal: {GOALS[product]})")  # fmt: skip
    total_run = total_floor = 0.0
    for name, figures in results["passes"].items():
        floors, runs = figures["floors"], figures["runs"]
        floor_wall = _median([f["wall_s"] for f in floors])
        run_wall = _median([r["wall_s"] for r in runs])
        total_run += run_wall
        total_floor += floor_wall
        print(f"  {name}: person file {figures['input_bytes'] / 1e9:.2f} GB, "
              f"{floors[0]['rows']:,} rows")  # fmt: skip
        for label, items in (("floor (pyarrow parse)", floors), ("das run", runs)):
            for item in items:
                extra = (f", peak {item['peak_bytes'] / 2**30:.2f} GiB of the process tree"
                         f"{_held(item)}" if "peak_bytes" in item else "")  # fmt: skip
                print(f"    {label:<22} {item['wall_s']:8.1f} s  {item['cpu_s']:8.1f} CPU-s  "
                      f"load {item['load']:.1f}{extra}")  # fmt: skip
        print(f"    ratio (medians) {run_wall / floor_wall:.2f}× the floor")
        stages = runs[len(runs) // 2]["stages"]  # the median run's log
        before = runs[len(runs) // 2]["before_first_stage_s"]
        print(f"    stages of a run: before the first stage (start-up) {before:.1f} s")
        for stage, figure in stages.items():
            if figure["cpu_s"] is None:
                print(f"      {stage:<12} {figure['wall_s']:7.1f} s")
                continue
            cores = figure["cpu_s"] / figure["wall_s"] if figure["wall_s"] > 0 else 0.0
            print(f"      {stage:<12} {figure['wall_s']:7.1f} s {figure['cpu_s']:8.1f} CPU-s "
                  f"({cores:.2f} cores), peak {figure['peak_bytes'] / 2**30:.2f} GiB"
                  f"{_held(figure)}")  # fmt: skip
    if len(results["passes"]) > 1:
        print(f"  all passes: das run {total_run:.1f} s, floor {total_floor:.1f} s, "
              f"ratio {total_run / total_floor:.2f}×")  # fmt: skip


if __name__ == "__main__":
    main()
