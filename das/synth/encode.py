"""Fast rendering of synthetic records to delimited text or Parquet (no Python object per row).

Every column is first turned into an ``(n, width)`` ``uint8`` matrix of ASCII bytes, where a 0
byte is padding to drop (so variable-width fields such as ``True``/``False`` or an unpadded age
need no special case). Text rows are the column matrices joined with delimiter and newline
columns; dropping the 0 bytes of the row-major matrix yields the file bytes. The same matrices
become Arrow string arrays (offsets from the per-row lengths) for Parquet. Cost: a few numpy
passes over n x (row width) bytes per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_ZERO = ord("0")


def digits(values: np.ndarray, width: int, *, pad: bool = True) -> np.ndarray:
    """Decimal digits of non-negative integers as an ``(n, width)`` byte matrix.

    ``pad=True`` zero-pads to ``width`` (``7`` -> ``007``); ``pad=False`` drops leading zeros
    (``7`` -> ``7``, ``0`` -> ``0``). Values must have at most ``width`` digits.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() >= 10**width):
        raise ValueError(f"values do not fit in {width} digits")
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    numbers = (values[:, None] // powers[None, :]) % 10
    matrix = (numbers + _ZERO).astype(np.uint8)
    if not pad and width > 1:
        leading = np.cumsum(numbers[:, :-1] != 0, axis=1) == 0
        matrix[:, :-1][leading] = 0
    return matrix


def choice(index: np.ndarray, options: Sequence[str]) -> np.ndarray:
    """``options[index]`` for every row, as a byte matrix (shorter options padded with 0)."""
    width = max(len(option) for option in options)
    table = np.zeros((len(options), width), dtype=np.uint8)
    for i, option in enumerate(options):
        encoded = option.encode("ascii")
        table[i, : len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return table[np.asarray(index, dtype=np.int64)]


def code_or_null(values: np.ndarray, width: int = 4) -> np.ndarray:
    """Zero-padded codes, with 0 rendered as the literal ``Null``."""
    values = np.asarray(values, dtype=np.int64)
    matrix = digits(values, width)
    null = np.frombuffer(b"Null".ljust(width, b"\0")[:width], dtype=np.uint8)
    matrix[values == 0] = null
    return matrix


def text_rows(fields: Sequence[np.ndarray], delimiter: str) -> bytes:
    """Rows ``f1<d>f2<d>...fk\\n`` as bytes (0 bytes inside the fields are dropped)."""
    n = fields[0].shape[0]
    separator = np.full((n, 1), ord(delimiter), dtype=np.uint8)
    newline = np.full((n, 1), ord("\n"), dtype=np.uint8)
    pieces: list[np.ndarray] = []
    for field in fields:
        pieces.extend((field, separator))
    pieces[-1] = newline
    matrix = np.concatenate(pieces, axis=1)
    if any(bool((field == 0).any()) for field in fields):
        return matrix[matrix != 0].tobytes()
    return matrix.tobytes()


def arrow_strings(field: np.ndarray) -> pa.Array:
    """An ``(n, width)`` byte matrix as an Arrow string array (0 bytes dropped)."""
    field = np.ascontiguousarray(field)
    keep = field != 0
    lengths = keep.sum(axis=1, dtype=np.int64)
    offsets = np.zeros(field.shape[0] + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = field[keep].tobytes()
    return pa.StringArray.from_buffers(
        field.shape[0], pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)
    )


class TableWriter:
    """Appends chunks of rendered columns to one output file (delimited text or Parquet)."""

    def __init__(self, path: Path, columns: Sequence[str], delimiter: str, parquet: bool) -> None:
        self.path = path
        self.columns = list(columns)
        self.delimiter = delimiter
        self.rows = 0
        self._parquet: pq.ParquetWriter | None = None
        self._text: BinaryIO | None = None
        if parquet:
            schema = pa.schema([(name, pa.string()) for name in self.columns])
            self._parquet = pq.ParquetWriter(path, schema)
        else:
            self._text = path.open("wb")
            self._text.write((delimiter.join(self.columns) + "\n").encode("ascii"))

    def write(self, fields: Sequence[np.ndarray]) -> None:
        """Append one chunk: one byte matrix per column, all with the same number of rows."""
        if len(fields) != len(self.columns):
            raise ValueError(f"{self.path.name}: expected {len(self.columns)} columns")
        n = fields[0].shape[0]
        if n == 0:
            return
        if self._parquet is not None:
            table = pa.table(
                {
                    name: arrow_strings(field)
                    for name, field in zip(self.columns, fields, strict=True)
                }
            )
            self._parquet.write_table(table)
        else:
            assert self._text is not None
            self._text.write(text_rows(fields, self.delimiter))
        self.rows += n

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
        if self._text is not None:
            self._text.close()
            self._text = None

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
