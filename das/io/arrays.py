"""Large 1-D arrays on disk, written and read in blocks (national-scale intermediate data).

Two forms:

* ``.npy`` files written as a stream (:func:`write_npy_blocks`): the header first (the size is
  known in advance), then the blocks, with the SHA-256 of the data bytes computed on the way
  and the file published atomically. The bytes are those ``np.save`` writes for the whole
  array, so ``np.load`` (or a read-only memory map) reads it back.
* raw column files (:class:`RawColumns`): a folder of ``<name>.bin`` files of one dtype each,
  appended block by block and read back by row range; for spills that grow while a file is
  streamed and are read back piece by piece.

Reading a range (:func:`read_npy_range`, :meth:`RawColumns.read`) copies it out of a
short-lived mapping, so the pages of a multi-GB file never stay mapped in the process.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

from das.io.atomic import atomic_open

DIGEST_BLOCK_BYTES = 1 << 24


def npy_header(size: int, dtype: np.dtype | type) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a 1-D C-order array of ``size`` values."""
    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": (int(size),)}  # fmt: skip
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def write_npy_blocks(
    path: str | Path, blocks: Iterable[np.ndarray], size: int, dtype: np.dtype | type = np.int64
) -> str:
    """Write ``blocks`` (laid end to end: exactly ``size`` values) as one ``.npy`` file.

    Atomic (temp file + rename); returns the hex SHA-256 of the data bytes (the values as
    ``dtype``, little-endian as stored), i.e. ``sha256(whole_array.tobytes())``.
    """
    dtype = np.dtype(dtype)
    digest = hashlib.sha256()
    written = 0
    with atomic_open(path) as handle:
        handle.write(npy_header(size, dtype))
        for block in blocks:
            data = np.ascontiguousarray(block, dtype=dtype).reshape(-1)
            written += data.size
            if written > size:
                raise ValueError(f"{path}: more than the announced {size} values")
            raw = memoryview(data).cast("B")
            digest.update(raw)
            handle.write(raw)
        if written != size:
            raise ValueError(f"{path}: {written} values written, {size} announced")
    return digest.hexdigest()


def _data_offset(path: Path) -> tuple[int, tuple[int, ...], np.dtype]:
    with path.open("rb") as handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
        if fortran:
            raise ValueError(f"{path}: Fortran-ordered arrays are not supported")
        return handle.tell(), tuple(shape), dtype


def npy_info(path: str | Path) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of a ``.npy`` file (header only)."""
    _, shape, dtype = _data_offset(Path(path))
    return shape, dtype


def npy_data_digest(path: str | Path) -> str:
    """Hex SHA-256 of a ``.npy`` file's data bytes, read in blocks (constant memory)."""
    path = Path(path)
    offset, _, _ = _data_offset(path)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        handle.seek(offset)
        while chunk := handle.read(DIGEST_BLOCK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def open_npy(path: str | Path) -> np.memmap:
    """A read-only memory map of a ``.npy`` file."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


def read_npy_range(path: str | Path, start: int, stop: int) -> np.ndarray:
    """Values ``[start, stop)`` of a 1-D ``.npy`` file, copied (no mapping is kept)."""
    path = Path(path)
    offset, shape, dtype = _data_offset(path)
    if len(shape) != 1 or not 0 <= start <= stop <= shape[0]:
        raise ValueError(f"{path}: range [{start}, {stop}) outside shape {shape}")
    start_byte = offset + start * dtype.itemsize
    return np.fromfile(path, dtype=dtype, count=stop - start, offset=start_byte)


def read_npy_positions(path: str | Path, positions: np.ndarray) -> np.ndarray:
    """Values at sorted or unsorted ``positions`` of a 1-D ``.npy`` file, copied."""
    mapped = open_npy(path)
    try:
        return np.asarray(mapped[np.asarray(positions, dtype=np.int64)]).copy()
    finally:
        del mapped


class RawColumns:
    """A folder of equally long raw columns (``<name>.bin``), appended block by block."""

    def __init__(self, folder: str | Path, dtypes: Mapping[str, np.dtype | type]) -> None:
        self.folder = Path(folder)
        self.dtypes = {name: np.dtype(dtype) for name, dtype in dtypes.items()}

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.bin"

    def append(self, columns: Mapping[str, np.ndarray]) -> None:
        """Append one block (every column, same length)."""
        if set(columns) != set(self.dtypes):
            raise ValueError(f"{self.folder}: expected columns {sorted(self.dtypes)}")
        lengths = {np.asarray(values).size for values in columns.values()}
        if len(lengths) != 1:
            raise ValueError(f"{self.folder}: columns of different lengths")
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, values in columns.items():
            data = np.ascontiguousarray(values, dtype=self.dtypes[name])
            with self.path(name).open("ab") as handle:
                handle.write(memoryview(data).cast("B"))

    def appender(self) -> RawAppender:
        """Keep the column files open while many blocks are appended (see :class:`RawAppender`)."""
        return RawAppender(self)

    def rows(self) -> int:
        name, dtype = next(iter(self.dtypes.items()))
        path = self.path(name)
        return path.stat().st_size // dtype.itemsize if path.is_file() else 0

    def read(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` of every column (copies)."""
        total = self.rows()
        stop = total if stop is None else min(stop, total)
        out = {}
        for name, dtype in self.dtypes.items():
            path = self.path(name)
            if not path.is_file() or stop <= start:
                out[name] = np.zeros(0, dtype=dtype)
                continue
            out[name] = np.fromfile(
                path, dtype=dtype, count=stop - start, offset=start * dtype.itemsize
            )
        return out

    def remove(self) -> None:
        for name in self.dtypes:
            path = self.path(name)
            if path.exists():
                os.remove(path)


class RawAppender:
    """Appends blocks to a :class:`RawColumns` through open file handles (a context manager):
    for spills written in many small blocks, without an open/close per block."""

    def __init__(self, columns: RawColumns) -> None:
        self.columns = columns
        self._handles: dict[str, BinaryIO] = {}

    def __enter__(self) -> RawAppender:
        self.columns.folder.mkdir(parents=True, exist_ok=True)
        for name in self.columns.dtypes:
            self._handles[name] = self.columns.path(name).open("ab")
        return self

    def append(self, values: Mapping[str, np.ndarray]) -> None:
        if set(values) != set(self.columns.dtypes):
            expected = sorted(self.columns.dtypes)
            raise ValueError(f"{self.columns.folder}: expected columns {expected}")
        for name, handle in self._handles.items():
            data = np.ascontiguousarray(values[name], dtype=self.columns.dtypes[name])
            handle.write(memoryview(data).cast("B"))

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
