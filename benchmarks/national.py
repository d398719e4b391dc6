"""National scale on one machine: validation + the streamed engine end to end, per stage.

Synthesizes (or reuses) an input under ``--scratch`` with the 2020 production spec files and
configs, then runs, in a child process, validation (GX suites on a sample + every row through
the engine checks and the cross-file checks) and the bounded-memory engine path, the inputs
read once as a release run reads them (validation's read also makes the engine's spill):

* ``safetab-p``: GRF-C maps and person spill per state (validation's read) → true totals per
  state → stage 1 / total-only / stage 2 per level (secure noise, persisted per level: the
  production noise store) → cells of the groups with a breakdown → T1/T2 streamed, atomic;
* ``phsafe``: the US pass (51 states, ``production_2020/us``) and the Puerto Rico pass
  (``production_2020/pr``) on inputs of their own (persons split by 2020 population): spill by
  MAFID bucket (validation's read) → counts per bucket → every query drawn once (persisted
  per table) → derived tables → statistical postprocessing → tables and estimates written.

A sampler thread in this (parent) process reads the resident memory of the child and all its
descendants (psutil) every 0.2 s; per stage it prints wall time, the peak of the whole process
tree, the 1-minute load average at the end of the stage (other jobs share the 2 cores), and
the stage's figures (rows in and out, groups measured, draws per second, output rows and
bytes). Synthetic data are not confidential, so the benchmark prints record counts (the engine
itself never logs them). Usage::

    .venv/bin/python benchmarks/national.py --persons 10000000 [--product safetab-p|phsafe]
        [--format text|parquet] [--scratch DIR] [--keep] [--json FILE]

The input folder is kept for reuse only with ``--keep``; the run folder (spills, noise,
outputs) is always deleted at the end. Check ``df -h`` first: a national text input takes
26 GB (SafeTab-P) or 19 GB (PHSafe), the run folder about as much again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "census_specs"
STP_SPECS = SHARED / "safetab_p" / "production_2020"
PH_CONFIGS = {
    "US": SHARED / "phsafe" / "production_2020" / "us" / "config.json",
    "PR": SHARED / "phsafe" / "production_2020" / "pr" / "config.json",
}
SEED = 2026
SAMPLE_SECONDS = 0.2


# ---------------------------------------------------------------------------- child side


class Events:
    """Stage events written by the child as JSON lines (read by the parent afterwards)."""

    def __init__(self, path: Path) -> None:
        self.handle = path.open("a", encoding="utf-8")

    def write(self, **event: Any) -> None:
        self.handle.write(json.dumps(event) + "\n")
        self.handle.flush()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[dict[str, Any]]:
        figures: dict[str, Any] = {}
        self.write(stage=name, event="start", t=time.time())
        yield figures
        self.write(stage=name, event="end", t=time.time(), load=os.getloadavg()[0], **figures)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _inputs_ready(folder: Path) -> bool:
    return (folder / "COMPLETE").is_file()


def _synthesize(events: Events, name: str, folder: Path, generate, persons: int, *args) -> None:
    if _inputs_ready(folder):
        return
    if folder.exists():
        shutil.rmtree(folder)
    with events.stage(name) as figures:
        generate(folder, persons, SEED, *args)
        figures.update(rows_out=persons, bytes_out=_size(folder))
    (folder / "COMPLETE").write_text("synthesized by benchmarks/national.py\n")


def child_safetab_p(args: argparse.Namespace, events: Events) -> None:
    from das.io.atomic import atomic_output_dir
    from das.io.safetab_p import grf_c_path, person_records_path
    from das.privacy.accounting import compose
    from das.runs.folder import RunFolder
    from das.runs.noise_store import NoiseStore, secure_streams
    from das.safetab_p import spill as sp
    from das.safetab_p import streamed as st
    from das.specs.config import load_safetab_p_config
    from das.specs.race_specs import load_race_specs
    from das.synth import generate_safetab_p
    from das.validation import validate_safetab_p

    data, run = Path(args.data), Path(args.run)
    _synthesize(events, "synth", data, generate_safetab_p, args.persons, STP_SPECS, args.format)
    config = load_safetab_p_config(data / "config.json")
    specs = load_race_specs(data)
    persons_path, grf_path = person_records_path(data), grf_c_path(data)
    events.write(inputs={"person-records": _size(persons_path), "GRF-C": _size(grf_path)})
    work = sp.WorkFolder(run / "work")
    # one read, as a release run reads: validation's read also prepares the geography and
    # spills the persons (das.safetab_p.spill.OnePass)
    with events.stage("validate + geography + spill") as figures:
        one_pass = sp.OnePass(config, specs, work)
        report = validate_safetab_p(
            data / "config.json", data, run / "validation", taps=one_pass.taps()
        )
        if not report.ok or one_pass.outcome(report) is None:
            raise SystemExit("validation failed: " + "; ".join(report.summary_lines()))
        spill_bytes = _size(work.root / "spill")  # 21 bytes per record spilled
        figures.update(rows_in=sum(f.rows for f in report.files), rows_out=spill_bytes // 21,
                       bytes_out=spill_bytes)  # fmt: skip
    states = st.tabulated_states(work)
    with events.stage("totals") as figures:
        for state in states:
            st.count_state_totals(config, specs, work, state)
        st.combine_totals(config, specs, work)
        figures.update(states=len(states))
    folder = RunFolder(run / "release", "benchmark").create()
    plan = st.plan_by_partition(config, specs)
    with events.stage("measure") as figures:
        groups = draws = 0
        levels = {}
        for pass_name in sp.PASSES:
            geography = sp.load_geography(work, pass_name)
            if geography is None:
                continue
            for space in st.level_spaces(config, specs, geography):
                store = NoiseStore.open(folder, space.partition, config.privacy_defn.value,
                                        compose(plan[space.partition].values()),
                                        secure_streams())  # fmt: skip
                summary = st.measure_level_streamed(
                    config, specs, work, space.partition, store, store.accountant
                )
                groups += summary.groups
                draws += sum(summary.draws.values())
                levels[space.partition] = summary.groups
        figures.update(groups=groups, draws=draws, levels=levels)
    with events.stage("cells"):
        for state in states:
            st.count_state_cells(config, specs, work, state)
        st.combine_cells(config, specs, work)
    with events.stage("write") as figures:
        output = run / "release" / "output"
        with atomic_output_dir(output) as staging:
            rows = st.write_release_tables(config, specs, work, staging)
        figures.update(rows_out=sum(rows.values()), tables=rows, bytes_out=_size(output))
    events.write(noise_bytes=_size(folder.noise_dir), work_bytes=_size(work.root))


def child_phsafe(args: argparse.Namespace, events: Events) -> None:
    from das.io.atomic import atomic_output_dir
    from das.io.phsafe import input_paths
    from das.io.writers import write_pipe_table
    from das.phsafe.engine import write_tables
    from das.phsafe.plan import plan_phsafe
    from das.phsafe.streamed import (
        OnePass,
        PHSafeWork,
        count_bucket,
        default_buckets,
        measure_streamed,
    )
    from das.postprocess.phsafe import estimates_name, format_estimates, postprocess_phsafe
    from das.privacy.accounting import compose
    from das.runs.folder import RunFolder
    from das.runs.noise_store import NoiseStore, secure_streams
    from das.specs.config import load_phsafe_config
    from das.synth import generate_phsafe
    from das.synth.states import STATES

    run = Path(args.run)
    share = {"PR": STATES["72"].population_thousands}
    share["US"] = sum(s.population_thousands for s in STATES.values()) - share["PR"]
    persons = {
        "PR": round(args.persons * share["PR"] / (share["US"] + share["PR"])),
    }
    persons["US"] = args.persons - persons["PR"]
    folders = {name: Path(args.data) / name.lower() for name in ("US", "PR")}
    for name, folder in folders.items():
        _synthesize(events, f"synth {name}", folder, generate_phsafe, persons[name],
                    PH_CONFIGS[name], args.format)  # fmt: skip
        events.write(inputs={f"{name} {k}": _size(p) for k, p in input_paths(folder).items()})
    from das.validation import validate_phsafe

    for name, folder in folders.items():
        config = load_phsafe_config(PH_CONFIGS[name])
        work = PHSafeWork(run / f"work-{name}")
        # one read, as a release run reads: validation's read also spills the records by
        # household bucket (das.phsafe.streamed.OnePass)
        with events.stage(f"validate + spill {name}") as figures:
            one_pass = OnePass(work, default_buckets(input_paths(folder)["persons"]))
            report = validate_phsafe(
                PH_CONFIGS[name], folder, run / f"validation-{name}", taps=one_pass.taps()
            )
            spilled = one_pass.outcome(report)
            if spilled is None:
                raise SystemExit("validation failed: " + "; ".join(report.summary_lines()))
            figures.update(rows_in=sum(f.rows for f in report.files), buckets=spilled.buckets,
                           bytes_out=_size(work.root / "buckets"))  # fmt: skip
        with events.stage(f"count {name}") as figures:
            for bucket in range(spilled.buckets):
                count_bucket(config, work, bucket)
        folder_run = RunFolder(run / f"release-{name}", "benchmark").create()
        plan = plan_phsafe(config)

        def noise_for_table(table: str, config=config, folder_run=folder_run, plan=plan):
            measurements = [m for m in plan if m.metadata["table"] == table]
            store = NoiseStore.open(folder_run, f"{config.pass_name}/{table}",
                                    config.privacy_defn.value, compose(measurements),
                                    secure_streams())  # fmt: skip
            return store, store.accountant

        with events.stage(f"measure {name}") as figures:
            release = measure_streamed(config, work, noise_for_table=noise_for_table)
            figures.update(queries=len(release.measurements),
                           cells=sum(len(f) for f in release.tables.values()))  # fmt: skip
        with events.stage(f"postprocess {name}"):
            estimates = postprocess_phsafe(release.tables, config, seed=SEED)
        with events.stage(f"write {name}") as figures:
            output = run / f"release-{name}" / "output"
            with atomic_output_dir(output) as staging:
                rows = write_tables(release, staging)
                for table, frame in estimates.items():
                    target = staging / estimates_name(table)
                    target.mkdir()
                    formatted = format_estimates(frame)
                    rows[estimates_name(table)] = write_pipe_table(
                        formatted, target / f"{estimates_name(table)}.txt",
                        [str(c) for c in formatted.columns],
                    )  # fmt: skip
            figures.update(rows_out=sum(rows.values()), bytes_out=_size(output))


def child_main(args: argparse.Namespace) -> None:
    events = Events(Path(args.events))
    if args.product == "safetab-p":
        child_safetab_p(args, events)
    else:
        child_phsafe(args, events)


# ---------------------------------------------------------------------------- parent side


class TreeSampler(threading.Thread):
    """Samples the resident memory of a process and all its descendants (psutil), and which
    of them holds it: :meth:`composition` names the processes at the peak (the run's own
    process, the Prefect API, the Dask workers), so a peak says where to look."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        import psutil

        self.root = psutil.Process(pid)
        self.samples: list[tuple[float, int]] = []
        self.parts: list[dict[str, int]] = []  # role -> resident bytes, one per sample
        self.roles: dict[int, str] = {}
        self.stopped = threading.Event()

    def _role(self, process: Any) -> str:
        import psutil

        if process.pid not in self.roles:
            try:
                command = " ".join(process.cmdline())
            except psutil.Error:
                command = ""
            if process.pid == self.root.pid:
                role = "run"
            elif "spawn_main" in command or "distributed" in command:
                role = "dask worker"
            elif "prefect" in command or "uvicorn" in command:
                role = "prefect api"
            else:
                role = "other"
            self.roles[process.pid] = role
        return self.roles[process.pid]

    def rss_by_role(self) -> dict[str, int]:
        """Resident bytes of the tree now, by role (a role's processes summed)."""
        import psutil

        parts: dict[str, int] = {}
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return parts
        for process in processes:
            with contextlib.suppress(psutil.Error):
                role = self._role(process)
                parts[role] = parts.get(role, 0) + process.memory_info().rss
        return parts

    def total_rss(self) -> int:
        return sum(self.rss_by_role().values())

    def run(self) -> None:
        while not self.stopped.is_set():
            parts = self.rss_by_role()
            self.samples.append((time.time(), sum(parts.values())))
            self.parts.append(parts)
            self.stopped.wait(SAMPLE_SECONDS)

    def _inside(self, start: float, end: float) -> list[int]:
        return [i for i, (t, _) in enumerate(self.samples) if start <= t <= end + SAMPLE_SECONDS]

    def peak(self, start: float, end: float) -> int:
        return max((self.samples[i][1] for i in self._inside(start, end)), default=0)

    def composition(self, start: float, end: float) -> dict[str, int]:
        """Resident bytes by role at the peak of the tree between ``start`` and ``end``."""
        inside = self._inside(start, end)
        if not inside:
            return {}
        return dict(self.parts[max(inside, key=lambda i: self.samples[i][1])])


