"""The canonical record fingerprint (das.io.fingerprint): the documented algorithm, frozen by
golden vectors; multiset semantics (order, chunking, merging); sensitivity to every value."""

from __future__ import annotations

import hashlib
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.io import fingerprint as fp
from das.io.fingerprint import (
    RecordFingerprint,
    combine_fingerprints,
    fingerprint_file,
    forget_fingerprint,
    read_fingerprints,
    record_fingerprint,
    row_layout,
)
from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.safetab_p import GRF_C, PERSON_RECORDS
from das.io.tables import Column, Kind, TableSpec

# A layout with wide and odd fields: words filled exactly, fields that must start a new word.
WIDE = TableSpec(
    name="wide",
    stem="wide",
    text_suffix=".txt",
    delimiter="|",
    columns=(
        Column("A", dtype="int64", maximum=(1 << 63) - 1, width=19),
        Column("B", kind=Kind.BOOL, dtype="bool", width=5),
        Column("C", dtype="uint8", maximum=0, width=1),
        Column("D", dtype="uint32", maximum=(1 << 32) - 1, width=10),
        Column("E", kind=Kind.CODE_OR_NULL, dtype="int64", minimum=5, maximum=(1 << 31) - 1),
        Column("F", dtype="int64", maximum=(1 << 62), width=19),
    ),
)
SPECS = (PERSON_RECORDS, GRF_C, PERSONS, UNITS, GEO, WIDE)
MASK = (1 << 64) - 1


# ------------------------------------------------------------------------- reference algorithm
# The module docstring's algorithm spelled out again with Python integers, independently of
# the vectorized code: one row at a time, no numpy.


def reference_layout(spec: TableSpec) -> list[tuple[int, int]]:
    places, word, used = [], 0, 0
    for column in spec.columns:
        bits = 1 if column.kind is Kind.BOOL else max(1, column.maximum.bit_length())
        if used + bits > 64:
            word, used = word + 1, 0
        places.append((word, used))
        used += bits
    return places


def reference_fmix(h: int, multipliers: tuple[int, int], shifts: tuple[int, int, int]) -> int:
    h ^= h >> shifts[0]
    h = (h * multipliers[0]) & MASK
    h ^= h >> shifts[1]
    h = (h * multipliers[1]) & MASK
    h ^= h >> shifts[2]
    return h


LANE_CONSTANTS = (  # as documented: MurmurHash3 fmix64, SplitMix64 (Stafford Mix13)
    (0x9E3779B97F4A7C15, (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53), (33, 33, 33)),
    (0x6A09E667F3BCC908, (0xBF58476D1CE4E5B9, 0x94D049BB133111EB), (30, 27, 31)),
)


def reference_digest(spec: TableSpec, rows: list[tuple[int, ...]]) -> str:
    places = reference_layout(spec)
    n_words = places[-1][0] + 1
    sums = [0, 0]
    for row in rows:
        words = [0] * n_words
        for (word, shift), value in zip(places, row, strict=True):
            words[word] |= int(value) << shift
        for lane, (seed, multipliers, shifts) in enumerate(LANE_CONSTANTS):
            h = seed
            for word in words:
                h = reference_fmix(h ^ word, multipliers, shifts)
            sums[lane] = (sums[lane] + h) % (1 << 64)
    bits = [1 if c.kind is Kind.BOOL else max(1, c.maximum.bit_length()) for c in spec.columns]
    layout = ",".join(
        f"{c.name}:{c.kind.value}:{b}" for c, b in zip(spec.columns, bits, strict=True)
    )
    text = f"das-records/1\n{spec.name}\n{layout}\n{len(rows)}\n{sums[0]:016x}{sums[1]:016x}\n"
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------- helpers


def value_range(column: Column) -> tuple[int, int]:
    if column.kind is Kind.BOOL:
        return 0, 1
    low = 0 if column.kind is Kind.CODE_OR_NULL else column.minimum
    return low, column.maximum


def rows_strategy(spec: TableSpec, max_rows: int = 40) -> st.SearchStrategy:
    row = st.tuples(*(st.integers(*value_range(c)) for c in spec.columns))
    return st.lists(row, max_size=max_rows)


