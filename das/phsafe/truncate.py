"""Truncate-and-join (PHSafe paper Algorithm 3, §5.1, §6.2.1).

Persons (already filtered to the table's universe) keep at most τ records per MAFID, chosen in
an order that depends only on each record's content; units whose MAFID is not unique are
dropped; the two are then inner-joined on MAFID. With person multiplicity ≤ τ and unit
multiplicity ≤ 1, one added/removed person changes the joined rows by at most 2τ + 2.

Order key: BLAKE2b (8-byte digest, personalised) of the record's packed content bytes, i.e. its
values in every column other than MAFID (ranking happens within one MAFID, where MAFID is
common). Digests are computed once per *distinct* content — a handful of thousands of age ×
race × ethnicity × relationship combinations, however many records — and broadcast back with
``np.unique(..., return_inverse=True)``, so no Python loop runs per record. Ties (equal
digests) are broken by the content itself, so the kept set is exact and independent of the
input row order; identical records are interchangeable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

KEY = "MAFID"
_PERSONAL = b"das-phsafe-trunc"


def content_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that make up a record's content for ordering: all but MAFID, sorted."""
    return sorted(str(name) for name in frame.columns if name != KEY)


def _content_ids(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(packed int64 rows, an integer id per row equal exactly when the contents are equal).

    Ids sort like the rows, lexicographically by column: a mixed-radix number over the columns
    when it fits in 63 bits (the usual case: small codes), else the rank among distinct rows.
    """
    packed = np.ascontiguousarray(
        np.column_stack([frame[name].to_numpy().astype("<i8") for name in columns])
    )
    low, high = packed.min(axis=0), packed.max(axis=0)
    radix = (high - low + 1).astype(object)
    if all(r > 0 for r in radix) and np.prod(radix) < 2**63:
        ids = np.zeros(len(packed), dtype=np.int64)
        for column in range(packed.shape[1]):
            ids = ids * int(radix[column]) + (packed[:, column] - low[column])
        return packed, ids
    order = np.lexsort(packed.T[::-1])  # lexicographic by column, like the radix ids
    ordered = packed[order]
    new_row = np.r_[True, np.any(ordered[1:] != ordered[:-1], axis=1)]
    ids = np.empty(len(packed), dtype=np.int64)
    ids[order] = np.cumsum(new_row) - 1
    return packed, ids


def content_digests(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> np.ndarray:
    """uint64 BLAKE2b digest of each row's packed content (little-endian int64 per column)."""
    columns = content_columns(frame) if columns is None else list(columns)
    if len(frame) == 0:
        return np.zeros(0, dtype=np.uint64)
    packed, ids = _content_ids(frame, columns)
    return _digests(packed, ids)


def _distinct(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted distinct ids, one row holding each, inverse: row → distinct index).

    Radix ids of small codes span a small range: a lookup table then replaces ``np.unique``'s
    sort of every row (linear time). Any row of an id will do: equal ids mean equal contents.
    """
    low = int(ids.min())
    span = int(ids.max()) - low + 1
    if span > max(4 * len(ids), 1 << 22):
        distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        return distinct, first, inverse.ravel()
    offset = ids - low
    present = np.zeros(span, dtype=bool)
    present[offset] = True
    slots = np.flatnonzero(present)
    index_of = np.empty(span, dtype=np.int64)
    index_of[slots] = np.arange(len(slots))
    inverse = index_of[offset]
    first = np.empty(len(slots), dtype=np.int64)
    first[inverse] = np.arange(len(ids))
    return slots + low, first, inverse


def _digest_rows(packed: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """BLAKE2b digest of the given rows (one per distinct content: thousands, not millions)."""
    return np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(packed[row].tobytes(), digest_size=8, person=_PERSONAL).digest(),
                "little",
            )
            for row in rows
        ),
        dtype=np.uint64,
        count=len(rows),
    )


def _digests(packed: np.ndarray, ids: np.ndarray) -> np.ndarray:
    _, first, inverse = _distinct(ids)
    return _digest_rows(packed, first)[inverse]


def truncation_order(frame: pd.DataFrame) -> np.ndarray:
    """Row positions sorted by (MAFID, truncation rank): the order truncation keeps rows in.

    The rank is the (digest, content) order, ranked once over the distinct contents; rows are
    sorted by the single int64 key ``MAFID · n_distinct + rank`` when it fits (else a two-key
    lexsort). Rows of equal MAFID and content are interchangeable.
    """
    if len(frame) == 0:
        return np.zeros(0, dtype=np.int64)
    packed, ids = _content_ids(frame, content_columns(frame))
    distinct, first, inverse = _distinct(ids)
    digests = _digest_rows(packed, first)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[np.lexsort([distinct, digests])] = np.arange(len(distinct))
    row_rank = rank[inverse]
    keys = frame[KEY].to_numpy().astype(np.int64)
    low, high = int(keys.min()), int(keys.max())
    if (high - low + 1) * len(distinct) < 2**62:
        # Stable = timsort: near-linear on files grouped by household (the usual layout).
        return np.argsort((keys - low) * len(distinct) + row_rank, kind="stable")
    return np.lexsort([row_rank, keys])


def first_per_key(sorted_keys: np.ndarray, mask: np.ndarray, tau: int) -> np.ndarray:
    """Among rows sorted by key (``truncation_order``), the masked rows that are among the
    first ``tau`` masked rows of their key; a mask in the same (sorted) order."""
    if tau < 1:
        raise ValueError(f"Invalid truncation threshold {tau} (need >= 1)")
    if sorted_keys.size == 0:
        return np.zeros(0, dtype=bool)
    starts = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    taken = np.cumsum(mask, dtype=np.int64)
    before = np.maximum.accumulate(np.where(starts, taken - mask, 0))  # masked rows before
    return mask & (taken - before <= tau)


def truncate_per_key(frame: pd.DataFrame, tau: int) -> pd.DataFrame:
    """Keep at most ``tau`` rows per MAFID: the ones first in (digest, content) order."""
    if tau < 1:
        raise ValueError(f"Invalid truncation threshold {tau} (need >= 1)")
    if len(frame) == 0:
        return frame
    order = truncation_order(frame)
    keys = frame[KEY].to_numpy().astype(np.int64)[order]
    kept = np.sort(order[first_per_key(keys, np.ones(keys.size, dtype=bool), tau)], kind="stable")
    return frame.iloc[kept]


def drop_non_unique(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop every row whose MAFID occurs more than once (Tumult's DropNonUnique)."""
    return frame.loc[~frame[KEY].duplicated(keep=False).to_numpy()]


def truncate_and_join(persons: pd.DataFrame, units: pd.DataFrame, tau: int) -> pd.DataFrame:
    """Persons truncated to τ per MAFID, inner-joined to the units with a unique MAFID.

    Unit columns that share a name with a person column get the suffix ``_unit``.
    """
    kept_persons = truncate_per_key(persons, tau)
    unique_units = drop_non_unique(units)
    return kept_persons.merge(unique_units, on=KEY, how="inner", suffixes=("", "_unit"))


def truncation_profile(
    persons: pd.DataFrame, units: pd.DataFrame, taus: Sequence[int]
) -> dict[str, object]:
    """How much each τ would truncate: aggregate counts only, for tuning τ on synthetic data.

    ``persons`` and ``units`` are a joined table's universe (filters applied); a household's
    size is its number of persons that the join would keep before truncation (MAFID unique in
    ``units``). For each τ: households above τ, and persons dropped (Σ max(size − τ, 0)).
    """
    unique_units = drop_non_unique(units)[KEY].to_numpy().astype(np.int64)
    keys = persons[KEY].to_numpy().astype(np.int64)
    keys = keys[np.isin(keys, unique_units)]
    _, sizes = np.unique(keys, return_counts=True)
    largest = int(sizes.max()) if sizes.size else 0
    by_size = np.bincount(sizes, minlength=largest + 1).astype(np.int64)
    size_values = np.arange(by_size.size, dtype=np.int64)
    households_above, persons_dropped = [], []
    for tau in taus:
        if tau < 1:
            raise ValueError(f"Invalid truncation threshold {tau} (need >= 1)")
        above = size_values > tau
        households_above.append(int(by_size[above].sum()))
        persons_dropped.append(int((by_size[above] * (size_values[above] - tau)).sum()))
    return {
        "households": int(sizes.size),
        "persons": int(sizes.sum()),
        "largest_household": largest,
        "households_above_tau": households_above,
        "persons_dropped": persons_dropped,
    }
