"""Stability of SafeTab-P's population-group counts, computed from the spec files.

Within one (iteration level, geography filter), a person is in the *alone* iterations shared by
all their race codes, in the *alone-or-in-combination* iterations of each code, and in the
ethnicity iterations of their QSPAN code. With h_r the most race iterations one code maps to in a
(level, alone, filter) and h_e the most ethnicity iterations one code maps to in a (level,
filter), a person changes at most Δ = h_r·max(2, max_race_codes) + h_e counts by one each. The
2020 specs give 1·8 + 1 = 9. Geography filters: USA/STATE/PR-STATE drop COARSE_ONLY iterations,
sub-state levels drop DETAILED_ONLY ones.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

import numpy as np

from das.io.tables import InputFormatError
from das.specs.race_specs import TRUE, RaceEthnicitySpecs

TABULATED_ITERATION_LEVELS = (1, 2)


def _most_iterations_per_code(keys: list[np.ndarray], code: np.ndarray) -> int:
    """Largest number of pairs sharing (keys..., code): the per-code fan-out of one group."""
    if code.size == 0:
        return 0
    stacked = np.stack([*keys, code], axis=1).astype(np.int64)
    _, counts = np.unique(stacked, axis=0, return_counts=True)
    return int(counts.max())


def stability(specs: RaceEthnicitySpecs, max_race_codes: int) -> int:
    """Δ = h_r·max(2, max_race_codes) + h_e over both geography filters and levels 1 and 2."""
    iteration = specs.pair_iteration_index
    known = iteration >= 0
    iteration = iteration[known]
    code = specs.pair_code[known]
    level = specs.level[iteration]
    tabulated = np.isin(level, TABULATED_ITERATION_LEVELS)
    h_race = h_ethnicity = 0
    for dropped in (specs.coarse_only, specs.detailed_only):  # state-or-above, sub-state
        keep = tabulated & (dropped[iteration] != TRUE)
        race = keep & ~specs.is_ethnicity[iteration]
        ethnicity = keep & specs.is_ethnicity[iteration]
        h_race = max(
            h_race,
            _most_iterations_per_code([level[race], specs.alone[iteration[race]]], code[race]),
        )
        h_ethnicity = max(
            h_ethnicity, _most_iterations_per_code([level[ethnicity]], code[ethnicity])
        )
    return h_race * max(2, max_race_codes) + h_ethnicity


class RaceCodeBoundError(InputFormatError):
    """A record with more race codes than ``max_race_codes``: Δ would understate what one
    person changes, so the noise would not cover them. Checked by the engine itself on every
    record it reads, not only by validation, which a sealed config or ``--skip-validation``
    could bypass."""

    shareable = True  # the message names the config's bound only


def require_race_code_bound(race_codes: np.ndarray, max_race_codes: int) -> None:
    """Stop (before any noise is drawn) if a row of ``race_codes`` (n, 8; 0 = Null) holds
    more than ``max_race_codes`` codes. The message names no record and no count."""
    if race_codes.size and int((race_codes > 0).sum(axis=1).max()) > max_race_codes:
        raise RaceCodeBoundError(
            f"the person file has records with more than max_race_codes = {max_race_codes} "
            "race codes: the noise scale (stability Δ) assumes at most that many. Raise "
            "max_race_codes in the config or correct the records; nothing was drawn"
        )


def detailed_only_levels(specs: RaceEthnicitySpecs) -> set[int]:
    """Iteration levels that hold DETAILED_ONLY iterations (measured total-only at state+)."""
    flagged = specs.detailed_only == TRUE
    return {int(level) for level in np.unique(specs.level[flagged])}


def l2_from_stability(stability_value: int) -> Fraction:
    """L2 sensitivity of counts where one person changes at most `stability_value` cells by 1.

    That is √stability; when it is not a perfect square the exact root is irrational, so it is
    bounded *above* by a rational (8 decimals): more noise, never less.
    """
    if stability_value < 0:
        raise ValueError(f"Invalid stability: {stability_value}")
    root = isqrt(stability_value)
    if root * root == stability_value:
        return Fraction(root)
    scale = 10**8
    return Fraction(isqrt(stability_value * scale * scale) + 1, scale)