def as_columns(spec: TableSpec, rows: list[tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Canonical int64 columns (what validation gives)."""
    matrix = np.array(rows, dtype=np.int64).reshape(len(rows), len(spec.columns))
    return {c.name: matrix[:, k] for k, c in enumerate(spec.columns)}


def as_frame(spec: TableSpec, rows: list[tuple[int, ...]]) -> pd.DataFrame:
    """Engine-form frame: each column in its compact dtype (bool for BOOL)."""
    columns = as_columns(spec, rows)
    return pd.DataFrame({c.name: columns[c.name].astype(c.dtype) for c in spec.columns}, copy=False)


def digest_of(spec: TableSpec, rows: list[tuple[int, ...]]) -> str:
    fingerprint = RecordFingerprint(spec)
    fingerprint.update_frame(as_frame(spec, rows))
    return fingerprint.hexdigest()


# ------------------------------------------------------------------------- the algorithm


def test_layouts_of_the_product_files() -> None:
    """Bit widths come from each column's maximum; a field never straddles two words."""
    fields, words = row_layout(PERSON_RECORDS)
    assert words == 4
    assert [f.bits for f in fields] == [8, 4, 1, 7, 10, 20, 14, 7, *[14] * 8, 14]
    assert [(f.word, f.shift) for f in fields][:8] == [
        (0, 0), (0, 8), (0, 12), (0, 13), (0, 20), (0, 30), (0, 50), (1, 0)
    ]  # fmt: skip
    assert {spec.name: row_layout(spec)[1] for spec in SPECS} == {
        "person-records": 4, "GRF-C": 2, "persons": 2, "units": 3, "geo": 3, "wide": 3,
    }  # fmt: skip
    for spec in SPECS:
        for field in row_layout(spec)[0]:
            assert field.shift + field.bits <= 64


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), block=st.sampled_from([1, 3, 7, 64, 1 << 15]))
def test_vectorized_equals_reference(spec: TableSpec, data, block: int) -> None:
    """The numpy implementation computes exactly the documented algorithm, whatever the
    block size it processes rows in."""
    rows = data.draw(rows_strategy(spec))
    with mock.patch.object(fp, "BLOCK_ROWS", block):
        assert digest_of(spec, rows) == reference_digest(spec, rows)


GOLDEN_PERSONS = [  # QAGE QSEX HOUSEHOLDER ST COU TRACT BLK CENRACE QRACE1..8 QSPAN
    (28, 1, 1, 1, 1, 1, 1, 1, 1000, 0, 0, 0, 0, 0, 0, 0, 1010),
    (0, 2, 0, 72, 999, 999_999, 9_999, 63, 9_999, 9_999, 9_999, 9_999, 9_999, 9_999, 9_999,
     9_999, 9_999),
    (115, 2, 1, 6, 37, 123_456, 1_002, 2, 1340, 2021, 0, 0, 0, 0, 0, 0, 2000),
]  # fmt: skip


def test_golden_vectors() -> None:
    """Frozen: these digests are ledger keys of real datasets. If this test fails the
    algorithm (or a product layout) changed, and every dataset would look new to the ledger:
    do not update the literals; add a new format tag instead."""
    one = RecordFingerprint(PERSON_RECORDS)
    one.update_frame(as_frame(PERSON_RECORDS, GOLDEN_PERSONS[:1]))
    assert one.sums == [0xB7D833B830570E88, 0xF121C37EBECB2016]  # the row's two lane hashes
    golden = {
        (PERSON_RECORDS, 3): "28ad57918cbd033514df23782660533dbb5e0e00deff63a06e91c981c7f80387",
        (PERSON_RECORDS, 1): "68e1b2848f823b1d0a5f0ff76df1133cca0646c2cd54e909bdefb8758ebbe415",
        (PERSON_RECORDS, 0): "43d7d3a8a72701b373202ebd0144a1c16e53dda2ba322d2c6591028932ce67d9",
    }
    for (spec, n), digest in golden.items():
        assert digest_of(spec, GOLDEN_PERSONS[:n]) == digest
    grf_c = [(1, 1, 1, 1, 99_999, 9_999), (72, 5, 950_100, 2_001, 3_000, 20)]
    persons = [(3, 100_000_001, 34, 1, 1, 20), (5, 4_294_967_295, 0, 2, 63, 38)]
    units = [(2, 100_000_001, 2, 2, 1, 1, 2, 1, 1, 1), (4, 7, 1500, 0, 0, 0, 0, 0, 0, 0)]
    geo = [(2, 100_000_001, 1, 1, 1, 1, 1, 3, 6, 99_999, 9_999)]
    assert digest_of(GRF_C, grf_c) == (
        "d7aeacbc1ad36eb8b3e0503990c9e5770e37c21aede205a2f4d0ed86b35798dd"
    )
    assert digest_of(PERSONS, persons) == (
        "cb5e152c55655077410a664b8500b74faeab2ef1235cb992c167586928010c8e"
    )
    assert digest_of(UNITS, units) == (
        "8677d75576d32b56e7e9502654096e79fdca433c716daebe6f3e89149c0e44ed"
    )
    assert digest_of(GEO, geo) == (
        "32b645011e2ec81b783ef1e5d29613da1d0e78cbc10a6fa5dad9bbfc8382dc86"
    )
    files = {"person-records": "a" * 64, "GRF-C": "0123456789abcdef" * 4}
    assert combine_fingerprints(files) == (
        "3f9554a9f71a6799b7d2aa389d93e6233bc4619838605490bd4bc71ccb0cd751"
    )


