"""Benchmark PHSafe on N synthetic persons: the engine alone, and `das run phsafe` end to end.

Inputs come from ``das synth phsafe`` (the demo config's states and budgets: all 51 US states).
*Engine*: read, truncate-and-join, measure and write (no flow, no postprocessing). *End to
end*: the production command — validation (GX + cross-file checks), load, tables measured in
parallel on a local Dask cluster with the secure noise source, statistical postprocessing,
atomic writes, audit — including the temporary Prefect API it starts. Each runs in a fresh
Python process so the reported peak RSS is that run's own; the temporary folder is deleted
afterwards. Usage::

    .venv/bin/python benchmarks/phsafe.py [--persons 1000000 10000000] [--engine-only]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
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
            [sys.executable, "-m", "das", "synth", "phsafe", "--output", str(data),
             "--persons", str(persons), "--seed", "2026"],
            check=True, capture_output=True, cwd=REPO,
        )
        result = subprocess.run(
            [sys.executable, "-c", _CHILD, str(data), str(Path(scratch) / "out")],
            check=True, capture_output=True, text=True, cwd=REPO,
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


_END_TO_END = """
import json, resource, sys, time
from das.cli import main
started = time.perf_counter()
code = main(["run", "phsafe", "--config", sys.argv[1], "--data", sys.argv[2], "--output",
             sys.argv[3]])
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"code": code, "total_s": elapsed, "peak": peak}))
"""


def run_end_to_end(persons: int) -> dict[str, object]:
    """Synthesize ``persons`` records, run `das run phsafe` once in a child; figures + audit."""
    with tempfile.TemporaryDirectory(prefix="das-phsafe-e2e-") as scratch:
        data = Path(scratch) / "data"
        out = Path(scratch) / "out"
        subprocess.run(
            [sys.executable, "-m", "das", "synth", "phsafe", "--output", str(data),
             "--persons", str(persons), "--seed", "2026"],
            check=True, capture_output=True, cwd=REPO,
        )  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-c", _END_TO_END, str(data / "config.json"), str(data), str(out)],
            check=True, capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        audit = json.loads((out / "audit.json").read_text())
    figures["timings"] = audit["timings"]
    figures["flow_s"] = audit["seconds"]
    figures["status"] = audit["status"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--engine-only", action="store_true", help="skip the end-to-end run")
    args = parser.parse_args()
    for persons in args.persons:
        figures = run_case(persons)
        print(
            f"{figures['persons']:>11,} persons, engine: read {figures['read_s']:.1f} s, engine "
            f"{figures['engine_s']:.1f} s, write {figures['write_s']:.2f} s, total "
            f"{figures['total_s']:.1f} s, peak RSS {figures['peak'] / 2**20:.0f} MiB, "
            f"{figures['rows']:,} output rows"
        )
        if args.engine_only:
            continue
        e2e = run_end_to_end(persons)
        stages = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in e2e["timings"].items())
        print(
            f"{persons:>11,} persons, das run phsafe: {e2e['status']} in {e2e['total_s']:.1f} s "
            f"wall (flow {e2e['flow_s']:.1f} s: {stages}), peak RSS "
            f"{e2e['peak'] / 2**20:.0f} MiB"
        )


if __name__ == "__main__":
    main()
