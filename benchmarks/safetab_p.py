"""Benchmark the SafeTab-P engine: read, measure, postprocess and write N synthetic persons.

Inputs come from ``das synth safetab-p`` with the 2020 spec files (their config: budgets,
states). The engine runs in a fresh Python process so the reported peak RSS is that run's own;
noise comes from a seeded source (a benchmark, not a release). The temporary folder is deleted
afterwards. Usage::

    .venv/bin/python benchmarks/safetab_p.py [--persons 1000000] [--specs DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPECS = REPO.parent / "shared" / "census_specs" / "safetab_p" / "production_2020"

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from das.io.safetab_p import read_grf_c, read_person_records
from das.privacy.rng import seeded_rng
from das.safetab_p.engine import run_safetab_p, write_release
from das.specs.config import load_safetab_p_config
from das.specs.race_specs import load_race_specs
data, out = Path(sys.argv[1]), Path(sys.argv[2])
started = time.perf_counter()
persons = read_person_records(data / "person-records.txt")
grfc = read_grf_c(data / "GRF-C.txt")
config, specs = load_safetab_p_config(data / "config.json"), load_race_specs(data)
read = time.perf_counter()
release = run_safetab_p(config, specs, persons, grfc, seeded_rng(2026))
ran = time.perf_counter()
rows = write_release(release, out)
done = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"persons": len(persons), "blocks": len(grfc), "read_s": read - started,
                  "engine_s": ran - read, "write_s": done - ran, "total_s": done - started,
                  "peak": peak, "t1": rows["t1"], "t2": rows["t2"]}))
"""


def run_case(persons: int, specs: Path) -> dict[str, float]:
    """Synthesize ``persons`` records, run the engine once in a child process, return figures."""
    with tempfile.TemporaryDirectory(prefix="das-safetab-bench-") as scratch:
        data = Path(scratch) / "data"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "das",
                "synth",
                "safetab-p",
                "--output",
                str(data),
                "--persons",
                str(persons),
                "--seed",
                "2026",
                "--specs",
                str(specs),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS)
    args = parser.parse_args()
    for persons in args.persons:
        figures = run_case(persons, args.specs)
        print(
            f"{figures['persons']:>11,} persons, {figures['blocks']:,} blocks: read "
            f"{figures['read_s']:.1f} s, engine {figures['engine_s']:.1f} s, write "
            f"{figures['write_s']:.1f} s, total {figures['total_s']:.1f} s, peak RSS "
            f"{figures['peak'] / 2**20:.0f} MiB, {figures['t1']:,} T1 + {figures['t2']:,} T2 rows"
        )


if __name__ == "__main__":
    main()