def _gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def _uptime() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def summarize(events_path: Path, sampler: TreeSampler, started: float, ended: float) -> dict:
    """Per-stage figures from the child's events and the parent's memory samples."""
    events = [json.loads(line) for line in events_path.read_text().splitlines() if line]
    starts = {e["stage"]: e["t"] for e in events if e.get("event") == "start"}
    stages, inputs, extra = [], {}, {}
    for event in events:
        if event.get("event") == "end":
            start = starts[event["stage"]]
            figures = {k: v for k, v in event.items() if k not in ("stage", "event", "t")}
            stages.append({"stage": event["stage"], "seconds": event["t"] - start,
                           "peak_bytes": sampler.peak(start, event["t"]), **figures})  # fmt: skip
        elif "inputs" in event:
            inputs.update(event["inputs"])
        elif "event" not in event:
            extra.update(event)
    return {
        "stages": stages,
        "inputs": inputs,
        "wall_seconds": ended - started,
        "peak_bytes": sampler.peak(started, ended),
        **extra,
    }


def report(args: argparse.Namespace, result: dict) -> None:
    print(f"\nbenchmarks/national.py {args.product}: {args.persons:,} persons, {args.format}, "
          f"load at end {_uptime()}")  # fmt: skip
    for name, size in result["inputs"].items():
        print(f"  input {name}: {size / 1e9:.2f} GB")
    print(f"  {'stage':<16}{'seconds':>9}{'peak tree':>12}{'load':>6}  figures")
    engine_seconds = 0.0
    for stage in result["stages"]:
        figures = {k: v for k, v in stage.items()
                   if k not in ("stage", "seconds", "peak_bytes", "load", "levels")}  # fmt: skip
        if "draws" in stage and stage["seconds"] > 0:
            figures["draws_per_s"] = round(stage["draws"] / stage["seconds"])
        if not stage["stage"].startswith("synth"):
            engine_seconds += stage["seconds"]
        print(f"  {stage['stage']:<16}{stage['seconds']:>9.1f}{_gib(stage['peak_bytes']):>12}"
              f"{stage.get('load', 0):>6.2f}  {json.dumps(figures)}")  # fmt: skip
    validation = sum(s["seconds"] for s in result["stages"] if s["stage"].startswith("validate"))
    print(f"  end to end (validation + engine): {engine_seconds / 60:.1f} min, validation "
          f"{validation / max(engine_seconds, 1e-9):.0%} of it; peak of the process tree "
          f"{_gib(result['peak_bytes'])}")  # fmt: skip
    for key in ("noise_bytes", "work_bytes"):
        if key in result:
            print(f"  {key.replace('_', ' ')}: {result[key] / 1e9:.2f} GB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, required=True)
    parser.add_argument("--product", choices=("safetab-p", "phsafe"), default="safetab-p")
    parser.add_argument("--format", choices=("text", "parquet"), default="text")
    parser.add_argument("--scratch", type=Path, default=REPO.parent / "scratch-national")
    parser.add_argument("--keep", action="store_true", help="keep the input for reuse")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--events", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    scratch = args.scratch.resolve()
    data = scratch / f"{args.product}-{args.persons}-{args.format}"
    run = scratch / f"run-{args.product}-{args.persons}-{os.getpid()}"
    run.mkdir(parents=True)
    events = run / "events.jsonl"
    command = [sys.executable, str(Path(__file__).resolve()), "--child",
               "--product", args.product, "--persons", str(args.persons),
               "--format", args.format, "--data", str(data), "--run", str(run),
               "--events", str(events)]  # fmt: skip
    print(f"df before: {shutil.disk_usage(scratch).free / 1e9:.0f} GB free; load {_uptime()}")
    started = time.time()
    child = subprocess.Popen(command, cwd=REPO)
    sampler = TreeSampler(child.pid)
    sampler.start()
    code = child.wait()
    ended = time.time()
    sampler.stopped.set()
    sampler.join()
    result = summarize(events, sampler, started, ended)
    result.update(product=args.product, persons=args.persons, format=args.format,
                  exit_code=code, load_end=_uptime())  # fmt: skip
    report(args, result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    shutil.rmtree(run, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(data, ignore_errors=True)
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
