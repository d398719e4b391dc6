"""Benchmark the PHSafe engine: read, truncate-and-join, measure and write N synthetic persons.

Inputs come from ``das synth phsafe`` (the demo config's states and budgets). The engine runs
in a fresh Python process so the reported peak RSS is that run's own; the temporary folder is
deleted afterwards. Usage::

    .venv/bin/python benchmarks/phsafe.py [--persons 1000000]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000])
    args = parser.parse_args()
    for persons in args.persons:
        figures = run_case(persons)
        print(
            f"{figures['persons']:>11,} persons: read {figures['read_s']:.1f} s, engine "
            f"{figures['engine_s']:.1f} s, write {figures['write_s']:.2f} s, total "
            f"{figures['total_s']:.1f} s, peak RSS {figures['peak'] / 2**20:.0f} MiB, "
            f"{figures['rows']:,} output rows"
        )


if __name__ == "__main__":
    main()
