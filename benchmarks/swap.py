"""Benchmark permutation swapping (Algorithm 5.1) on a large synthetic unit file.

Usage::

    .venv/bin/python benchmarks/swap.py                       # 1,000,000 households, in memory
    .venv/bin/python benchmarks/swap.py --end-to-end          # also files: read, swap, write
    .venv/bin/python benchmarks/swap.py --households 5000000 --rate 0.5

The in-memory part times the engine steps on a frame of zero-padded text codes (what the
reader yields): Algorithm 5.1, b, the exact invariant check and the MAPE. ``--end-to-end``
writes ``units.csv`` / ``geo.csv`` to a temporary folder and times :func:`run_swap` as the
command line runs it. Randomness is seeded (a benchmark, not a release).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from das.privacy.rng import seeded_rng
from das.swapping.analysis import (
    check_invariants,
    largest_stratum,
    mean_absolute_percentage_error,
)
from das.swapping.permutation import SwapScheme, parse_rate, permutation_swap
from das.swapping.run import SwapRequest, run_swap


def _codes(values: np.ndarray, width: int) -> pd.Series:
    """Zero-padded text codes without a Python loop (via Arrow's string kernels)."""
    text = pa.compute.utf8_lpad(pa.array(values).cast(pa.string()), width=width, padding="0")
    return pd.Series(text.to_pandas(types_mapper=None), dtype="str")


def synthetic_units(n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """units and geo frames of n households in 10 states × ~30 counties × tracts × blocks."""
    rng = np.random.default_rng(seed)
    state = rng.integers(1, 11, n)
    county = rng.integers(1, 31, n) * 2 + 1
    tract = rng.integers(100, 140, n) * 100
    block = rng.integers(1000, 1030, n)
    size = np.minimum(rng.geometric(0.4, n), 7)
    mafid = np.arange(100_000_001, 100_000_001 + n)
    units = pd.DataFrame(
        {
            "RTYPE": "2",
            "MAFID": _codes(mafid, 9),
            "FINAL_POP": _codes(size, 1),
            "NPF": _codes(np.where(size > 1, size, 0), 1),
            "HHSPAN": _codes(rng.integers(1, 3, n), 1),
            "HHRACE": _codes(rng.integers(1, 8, n), 2),
            "TEN": _codes(rng.integers(1, 5, n), 1),
            "HHT": _codes(rng.integers(1, 8, n), 1),
            "HHT2": _codes(rng.integers(1, 13, n), 2),
            "CPLT": _codes(rng.integers(1, 6, n), 1),
        }
    )
    geo = pd.DataFrame(
        {
            "RTYPE": "2",
            "MAFID": units["MAFID"],
            "TABBLKST": _codes(state, 2),
            "TABBLKCOU": _codes(county, 3),
            "TABTRACTCE": _codes(tract, 6),
            "TABBLK": _codes(block, 4),
        }
    )
    return units, geo


def _timed(label: str, timings: dict[str, float], fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    timings[label] = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--households", type=int, default=1_000_000)
    parser.add_argument("--rate", default="0.05")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--end-to-end", action="store_true")
    args = parser.parse_args()

    units, geo = synthetic_units(args.households, args.seed)
    records = pd.concat([units, geo.drop(columns=["RTYPE", "MAFID"])], axis=1)
    scheme = SwapScheme(
        match=("TABBLKST", "FINAL_POP"),
        swap=("TABBLKCOU", "TABTRACTCE", "TABBLK"),
        hold=("RTYPE", "NPF", "HHSPAN", "HHRACE", "TEN", "HHT", "HHT2", "CPLT"),
    )
    rate = parse_rate(args.rate)
    timings: dict[str, float] = {}
    swapped, draw = _timed(
        "swap (Algorithm 5.1)", timings, permutation_swap, records, scheme, rate,
        seeded_rng(args.seed),
    )  # fmt: skip
    b = _timed("b", timings, largest_stratum, records, scheme)
    invariants = _timed("invariant check", timings, check_invariants, records, swapped, scheme)
    mape = _timed(
        "MAPE", timings, mean_absolute_percentage_error, records, swapped,
        ("TABBLKST", "TABBLKCOU"), ("TEN",),
    )  # fmt: skip
    print(
        f"{args.households:,} households, p = {args.rate}: {draw.records_selected:,} selected in "
        f"{draw.strata_permuted} strata ({draw.selection_rounds} selection rounds, "
        f"{draw.derangement_rounds} derangement rounds); b = {b:,}; invariants exact: "
        f"{invariants.exact}; county x TEN MAPE {mape.mape:.3%}"
    )
    for label, seconds in timings.items():
        print(f"  {label:<22} {seconds:7.2f} s")

    if args.end_to_end:
        with tempfile.TemporaryDirectory(prefix="das-swap-bench-") as folder:
            data = Path(folder) / "in"
            data.mkdir()
            options = pa_csv.WriteOptions(quoting_style="none")
            for name, frame in (("units", units), ("geo", geo)):
                table = pa.Table.from_pandas(frame, preserve_index=False)
                pa_csv.write_csv(table, data / f"{name}.csv", write_options=options)
            request = SwapRequest(
                match=scheme.match, swap=scheme.swap, rate=rate, seed=args.seed,
                two_way=(("TABBLKST", "TABBLKCOU"), ("TEN",)),
            )  # fmt: skip
            started = time.perf_counter()
            report = run_swap(data, Path(folder) / "out", request)
            total = time.perf_counter() - started
        steps = ", ".join(f"{k} {v:.2f}" for k, v in report["timings_seconds"].items())
        print(f"end to end (read CSV, swap, check, write): {total:.2f} s ({steps})")


if __name__ == "__main__":
    main()
