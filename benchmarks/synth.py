"""Benchmark `das synth`: generation time, peak memory and disk for 1 M and 10 M persons.

Each case runs in a fresh Python process (so peak RSS is that run's own), writes into a
temporary folder that is deleted afterwards, and prints one line. Usage::

    .venv/bin/python benchmarks/synth.py [--persons 1000000 10000000] [--format text]

The per-100 M figures extrapolate the largest case linearly (generation is chunked, so time and
disk grow linearly and memory stays flat).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from das.resources import demo_specs
from das.synth import generate_phsafe, generate_safetab_p
product, persons, file_format = sys.argv[1], int(sys.argv[2]), sys.argv[4]
folder = Path(sys.argv[3])
started = time.perf_counter()
if product == "safetab-p":
    generate_safetab_p(folder, persons, 2026, demo_specs("safetab_p"), file_format)
else:
    generate_phsafe(folder, persons, 2026, demo_specs("phsafe") / "config.json", file_format)
seconds = time.perf_counter() - started
disk = sum(p.stat().st_size for p in folder.iterdir())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "disk": disk, "peak": peak}))
"""


def run_case(product: str, persons: int, file_format: str) -> dict[str, float]:
    """Generate once in a child process; return seconds, bytes on disk and peak RSS bytes."""
    with tempfile.TemporaryDirectory(prefix="das-synth-bench-") as scratch:
        folder = Path(scratch) / "out"
        code = f"from pathlib import Path\nREPO = Path({str(REPO)!r})\n" + _CHILD
        result = subprocess.run(
            [sys.executable, "-c", code, product, str(persons), str(folder), file_format],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        shutil.rmtree(folder, ignore_errors=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--format", choices=("text", "parquet"), default="text")
    parser.add_argument("--products", nargs="+", default=["safetab-p", "phsafe"])
    args = parser.parse_args()
    for product in args.products:
        last: tuple[int, dict[str, float]] | None = None
        for persons in args.persons:
            figures = run_case(product, persons, args.format)
            last = (persons, figures)
            print(
                f"{product:9s} {persons:>12,} persons: {figures['seconds']:7.1f} s, "
                f"peak {figures['peak'] / 2**20:7.0f} MiB, disk {figures['disk'] / 1e9:6.2f} GB "
                f"({persons / figures['seconds']:,.0f} persons/s)",
                flush=True,
            )
        if last is not None:
            persons, figures = last
            factor = 100_000_000 / persons
            minutes = figures["seconds"] * factor / 60
            gigabytes = figures["disk"] * factor / 1e9
            print(
                f"{product:9s} per 100 M persons (extrapolated): "
                f"{minutes:.0f} min, {gigabytes:.1f} GB",
                flush=True,
            )


if __name__ == "__main__":
    main()
