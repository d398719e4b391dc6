"""Production-format writers: pipe-delimited tables with a header, and file hashes for audits.

The Census output format is ``COL1|COL2|...`` with a header line, UTF-8, ``\\n`` line ends and
no quoting, so a value may not contain ``|``, a quote or a line break; such a value (or a
missing one) is refused with the column's name, not the value.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from das.io.atomic import atomic_open

PIPE = "|"


def _arrow_batch(frame: pd.DataFrame, columns: Sequence[str]) -> pa.Table:
    missing = [name for name in columns if name not in frame.columns]
    if missing:
        raise KeyError(f"write_pipe_table: frame lacks column(s) {', '.join(missing)}")
    arrays = {}
    for name in columns:
        series = frame[name]
        if series.isna().any():
            raise ValueError(f"write_pipe_table: column {name} has missing values")
        if pd.api.types.is_bool_dtype(series.dtype):
            # Census style for booleans: True/False, not Arrow's true/false.
            arrays[name] = pa.array(np.where(series.to_numpy(), "True", "False"))
            continue
        array = pa.array(series, from_pandas=True)
        if pa.types.is_dictionary(array.type):
            array = array.cast(array.type.value_type)
        arrays[name] = array
    return pa.table(arrays)


def write_pipe_table(
    frames: pd.DataFrame | Iterable[pd.DataFrame],
    path: str | Path,
    columns: Sequence[str] | None = None,
) -> int:
    """Write one frame (or an iterable of frames, for outputs built in batches) as a pipe table.

    ``columns`` fixes the column order (default: the first frame's columns). The file is
    written atomically; returns the number of data rows. Integers are written in plain decimal,
    booleans as ``True``/``False``; format anything else (e.g. floats) as strings beforehand if
    the exact text matters.
    """
    if isinstance(frames, pd.DataFrame):
        frames = [frames]
    options = pa_csv.WriteOptions(include_header=False, delimiter=PIPE, quoting_style="none")
    rows = 0
    header_written = False
    with atomic_open(path) as handle:
        for frame in frames:
            if columns is None:
                columns = [str(name) for name in frame.columns]
            if not header_written:
                _write_header(handle, columns)
                header_written = True
            table = _arrow_batch(frame, columns)
            try:
                pa_csv.write_csv(table, handle, write_options=options)
            except pa.ArrowInvalid:
                raise ValueError(
                    f"write_pipe_table: {path}: a value contains '|', a quote or a line break"
                ) from None
            rows += table.num_rows
        if not header_written:
            if columns is None:
                raise ValueError("write_pipe_table: no frames and no columns given")
            _write_header(handle, columns)
    return rows


class PipeTableAppender:
    """Appends frames to an open pipe table (see :func:`open_pipe_table`)."""

    def __init__(self, handle: BinaryIO, path: Path, columns: Sequence[str]) -> None:
        self._handle = handle
        self._path = path
        self.columns = list(columns)
        self.rows = 0

    def write(self, frame: pd.DataFrame) -> int:
        """Append the frame's rows (its ``columns``, in that order); returns the rows added."""
        if len(frame) == 0:
            return 0
        table = _arrow_batch(frame, self.columns)
        options = pa_csv.WriteOptions(include_header=False, delimiter=PIPE, quoting_style="none")
        try:
            pa_csv.write_csv(table, self._handle, write_options=options)
        except pa.ArrowInvalid:
            raise ValueError(
                f"write_pipe_table: {self._path}: a value contains '|', a quote or a line break"
            ) from None
        self.rows += table.num_rows
        return table.num_rows


@contextlib.contextmanager
def open_pipe_table(path: str | Path, columns: Sequence[str]) -> Iterator[PipeTableAppender]:
    """A pipe table written frame by frame while the rows are produced (national outputs).

    The header is written first; the file appears atomically when the block ends without an
    error. The bytes are those :func:`write_pipe_table` writes for the frames concatenated.
    """
    with atomic_open(path) as handle:
        _write_header(handle, columns)
        yield PipeTableAppender(handle, Path(path), columns)


def _write_header(handle, columns: Sequence[str]) -> None:
    bad = [name for name in columns if any(char in name for char in '|"\r\n')]
    if bad:
        raise ValueError(f"write_pipe_table: invalid column name(s) {bad}")
    handle.write((PIPE.join(columns) + "\n").encode("utf-8"))


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in blocks (constant memory; for audit records)."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
