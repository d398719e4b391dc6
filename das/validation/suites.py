"""The reviewed Great Expectations suites (``expectations/<file>.json``) and their engine twin.

Each input file has one suite, stored in GX 1.x's own JSON form (``name``, ``expectations``
of ``{"type", "kwargs", "meta"}``, ``meta``, ``notes``) so it loads directly into a
``great_expectations.ExpectationSuite`` (see :mod:`das.validation.gx_runner`).

Great Expectations validates pandas frames in memory and is slow on tens of millions of rows,
so the *same* suite is also interpreted here, vectorized with Arrow compute kernels, on every
row of every chunk. One JSON file is therefore the single source of both: a rule cannot be
checked by GX and forgotten by the engine, or the other way round. Only the expectation types
below are allowed (a suite using another type, or ``mostly``, is refused at load time, so
nothing is ever silently skipped):

==================================================  =============================================
expectation type                                    engine evaluation
==================================================  =============================================
expect_table_columns_to_match_ordered_list          header == column_list
expect_table_columns_to_match_set                   column_set ⊆ header (== when exact_match)
expect_column_values_to_be_of_type (``str``)        the column is text (always, in raw reads)
expect_column_values_to_match_regex                 RE2 full-row match; null fails
expect_column_values_to_be_in_set                   membership; null fails
expect_column_values_to_be_unique                   64-bit hash of the value, over all chunks
expect_compound_columns_to_be_unique                64-bit hash of the joined values
==================================================  =============================================

Uniqueness uses a 64-bit hash of the text: a duplicate is never missed; a hash collision (odds
about n²/2⁶⁵, below 10⁻⁵ for 10⁸ rows) could only add a false failure, never hide one. As in
GX, every occurrence of a repeated value counts as a failing row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from das.resources import expectations_dir

# The shipped suites (package data: a checkout's expectations/ folder, or the installed copy).
EXPECTATIONS_DIR = expectations_dir()

TABLE_TYPES = (
    "expect_table_columns_to_match_ordered_list",
    "expect_table_columns_to_match_set",
)
COLUMN_TYPES = (
    "expect_column_values_to_be_of_type",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_be_in_set",
)
UNIQUE_TYPES = (
    "expect_column_values_to_be_unique",
    "expect_compound_columns_to_be_unique",
)
SUPPORTED_TYPES = TABLE_TYPES + COLUMN_TYPES + UNIQUE_TYPES
_KEY_SEPARATOR = "\x1f"  # unit separator: cannot occur in a delimited production field
# ^[0-9]$, ^[0-9]{n}$, ^[0-9]{a,b}$: evaluated as "ASCII digits of a length" (same verdicts)
_DIGITS_ONLY = re.compile(r"\^\[0-9\](?:\{(\d+)(,(\d+))?\})?\$")


class SuiteError(ValueError):
    """A suite file is malformed or uses an expectation the engine cannot also evaluate."""


@dataclass(frozen=True)
class Suite:
    """One reviewed suite: its JSON (GX form) plus views by kind of expectation."""

    name: str
    data: dict[str, Any]
    path: Path

    @property
    def expectations(self) -> list[dict[str, Any]]:
        return list(self.data["expectations"])

    def of_types(self, types: tuple[str, ...]) -> list[dict[str, Any]]:
        return [e for e in self.expectations if e["type"] in types]

    @property
    def columns(self) -> list[str]:
        """Every column a column-level or uniqueness expectation reads, in suite order."""
        names: list[str] = []
        for expectation in self.of_types(COLUMN_TYPES + UNIQUE_TYPES):
            kwargs = expectation["kwargs"]
            for name in kwargs.get("column_list", [kwargs.get("column")]):
                if name is not None and name not in names:
                    names.append(name)
        return names


def load_suite(name: str, directory: str | Path | None = None) -> Suite:
    """Read ``<directory>/<name>.json`` and check that the engine can evaluate every rule."""
    path = Path(directory or EXPECTATIONS_DIR) / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SuiteError(f"{path}: expectation suite not found") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or data.get("name") != name:
        raise SuiteError(f"{path}: expected a suite object named {name!r}")
    expectations = data.get("expectations")
    if not isinstance(expectations, list) or not expectations:
        raise SuiteError(f"{path}: no expectations")
    for index, expectation in enumerate(expectations):
        kind = expectation.get("type")
        kwargs = expectation.get("kwargs", {})
        where = f"{path}: expectation {index} ({kind})"
        if kind not in SUPPORTED_TYPES:
            raise SuiteError(f"{where}: type not supported by the engine twin")
        if "mostly" in kwargs:
            raise SuiteError(f"{where}: 'mostly' is not allowed (validation fails closed)")
        if kind == "expect_column_values_to_be_of_type" and kwargs.get("type_") != "str":
            raise SuiteError(f"{where}: only type_='str' is supported (raw reads are text)")
        if kind == "expect_column_values_to_match_regex":
            pattern = kwargs.get("regex", "")
            if not (pattern.startswith("^") and pattern.endswith("$")):
                raise SuiteError(f"{where}: the regex must be anchored with ^...$")
    return Suite(name=name, data=data, path=path)


# ------------------------------------------------------------------------------------------------
# Header (table-level) rules
# ------------------------------------------------------------------------------------------------


def header_problem(expectation: dict[str, Any], header: list[str]) -> str | None:
    """Why a header breaks a table-level expectation (column names only), or None."""
    kwargs = expectation["kwargs"]
    if expectation["type"] == "expect_table_columns_to_match_ordered_list":
        expected = list(kwargs["column_list"])
        if header == expected:
            return None
        return _describe(expected, header, ordered=True)
    expected = list(kwargs["column_set"])
    missing = [name for name in expected if name not in header]
    extra = [name for name in header if name not in expected] if kwargs.get("exact_match") else []
    if not missing and not extra:
        return None
    return _describe(expected, header, ordered=False)


def _describe(expected: list[str], header: list[str], ordered: bool) -> str:
    missing = [name for name in expected if name not in header]
    extra = [name for name in header if name not in expected]
    duplicated = sorted({name for name in header if header.count(name) > 1})
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if extra:
        parts.append(f"unexpected {', '.join(extra)}")
    if duplicated:
        parts.append(f"duplicated {', '.join(duplicated)}")
    if ordered and not parts:
        parts.append(f"wrong order (expected {','.join(expected)})")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------------
# Row-level rules, vectorized on Arrow string arrays
# ------------------------------------------------------------------------------------------------


def is_digits_rule(expectation: dict[str, Any]) -> bool:
    """A regex rule of the form ^[0-9]{a,b}$ (checked without a regex engine)."""
    regex = expectation.get("kwargs", {}).get("regex")
    return regex is not None and _DIGITS_ONLY.fullmatch(regex) is not None


def failing_mask(expectation: dict[str, Any], array: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Boolean mask of the rows that break one column expectation (null always fails)."""
    kind = expectation["type"]
    kwargs = expectation["kwargs"]
    n = len(array)
    if kind == "expect_column_values_to_be_of_type":
        text = pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
        return np.zeros(n, dtype=bool) if text else np.ones(n, dtype=bool)
    if kind == "expect_column_values_to_match_regex":
        digits = _DIGITS_ONLY.fullmatch(kwargs["regex"])
        if digits is not None:  # ^[0-9]{a,b}$: ASCII digits and a length, no regex engine
            low = int(digits.group(1) or 1)
            high = int(digits.group(3) or low) if digits.group(2) else low
            length = pc.utf8_length(array)
            ok = pc.and_(
                pc.ascii_is_decimal(array),
                pc.and_(pc.greater_equal(length, low), pc.less_equal(length, high)),
            )
        else:
            ok = pc.match_substring_regex(array, kwargs["regex"])
    elif kind == "expect_column_values_to_be_in_set":
        values = pa.array([str(v) for v in kwargs["value_set"]], type=array.type)
        ok = pc.is_in(array, value_set=values)
    else:
        raise SuiteError(f"{kind} is not a row-level expectation")
    return ~np.asarray(pc.fill_null(ok, False), dtype=bool)