# ------------------------------------------------------------------------- multiset semantics


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_order_chunks_and_merges_do_not_matter(spec: TableSpec, data) -> None:
    """Any permutation of the rows, cut into any chunks, fed to one accumulator or to several
    merged ones, as compact frames or int64 columns: one fingerprint."""
    rows = data.draw(rows_strategy(spec))
    whole = digest_of(spec, rows)
    shuffled = data.draw(st.permutations(rows))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=5)))
    pieces = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    one = RecordFingerprint(spec)
    parts = []
    for k, piece in enumerate(pieces):
        if k % 2:
            one.update_columns(as_columns(spec, piece))
        else:
            one.update_frame(as_frame(spec, piece))
        part = RecordFingerprint(spec)
        part.update_columns(as_columns(spec, piece))
        parts.append(part)
    assert one.hexdigest() == whole
    assert one.rows == len(rows)
    merged = RecordFingerprint(spec)
    for part in reversed(parts):
        merged.merge(part)
    assert merged.hexdigest() == whole
    if len(parts) >= 2:
        total = parts[0] + parts[1]
        for part in parts[2:]:
            total = total + part
        assert total.hexdigest() == whole
        assert parts[0].rows == len(pieces[0])  # `+` leaves its operands alone


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_single_change_gives_a_new_fingerprint(spec: TableSpec) -> None:
    """Changing any one value of any one row (to its neighbours, the range ends, Null),
    duplicating, dropping or adding a row, or swapping two rows' values in a column: each
    variant has its own fingerprint (the base rows are distinct, so every variant is a
    different multiset)."""
    rng = np.random.default_rng(11)
    base = []
    while len(base) < 6:
        row = tuple(
            int(rng.integers(lo, hi, endpoint=True)) for lo, hi in map(value_range, spec.columns)
        )
        if row not in base:
            base.append(row)
    variants = [base]
    for i, row in enumerate(base):
        for k, column in enumerate(spec.columns):
            low, high = value_range(column)
            for value in sorted({low, high, row[k] - 1, row[k] + 1, low + 1, high - 1}):
                if low <= value <= high and value != row[k]:
                    changed = list(base)
                    changed[i] = (*row[:k], value, *row[k + 1 :])
                    variants.append(changed)
        variants.append([*base, row])  # duplicated
        variants.append(base[:i] + base[i + 1 :])  # dropped
    for k in range(len(spec.columns)):  # swap column k between rows 0 and 1
        a, b = base[0], base[1]
        if a[k] != b[k]:
            swapped = [(*a[:k], b[k], *a[k + 1 :]), (*b[:k], a[k], *b[k + 1 :]), *base[2:]]
            variants.append(swapped)
    digests = [digest_of(spec, rows) for rows in variants]
    distinct_multisets = {tuple(sorted(rows)) for rows in variants}
    assert len(distinct_multisets) == len(variants)
    assert len(set(digests)) == len(variants)


def test_duplicate_rows_count_each_time() -> None:
    row = GOLDEN_PERSONS[0]
    digests = {digest_of(PERSON_RECORDS, [row] * k) for k in range(1, 6)}
    assert len(digests) == 5


def test_the_layout_is_part_of_the_identity() -> None:
    """The same integers under another spec name or column order are another dataset."""
    renamed = TableSpec("other", GRF_C.stem, ".txt", "|", GRF_C.columns)
    reordered = TableSpec(GRF_C.name, GRF_C.stem, ".txt", "|", GRF_C.columns[::-1])
    rows = [(1, 1, 1, 1, 1, 1)]
    assert len({digest_of(GRF_C, rows), digest_of(renamed, rows), digest_of(reordered, rows)}) == 3


# ------------------------------------------------------------------------- errors


