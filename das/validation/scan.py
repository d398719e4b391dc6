"""Stream one input file through its suite: every rule on every row, chunk by chunk.

:func:`scan_file` reads the file in its raw form (:class:`das.io.tables.RawSource`: the file's
own strings, rows numbered from 1), evaluates the suite's header rules once and its column
rules on each chunk (Arrow kernels, no Python loop per row), accumulates uniqueness keys, hands
each chunk to an optional product hook (cross-file checks), keeps the integer columns the
product asks for, and keeps the Great Expectations sample:

- a systematic sample of at most ``sample_rows`` rows (every k-th row, k doubling whenever the
  sample outgrows the limit, so the file size need not be known in advance; the whole file when
  it has at most ``sample_rows`` rows), plus
- up to :data:`FLAGGED_ROWS` rows the engine found breaking a suite rule, so the Data Docs show
  the same failures as the engine.

With ``fingerprint=True`` it also computes the file's canonical fingerprint
(:mod:`das.io.fingerprint`) on the same chunks, so the privacy ledger's dataset identity costs
no extra read of the file: every spec column is converted to the integer the engine reader
would give (:func:`engine_ints`), and a file with one value the engine would reject has none.
An :class:`EngineTap` receives those engine-form chunks too: the engine's spill is made from
the very chunks validated and fingerprinted (one read of the input, :mod:`das.safetab_p.spill`,
:mod:`das.phsafe.streamed`).

Both cores: this thread reads the file; worker threads parse chunks (each in one block) and
check them (the code columns dictionary-encoded once the first chunk shows they hold few
values: every rule and conversion of theirs then runs on their distinct values); what the
workers found is applied in file order, so the report is the same with one worker or many.
Memory stays bounded by a few chunks of strings (about one and a half per worker) plus the
kept integer columns.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from das import allocator
from das.io.fingerprint import RecordFingerprint
from das.io.tables import (
    Column,
    InputFormatError,
    Kind,
    RawSource,
    TableSpec,
    iter_raw,
    read_header,
)
from das.validation.findings import MAX_ROWS, FailureCollector, FileSummary, short_value
from das.validation.suites import (
    COLUMN_TYPES,
    TABLE_TYPES,
    UNIQUE_TYPES,
    Suite,
    UniqueAccumulator,
    failing_mask,
    header_problem,
    is_digits_rule,
    key_hash,
)

FLAGGED_ROWS = 200  # engine-flagged rows added to the GX sample, per file
FILE_READABLE = "file_readable"
FILE_PRESENT = "file_present"
_DIGITS = r"^[0-9]{1,18}$"

MAX_SCAN_WORKERS = 4
# The read's chunk: each chunk in flight (read, parsed, checked, waiting for its turn: about
# five with two workers) holds its text and, while checked, several times as much in
# conversions and spill parts. 32 MiB: the one read of 30 M PHSafe persons peaked at 1.0 GiB
# in the run's process (2.4 GiB with 64 MiB chunks and int64 copies), at the same CPU-seconds.
SCAN_CHUNK_BYTES = 32 * 1024 * 1024
# Free memory goes back to the kernel every this many chunks and at the end of a file
# (das.allocator.release): the threads' heaps would otherwise keep the read's peak.
RELEASE_EVERY_CHUNKS = 16
# A product's per-chunk checks (see scan_file): called in a worker thread; what it returns, if
# anything, is called afterwards in file order.
ChunkHook = Callable[["RawChunk", dict[str, np.ndarray]], Callable[[], None] | None]


class RawChunk:
    """One chunk of a file in raw form: its spec columns as Arrow strings, the file's own text,
    and the row number of its first record (row 1 = the first record after the header); the
    columns named in ``encode`` are dictionary-encoded when first used (:meth:`view`).

    What validation reads, without a pandas frame of the chunk's strings (a copy of every
    string); pandas only for the few rows a report or the GX sample keeps. ``index`` is the
    chunk's row numbers, as a raw frame's index (:func:`das.io.tables.iter_raw`).
    """

    def __init__(self, table: pa.Table, first_row: int, encode: Collection[str] = ()) -> None:
        self.table = table
        self.first_row = first_row
        self.encode = frozenset(encode)
        self.index = pd.RangeIndex(first_row, first_row + table.num_rows, name="row")
        self._views: dict[str, ColumnView] = {}

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    def raw(self, name: str) -> pa.ChunkedArray:
        """A column as parsed (text, or dictionary-encoded text)."""
        return self.table.column(name)

    def forget_views(self) -> None:
        """Drop the columns' views (their encodings and conversions): memory of a chunk that
        is done being checked."""
        self._views.clear()

    def view(self, name: str) -> ColumnView:
        """The chunk's :class:`ColumnView` of a column (one per column: what one rule or
        conversion learns, e.g. its distinct values, the next one reuses)."""
        view = self._views.get(name)
        if view is None:
            view = ColumnView(self.table.column(name), encode=name in self.encode)
            self._views[name] = view
        return view

    def column(self, name: str) -> pa.ChunkedArray:
        """A column as plain text (a dictionary-encoded column decoded once)."""
        array = self.table.column(name)
        return self.view(name).array if pa.types.is_dictionary(array.type) else array

    def per_value(self, name: str, function: Callable[[pa.ChunkedArray], np.ndarray]):
        """``function`` (value by value, text to numpy) of a column's every value, on its
        distinct values when it has few (:meth:`ColumnView.per_value`)."""
        return self.view(name).per_value(function)

    def texts(self, name: str, positions: np.ndarray) -> list[str]:
        """The text of one column at 0-based ``positions`` of the chunk."""
        if not len(positions):
            return []
        taken = self.table.column(name).take(pa.array(positions, pa.int64()))
        return [str(value) for value in taken.to_pylist()]

    def frame(self, positions: np.ndarray) -> pd.DataFrame:
        """The rows at 0-based ``positions`` as a raw frame (strings, indexed by row number)."""
        positions = np.asarray(positions, dtype=np.int64)
        part = self.table.take(pa.array(positions))
        plain = {
            name: (
                part.column(name).cast(part.column(name).type.value_type)
                if pa.types.is_dictionary(part.column(name).type)
                else part.column(name)
            )
            for name in part.column_names
        }
        frame = pa.table(plain).to_pandas()
        frame.index = pd.Index(positions + self.first_row, name="row")
        return frame


Frame = pd.DataFrame | RawChunk


def column_array(frame: Frame, column: str) -> pa.ChunkedArray:
    """A raw chunk's column as an Arrow string array (zero-copy for pandas' Arrow strings)."""
    if isinstance(frame, RawChunk):
        return frame.column(column)
    array = pa.array(frame[column])
    if isinstance(array, pa.Array):
        array = pa.chunked_array([array])
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        array = array.cast(pa.large_string())
    return array


def to_int(array: pa.ChunkedArray, null_token: str | None = None) -> np.ndarray:
    """Decimal text -> int64 (leading zeros allowed, at most 18 digits); anything else -> -1.

    With ``null_token`` (race codes) that literal becomes 0. Value by value: Arrow's cast
    alone would also take ``-0`` or ``0x5``, so it is the fast path only when every value is
    ASCII digits; otherwise a digits regex locates the bad values. The same verdict for a
    value whatever the others, so it may run on a column's distinct values
    (:class:`ColumnView`).
    """
    if null_token is not None:
        token = pa.scalar(null_token, array.type)
        array = pc.if_else(pc.equal(array, token), pa.scalar("0", array.type), array)
    try:
        if array.null_count:
            raise pa.ArrowInvalid("nulls")
        if len(array) and not (
            pc.all(pc.ascii_is_decimal(array)).as_py()
            and pc.max(pc.binary_length(array)).as_py() <= 18
        ):
            raise pa.ArrowInvalid("not only digits")
        return np.asarray(array.cast(pa.int64()), dtype=np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ok = pc.fill_null(pc.match_substring_regex(array, _DIGITS), False)
        cleaned = pc.if_else(ok, array, pa.scalar("-1", array.type))
        return np.asarray(cleaned.cast(pa.int64()), dtype=np.int64)


def _indices(encoded: pa.DictionaryArray) -> np.ndarray:
    """A dictionary array's indices as numpy without a copy (Arrow's int32: an int64 copy
    would be 8 bytes a row for each code column of every chunk in flight)."""
    return np.asarray(encoded.indices)


class ColumnView:
    """One chunk's column; rules and conversions run once per *distinct* value when it has few.

    Codes (ages, race codes, relationships ...) repeat millions of times in a chunk: they are
    dictionary-encoded (as :func:`scan_file` asks, or for a general regex), each
    rule and conversion is evaluated on the distinct values and spread back by index (the
    same verdicts as value by value: every function given to :meth:`per_value` is one). Digit
    rules and set membership of other columns are cheap per row and stay so.
    """

    _SAMPLE = 4_096

    def __init__(self, array: pa.ChunkedArray, encode: bool = False) -> None:
        self._encoded: tuple[np.ndarray, pa.ChunkedArray] | bool | None = False  # False: not tried
        self._array: pa.ChunkedArray | None = None
        self._ints_of_distinct: dict[str | None, np.ndarray] = {}
        if encode and not pa.types.is_dictionary(array.type) and array.null_count == 0:
            array = pa.chunked_array([pc.dictionary_encode(array.combine_chunks())])
        if pa.types.is_dictionary(array.type):
            combined = array.combine_chunks()  # one dictionary for the chunk
            if combined.indices.null_count == 0:
                values = pa.chunked_array([combined.dictionary])
                self._encoded = (_indices(combined), values)
            else:
                self._array = pa.chunked_array([combined.cast(combined.type.value_type)])
        else:
            self._array = array

    @property
    def array(self) -> pa.ChunkedArray:
        """Every value as text (decoded once when the column came dictionary-encoded)."""
        if self._array is None:
            assert isinstance(self._encoded, tuple)
            indices, values = self._encoded
            self._array = pa.chunked_array([values.combine_chunks().take(pa.array(indices))])
        return self._array

    def _dictionary(self) -> tuple[np.ndarray, pa.ChunkedArray] | None:
        if self._encoded is False:
            self._encoded = None
            array = self.array
            n = len(array)
            if n >= 4 * self._SAMPLE and array.null_count == 0:
                sample = pc.count_distinct(array.slice(0, self._SAMPLE)).as_py()
                if sample <= self._SAMPLE // 8:
                    encoded = pc.dictionary_encode(array.combine_chunks())
                    if len(encoded.dictionary) <= n // 8:
                        self._encoded = (
                            _indices(encoded),
                            pa.chunked_array([encoded.dictionary]),
                        )
        return self._encoded  # type: ignore[return-value]

    @property
    def distinct(self) -> int:
        """Distinct values held when encoded (0 when not)."""
        return len(self._encoded[1]) if isinstance(self._encoded, tuple) else 0

    def distinct_values(self) -> tuple[np.ndarray, pa.ChunkedArray] | None:
        """(index of each row's value, the distinct values) when encoded, else None."""
        return self._encoded if isinstance(self._encoded, tuple) else None

    @property
    def encoded(self) -> bool:
        """Whether the column is held as its distinct values and an index."""
        return isinstance(self._encoded, tuple)

    def per_value(self, function: Callable[[pa.ChunkedArray], np.ndarray]) -> np.ndarray:
        """``function`` (a value-by-value map of text to a numpy array) of every value: on the
        distinct values when the column is encoded."""
        encoded = self._encoded if isinstance(self._encoded, tuple) else None
        if encoded is None:
            return function(self.array)
        indices, values = encoded
        result = function(values)
        if result.dtype == np.bool_ and not result.any():  # no value fails: no row does
            return np.zeros(indices.size, dtype=bool)
        return result[indices]

    def mask(self, expectation: dict) -> np.ndarray:
        general_regex = expectation[
            "type"
        ] == "expect_column_values_to_match_regex" and not is_digits_rule(expectation)
        if general_regex:
            self._dictionary()
        return self.per_value(lambda values: failing_mask(expectation, values))

    def ints(self, null_token: str | None) -> np.ndarray:
        return self.per_value(lambda values: self._distinct_ints(values, null_token))

    def _distinct_ints(self, values: pa.ChunkedArray, null_token: str | None) -> np.ndarray:
        result = to_int(values, null_token)
        if self.encoded:
            self._ints_of_distinct[null_token] = result
        return result

    def ints_of_distinct(self, null_token: str | None) -> np.ndarray | None:
        """:meth:`ints` of the distinct values, when the column is encoded and they were
        converted."""
        return self._ints_of_distinct.get(null_token) if self.encoded else None

    def equals(self, token: str) -> np.ndarray:
        """Which values are exactly ``token`` (on the distinct values when encoded)."""

        def same(values: pa.ChunkedArray) -> np.ndarray:
            token_value = pa.scalar(token, values.type)
            return np.asarray(pc.fill_null(pc.equal(values, token_value), False), dtype=bool)

        return self.per_value(same)


_NULL_TOKEN = "Null"


def engine_ints(
    view: ColumnView, column: Column, converted: tuple[np.ndarray, str | None] | None = None
) -> np.ndarray:
    """The engine form of one raw column as int64 (what :func:`das.io.tables.iter_table` reads:
    UINT its value, CODE_OR_NULL ``Null`` → 0, BOOL True → 1 / False → 0); -1 where the engine
    reader would reject the text (not digits, out of ``minimum..maximum``, a written zero in a
    code-or-Null column whose codes start at 1).

    ``converted`` is the (values, null token) this chunk's :meth:`ColumnView.ints` already
    gave for the column, reused when its token means the same as the engine's (a column with
    few distinct values is converted on those instead).
    """
    if column.kind is Kind.TEXT:
        raise ValueError(f"column {column.name} is text: it has no integer engine form")
    token = _NULL_TOKEN if column.kind is Kind.CODE_OR_NULL else None
    reuse = converted is not None and converted[1] == token
    encoded = view.distinct_values()
    if encoded is not None:
        indices, values = encoded
        engine = _engine_form(values, column)
        known = view.ints_of_distinct(token) if reuse else None
        if converted is not None and known is not None and np.array_equal(engine, known):
            return converted[0]  # the same values, already spread over the rows
        return engine[indices]
    if not reuse or converted is None:
        return view.per_value(lambda values: _engine_form(values, column))
    return _engine_range(converted[0], column, lambda: view.equals(_NULL_TOKEN))


def _engine_form(values: pa.ChunkedArray, column: Column) -> np.ndarray:
    """:func:`engine_ints` of plain text values (value by value)."""

    def equals(token: str) -> np.ndarray:
        same = pc.equal(values, pa.scalar(token, values.type))
        return np.asarray(pc.fill_null(same, False), dtype=bool)

    if column.kind is Kind.BOOL:
        return np.where(equals("True"), 1, np.where(equals("False"), 0, -1)).astype(np.int64)
    token = _NULL_TOKEN if column.kind is Kind.CODE_OR_NULL else None
    return _engine_range(to_int(values, token), column, lambda: equals(_NULL_TOKEN))


def _engine_range(
    values: np.ndarray, column: Column, is_null: Callable[[], np.ndarray]
) -> np.ndarray:
    """Converted values in ``minimum..maximum`` (a code-or-Null column: or a Null), else -1."""
    ok = (values >= column.minimum) & (values <= column.maximum)
    if column.kind is Kind.CODE_OR_NULL:
        zero = values == 0  # Null, or a written zero (valid only if the codes start at 0)
        if column.minimum == 0:
            ok |= zero
        elif zero.any():
            ok |= is_null()
    return np.where(ok, values, -1)


class _Sample:
    """Systematic sample (stride doubles past the limit) plus engine-flagged rows."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.stride = 1
        self.parts: list[pd.DataFrame] = []
        self.size = 0
        self.flagged: list[pd.DataFrame] = []
        self.flagged_size = 0

    def add(self, frame: RawChunk) -> None:
        rows = frame.index.to_numpy()
        # Widen the stride before taking rows, so a big chunk is never copied whole.
        while self.size + int(((rows - 1) % self.stride == 0).sum()) > self.limit:
            self.stride *= 2
            self.parts = [p[(p.index.to_numpy() - 1) % self.stride == 0] for p in self.parts]
            self.size = sum(len(p) for p in self.parts)
        part = frame.frame(np.flatnonzero((rows - 1) % self.stride == 0))
        self.parts.append(part)
        self.size += len(part)

    def add_flagged(self, frame: RawChunk, mask: np.ndarray) -> None:
        room = FLAGGED_ROWS - self.flagged_size
        if room > 0 and mask.any():
            part = frame.frame(np.flatnonzero(mask)[:room])
            self.flagged.append(part)
            self.flagged_size += len(part)

    def frame(self, columns: list[str]) -> pd.DataFrame:
        parts = [p for p in self.parts + self.flagged if len(p)]
        if not parts:
            return pd.DataFrame({name: pd.Series([], dtype="str") for name in columns})
        sample = pd.concat(parts)
        sample = sample[~sample.index.duplicated()].sort_index()
        return sample


@dataclass
class FileScan:
    """The outcome of scanning one file."""

    label: str
    path: Path | None
    spec: TableSpec
    summary: FileSummary
    header: list[str] | None = None
    sample: pd.DataFrame | None = None
    kept: dict[str, np.ndarray] = field(default_factory=dict)
    sampled: bool = False  # the GX sample is a systematic sample, not the whole file
    # Canonical fingerprint (das.io.fingerprint) when asked for, the file was read to its end
    # and every value converted; confidential-data derived: report.json only, never Prefect.
    fingerprint: str | None = None

    @property
    def scanned(self) -> bool:
        return self.summary.scanned


class EngineTap(Protocol):
    """Takes a file's records in engine form from validation's own read (the one pass over
    the input: the engine's spill is made from the chunks validation checks).

    :meth:`chunk` is called in a worker thread, for the chunks in any order, with the engine
    form (:func:`engine_ints`, int64) of every spec column of a chunk whose values all convert;
    what it returns (if anything) is called afterwards on the scanning thread, in file order
    (appending to files belongs there). After the first chunk that does not convert it is not
    called again. :meth:`done` ends the file: ``complete`` when every chunk was handed over
    and the file raised no error of its own (the whole validation may still fail: a caller
    uses what the tap made only when the report is ok).
    """

    def chunk(self, columns: Mapping[str, np.ndarray]) -> Callable[[], None] | None: ...

    def done(self, complete: bool) -> None: ...


@dataclass
class _Chunk:
    """What a worker thread found in one chunk, applied in file order by :func:`scan_file`."""

    frame: RawChunk
    calls: list[tuple[tuple, dict]]
    flagged: np.ndarray
    keys: list[np.ndarray]
    converted: dict[str, np.ndarray]
    fingerprint: RecordFingerprint | None
    commits: list[Callable[[], None]]
    many_values: list[str]  # encoded columns with too many distinct values


def few_values(table: pa.Table, columns: Collection[str], sample: int = 4_096) -> list[str]:
    """Those of ``columns`` whose first ``sample`` values hold at most an eighth as many
    distinct ones: they are dictionary-encoded in the next chunks (a column found to
    have many more is dropped again), so each rule and conversion runs on their distinct
    values."""
    if table.num_rows < sample:
        return []
    head = table.slice(0, sample)
    return [name for name in columns if pc.count_distinct(head.column(name)).as_py() <= sample // 8]


def scan_workers() -> int:
    """Worker threads checking chunks while the next one is parsed: the machine's cores, at
    most :data:`MAX_SCAN_WORKERS` (each holds a chunk's strings and their conversions)."""
    return max(1, min(MAX_SCAN_WORKERS, os.cpu_count() or 1))


def scan_file(
    path: Path | None,
    spec: TableSpec,
    suite: Suite,
    collector: FailureCollector,
    *,
    label: str,
    convert: Mapping[str, str | None] | None = None,
    retain: bool = False,
    on_chunk: ChunkHook | None = None,
    sample_rows: int = 20_000,
    chunk_bytes: int = SCAN_CHUNK_BYTES,
    spill_dir: Path | None = None,
    buckets: int = 1,
    fingerprint: bool = False,
    tap: EngineTap | None = None,
    workers: int | None = None,
) -> FileScan:
    """Check every suite rule on every row of ``path``; return counts, sample and kept columns.

    ``convert`` maps columns to convert to int64 for the product checks (value: a null token
    such as ``"Null"`` that becomes 0, or None); -1 marks text that is not a number. With
    ``retain`` the converted columns of all chunks are kept (``FileScan.kept``, row r at index
    r - 1); otherwise they are only passed to ``on_chunk`` with the chunk's raw frame.
    With ``spill_dir``, uniqueness keys go to disk in ``buckets`` files (bounded memory).
    With ``fingerprint``, ``FileScan.fingerprint`` is the file's canonical fingerprint (None
    when a value does not convert or the file was not read to its end). ``tap`` receives the
    engine form of every chunk (:class:`EngineTap`; implies the fingerprint's conversions).

    The file is read and parsed on this thread (Arrow's parser is multithreaded) while up to
    ``workers`` threads (default :func:`scan_workers`) check the chunks already parsed; what
    they found is applied in file order, so the outcome is the same with any number of
    workers. ``on_chunk`` runs in those threads: its ``collector.add`` calls are recorded and
    replayed in order (:meth:`FailureCollector.recording`), and a callable it returns is
    called in order on this thread.
    """
    convert = dict(convert or {})
    summary = FileSummary(file=label, path=str(path) if path else None, gx_suite=suite.name)
    scan = FileScan(label=label, path=path, spec=spec, summary=summary)
    tapped = tap
    if path is None:
        _close_tap(tap, False)
        return scan
    try:
        header = read_header(path, spec)
    except InputFormatError as exc:
        collector.add(label, None, FILE_READABLE, str(exc), count=1)
        _close_tap(tap, False)
        return scan
    scan.header = header
    for expectation in suite.of_types(TABLE_TYPES):
        problem = header_problem(expectation, header)
        if problem is not None:
            collector.add(
                label,
                None,
                expectation["type"],
                f"header: {problem}",
                count=1,
                values=[spec.delimiter.join(header)],
            )
    if any(name not in header for name in spec.column_names):
        _close_tap(tap, False)
        return scan  # the rows cannot be read against this layout: the header failure says why

    column_rules = suite.of_types(COLUMN_TYPES)
    # codes (a general regex or a set of values checks them): dictionary-encoded
    # when they hold few values; digit rules (numbers, identifiers) are cheap row by row
    few_valued = {
        e["kwargs"]["column"]
        for e in column_rules
        if e["type"] != "expect_column_values_to_be_of_type" and not is_digits_rule(e)
    }
    uniques = [
        UniqueAccumulator(
            e, None if spill_dir is None else spill_dir / f"unique-{label}-{index}", buckets
        )
        for index, e in enumerate(suite.of_types(UNIQUE_TYPES))
    ]
    sample = _Sample(sample_rows)
    kept: dict[str, list[np.ndarray]] = {name: [] for name in convert}
    accumulator = RecordFingerprint(spec) if fingerprint or tap is not None else None
    unconverted = threading.Event()  # a chunk did not convert: no fingerprint, no more taps

    def analyze(frame: RawChunk) -> _Chunk:
        """Every per-row check of one chunk (a worker thread; nothing shared is changed)."""
        with collector.recording() as calls:
            rows = frame.index.to_numpy()
            views = {name: frame.view(name) for name in spec.column_names}
            flagged = np.zeros(len(frame), dtype=bool)
            for expectation in column_rules:
                column = expectation["kwargs"]["column"]
                mask = views[column].mask(expectation)
                if mask.any():
                    flagged |= mask
                    collector.add(
                        label,
                        column,
                        expectation["type"],
                        expectation.get("meta", {}).get("rule", expectation["type"]),
                        rows=rows[mask],
                        values=first_values(frame, column, mask),
                    )
            keys = [key_hash([frame.column(c) for c in unique.columns]) for unique in uniques]
            converted = {name: views[name].ints(null_token) for name, null_token in convert.items()}
            chunk_print = None
            commits = []
            if accumulator is not None and not unconverted.is_set():
                engine = _engine_columns(spec, views, converted, convert)
                if engine is None:
                    unconverted.set()
                else:
                    chunk_print = RecordFingerprint(spec)
                    chunk_print.update_columns(engine)
                    if tapped is not None:
                        commit = tapped.chunk(engine)
                        if commit is not None:
                            commits.append(commit)
                    del engine
            if on_chunk is not None:
                commit = on_chunk(frame, converted)
                if commit is not None:
                    commits.insert(0, commit)
        many = [name for name, view in views.items() if view.distinct > max(len(frame) // 4, 64)]
        # What waits for its turn in file order holds only what apply uses: the chunk's text
        # (the sample) and its commits, not its views and conversions (several times the
        # text, for every chunk in flight); a later use of a view makes it again.
        del views
        frame.forget_views()
        return _Chunk(
            frame, calls, flagged, keys, converted if retain else {}, chunk_print, commits, many
        )

    def apply(chunk: _Chunk) -> None:
        """One analyzed chunk into the file's outcome, in file order (this thread)."""
        nonlocal accumulator
        collector.replay(chunk.calls)
        dictionary.difference_update(chunk.many_values)
        rows = chunk.frame.index.to_numpy()
        for unique, keys in zip(uniques, chunk.keys, strict=True):
            unique.add_keys(keys, rows)
        sample.add(chunk.frame)
        sample.add_flagged(chunk.frame, chunk.flagged)
        if accumulator is not None:
            if chunk.fingerprint is None:
                accumulator = None
            else:
                accumulator.merge(chunk.fingerprint)
        if retain:
            for name, values in chunk.converted.items():
                kept[name].append(values)
        for commit in chunk.commits:
            commit()
        nonlocal applied
        applied += 1
        if applied % RELEASE_EVERY_CHUNKS == 0:
            allocator.release()

    rows_read = 0
    applied = 0
    dictionary: set[str] = set()  # columns dictionary-encoded, after the first chunk
    parsing: deque[tuple[pa.Buffer | pa.Table, Future[pa.Table | None]]] = deque()
    pending: deque[Future[_Chunk]] = deque()
    workers = scan_workers() if workers is None else max(1, workers)

    def parse(source: RawSource, piece: pa.Buffer | pa.Table):
        """A worker's parse of one piece (rows unknown yet: None on an error, which the
        scanning thread parses again with the right row numbers to report it)."""
        try:
            return source.parse(piece, 1, threads=False)
        except InputFormatError:
            return None

    def next_parsed(source: RawSource) -> None:
        """The oldest piece parsed, numbered, and its checks started (in file order)."""
        nonlocal rows_read
        piece, parsed = parsing.popleft()
        table = parsed.result()
        if table is None:
            table = source.parse(piece, rows_read + 1, threads=False)  # raises, rows named
        del piece
        if not rows_read:
            dictionary.update(few_values(table, few_valued))
        frame = RawChunk(table, rows_read + 1, dictionary)
        rows_read += len(frame)
        pending.append(pool.submit(analyze, frame))
        while len(pending) > workers:  # bounded: a few chunks in memory at a time
            apply(pending.popleft().result())

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="das-scan") as pool:
        try:
            source = RawSource(path, spec)
            for piece in source.pieces(chunk_bytes):
                parsing.append((piece, pool.submit(parse, source, piece)))
                del piece
                # one parse queued behind the checks keeps the workers busy: more chunks in
                # flight would only hold memory (each ~0.3 GB of strings and conversions)
                while len(parsing) > max(1, workers // 2):
                    next_parsed(source)
            while parsing:
                next_parsed(source)
            while pending:
                apply(pending.popleft().result())
        except InputFormatError as exc:
            for _, future in parsing:
                future.cancel()
            while pending:  # the chunks before the unreadable one count, as they were read
                apply(pending.popleft().result())
            summary.rows = rows_read
            collector.add(label, None, FILE_READABLE, str(exc), count=1)
            _close_tap(tapped, False)
            return scan
        except BaseException:
            for future in [*(f for _, f in parsing), *pending]:
                future.cancel()
            _close_tap(tapped, False)
            raise
    summary.rows = rows_read
    summary.scanned = True
    for unique in uniques:
        count, first = unique.duplicates(MAX_ROWS)
        collector.add(
            label,
            unique.label,
            unique.expectation["type"],
            unique.expectation.get("meta", {}).get("rule", "unique"),
            rows=first,
            count=count,
            value_columns=unique.columns,
        )
    scan.kept = {
        name: (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
        for name, parts in kept.items()
    }
    kept.clear()  # (the chunks' copies: a tap's done may need the memory)
    frame = sample.frame(spec.column_names)
    # GX sees the header as written: the suite's columns with their text, others blanked.
    scan.sample = pd.DataFrame(
        {
            name: frame[name] if name in frame.columns else pd.Series("", index=frame.index)
            for name in dict.fromkeys(header)
        },
        index=frame.index,
    ).astype("str")
    scan.sampled = sample.stride > 1
    if accumulator is not None and fingerprint:
        scan.fingerprint = accumulator.hexdigest()
    _close_tap(tapped, accumulator is not None and not collector.has_errors(label))
    allocator.release()
    return scan


def _close_tap(tap: EngineTap | None, complete: bool) -> None:
    if tap is not None:
        tap.done(complete)


def _engine_columns(
    spec: TableSpec,
    views: Mapping[str, ColumnView],
    converted: Mapping[str, np.ndarray],
    convert: Mapping[str, str | None],
) -> dict[str, np.ndarray] | None:
    """The engine form of one chunk (every spec column, int64), or None if a value does not
    convert (validation reports that value through the suite)."""
    canonical = {}
    for column in spec.columns:
        name = column.name
        given = (converted[name], convert[name]) if name in converted else None
        values = engine_ints(views[name], column, given)
        if values.size and values.min() < 0:
            return None
        canonical[name] = values
    return canonical


def fill_values(collector: FailureCollector, scan: FileScan) -> None:
    """Read back the text of the first failing rows for failures found after the scan.

    One extra pass over the file, only when a cross-row check (uniqueness, a unit's persons)
    failed; multi-column values are joined with the file's delimiter.
    """
    pending = collector.needing_values(scan.label)
    if not pending or scan.path is None or not scan.scanned:
        return
    wanted = {f.key: f.rows[: min(len(f.rows), 5)] for f in pending}
    found: dict[tuple, dict[int, str]] = {key: {} for key in wanted}
    last_needed = max(max(rows) for rows in wanted.values())
    try:
        for frame in iter_raw(scan.path, scan.spec):
            for failure in pending:
                rows = [r for r in wanted[failure.key] if r in frame.index]
                if rows:
                    columns = [frame.loc[rows, c].astype("str") for c in failure.value_columns]
                    text = columns[0]
                    for other in columns[1:]:
                        text = text + scan.spec.delimiter + other
                    found[failure.key].update(zip(rows, text.tolist(), strict=True))
            if frame.index[-1] >= last_needed:
                break
    except InputFormatError:
        return
    for failure in pending:
        texts = found[failure.key]
        failure.values = [short_value(texts[row]) for row in wanted[failure.key] if row in texts]


def missing_file(collector: FailureCollector, label: str, message: str) -> None:
    """Record that an input file is absent or ambiguous (text and Parquet both present)."""
    collector.add(label, None, FILE_PRESENT, message, count=1)


def locate(
    data_dir: Path, spec: TableSpec, collector: FailureCollector, resolve: Callable[..., Path]
) -> tuple[Path | None, str]:
    """Resolve an input's path and its label (file name as found, else the text name)."""
    default = f"{spec.stem}{spec.text_suffix}"
    try:
        path = resolve(data_dir, spec)
    except FileNotFoundError as exc:
        missing_file(collector, default, str(exc))
        return None, default
    except InputFormatError as exc:
        missing_file(collector, default, str(exc))
        return None, default
    return path, path.name


def rows_of(frame: Frame, mask: np.ndarray) -> np.ndarray:
    """The 1-based row numbers of the masked rows of a raw chunk."""
    return frame.index.to_numpy()[mask]


def _texts(frame: Frame, column: str, index: np.ndarray) -> list[str]:
    if isinstance(frame, RawChunk):
        return frame.texts(column, index)
    return [str(value) for value in frame[column].iloc[index].tolist()]


def first_values(frame: Frame, column: str, mask: np.ndarray, n: int = 5) -> list[str]:
    """The text of the first ``n`` masked rows of one column (only those rows are converted)."""
    index = np.flatnonzero(mask)[:n]
    return _texts(frame, column, index) if index.size else []


def joined_values(frame: Frame, columns: Sequence[str], mask: np.ndarray, sep: str):
    """The first few masked rows' text of ``columns``, joined with the file delimiter."""
    index = np.flatnonzero(mask)[:5]
    if not index.size:
        return []
    parts = [_texts(frame, c, index) for c in columns]
    return [sep.join(fields) for fields in zip(*parts, strict=True)]
