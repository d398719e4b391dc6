"""Time `das validate` on synthetic inputs of 1 M and 10 M persons (both products).

    .venv/bin/python benchmarks/validate.py [--persons 1000000 10000000] [--products ...]

For each size and product: write a synthetic input folder (not timed), then validate it with
the engine only (every rule on every row) and with Great Expectations on its default sample
plus Data Docs, and print the times, rows per second and the process's peak memory (the
one-time import of great_expectations is timed separately). The inputs must validate
cleanly; the script stops if they do not.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from das.offline import configure_offline  # noqa: E402

configure_offline()

from das.resources import demo_specs  # noqa: E402
from das.synth import generate_phsafe, generate_safetab_p  # noqa: E402
from das.validation import validate_phsafe, validate_safetab_p  # noqa: E402

SAFETAB_P_SPECS = demo_specs("safetab_p")
PHSAFE_CONFIG = demo_specs("phsafe") / "config.json"


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def _run(product: str, persons: int, workdir: Path) -> None:
    folder = workdir / f"{product}-{persons}"
    started = time.perf_counter()
    if product == "safetab-p":
        generate_safetab_p(folder, persons, 2026, SAFETAB_P_SPECS)
        validate = validate_safetab_p
    else:
        generate_phsafe(folder, persons, 2026, PHSAFE_CONFIG)
        validate = validate_phsafe
    generated = time.perf_counter() - started
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e9
    for run_gx in (False, True):
        started = time.perf_counter()
        report = validate(folder / "config.json", folder, workdir / "report", run_gx=run_gx)
        seconds = time.perf_counter() - started
        if not report.ok:
            print("\n".join(report.summary_lines()))
            raise SystemExit(f"{product} {persons:,}: synthetic inputs did not validate")
        mode = "engine + GX sample + Data Docs" if run_gx else "engine only (every row)"
        print(
            f"{product:9s} {persons:>12,} persons ({size:.2f} GB, generated in {generated:.0f} s):"
            f" {mode:32s} {seconds:7.1f} s  {persons / seconds / 1e6:5.2f} M persons/s"
            f"  peak RSS {_peak_gib():.2f} GiB",
            flush=True,
        )
    shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument(
        "--products", nargs="+", choices=("safetab-p", "phsafe"), default=["safetab-p", "phsafe"]
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp folder")
    args = parser.parse_args()
    started = time.perf_counter()
    import great_expectations  # noqa: F401  (one-time import, kept out of the timings below)

    print(f"great_expectations import: {time.perf_counter() - started:.1f} s (once per process)")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="das-validate-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        for persons in args.persons:
            for product in args.products:
                _run(product, persons, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
