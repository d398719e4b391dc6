"""Record → characteristic iterations, computed once per distinct code combination
(docs/explanation/architecture.md#safetab-p).

Within one (iteration level L, geography filter), a record with race codes R (non-empty) and
ethnicity code e is in

* the *alone* iterations ⋂_{r∈R} A(r), A(r) = r's ALONE=True race iterations of level L;
* the *alone-or-in-any-combination* iterations ⋃_{r∈R} C(r), C(r) = r's ALONE=False ones;
* the ethnicity iterations of e at level L.

Filters: USA / STATE / PR-STATE drop COARSE_ONLY=True iterations and measure DETAILED_ONLY=True
ones total-only; sub-state levels drop DETAILED_ONLY=True ones. LEVEL 0 is never tabulated.

Everything is sparse linear algebra over a (combination × code) matrix K: with k the number of
codes of a combination, ``alone = (K·A == k)``, ``combination = (K·C > 0)``; a code unknown to
the specs maps to no iteration (so it empties the alone intersection).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from das.io.safetab_p import NULL_RACE_CODE
from das.safetab_p.memo import of_specs
from das.specs.race_specs import TRUE, RaceEthnicitySpecs


@dataclass(frozen=True)
class IterationFilter:
    """The iterations tabulated at one (iteration level, geography filter), in spec order.

    ``index`` points into the spec's iteration arrays; ``total_only[j]`` says column j gets a
    total only (DETAILED_ONLY at state-or-above).
    """

    index: np.ndarray  # int64
    total_only: np.ndarray  # bool

    @property
    def size(self) -> int:
        return int(self.index.size)


def iteration_filter(
    specs: RaceEthnicitySpecs, iteration_level: int, state_or_above: bool
) -> IterationFilter:
    """Eligible iterations of a level under the USA/STATE (True) or sub-state (False) filter."""
    if iteration_level not in (1, 2):
        raise ValueError(f"Invalid iteration level {iteration_level}: only 1 and 2 are tabulated")
    keep = specs.level == iteration_level
    if state_or_above:
        keep &= specs.coarse_only != TRUE
    else:
        keep &= specs.detailed_only != TRUE
    index = np.flatnonzero(keep).astype(np.int64)
    total_only = state_or_above & (specs.detailed_only[index] == TRUE)
    return IterationFilter(index=index, total_only=np.asarray(total_only, dtype=bool))


def _code_iteration_matrix(
    specs: RaceEthnicitySpecs, columns: np.ndarray, mask: np.ndarray
) -> sp.csr_matrix:
    """(n_codes + 1) × len(columns) 0/1 matrix: code → its iterations among ``columns`` where
    ``mask`` (over columns) holds; the extra last row is the "unknown code" row (empty).

    Made once per specs, columns and mask (every piece of every state asks for the same few:
    :mod:`das.safetab_p.memo`), read-only."""
    key = ("code-iteration", columns.tobytes(), mask.tobytes())
    return of_specs(specs, key, lambda: _make_code_iteration_matrix(specs, columns, mask))


def _make_code_iteration_matrix(
    specs: RaceEthnicitySpecs, columns: np.ndarray, mask: np.ndarray
) -> sp.csr_matrix:
    column_of = np.full(specs.iteration_code.size, -1, dtype=np.int64)
    column_of[columns[mask]] = np.flatnonzero(mask)
    pair_iteration = specs.pair_iteration_index.astype(np.int64)
    pair_code = specs.pair_code_index.astype(np.int64)
    valid = (pair_iteration >= 0) & (pair_code >= 0)
    column = np.where(valid, column_of[np.where(valid, pair_iteration, 0)], -1)
    use = valid & (column >= 0)
    matrix = sp.csr_matrix(
        (np.ones(int(use.sum()), dtype=np.int32), (pair_code[use], column[use])),
        shape=(specs.n_codes + 1, columns.size),
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1
    for array in (matrix.data, matrix.indices, matrix.indptr):
        array.flags.writeable = False
    return matrix


def code_positions(specs: RaceEthnicitySpecs, codes: np.ndarray) -> np.ndarray:
    """Index of each code in the spec's code list; n_codes (the empty row) when unknown."""
    order = np.argsort(specs.code, kind="stable")
    sorted_codes = specs.code[order]
    flat = codes.ravel()
    position = np.minimum(np.searchsorted(sorted_codes, flat), max(sorted_codes.size - 1, 0))
    hit = sorted_codes.size > 0
    found = (sorted_codes[position] == flat) if hit else np.zeros(flat.size, dtype=bool)
    result = np.where(found, order[position] if hit else 0, specs.n_codes)
    return result.reshape(codes.shape).astype(np.int64)


