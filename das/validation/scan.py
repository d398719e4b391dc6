"""Stream one input file through its suite: every rule on every row, chunk by chunk.

:func:`scan_file` reads the file in its raw form (:func:`das.io.tables.iter_raw`: the file's own
strings, indexed by 1-based row number), evaluates the suite's header rules once and its column
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

Memory stays bounded by one chunk of strings plus the kept integer columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from das.io.fingerprint import RecordFingerprint
from das.io.tables import (
    DEFAULT_CHUNK_BYTES,
    Column,
    InputFormatError,
    Kind,
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
)

FLAGGED_ROWS = 200  # engine-flagged rows added to the GX sample, per file
FILE_READABLE = "file_readable"
FILE_PRESENT = "file_present"
_DIGITS = r"^[0-9]{1,18}$"

ChunkHook = Callable[[pd.DataFrame, dict[str, np.ndarray]], None]


def column_array(frame: pd.DataFrame, column: str) -> pa.ChunkedArray:
    """A raw frame's column as an Arrow string array (zero-copy for pandas' Arrow strings)."""
    array = pa.array(frame[column])
    if isinstance(array, pa.Array):
        array = pa.chunked_array([array])
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        array = array.cast(pa.large_string())
    return array


def to_int(array: pa.ChunkedArray, null_token: str | None = None) -> np.ndarray:
    """Decimal text -> int64 (leading zeros allowed); anything else -> -1.

    With ``null_token`` (race codes) that literal becomes 0. Fast path: Arrow's cast; only when
    it fails (or yields a sign) is a digits regex used to locate the bad values.
    """
    if null_token is not None:
        token = pa.scalar(null_token, array.type)
        array = pc.if_else(pc.equal(array, token), pa.scalar("0", array.type), array)
    try:
        if array.null_count:
            raise pa.ArrowInvalid("nulls")
        values = np.asarray(array.cast(pa.int64()), dtype=np.int64)
        if values.size and values.min() < 0:
            raise pa.ArrowInvalid("signed")
        return values
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ok = pc.fill_null(pc.match_substring_regex(array, _DIGITS), False)
        cleaned = pc.if_else(ok, array, pa.scalar("-1", array.type))
        return np.asarray(cleaned.cast(pa.int64()), dtype=np.int64)


class ColumnView:
    """One chunk's column; a general regex runs once per *distinct* value when it has few.

    Codes (ages, race codes, relationships ...) repeat millions of times in a chunk: a regex
    is then evaluated on the dictionary of distinct values and spread back by index (same
    verdicts as row by row). Set membership and digit rules are cheap per row and stay so.
    """

    _SAMPLE = 4_096

    def __init__(self, array: pa.ChunkedArray) -> None:
        self.array = array
        self._encoded: tuple[np.ndarray, pa.Array] | bool | None = False  # False: not tried

    def _dictionary(self) -> tuple[np.ndarray, pa.Array] | None:
        if self._encoded is False:
            self._encoded = None
            n = len(self.array)
            if n >= 4 * self._SAMPLE and self.array.null_count == 0:
                sample = pc.count_distinct(self.array.slice(0, self._SAMPLE)).as_py()
                if sample <= self._SAMPLE // 8:
                    encoded = pc.dictionary_encode(self.array.combine_chunks())
                    if len(encoded.dictionary) <= n // 8:
                        self._encoded = (np.asarray(encoded.indices), encoded.dictionary)
        return self._encoded  # type: ignore[return-value]

    def mask(self, expectation: dict) -> np.ndarray:
        general_regex = expectation[
            "type"
        ] == "expect_column_values_to_match_regex" and not is_digits_rule(expectation)
        encoded = self._dictionary() if general_regex else None
        if encoded is None:
            return failing_mask(expectation, self.array)
        indices, values = encoded
        return failing_mask(expectation, values)[indices]

    def ints(self, null_token: str | None) -> np.ndarray:
        encoded = self._encoded if isinstance(self._encoded, tuple) else None
        if encoded is None:
            return to_int(self.array, null_token)
        indices, values = encoded
        return to_int(pa.chunked_array([values]), null_token)[indices]

    def equals(self, token: str) -> np.ndarray:
        """Which values are exactly ``token`` (on the distinct values when encoded)."""
        encoded = self._encoded if isinstance(self._encoded, tuple) else None
        array = self.array if encoded is None else encoded[1]
        same = np.asarray(pc.fill_null(pc.equal(array, pa.scalar(token, array.type)), False))
        return same if encoded is None else same[encoded[0]]


_NULL_TOKEN = "Null"


def engine_ints(
    view: ColumnView, column: Column, converted: tuple[np.ndarray, str | None] | None = None
) -> np.ndarray:
    """The engine form of one raw column as int64 (what :func:`das.io.tables.iter_table` reads:
    UINT its value, CODE_OR_NULL ``Null`` → 0, BOOL True → 1 / False → 0); -1 where the engine
    reader would reject the text (not digits, out of ``minimum..maximum``, a written zero in a
    code-or-Null column whose codes start at 1).

    ``converted`` is the (values, null token) this chunk's :meth:`ColumnView.ints` already
    gave for the column, reused when its token means the same as the engine's.
    """
    if column.kind is Kind.BOOL:
        true = view.equals("True")
        return np.where(true, 1, np.where(view.equals("False"), 0, -1)).astype(np.int64)
    if column.kind is Kind.TEXT:
        raise ValueError(f"column {column.name} is text: it has no integer engine form")
    token = _NULL_TOKEN if column.kind is Kind.CODE_OR_NULL else None
    reuse = converted is not None and converted[1] == token
    values = converted[0] if reuse else view.ints(token)
    ok = (values >= column.minimum) & (values <= column.maximum)
    if column.kind is Kind.CODE_OR_NULL:
        zero = values == 0  # Null, or a written zero (valid only if the codes start at 0)
        if column.minimum == 0:
            ok |= zero
        elif zero.any():
            ok |= view.equals(_NULL_TOKEN)
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

    def add(self, frame: pd.DataFrame) -> None:
        rows = frame.index.to_numpy()
        # Widen the stride before taking rows, so a big chunk is never copied whole.
        while self.size + int(((rows - 1) % self.stride == 0).sum()) > self.limit:
            self.stride *= 2
            self.parts = [p[(p.index.to_numpy() - 1) % self.stride == 0] for p in self.parts]
            self.size = sum(len(p) for p in self.parts)
        part = frame.iloc[np.flatnonzero((rows - 1) % self.stride == 0)]
        self.parts.append(part)
        self.size += len(part)

    def add_flagged(self, frame: pd.DataFrame, mask: np.ndarray) -> None:
        room = FLAGGED_ROWS - self.flagged_size
        if room > 0 and mask.any():
            part = frame[mask].iloc[:room]
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
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    spill_dir: Path | None = None,
    buckets: int = 1,
    fingerprint: bool = False,
) -> FileScan:
    """Check every suite rule on every row of ``path``; return counts, sample and kept columns.

    ``convert`` maps columns to convert to int64 for the product checks (value: a null token
    such as ``"Null"`` that becomes 0, or None); -1 marks text that is not a number. With
    ``retain`` the converted columns of all chunks are kept (``FileScan.kept``, row r at index
    r - 1); otherwise they are only passed to ``on_chunk`` with the chunk's raw frame.
    With ``spill_dir``, uniqueness keys go to disk in ``buckets`` files (bounded memory).
    With ``fingerprint``, ``FileScan.fingerprint`` is the file's canonical fingerprint (None
    when a value does not convert or the file was not read to its end).
    """
    convert = dict(convert or {})
    summary = FileSummary(file=label, path=str(path) if path else None, gx_suite=suite.name)
    scan = FileScan(label=label, path=path, spec=spec, summary=summary)
    if path is None:
        return scan
    try:
        header = read_header(path, spec)
    except InputFormatError as exc:
        collector.add(label, None, FILE_READABLE, str(exc), count=1)
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
        return scan  # the rows cannot be read against this layout: the header failure says why

    column_rules = suite.of_types(COLUMN_TYPES)
    uniques = [
        UniqueAccumulator(
            e, None if spill_dir is None else spill_dir / f"unique-{label}-{index}", buckets
        )
        for index, e in enumerate(suite.of_types(UNIQUE_TYPES))
    ]
    sample = _Sample(sample_rows)
    kept: dict[str, list[np.ndarray]] = {name: [] for name in convert}
    accumulator = RecordFingerprint(spec) if fingerprint else None
    rows_read = 0
    try:
        for frame in iter_raw(path, spec, chunk_bytes):
            rows = frame.index.to_numpy()
            rows_read += len(frame)
            arrays = {name: column_array(frame, name) for name in spec.column_names}
            views = {name: ColumnView(arrays[name]) for name in spec.column_names}
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
            for unique in uniques:
                unique.add([arrays[c] for c in unique.columns], rows)
            sample.add(frame)
            sample.add_flagged(frame, flagged)
            converted = {name: views[name].ints(null_token) for name, null_token in convert.items()}
            if accumulator is not None:
                accumulator = _fingerprint_chunk(accumulator, spec, views, converted, convert)
            if retain:
                for name, values in converted.items():
                    kept[name].append(values)
            if on_chunk is not None:
                on_chunk(frame, converted)
    except InputFormatError as exc:
        summary.rows = rows_read
        collector.add(label, None, FILE_READABLE, str(exc), count=1)
        return scan
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
    if accumulator is not None:
        scan.fingerprint = accumulator.hexdigest()
    return scan


def _fingerprint_chunk(
    accumulator: RecordFingerprint,
    spec: TableSpec,
    views: Mapping[str, ColumnView],
    converted: Mapping[str, np.ndarray],
    convert: Mapping[str, str | None],
) -> RecordFingerprint | None:
    """Add one chunk to the file's fingerprint; None (no fingerprint) if a value does not
    convert to its engine form (validation reports that value through the suite)."""
    canonical = {}
    for column in spec.columns:
        name = column.name
        given = (converted[name], convert[name]) if name in converted else None
        values = engine_ints(views[name], column, given)
        if values.size and values.min() < 0:
            return None
        canonical[name] = values
    accumulator.update_columns(canonical)
    return accumulator


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


def rows_of(frame: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """The 1-based row numbers of the masked rows of a raw chunk."""
    return frame.index.to_numpy()[mask]


def first_values(frame: pd.DataFrame, column: str, mask: np.ndarray, n: int = 5) -> list[str]:
    """The text of the first ``n`` masked rows of one column (only those rows are converted)."""
    index = np.flatnonzero(mask)[:n]
    return [str(value) for value in frame[column].iloc[index].tolist()] if index.size else []


def joined_values(frame: pd.DataFrame, columns: Sequence[str], mask: np.ndarray, sep: str):
    """The first few masked rows' text of ``columns``, joined with the file delimiter."""
    index = np.flatnonzero(mask)[:5]
    if not index.size:
        return []
    parts = [frame[c].iloc[index].astype(str).tolist() for c in columns]
    return [sep.join(fields) for fields in zip(*parts, strict=True)]
