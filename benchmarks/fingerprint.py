"""Throughput of the canonical record fingerprint (das.io.fingerprint), one core.

    .venv/bin/python benchmarks/fingerprint.py [--rows 10000000] [--repeats 5]

Random records in the engine form of each product layout (SafeTab-P person records first:
the file that matters at national scale, 334 M rows), fed in chunks of the size
:func:`das.io.tables.iter_table` yields for 64 MiB of text. Two feeds per layout: compact
engine frames (``update_frame``, what the engine passes give) and int64 columns
(``update_columns``, what validation gives). Prints the median rows per second over
``--repeats`` runs; the target is 20 M rows/s for the person layout. Reading and parsing
the file are not included (the passes read it anyway).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd

from das.io.fingerprint import RecordFingerprint, row_layout
from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.safetab_p import GRF_C, PERSON_RECORDS
from das.io.tables import DEFAULT_CHUNK_BYTES, Kind, TableSpec

LAYOUTS = (PERSON_RECORDS, GRF_C, PERSONS, UNITS, GEO)


def random_frame(spec: TableSpec, rows: int, seed: int = 2026) -> pd.DataFrame:
    """Engine-form columns with values anywhere in each column's range."""
    rng = np.random.default_rng(seed)
    data = {}
    for column in spec.columns:
        if column.kind is Kind.BOOL:
            data[column.name] = rng.integers(0, 2, rows).astype(bool)
        else:
            data[column.name] = rng.integers(0, column.maximum, rows, endpoint=True).astype(
                column.dtype
            )
    return pd.DataFrame(data, copy=False)


def median_rate(feed, chunks: list, rows: int, spec: TableSpec, repeats: int) -> tuple[float, str]:
    """Median rows/s of fingerprinting all ``chunks`` (``rows`` in all) with ``feed``; and
    the digest."""
    rates, digest = [], ""
    for _ in range(repeats):
        fingerprint = RecordFingerprint(spec)
        start = time.perf_counter()
        for chunk in chunks:
            feed(fingerprint, chunk)
        digest = fingerprint.hexdigest()
        rates.append(rows / (time.perf_counter() - start))
    return statistics.median(rates), digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="records per layout")
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement")
    parser.add_argument(
        "--layouts", nargs="*", default=[spec.name for spec in LAYOUTS], help="spec names"
    )
    args = parser.parse_args()
    print(f"{args.rows:,} random records per layout; median of {args.repeats} runs, one core")
    print(f"{'layout':>15} {'words':>5} {'chunk rows':>10} {'frames M/s':>11} {'int64 M/s':>10}")
    for spec in LAYOUTS:
        if spec.name not in args.layouts:
            continue
        frame = random_frame(spec, args.rows)
        step = max(1, DEFAULT_CHUNK_BYTES // spec.text_row_bytes)
        frames = [frame.iloc[i : i + step] for i in range(0, len(frame), step)]
        columns = [
            {name: chunk[name].to_numpy().astype(np.int64) for name in spec.column_names}
            for chunk in frames
        ]
        compact, digest = median_rate(
            lambda f, chunk: f.update_frame(chunk), frames, args.rows, spec, args.repeats
        )
        wide, same = median_rate(
            lambda f, chunk: f.update_columns(chunk), columns, args.rows, spec, args.repeats
        )
        assert same == digest, "the two feeds must agree"
        words = row_layout(spec)[1]
        print(f"{spec.name:>15} {words:>5} {step:>10,} {compact / 1e6:>11.1f} {wide / 1e6:>10.1f}")


if __name__ == "__main__":
    main()