def test_values_outside_the_layout_are_refused_without_showing_them() -> None:
    rows = [GOLDEN_PERSONS[0]]
    columns = as_columns(PERSON_RECORDS, rows)
    for name, bad in (("QAGE", 777), ("QRACE1", -3), ("QSPAN", 54_321)):
        broken = {**columns, name: np.array([bad])}
        with pytest.raises(ValueError, match=name) as raised:
            RecordFingerprint(PERSON_RECORDS).update_columns(broken)
        assert str(bad) not in str(raised.value)
    frame = as_frame(PERSON_RECORDS, rows)
    for name, bad in (("QSEX", 10), ("QRACE2", -1), ("TABBLK", 10_000)):
        broken = frame.copy()
        broken[name] = np.array([bad]).astype(frame[name].dtype)  # compact dtype, out of range
        with pytest.raises(ValueError, match=name):
            RecordFingerprint(PERSON_RECORDS).update_frame(broken)
    with pytest.raises(ValueError, match="integers"):
        RecordFingerprint(PERSON_RECORDS).update_columns({**columns, "QAGE": np.array([1.0])})
    with pytest.raises(ValueError, match="missing column"):
        RecordFingerprint(PERSON_RECORDS).update_columns({"QAGE": columns["QAGE"]})
    with pytest.raises(ValueError, match="lacks column"):
        RecordFingerprint(PERSON_RECORDS).update_frame(pd.DataFrame({"QAGE": [1]}))
    with pytest.raises(ValueError, match="length"):
        RecordFingerprint(PERSON_RECORDS).update_columns({**columns, "QSEX": np.array([1, 2])})
    text = TableSpec("specs", "specs", ".txt", "|", (Column("NAME", kind=Kind.TEXT),))
    with pytest.raises(ValueError, match="text"):
        RecordFingerprint(text)


def test_merge_refuses_another_layout_and_repr_shows_nothing() -> None:
    persons = RecordFingerprint(PERSON_RECORDS)
    persons.update_frame(as_frame(PERSON_RECORDS, GOLDEN_PERSONS))
    with pytest.raises(ValueError, match="different layouts"):
        persons.merge(RecordFingerprint(GRF_C))
    assert repr(persons) == "RecordFingerprint(person-records)"


# ------------------------------------------------------------------------- datasets and files


def test_combine_fingerprints() -> None:
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    dataset = combine_fingerprints({"persons": a, "units": b, "geo": c})
    assert combine_fingerprints({"geo": c, "units": b, "persons": a}) == dataset
    assert combine_fingerprints({"persons": b, "units": a, "geo": c}) != dataset
    assert combine_fingerprints({"persons": a, "units": b}) != dataset
    assert combine_fingerprints({"persons": a, "units": b, "geo2": c}) != dataset
    for bad in ({}, {"persons": "A" * 64}, {"persons": a[:-1]}, {"a=b": a}, {"": a}):
        with pytest.raises(ValueError):
            combine_fingerprints(bad)


def test_kept_fingerprints_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "fingerprints"
    assert read_fingerprints(folder) == {}
    record_fingerprint(folder, "GRF-C", "1" * 64)
    record_fingerprint(folder, "person-records", "2" * 64)
    record_fingerprint(folder, "GRF-C", "3" * 64)
    assert read_fingerprints(folder) == {"GRF-C": "3" * 64, "person-records": "2" * 64}
    forget_fingerprint(folder, "GRF-C")
    forget_fingerprint(folder, "GRF-C")
    assert read_fingerprints(folder) == {"person-records": "2" * 64}
    with pytest.raises(ValueError):
        record_fingerprint(folder, "../x", "2" * 64)


def test_fingerprint_file_reads_text_and_parquet_alike(tmp_path: Path) -> None:
    """One read of the file (engine form): the text and a Parquet copy of it agree, and both
    agree with the in-memory fingerprint of the same integers."""
    from das.io.tables import convert_to_parquet

    header = "|".join(GRF_C.column_names)
    text = tmp_path / "GRF-C.txt"
    text.write_text(f"{header}\n01|001|000001|0001|99999|9999\n72|005|950100|2001|03000|0020\n")
    parquet = tmp_path / "copy" / "GRF-C.parquet"
    parquet.parent.mkdir()
    convert_to_parquet(text, parquet, GRF_C)
    expected = digest_of(GRF_C, [(1, 1, 1, 1, 99_999, 9_999), (72, 5, 950_100, 2_001, 3_000, 20)])
    assert fingerprint_file(text, GRF_C) == expected
    assert fingerprint_file(parquet, GRF_C, chunk_bytes=1) == expected
