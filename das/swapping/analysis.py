"""What a swap preserves and what it costs: b, H(Z), the invariants, and the MAPE.

Notation of the paper (Proposition 5.3): j = matching category, k = swapping category,
l = non-matching holding category; H(X) = [n_jkl]. Swapping keeps every margin except n_·kl:
in particular n_jk (match × swap) and n_jl (match × hold) are invariant, exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from das.swapping.permutation import SwapScheme, combine_codes, factor_codes, stratum_codes

COUNT = "COUNT"


def largest_stratum(frame: pd.DataFrame, scheme: SwapScheme) -> int:
    """b of Theorem 5.6: max{0, n_j | stratum j holds at least two different records}.

    "Different" is judged on the swapping variables: in a stratum whose records all share
    their swapping values no permutation changes anything, and the invariant n_jk pins every
    record of the stratum to that single k while n_jl pins the multiset of l, so the
    stratum's data universe is a single dataset and it contributes no privacy loss. Counting
    every stratum with two distinct swapping values is therefore valid, and conservative when
    two such records also share their holding values. b is n_j, the stratum's full size.
    """
    if len(frame) == 0:
        return 0
    strata = stratum_codes(frame, scheme.match)
    sizes = np.bincount(strata)
    eligible = sizes[_varies(strata, stratum_codes(frame, scheme.swap), sizes.size)]
    return int(eligible.max()) if eligible.size else 0


def _varies(strata: np.ndarray, values: np.ndarray, n_strata: int) -> np.ndarray:
    """Per stratum: does ``values`` take two different values in it? (O(n), no sort.)

    Each stratum's first value is found by scattering in reverse (the last write wins); a
    stratum varies iff some record differs from its stratum's first value.
    """
    first = np.zeros(n_strata, dtype=values.dtype)
    first[strata[::-1]] = values[::-1]
    differs = values != first[strata]
    return np.bincount(strata[differs], minlength=n_strata) > 0


def varying_within_strata(
    frame: pd.DataFrame, match: Sequence[str], columns: Sequence[str]
) -> tuple[str, ...]:
    """The ``columns`` that take more than one value inside some matching stratum.

    A holding column that is constant within every stratum (a function of the swap key, such
    as the census region when the key includes the state) stays consistent with any swapped
    geography; one that varies (say a place code, when blocks are swapped) may not.
    """
    if len(frame) == 0:
        return ()
    strata = stratum_codes(frame, match)
    n_strata = int(strata.max()) + 1
    return tuple(
        name for name in columns if _varies(strata, stratum_codes(frame, [name]), n_strata).any()
    )


def contingency_table(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """The non-zero cells of the cross-classification of ``columns``, with a COUNT column.

    Sorted by the columns' values so that two tables of the same data compare row by row.
    """
    columns = list(columns)
    if COUNT in columns:
        raise ValueError(f"a tabulated column may not be named {COUNT}")
    table = frame.groupby(columns, sort=True, dropna=False, observed=True).size()
    return table.rename(COUNT).reset_index()


class _PairedTables:
    """Cell counts of X and of Z over shared cells, factorizing each column only once."""

    def __init__(self, x: pd.DataFrame, z: pd.DataFrame) -> None:
        self.x, self.z = x, z
        self._factors: dict[str, tuple[np.ndarray, int]] = {}

    def _factor(self, name: str) -> tuple[np.ndarray, int]:
        if name not in self._factors:
            both = pd.concat([self.x[name], self.z[name]], ignore_index=True)
            self._factors[name] = factor_codes(both)
        return self._factors[name]

    def counts(self, columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        n_x = len(self.x)
        cells = combine_codes([self._factor(name) for name in columns], n_x + len(self.z))
        n_cells = int(cells.max()) + 1 if cells.size else 0
        return (
            np.bincount(cells[:n_x], minlength=n_cells),
            np.bincount(cells[n_x:], minlength=n_cells),
        )


def _paired_counts(
    x: pd.DataFrame, z: pd.DataFrame, columns: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Cell counts of X and of Z over one shared list of cells (the cells present in either)."""
    return _PairedTables(x, z).counts(columns)


