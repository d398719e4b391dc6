"""Delimited-text and Parquet readers for the production input files, in two forms.

*Raw* form (:func:`read_raw`, :func:`iter_raw`): the file's own values, every column a string,
exactly as written (no stripping, ``Null`` stays ``"Null"``). Validation reads this form so it
can report the curator's own values and rows.

*Engine* form (:func:`read_table`, :func:`iter_table`): compact numpy columns (``uint8`` ages,
``int16`` race codes, integer geography codes ...) converted with vectorized Arrow/numpy
kernels; no Python object per row. A value that cannot be converted raises
:class:`InputFormatError` naming the file, the column, how many values failed and the first row
numbers, never a value (the records are confidential).

Row numbers (both forms): row 1 is the first data record after the header; blank lines are not
records and are not counted (so row *k* is physical line *k* + 1 when the file has no blank line
before its end; the trailing blank line of the Census files does not matter). The raw frame
carries them as its index (named ``row``); engine frames have a plain 0-based index.

Text files are read in chunks of about ``chunk_bytes`` cut at line ends, each chunk parsed by
Arrow's multithreaded CSV reader, so memory stays bounded by one chunk of strings plus the
compact result; the iterators yield one frame per chunk (per Parquet batch) for files too big
to hold at once.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
_MAX_ROWS_SHOWN = 5
_NULL_TOKEN = "Null"
_DICTIONARY = pa.dictionary(pa.int32(), pa.string())


class InputFormatError(ValueError):
    """An input file cannot be read or converted; the message says where, never which values.

    "Where" (row numbers, how many rows) still describes the confidential file, so a run shows
    the message to the curator only, unless :attr:`shareable` (the message names no row, count
    or value: it may reach the Prefect server).
    """

    shareable = False


class Kind(Enum):
    """How a column's text converts to its engine form."""

    UINT = "uint"  # decimal digits (leading zeros allowed), value in [minimum, maximum]
    CODE_OR_NULL = "code_or_null"  # like UINT, or the literal ``Null`` (-> 0)
    BOOL = "bool"  # exactly ``True`` or ``False``
    TEXT = "text"  # kept as a string (spec-file names)


@dataclass(frozen=True)
class Column:
    """One column of a production file: its name, how it converts, and its engine dtype.

    ``width`` is the canonical zero-padded text width (geography codes, race codes); it sizes
    Parquet batches and lets callers rebuild the canonical string (:func:`zero_pad`).
    """

    name: str
    kind: Kind = Kind.UINT
    dtype: str = "uint8"
    minimum: int = 0
    maximum: int = 255
    width: int = 1

    def describe(self) -> str:
        """What a valid value looks like, for error messages (no data values)."""
        if self.kind is Kind.BOOL:
            return "True or False"
        if self.kind is Kind.TEXT:
            return "text"
        span = f"an integer in {self.minimum}..{self.maximum}"
        return f"{span} or {_NULL_TOKEN}" if self.kind is Kind.CODE_OR_NULL else span


@dataclass(frozen=True)
class TableSpec:
    """The layout of one production file: name, file stem, text suffix, delimiter, columns.

    ``extra_columns`` says what to do with columns the spec does not list: ``"ignore"`` (record
    files such as GRF-C carry many) or ``"reject"`` (spec files, where an extra column means the
    wrong file was given).
    """

    name: str
    stem: str
    text_suffix: str
    delimiter: str
    columns: tuple[Column, ...]
    extra_columns: str = "ignore"

    @property
    def column_names(self) -> list[str]:
        return [column.name for column in self.columns]

    @property
    def text_row_bytes(self) -> int:
        """Bytes of one canonical text row (widths + delimiters + newline): sizes batches."""
        return sum(column.width + 1 for column in self.columns)


# ------------------------------------------------------------------------------------------------
# Locating files and reading headers
# ------------------------------------------------------------------------------------------------


