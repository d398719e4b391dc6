"""Permutation swapping (Algorithm 5.1) and its privacy accounting, as a comparison tool.

- :mod:`das.swapping.permutation`: the algorithm, vectorized across strata.
- :mod:`das.swapping.analysis`: b (Theorem 5.6), H(Z), the invariant check, the MAPE.
- :mod:`das.swapping.definitions`: swapping beside TopDown, SafeTab-P and PHSafe (Table 6.1).
- :mod:`das.swapping.files`: PHSafe-style ``units`` ⋈ ``geo`` in, the same format out.
- :mod:`das.swapping.run`: load → swap → check → write, the steps the flow and CLI chain.
- :mod:`das.swapping.swap_report`: report.json / report.md.

ε itself lives with the accountant: :func:`das.privacy.calculators.swap_epsilon`.
"""

from das.swapping.analysis import (
    check_invariants,
    contingency_table,
    largest_stratum,
    mean_absolute_percentage_error,
)
from das.swapping.permutation import (
    SwapDraw,
    SwapScheme,
    draw_permutation_swap,
    parse_rate,
    permutation_swap,
    select_records,
    uniform_derangements,
)
from das.swapping.run import SwapRequest, run_swap

__all__ = [
    "SwapDraw",
    "SwapRequest",
    "SwapScheme",
    "check_invariants",
    "contingency_table",
    "draw_permutation_swap",
    "largest_stratum",
    "mean_absolute_percentage_error",
    "parse_rate",
    "permutation_swap",
    "run_swap",
    "select_records",
    "uniform_derangements",
]