@dataclass(frozen=True)
class MarginCheck:
    """One invariant margin compared between X and Z."""

    name: str
    columns: tuple[str, ...]
    cells: int
    cells_differing: int

    @property
    def exact(self) -> bool:
        return self.cells_differing == 0

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "columns": list(self.columns),
            "cells": self.cells,
            "cells_differing": self.cells_differing,
            "exact": self.exact,
        }


@dataclass(frozen=True)
class InvariantReport:
    """The swapping invariants (Definition 5.4) checked exactly, plus what did change."""

    margins: tuple[MarginCheck, ...]
    records: int
    interior_cells: int
    interior_cells_changed: int

    @property
    def exact(self) -> bool:
        return all(margin.exact for margin in self.margins)

    def as_dict(self) -> dict[str, object]:
        return {
            "exact": self.exact,
            "records": self.records,
            "margins": [margin.as_dict() for margin in self.margins],
            "interior_cells": self.interior_cells,
            "interior_cells_changed": self.interior_cells_changed,
        }


def check_invariants(x: pd.DataFrame, z: pd.DataFrame, scheme: SwapScheme) -> InvariantReport:
    """Compare the margins n_jk and n_jl (and the record count) of X and Z, cell by cell.

    Counts are tabulated independently from each frame, so a bug that moved a matching or
    holding value, lost a record or broke the stratum restriction shows as a differing cell.
    """
    tables = _PairedTables(x, z)
    margins = []
    for name, columns in (
        ("match x swap (n_jk)", scheme.match + scheme.swap),
        ("match x hold (n_jl)", scheme.match + scheme.hold),
    ):
        count_x, count_z = tables.counts(columns)
        margins.append(
            MarginCheck(name, columns, int(count_x.size), int(np.count_nonzero(count_x - count_z)))
        )
    if len(x) != len(z):
        margins.append(MarginCheck("records (n)", (), 1, 1))
    count_x, count_z = tables.counts(scheme.columns)
    return InvariantReport(
        margins=tuple(margins),
        records=len(x),
        interior_cells=int(count_x.size),
        interior_cells_changed=int(np.count_nonzero(count_x - count_z)),
    )


@dataclass(frozen=True)
class MapeResult:
    """MAPE of a two-way table (footnote 22), over the cells with a non-zero true count.

    ``cells_zero_true`` counts cells empty in X but not in Z: their percentage error is
    undefined, so they are left out of the mean (and reported).
    """

    rows: tuple[str, ...]
    cols: tuple[str, ...]
    mape: float
    cells: int
    cells_zero_true: int

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": list(self.rows),
            "cols": list(self.cols),
            "mape": self.mape,
            "cells": self.cells,
            "cells_zero_true": self.cells_zero_true,
        }


def mean_absolute_percentage_error(
    x: pd.DataFrame, z: pd.DataFrame, rows: Sequence[str], cols: Sequence[str]
) -> MapeResult:
    """(1/KL) Σ_kl |n_kl^X − n_kl^Z| / n_kl^X over the two-way table rows × cols.

    ``rows`` and ``cols`` may each be several columns (e.g. state and county as one row
    variable). The mean is over the cells with n_kl^X > 0, as a percentage error needs.
    """
    rows, cols = tuple(rows), tuple(cols)
    if not rows or not cols:
        raise ValueError("a two-way table needs at least one row and one column variable")
    count_x, count_z = _paired_counts(x, z, rows + cols)
    true = count_x > 0
    errors = np.abs(count_x[true] - count_z[true]) / count_x[true]
    return MapeResult(
        rows=rows,
        cols=cols,
        mape=float(errors.mean()) if errors.size else 0.0,
        cells=int(true.sum()),
        cells_zero_true=int(np.count_nonzero(~true & (count_z > 0))),
    )