def not_a_regular_file(path: str | Path) -> str | None:
    """Why ``path`` exists but cannot be read as an input file, or None (absent, or a regular
    file). A named pipe would block a reader forever; a directory or a dangling link is a
    mistake the curator should see named, not reported as "not found"."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    if path.is_symlink() and not path.exists():
        return f"{path} is a symbolic link to a missing target ({os.readlink(path)})"
    mode = path.stat().st_mode
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"{path} is a directory, not a file"
    if stat.S_ISFIFO(mode):
        return f"{path} is a named pipe (FIFO), not a regular file"
    if stat.S_ISCHR(mode):
        return f"{path} is a character device, not a regular file"
    if stat.S_ISBLK(mode):
        return f"{path} is a block device, not a regular file"
    if stat.S_ISSOCK(mode):
        return f"{path} is a socket, not a regular file"
    return f"{path} is not a regular file"


def resolve_input(data_dir: str | Path, spec: TableSpec) -> Path:
    """Find ``<data_dir>/<stem>.txt|.csv`` (the spec's text suffix) or ``<stem>.parquet``.

    Exactly one must exist: none, or both, is an error (which one is meant would be a guess);
    a path that exists but is not a regular file is named for what it is.
    """
    data_dir = Path(data_dir)
    candidates = [data_dir / f"{spec.stem}{spec.text_suffix}", data_dir / f"{spec.stem}.parquet"]
    for path in candidates:
        problem = not_a_regular_file(path)
        if problem is not None:
            raise InputFormatError(f"{spec.name} input: {problem}")
    present = [path for path in candidates if path.is_file()]
    if not present:
        names = " or ".join(path.name for path in candidates)
        raise FileNotFoundError(f"{data_dir}: no {spec.name} input ({names} not found)")
    if len(present) > 1:
        names = " and ".join(path.name for path in present)
        raise InputFormatError(f"{data_dir}: both {names} exist; keep only one {spec.name} input")
    return present[0]


def is_parquet(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".parquet"


def estimated_rows(path: str | Path, spec: TableSpec) -> int:
    """Rows of an input, to size work: exact for Parquet (metadata), from the size for text
    (canonical row width), so an estimate only."""
    if is_parquet(path):
        return int(pq.ParquetFile(path).metadata.num_rows)
    return Path(path).stat().st_size // max(spec.text_row_bytes, 1)


def read_header(path: str | Path, spec: TableSpec) -> list[str]:
    """A file's column names (text: first line, UTF-8, optional BOM; Parquet: schema)."""
    path = Path(path)
    if is_parquet(path):
        return list(pq.read_schema(path).names)
    with path.open("rb") as handle:
        line = handle.readline()
    if not line.strip():
        raise InputFormatError(f"{path}: empty file (expected a header line)")
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputFormatError(f"{path}: header line is not valid UTF-8") from None
    names = text.rstrip("\r\n").split(spec.delimiter)
    if spec.delimiter == ",":  # CSV may quote its header names
        names = [
            name[1:-1] if len(name) > 1 and name[0] == name[-1] == '"' else name for name in names
        ]
    return names


def _check_header(path: Path, spec: TableSpec, header: list[str]) -> None:
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise InputFormatError(f"{path}: duplicate column(s) in header: {', '.join(duplicates)}")
    missing = [name for name in spec.column_names if name not in header]
    if missing:
        raise InputFormatError(
            f"{path}: missing column(s) {', '.join(missing)} "
            f"(a {spec.name} file needs {spec.delimiter.join(spec.column_names)})"
        )
    if spec.extra_columns == "reject":
        extra = [name for name in header if name not in spec.column_names]
        if extra:
            raise InputFormatError(f"{path}: unexpected column(s) {', '.join(extra)}")


# ------------------------------------------------------------------------------------------------
# Raw (string) reading
# ------------------------------------------------------------------------------------------------


HEADER_IS_ROW_0 = "the header line is row 0"


def rows_text(rows: Sequence[int], total: int, path: str | Path | None = None) -> str:
    """``data rows 2, 5, 7 and 3 more (the header line is row 0)``: the first few of ``total``
    row numbers, as this module counts them (row 1 is the first record after the header, so
    in a text file data row *k* is line *k* + 1 when no blank line comes before it). A Parquet
    file has no header line: no note. Row numbers only, never a value."""
    shown = [str(row) for row in rows[:_MAX_ROWS_SHOWN]]
    more = f" and {total - len(shown)} more" if total > len(shown) else ""
    noun = "data row" if total == 1 else "data rows"
    note = "" if path is not None and is_parquet(path) else f" ({HEADER_IS_ROW_0})"
    return f"{noun} {', '.join(shown)}{more}{note}"


def _chunk_bounds(path: Path, start: int, size: int, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """Byte ranges [a, b) covering [start, size), each ending just after a newline (or at EOF)."""
    with path.open("rb") as handle:
        position = start
        while position < size:
            end = position + chunk_bytes
            if end >= size:
                yield position, size
                return
            handle.seek(end)
            handle.readline()  # finish the line that straddles the cut
            end = handle.tell()
            yield position, end
            position = end


def _invalid_utf8_record(data: bytes) -> int:
    """0-based index, among the records of ``data`` (blank lines are not records), of the
    record holding the first byte that is not UTF-8. Only called on that error."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].split(b"\n")
        # Every complete line before the bad one that holds a record, then the bad line itself.
        return sum(1 for line in before[:-1] if line.strip(b"\r"))
    return 0


def _parse_chunk(
    path: Path,
    data: pa.Buffer,
    header: list[str],
    spec: TableSpec,
    first_row: int,
    use_threads: bool = True,
    dictionary: Collection[str] = (),
    one_block: bool = False,
) -> pa.Table:
    """Parse one chunk of data lines (no header) into string columns of the spec (the columns
    named in ``dictionary`` dictionary-encoded by the parser: the same strings). With
    ``one_block``, on this thread in one block: each column one contiguous array."""
    bad_rows: list[int | None] = []
    bad_shapes: set[tuple[int, int]] = set()

    def on_invalid(row: pa_csv.InvalidRow) -> str:
        # Keep only the shape and position: row.text holds confidential values.
        bad_rows.append(row.number)
        bad_shapes.add((row.expected_columns, row.actual_columns))
        return "skip"

    parse = pa_csv.ParseOptions(
        delimiter=spec.delimiter,
        quote_char='"' if spec.delimiter == "," else False,
        invalid_row_handler=on_invalid,
    )
    block_size = max(1 << 22, data.size + 1) if one_block else 1 << 22
    read = pa_csv.ReadOptions(
        column_names=header, use_threads=use_threads and not one_block, block_size=block_size
    )
    convert = pa_csv.ConvertOptions(
        include_columns=spec.column_names,
        column_types={
            name: _DICTIONARY if name in dictionary else pa.string() for name in spec.column_names
        },
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    try:
        table = pa_csv.read_csv(
            pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert
        )
    except pa.ArrowInvalid as exc:
        message = str(exc)
        if "Empty CSV file" in message:
            return pa.table({name: pa.array([], pa.string()) for name in spec.column_names})
        if "UTF8" in message:
            column = re.search(r"column #(\d+)", message)
            where = f" in column {header[int(column.group(1))]}" if column else ""
            row = first_row + _invalid_utf8_record(data.to_pybytes())
            raise InputFormatError(
                f"{path}: invalid UTF-8 data{where} in data row {row} ({HEADER_IS_ROW_0})"
            ) from None
        raise InputFormatError(
            f"{path}: cannot be parsed (data rows {first_row} onwards; {HEADER_IS_ROW_0})"
        ) from None
    if bad_rows:
        if use_threads and None in bad_rows:
            # Multithreaded parsing does not know row positions: re-parse to find them.
            return _parse_chunk(path, data, header, spec, first_row, False, dictionary, one_block)
        rows = sorted(first_row + number - 1 for number in bad_rows if number is not None)
        shapes = "; ".join(f"expected {e} fields, found {a}" for e, a in sorted(bad_shapes))
        raise InputFormatError(
            f"{path}: {len(bad_rows)} row(s) with the wrong number of fields ({shapes}); "
            f"{rows_text(rows, len(bad_rows), path)}"
        )
    return table.select(spec.column_names)


def _as_strings(path: Path, name: str, array: pa.ChunkedArray) -> pa.ChunkedArray:
    """A Parquet column as the strings its text file would hold (booleans as True/False)."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        array = array.cast(kind.value_type)
        kind = array.type
    if pa.types.is_string(kind):
        return array
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return array.cast(pa.string())
    if pa.types.is_boolean(kind):
        return pc.if_else(array, "True", "False")
    if pa.types.is_integer(kind):
        return array.cast(pa.string())
    raise InputFormatError(f"{path}: column {name} has Parquet type {kind}; expected string or int")


class RawSource:
    """A text or Parquet input opened for reading in raw form: the header read and checked, the
    file cut into chunks (:meth:`pieces`), each parsed by :meth:`parse` into string columns.

    Reading and parsing are separate so that a caller may parse several chunks at once on
    other threads; :func:`iter_raw_tables` parses them in order on the calling thread.
    Raises :class:`InputFormatError` (no values) when the header cannot be read or lacks a
    spec column.
    """

    def __init__(self, path: str | Path, spec: TableSpec) -> None:
        self.path = Path(path)
        self.spec = spec
        self.header = read_header(self.path, spec)
        _check_header(self.path, spec, self.header)

    def pieces(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[pa.Buffer | pa.Table]:
        """The file's chunks in order: for text, the bytes of about ``chunk_bytes`` of whole
        lines (read with plain reads, not a memory map: mapped pages of a multi-GB file would
        stay resident in the process until the whole file is read); for Parquet, a batch's
        spec columns already as strings."""
        path, spec = self.path, self.spec
        if is_parquet(path):
            batch_rows = max(1, chunk_bytes // max(1, spec.text_row_bytes))
            parquet = pq.ParquetFile(path)
            for batch in parquet.iter_batches(batch_size=batch_rows, columns=spec.column_names):
                table = pa.Table.from_batches([batch])
                names = spec.column_names
                yield pa.table({n: _as_strings(path, n, table.column(n)) for n in names})
            return
        with path.open("rb") as handle:
            handle.readline()
            data_start = handle.tell()
        size = path.stat().st_size
        with path.open("rb") as handle:
            for start, end in _chunk_bounds(path, data_start, size, chunk_bytes):
                handle.seek(start)
                yield pa.py_buffer(handle.read(end - start))

    def parse(
        self,
        piece: pa.Buffer | pa.Table,
        first_row: int,
        dictionary: Collection[str] = (),
        threads: bool = True,
    ) -> pa.Table:
        """One piece's spec columns as strings (text columns named in ``dictionary``
        dictionary-encoded by the parser: the same strings); errors name rows from
        ``first_row``. Without ``threads``, on this thread in one block (each column one
        contiguous array)."""
        if isinstance(piece, pa.Table):
            return piece
        return _parse_chunk(
            self.path, piece, self.header, self.spec, first_row, threads, tuple(dictionary),
            not threads,
        )  # fmt: skip


def _iter_raw_tables(
    path: str | Path,
    spec: TableSpec,
    chunk_bytes: int,
    typed: Callable[[pa.Buffer, list[str]], pd.DataFrame | None] | None = None,
) -> Iterator[tuple[int, pa.Table | pd.DataFrame]]:
    """(first row number, string table) per chunk of a text or Parquet file.

    With ``typed``, each text chunk is first offered to it (raw bytes, header); a frame it
    returns is yielded instead of the string table (the engine form's fast path).
    """
    source = RawSource(path, spec)
    next_row = 1
    for piece in source.pieces(chunk_bytes):
        if typed is not None and isinstance(piece, pa.Buffer):
            frame = typed(piece, source.header)
            if frame is not None:
                yield next_row, frame
                next_row += len(frame)
                continue
        table = source.parse(piece, next_row)
        del piece
        yield next_row, table
        next_row += table.num_rows


def _raw_frame(table: pa.Table, first_row: int) -> pd.DataFrame:
    frame = table.to_pandas()
    frame.index = pd.RangeIndex(first_row, first_row + table.num_rows, name="row")
    return frame


def iter_raw(
    path: str | Path, spec: TableSpec, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pd.DataFrame]:
    """Yield the file's spec columns as strings, one frame per chunk, indexed by row number."""
    for first_row, table in _iter_raw_tables(path, spec, chunk_bytes):
        yield _raw_frame(table, first_row)


def iter_raw_tables(
    path: str | Path, spec: TableSpec, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[int, pa.Table]]:
    """(first row number, the chunk's spec columns as Arrow strings), one per chunk: the raw
    form without pandas (a chunk's strings are not copied into a frame)."""
    for first_row, table in _iter_raw_tables(path, spec, chunk_bytes):
        assert isinstance(table, pa.Table)
        yield first_row, table


def read_raw(
    path: str | Path, spec: TableSpec, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> pd.DataFrame:
    """The whole file's spec columns as strings, indexed by row number (row 1 = first record)."""
    tables = [table for _, table in _iter_raw_tables(path, spec, chunk_bytes)]
    if not tables:
        empty = pa.table({name: pa.array([], pa.string()) for name in spec.column_names})
        return _raw_frame(empty, 1)
    return _raw_frame(pa.concat_tables(tables), 1)


# ------------------------------------------------------------------------------------------------
# Engine (compact) conversion
# ------------------------------------------------------------------------------------------------


def _convert_uint(column: Column, array: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """Digits -> integers in [minimum, maximum]; returns (values, failure mask or None).

    Fast path: Arrow's cast (rejects signs, spaces, decimals, empty strings). Only when it fails
    is a per-value mask computed, by regex, to count and locate the failures.
    """
    if column.kind is Kind.CODE_OR_NULL:
        array = pc.fill_null(array, _NULL_TOKEN)
        is_null = pc.equal(array, _NULL_TOKEN)
        array = pc.if_else(is_null, "0", array)
    else:
        is_null = None
    try:
        if array.null_count:
            raise pa.ArrowInvalid("null values")
        values = np.asarray(array.cast(pa.uint64()))
        digits = None
    except pa.ArrowInvalid:
        is_digits = pc.fill_null(pc.match_substring_regex(array, r"^[0-9]{1,19}$"), False)
        values = np.asarray(pc.if_else(is_digits, array, "0").cast(pa.uint64()))
        digits = np.asarray(is_digits)
    in_range = (values >= column.minimum) & (values <= column.maximum)
    if is_null is not None:
        null_mask = np.asarray(is_null)
        in_range |= null_mask
    ok = in_range if digits is None else in_range & digits
    failures = None if ok.all() else ~ok
    return values.astype(column.dtype), failures


def _convert_bool(array: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    is_true = np.asarray(pc.fill_null(pc.equal(array, "True"), False))
    is_false = np.asarray(pc.fill_null(pc.equal(array, "False"), False))
    ok = is_true | is_false
    return is_true, (None if ok.all() else ~ok)


def _convert_table(path: Path, spec: TableSpec, table: pa.Table, first_row: int) -> pd.DataFrame:
    """Convert one chunk of string columns to the compact engine form (all failures reported)."""
    data: dict[str, np.ndarray] = {}
    problems: list[str] = []
    for column in spec.columns:
        array = table.column(column.name)
        if column.kind is Kind.TEXT:
            data[column.name] = np.asarray(array.to_numpy(zero_copy_only=False), dtype=object)
            continue
        if column.kind is Kind.BOOL:
            values, failures = _convert_bool(array)
        else:
            values, failures = _convert_uint(column, array)
        if failures is not None:
            rows = np.flatnonzero(failures)
            problems.append(
                f"column {column.name}: {rows.size} value(s) not {column.describe()}; "
                f"{rows_text((rows[:_MAX_ROWS_SHOWN] + first_row).tolist(), rows.size, path)}"
            )
        data[column.name] = values
    if problems:
        details = "\n  ".join(problems)
        raise InputFormatError(f"{path}: cannot convert {spec.name} values\n  {details}")
    return pd.DataFrame(data, copy=False)


def _typed_chunk(spec: TableSpec, data: pa.Buffer, header: list[str]) -> pd.DataFrame | None:
    """Fast path: Arrow's CSV reader converts the numbers itself while parsing (threaded).

    Accepts a chunk only when every value converts cleanly and lies in its column's range
    (digits only, ``Null`` only in code-or-Null columns, ``True``/``False`` only); anything
    else returns None and the chunk goes through the string path, which says what is wrong.
    """
    types: dict[str, pa.DataType] = {}
    for column in spec.columns:
        if column.kind is Kind.BOOL:
            types[column.name] = pa.bool_()
        elif column.kind is Kind.TEXT:
            return None
        else:
            types[column.name] = pa.int64()
    parse = pa_csv.ParseOptions(
        delimiter=spec.delimiter, quote_char='"' if spec.delimiter == "," else False
    )
    read = pa_csv.ReadOptions(column_names=header, use_threads=True, block_size=1 << 22)
    convert = pa_csv.ConvertOptions(
        include_columns=spec.column_names,
        column_types=types,
        null_values=[_NULL_TOKEN],
        true_values=["True"],
        false_values=["False"],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    try:
        table = pa_csv.read_csv(
            pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        return None
    out: dict[str, np.ndarray] = {}
    for column in spec.columns:
        array = table.column(column.name)
        if column.kind is Kind.CODE_OR_NULL:
            array = pc.fill_null(array, 0)
        elif array.null_count:
            return None
        values = np.asarray(array)
        if column.kind is not Kind.BOOL and values.size:
            low, high = int(values.min()), int(values.max())
            lowest = 0 if column.kind is Kind.CODE_OR_NULL else column.minimum
            if low < lowest or high > column.maximum:
                return None
            if column.kind is Kind.CODE_OR_NULL and column.minimum > 0 and low == 0:
                # 0 must come from a Null, never from a written zero such as "0000"
                written_zero = pc.fill_null(pc.equal(table.column(column.name), 0), False)
                if pc.any(written_zero).as_py():
                    return None
        out[column.name] = values.astype(column.dtype)
    return pd.DataFrame(out, copy=False)


def iter_table(
    path: str | Path, spec: TableSpec, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pd.DataFrame]:
    """Yield the file in compact engine form, one frame per chunk (for files of any size).

    Text chunks take the fast path (:func:`_typed_chunk`) when every value is clean, else
    the string path; both give the same frame.
    """
    path = Path(path)

    def typed(data: pa.Buffer, header: list[str]) -> pd.DataFrame | None:
        return _typed_chunk(spec, data, header)

    for first_row, table in _iter_raw_tables(path, spec, chunk_bytes, typed):
        if isinstance(table, pd.DataFrame):
            yield table
        else:
            yield _convert_table(path, spec, table, first_row)


def read_table(
    path: str | Path, spec: TableSpec, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> pd.DataFrame:
    """The whole file in compact engine form (converted chunk by chunk, then concatenated)."""
    path = Path(path)
    frames = list(iter_table(path, spec, chunk_bytes))
    if not frames:
        empty = pa.table({name: pa.array([], pa.string()) for name in spec.column_names})
        return _convert_table(path, spec, empty, 1)
    if len(frames) == 1:
        return frames[0]
    return pd.DataFrame(
        {name: np.concatenate([f[name].to_numpy() for f in frames]) for name in spec.column_names},
        copy=False,
    )


def convert_to_parquet(
    path: str | Path,
    destination: str | Path,
    spec: TableSpec,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> int:
    """Copy a text input to Parquet with the same columns and string values; returns the row count.

    Streams chunk by chunk; the result reads back identical in both forms. The destination is
    written atomically (temp file + rename).
    """
    from das.io.atomic import atomic_path

    schema = pa.schema([(name, pa.string()) for name in spec.column_names])
    rows = 0
    with atomic_path(destination) as temporary, pq.ParquetWriter(temporary, schema) as writer:
        for _, table in _iter_raw_tables(path, spec, chunk_bytes):
            writer.write_table(table.cast(schema))
            rows += table.num_rows
    return rows


def zero_pad(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative integer codes as canonical zero-padded strings (numpy unicode, vectorized).

    A value with more digits than ``width`` keeps all its digits (never truncated).
    """
    values = np.asarray(values)
    if values.size and values.min() < 0:
        raise ValueError("zero_pad: codes must be non-negative")
    if not values.size:
        return np.empty(values.shape, dtype=f"U{width}")
    digits = len(str(int(values.max())))
    text = values.astype(np.uint64).astype(f"U{max(width, digits)}")
    return np.strings.zfill(text, width)
