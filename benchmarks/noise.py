"""Throughput of the exact noise samplers (secure source, one process).

    .venv/bin/python benchmarks/noise.py [--draws 10000000]

Discrete Gaussian at σ² ∈ {2.3, 31.4, 625, 92402} and the two-sided geometric at the
comparable scale σ (as an exact decimal rational, e.g. 303.977 = 303977/1000). Targets on
one core (docs/explanation/architecture.md#noise): >= 2.5 M/s discrete Gaussian, >= 4 M/s geometric.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from das.privacy.noise import discrete_gaussian, geometric
from das.privacy.rng import default_source

SIGMA_SQUARED = ("2.3", "31.4", "625", "92402")


def rate(draw: Callable[[], np.ndarray], draws: int) -> float:
    """Samples per second of one call producing ``draws`` samples."""
    start = time.perf_counter()
    out = draw()
    elapsed = time.perf_counter() - start
    assert out.size == draws and out.dtype == np.int64
    return draws / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10**7, help="samples per measurement")
    args = parser.parse_args()
    n = args.draws
    print(f"randomness: {default_source().describe()}")
    print(f"{n:,} draws per measurement, one process\n")
    print(f"{'sigma^2':>8} {'gaussian M/s':>13} {'scale':>12} {'geometric M/s':>14}")
    discrete_gaussian(1, 1000)  # warm up imports and tables
    for s2 in SIGMA_SQUARED:
        sigma2 = Fraction(s2)
        scale = Fraction(round(math.sqrt(float(sigma2)) * 1000), 1000)
        g = rate(lambda s=sigma2: discrete_gaussian(s, n), n)
        h = rate(lambda s=scale: geometric(s, n), n)
        print(f"{s2:>8} {g / 1e6:>13.2f} {float(scale):>12.3f} {h / 1e6:>14.2f}")


if __name__ == "__main__":
    main()
