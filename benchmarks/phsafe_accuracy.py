"""PHSafe accuracy on a seeded synthetic population with the 2020 production config.

Synthesizes N persons with ``das synth phsafe`` (states of the production US config), runs the
engine once with every budget ``Infinity`` (the exact tabulation) and ``--repeats`` times with
the production budgets (seeded noise), postprocesses each noisy release once per interval type
(``--interval``: equal-tailed, HPD or both, the default) and prints, pooled over the repeats:
per noisy table the share of cells within their 90% MOE; per interval type and count table the
90% credible-interval coverage (by cell kind and by the truth's size in noise standard
deviations); per average table the coverage of the exact ratio and the mean absolute error
(averages are equal-tailed whatever ``--interval`` says, so printed once); and wall times
(postprocessing per interval type). The data are synthetic, so aggregate figures may be
printed. ``--json`` writes ``{interval: figures}``. Usage::

    .venv/bin/python benchmarks/phsafe_accuracy.py [--persons 1000000] [--seed 2026]
        [--repeats 1] [--draws 4000] [--interval {equal-tailed,hpd,both}]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from das.io.phsafe import input_paths, read_geo, read_persons, read_units
from das.phsafe.engine import run_phsafe
from das.postprocess.accuracy import DERIVED_TABLES, AccuracyReport, Share, evaluate
from das.postprocess.counts import INTERVALS
from das.postprocess.phsafe import postprocess_phsafe
from das.privacy.rng import seeded_rng
from das.specs.config import load_phsafe_config

REPO = Path(__file__).resolve().parents[1]
PRODUCTION = Path("/work/shared/census_specs/phsafe/production_2020/us/config.json")
COUNT_KEYS = (
    "all",
    "basis",
    "subtotal",
    "total",
    "exact_0",
    "exact_lt_1sd",
    "exact_1_3sd",
    "exact_ge_3sd",
)


def exact_config(config_file: Path, target: Path) -> Path:
    """A copy of the config with every positive budget replaced by Infinity (no noise)."""
    raw = json.loads(config_file.read_text())
    raw["privacy_budget"] = {
        table: {query: (math.inf if budget > 0 else budget) for query, budget in queries.items()}
        for table, queries in raw["privacy_budget"].items()
    }
    target.write_text(json.dumps(raw, indent=1))
    return target


def _cell(s: Share) -> str:
    """``fraction (cells)``, or a dash for an empty category."""
    return f"{s.fraction:6.3f} ({s.cells:>6,})" if s.cells else f"{'—':>6} ({0:>6})"


def print_report(reports: dict[str, AccuracyReport], repeats: int) -> None:
    """Readable tables of the pooled figures: MOE and ratios once, counts per interval type."""
    report = next(iter(reports.values()))
    print(f"\nWithin 90% MOE (|noisy − exact| ≤ MOE), pooled over {repeats} draw(s):")
    for table, s in report.moe.items():
        note = (
            "  (derived; Gaussian MOE)"
            if table == "PH8_num"
            else ("  (derived)" if table in DERIVED_TABLES else "")
        )
        print(f"  {table:<10} {_cell(s)}{note}")
    print(f"  {'overall':<10} {_cell(report.moe_overall)}  (measured tables only)")
    header = "".join(f"{key:>17}" for key in COUNT_KEYS)
    for interval, by_interval in reports.items():
        print(f"\nCount tables, {interval} intervals: 90% CI coverage of the exact count")
        print(f"  {'table':<6}{header}")
        for table, by in by_interval.counts.items():
            print(f"  {table:<6}" + "".join(f"{_cell(by[key]):>17}" for key in COUNT_KEYS))
        pooled = {
            key: sum((by[key] for by in by_interval.counts.values()), Share(0, 0))
            for key in COUNT_KEYS
        }
        print(f"  {'all':<6}" + "".join(f"{_cell(pooled[key]):>17}" for key in COUNT_KEYS))
    print(
        "\nAverage tables (equal-tailed for every interval type): 90% CI coverage of the exact "
        "ratio (exact denominator ≥ 1), MAE"
    )
    print(f"  {'table':<6}" + "".join(f"{key:>17}" for key in ("all", "1", "2", "3", "MAE")))
    for table, figures in report.ratios.items():
        cells = "".join(f"{_cell(figures.coverage[key]):>17}" for key in ("all", "1", "2", "3"))
        print(f"  {table:<6}{cells}{figures.mean_abs_error:>17.3f}")
    print(f"  {'all':<6}{_cell(report.ratio_overall):>17}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=2026, help="population and noise seed")
    parser.add_argument("--repeats", type=int, default=1, help="noise draws to pool")
    parser.add_argument("--draws", type=int, default=4000, help="postprocessing draws")
    parser.add_argument(
        "--interval",
        choices=[*INTERVALS, "both"],
        default="both",
        help="count-table credible interval(s) to measure",
    )
    parser.add_argument("--json", type=Path, help="also write the pooled figures here")
    args = parser.parse_args()
    intervals = INTERVALS if args.interval == "both" else (args.interval,)
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="das-phsafe-accuracy-") as scratch:
        folder = Path(scratch)
        config_file = folder / "config.json"
        shutil.copyfile(PRODUCTION, config_file)
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "das",
                "synth",
                "phsafe",
                "--output",
                str(folder / "data"),
                "--persons",
                str(args.persons),
                "--seed",
                str(args.seed),
                "--config",
                str(config_file),
            ],
            check=True,
            capture_output=True,
            cwd=REPO,
        )
        times["synth"] = time.perf_counter() - started
        started = time.perf_counter()
        paths = input_paths(folder / "data")
        inputs = (
            read_persons(paths["persons"]),
            read_units(paths["units"]),
            read_geo(paths["geo"]),
        )
        times["read"] = time.perf_counter() - started
        config = load_phsafe_config(config_file)
        exact_file = exact_config(config_file, folder / "exact.json")
        started = time.perf_counter()
        exact = run_phsafe(load_phsafe_config(exact_file), *inputs).tables
        times["engine exact"] = time.perf_counter() - started
    reports = {interval: AccuracyReport() for interval in intervals}
    for repeat in range(args.repeats):
        noise_seed = args.seed + 1 + repeat
        started = time.perf_counter()
        noisy = run_phsafe(config, *inputs, rng=seeded_rng(noise_seed)).tables
        times["engine noisy"] = times.get("engine noisy", 0.0) + time.perf_counter() - started
        for interval in intervals:
            name = f"postprocess {interval}"
            started = time.perf_counter()
            estimates = postprocess_phsafe(
                noisy, config, seed=noise_seed, n_draws=args.draws, interval=interval
            )
            times[name] = times.get(name, 0.0) + time.perf_counter() - started
            started = time.perf_counter()
            reports[interval] = reports[interval] + evaluate(exact, noisy, estimates)
            name = "evaluate (all intervals)"
            times[name] = times.get(name, 0.0) + time.perf_counter() - started
    print(
        f"{len(inputs[0]):,} synthetic persons, seed {args.seed}, {args.repeats} noise draw(s), "
        f"config {PRODUCTION}"
    )
    print_report(reports, args.repeats)
    per_draw = {"engine noisy", "evaluate (all intervals)"}
    per_draw |= {f"postprocess {interval}" for interval in intervals}
    print(
        "\nWall times: "
        + ", ".join(
            f"{name} {seconds / (args.repeats if name in per_draw else 1):.1f} s"
            + (" per draw" if name in per_draw else "")
            for name, seconds in times.items()
        )
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps({name: r.to_dict() for name, r in reports.items()}, indent=1)
        )


if __name__ == "__main__":
    main()
