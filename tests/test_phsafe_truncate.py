"""Truncate-and-join: at most τ persons per unit, order from record content only."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.phsafe.truncate import (
    content_digests,
    drop_non_unique,
    truncate_and_join,
    truncate_per_key,
)

COLUMNS = ["RTYPE", "MAFID", "QAGE", "CENHISP", "CENRACE", "RELSHIP"]

rows = st.lists(
    st.tuples(
        st.just(3),
        st.integers(100_000_001, 100_000_006),
        st.integers(0, 115),
        st.integers(1, 2),
        st.integers(1, 63),
        st.integers(20, 36),
    ),
    max_size=60,
)


def _frame(records: list[tuple[int, ...]]) -> pd.DataFrame:
    return pd.DataFrame(records, columns=COLUMNS).astype("int64")


def _canonical(frame: pd.DataFrame) -> list[tuple[int, ...]]:
    return sorted(map(tuple, frame[COLUMNS].to_numpy().tolist()))


@settings(max_examples=60, deadline=None)
@given(rows, st.integers(1, 5), st.randoms(use_true_random=False))
def test_truncation_bounds_and_is_order_independent(records, tau, shuffler) -> None:
    frame = _frame(records)
    kept = truncate_per_key(frame, tau)
    counts = kept["MAFID"].value_counts()
    assert (counts <= tau).all()
    original = frame["MAFID"].value_counts()
    # Households at or under τ keep everyone; larger ones keep exactly τ.
    for mafid, n in original.items():
        assert counts.get(mafid, 0) == min(n, tau)
    shuffled = list(records)
    shuffler.shuffle(shuffled)
    assert _canonical(truncate_per_key(_frame(shuffled), tau)) == _canonical(kept)


def test_truncation_keeps_a_subset_of_the_input() -> None:
    frame = _frame([(3, 1, age, 1, 1, 25) for age in range(10)])
    kept = truncate_per_key(frame, 3)
    assert len(kept) == 3
    assert set(kept["QAGE"]) <= set(range(10))
    # The choice is by content digest, not by position: not simply the first three rows.
    digests = content_digests(frame)
    expected = frame.iloc[np.argsort(digests, kind="stable")[:3]]
    assert sorted(kept["QAGE"]) == sorted(expected["QAGE"])


def test_digest_depends_on_content_not_mafid() -> None:
    a = _frame([(3, 1, 40, 1, 1, 20), (3, 2, 40, 1, 1, 20), (3, 1, 41, 1, 1, 20)])
    digests = content_digests(a)
    assert digests[0] == digests[1]
    assert digests[0] != digests[2]


def test_invalid_tau_is_refused() -> None:
    with pytest.raises(ValueError, match="truncation threshold"):
        truncate_per_key(_frame([(3, 1, 1, 1, 1, 20)]), 0)


def test_join_drops_units_with_non_unique_mafid() -> None:
    persons = _frame([(3, 1, 30, 1, 1, 20), (3, 2, 30, 1, 1, 20), (3, 3, 30, 1, 1, 20)])
    units = pd.DataFrame({"MAFID": [1, 2, 2, 4], "TEN": [1, 2, 3, 1]})
    assert list(drop_non_unique(units)["MAFID"]) == [1, 4]
    joined = truncate_and_join(persons, units, tau=5)
    assert list(joined["MAFID"]) == [1]  # 2 duplicated, 3 has no unit, 4 has no person
    assert list(joined["TEN"]) == [1]


def _reference_truncation(records: list[tuple[int, ...]], tau: int) -> list[tuple[int, ...]]:
    """Per-row BLAKE2b of the non-MAFID columns (sorted by name), then content, per MAFID."""
    names = sorted(name for name in COLUMNS if name != "MAFID")
    kept = []
    for mafid in sorted({row[1] for row in records}):
        members = [dict(zip(COLUMNS, row, strict=True)) for row in records if row[1] == mafid]

        def key(row: dict) -> tuple:
            data = b"".join(int(row[n]).to_bytes(8, "little", signed=True) for n in names)
            digest = hashlib.blake2b(data, digest_size=8, person=b"das-phsafe-trunc").digest()
            return (int.from_bytes(digest, "little"), *(row[n] for n in names))

        kept += [tuple(row[c] for c in COLUMNS) for row in sorted(members, key=key)[:tau]]
    return sorted(kept)


@pytest.mark.parametrize("huge", [False, True])
def test_truncation_matches_a_per_row_reference(huge: bool) -> None:
    gen = np.random.default_rng(7)
    n = 300
    ages = gen.integers(0, 2**40 if huge else 116, n)  # huge values take the rank-id path
    records = [
        (3, int(m), int(a), int(h), int(r), int(s))
        for m, a, h, r, s in zip(
            gen.integers(1, 40, n),
            ages,
            gen.integers(1, 3, n),
            gen.integers(1, 64, n),
            gen.integers(20, 37, n),
            strict=True,
        )
    ]
    assert _canonical(truncate_per_key(_frame(records), 3)) == _reference_truncation(records, 3)
