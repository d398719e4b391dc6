"""Benchmark the SafeTab-P engine: read, measure, postprocess and write N synthetic persons.

Inputs come from ``das synth safetab-p`` with the 2020 spec files (their config: budgets,
states). The engine runs in a fresh Python process so the reported peak RSS is that run's own;
noise comes from a seeded source (a benchmark, not a release). The temporary folder is deleted
afterwards. Usage::

    .venv/bin/python benchmarks/safetab_p.py [--persons 1000000 ...] [--specs DIR]
    .venv/bin/python benchmarks/safetab_p.py --data DIR   # an existing ``das synth`` folder

Besides wall time and peak RSS it prints the population groups measured per level (every
group of the key set, entities × iterations, is measured whether empty or not).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPECS = REPO.parent / "shared" / "census_specs" / "safetab_p" / "production_2020"

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from das.io.safetab_p import read_grf_c, read_person_records
from das.privacy.rng import seeded_rng
from das.safetab_p.engine import run_safetab_p, write_release
from das.safetab_p.iterations import iteration_filter
from das.safetab_p.keys import geography_entities, pass_blocks
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
groups = {}
for level in config.tabulated_levels():
    geography = level.geography
    blocks = pass_blocks(grfc, config, geography.pass_name)
    n_iterations = iteration_filter(
        specs, level.iteration_level, geography.is_state_or_above
    ).size
    groups[str(level)] = geography_entities(blocks, geography).size * n_iterations
print(json.dumps({"groups": groups,
                  "persons": len(persons), "blocks": len(grfc), "read_s": read - started,
                  "engine_s": ran - read, "write_s": done - ran, "total_s": done - started,
                  "peak": peak, "t1": rows["t1"], "t2": rows["t2"]}))
"""


def run_engine(data: Path, scratch: Path) -> dict[str, Any]:
    """Run the engine once on the input folder ``data`` in a child process, return figures."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data), str(scratch / "out")],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_case(persons: int, specs: Path) -> dict[str, Any]:
    """Synthesize ``persons`` records into a temporary folder and benchmark the engine on them."""
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
        return run_engine(data, Path(scratch))


def report(figures: dict[str, Any]) -> None:
    """Print one run's figures: timings, peak RSS, rows written, groups measured per level."""
    print(
        f"{figures['persons']:>11,} persons, {figures['blocks']:,} blocks: read "
        f"{figures['read_s']:.1f} s, engine {figures['engine_s']:.1f} s, write "
        f"{figures['write_s']:.1f} s, total {figures['total_s']:.1f} s, peak RSS "
        f"{figures['peak'] / 2**20:.0f} MiB, {figures['t1']:,} T1 + {figures['t2']:,} T2 rows"
    )
    groups = figures["groups"]
    print(f"  population groups measured: {sum(groups.values()):,}")
    for level, count in groups.items():
        print(f"    {level:<16} {count:>12,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS)
    parser.add_argument(
        "--data", type=Path, help="benchmark this existing input folder instead of synthesizing"
    )
    args = parser.parse_args()
    if args.data is not None:
        with tempfile.TemporaryDirectory(prefix="das-safetab-bench-") as scratch:
            report(run_engine(args.data, Path(scratch)))
        return
    for persons in args.persons:
        report(run_case(persons, args.specs))


if __name__ == "__main__":
    main()