def key_hash(arrays: list[pa.ChunkedArray]) -> np.ndarray:
    """64-bit key per row of one column's text, or of several columns joined (uniqueness).

    A single column's digit strings of at most 17 characters (MAFIDs, codes) get an exact
    key, value · 32 + length (below 2⁶³; equal keys ⇔ equal texts); every other text gets a
    64-bit hash with the top bit set, so the two kinds never meet.
    """
    text = [a.cast(pa.large_string()) for a in arrays]
    if len(text) == 1:
        joined = text[0]
    else:
        separator = pa.scalar(_KEY_SEPARATOR, pa.large_string())
        joined = pc.binary_join_element_wise(*text, separator)
    if isinstance(joined, pa.Array):
        joined = pa.chunked_array([joined])
    keys = np.zeros(len(joined), dtype=np.uint64)
    exact = np.zeros(len(joined), dtype=bool)
    if len(text) == 1 and len(joined):
        length = pc.utf8_length(joined)
        exact = np.asarray(
            pc.fill_null(pc.and_(pc.ascii_is_decimal(joined), pc.less_equal(length, 17)), False)
        )
        if exact.any():
            digits = pc.if_else(pa.chunked_array([pa.array(exact)]), joined, "0")
            value = np.asarray(digits.cast(pa.uint64()), dtype=np.uint64)
            keys[exact] = (value * np.uint64(32) + np.asarray(length, dtype=np.uint64))[exact]
    if not exact.all():
        rest = np.flatnonzero(~exact)
        strings = pd.Series(pd.arrays.ArrowStringArray(joined), copy=False).iloc[rest]
        hashed = pd.util.hash_pandas_object(strings, index=False).to_numpy(dtype=np.uint64)
        keys[rest] = hashed | np.uint64(1 << 63)
    return keys


