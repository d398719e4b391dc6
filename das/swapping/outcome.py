"""What one swap produced: the swapped records and everything measured on them (kept in memory
between the steps of :mod:`das.swapping.run`, and reported by :mod:`das.swapping.swap_report`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pandas as pd

from das.swapping.analysis import InvariantReport, MapeResult
from das.swapping.permutation import SwapDraw, SwapScheme


@dataclass
class SwapOutcome:
    """The swapped records and everything measured on them (kept in memory between steps)."""

    scheme: SwapScheme
    rate: Fraction
    swapped: pd.DataFrame
    draw: SwapDraw
    strata: int
    b: int
    epsilon: float
    randomness: dict[str, Any]
    two_way: tuple[tuple[str, ...], tuple[str, ...]]
    timings: dict[str, float] = field(default_factory=dict)
    invariants: InvariantReport | None = None
    mape: MapeResult | None = None
    geography_held_varying: tuple[str, ...] = ()