def combination_incidence(
    specs: RaceEthnicitySpecs,
    race_codes: np.ndarray,
    qspan: np.ndarray,
    selected: IterationFilter,
) -> sp.csr_matrix:
    """(m × selected.size) 0/1 CSR matrix: row i = iterations of combination i.

    ``race_codes`` is (m, 8) int16 with 0 for Null slots (repeated codes count once);
    ``qspan`` is (m,) int16.
    """
    race_codes = np.asarray(race_codes)
    present = race_codes != NULL_RACE_CODE
    positions = np.where(present, code_positions(specs, race_codes), -1)
    return position_incidence(specs, positions, code_positions(specs, np.asarray(qspan)), selected)


@dataclass(frozen=True)
class CombinationCodes:
    """The race codes of m combinations as a 0/1 (m × codes) matrix (a repeated code once),
    and how many each has: what every (iteration level, filter)'s incidence starts from, so
    a piece of records builds it once for all of them (:func:`combination_codes`)."""

    codes: sp.csr_matrix
    n_codes: np.ndarray


def combination_codes(specs: RaceEthnicitySpecs, positions: np.ndarray) -> CombinationCodes:
    """:class:`CombinationCodes` of code *positions* ((m, 8), −1 for a Null slot)."""
    positions = np.asarray(positions, dtype=np.int64)
    m = positions.shape[0]
    present = positions >= 0
    rows = np.broadcast_to(np.arange(m)[:, None], positions.shape)
    codes = sp.csr_matrix(
        (np.ones(int(present.sum()), dtype=np.int32), (rows[present], positions[present])),
        shape=(m, specs.n_codes + 1),
    )
    codes.sum_duplicates()
    codes.data[:] = 1
    return CombinationCodes(codes, np.asarray(codes.sum(axis=1)).ravel())


def position_incidence(
    specs: RaceEthnicitySpecs,
    positions: np.ndarray,
    qspan_positions: np.ndarray,
    selected: IterationFilter,
    codes: CombinationCodes | None = None,
) -> sp.csr_matrix:
    """:func:`combination_incidence` from code *positions* (:func:`code_positions`).

    ``positions`` is (m, 8) int64: −1 for a Null slot, ``specs.n_codes`` for a code the specs
    do not list; ``qspan_positions`` is (m,) int64 the same way. Combinations that differ
    only in unlisted codes have the same row (an unlisted code maps to no iteration).
    ``codes``: :func:`combination_codes` of ``positions``, when the caller already has it.
    """
    if codes is None:
        codes = combination_codes(specs, positions)
    m = codes.codes.shape[0]
    columns = selected.index
    is_ethnicity = specs.is_ethnicity[columns]
    alone = specs.alone[columns] == TRUE
    alone_matrix = _code_iteration_matrix(specs, columns, ~is_ethnicity & alone)
    combo_matrix = _code_iteration_matrix(specs, columns, ~is_ethnicity & ~alone)
    ethnicity_matrix = _code_iteration_matrix(specs, columns, is_ethnicity)
    n_codes = codes.n_codes
    codes = codes.codes

    shared = (codes @ alone_matrix).tocsr()
    shared.data = shared.data == n_codes[np.repeat(np.arange(m), np.diff(shared.indptr))]
    shared.eliminate_zeros()
    union = (codes @ combo_matrix).tocsr()
    ethnicity = ethnicity_matrix[np.asarray(qspan_positions, dtype=np.int64)]
    incidence = (shared.astype(np.int32) + union + ethnicity).tocsr()
    incidence.sum_duplicates()
    incidence.data[:] = 1
    incidence.eliminate_zeros()
    return incidence.astype(np.int8)