class UniqueAccumulator:
    """Collects (key, row) pairs of one uniqueness expectation across chunks.

    With ``spill`` (a folder) the pairs go to disk in ``buckets`` files by key, so memory
    stays bounded whatever the file's size; :meth:`duplicates` then reads one bucket at a
    time (equal keys share a bucket).
    """

    def __init__(
        self, expectation: dict[str, Any], spill: Path | None = None, buckets: int = 1
    ) -> None:
        kwargs = expectation["kwargs"]
        self.expectation = expectation
        self.columns: list[str] = list(kwargs.get("column_list", [kwargs.get("column")]))
        self._hashes: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._spill = spill
        self._buckets = max(1, buckets) if spill is not None else 1
        if spill is not None:
            spill.mkdir(parents=True, exist_ok=True)

    @property
    def label(self) -> str:
        return ",".join(self.columns)

    def _paths(self, bucket: int) -> tuple[Path, Path]:
        assert self._spill is not None
        return self._spill / f"{bucket:04d}.key", self._spill / f"{bucket:04d}.row"

    def add(self, arrays: list[pa.ChunkedArray], rows: np.ndarray) -> None:
        self.add_keys(key_hash(arrays), rows)

    def add_keys(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Add one chunk's keys (:func:`key_hash` of its :attr:`columns`) and row numbers."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._spill is None:
            self._hashes.append(keys)
            self._rows.append(rows)
            return
        bucket = (keys % np.uint64(self._buckets)).astype(np.int64)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self._buckets + 1))
        for k in range(self._buckets):  # a loop over buckets, not over rows
            part = order[bounds[k] : bounds[k + 1]]
            if part.size:
                key_path, row_path = self._paths(k)
                with key_path.open("ab") as handle:
                    handle.write(keys[part].tobytes())
                with row_path.open("ab") as handle:
                    handle.write(rows[part].tobytes())

    @staticmethod
    def _repeated(keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        same_as_next = ordered[1:] == ordered[:-1]
        repeated = np.zeros(ordered.size, dtype=bool)
        repeated[1:] |= same_as_next
        repeated[:-1] |= same_as_next
        return rows[order[repeated]]

    def duplicates(self, keep: int) -> tuple[int, np.ndarray]:
        """(rows whose key occurs more than once, the ``keep`` smallest of them, sorted)."""
        count, first = 0, np.zeros(0, dtype=np.int64)
        if self._spill is None:
            parts = (
                [(np.concatenate(self._hashes), np.concatenate(self._rows))]
                if (self._hashes)
                else []
            )
        else:
            parts = (
                (np.fromfile(key, dtype=np.uint64), np.fromfile(row, dtype=np.int64))
                for key, row in (self._paths(k) for k in range(self._buckets))
                if key.is_file()
            )
        for keys, rows in parts:
            repeated = self._repeated(keys, rows)
            count += repeated.size
            first = np.sort(np.concatenate([first, np.sort(repeated)[:keep]]))[:keep]
        return count, first

    def duplicate_rows(self) -> np.ndarray:
        """Sorted rows whose key occurs more than once in the file (every occurrence)."""
        if not self._hashes:
            return np.zeros(0, dtype=np.int64)
        return np.sort(self._repeated(np.concatenate(self._hashes), np.concatenate(self._rows)))
