"""PHSafe-style unit files in and out of a swap: ``units`` joined with ``geo`` on MAFID.

A swap record is one row of ``units`` plus the ``geo`` row of the same MAFID (geo columns
whose name is already a unit column, such as RTYPE, and MAFID itself stay in the geo file and
are not variables). Files are read with *every* column kept exactly as written (text files:
strings, so ``055`` stays ``055``; Parquet: the file's own types) and written back in the same
format, so the swapped folder is a drop-in PHSafe input: ``units`` and ``geo`` in their original
row order with only the swapping variables changed, ``persons`` (linked by MAFID, which stays
with its household) copied byte for byte when present.

Errors name the file, the column, how many rows and which row numbers (1 = first record),
never a value: the records are confidential.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from das.io.atomic import atomic_open, atomic_path
from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.tables import (
    Column,
    InputFormatError,
    Kind,
    TableSpec,
    is_parquet,
    read_header,
    read_raw,
    resolve_input,
    rows_text,
)
from das.io.writers import file_sha256

KEY = "MAFID"
_ROWS_SHOWN = 5


@dataclass(frozen=True)
class InputFile:
    """One input file as read: where it was, its hash, and its frame (0-based positional)."""

    path: Path
    sha256: str
    frame: pd.DataFrame

    @property
    def rows(self) -> int:
        return len(self.frame)


@dataclass(frozen=True)
class UnitData:
    """The unit records of a PHSafe input folder, joined with their geography.

    ``records`` is in ``units`` order; ``geo_to_record[g]`` is the record of geo row ``g``.
    ``variables`` are the record columns usable as matching/swapping/holding variables.
    """

    units: InputFile
    geo: InputFile
    persons: Path | None
    records: pd.DataFrame
    geo_to_record: np.ndarray

    @property
    def unit_variables(self) -> tuple[str, ...]:
        return tuple(name for name in self.units.frame.columns if name != KEY)

    @property
    def geo_variables(self) -> tuple[str, ...]:
        return tuple(
            name
            for name in self.geo.frame.columns
            if name != KEY and name not in self.units.frame.columns
        )

    @property
    def variables(self) -> tuple[str, ...]:
        return self.unit_variables + self.geo_variables


def _row_list(positions: np.ndarray, path: Path) -> str:
    """The rows at 0-based ``positions``, as the readers number them (:func:`rows_text`)."""
    return rows_text([int(p) + 1 for p in positions[:_ROWS_SHOWN]], positions.size, path)


def _read_all_columns(path: Path, base: TableSpec) -> pd.DataFrame:
    """Every column of the file, unconverted: strings from text, native types from Parquet."""
    if is_parquet(path):
        frame = pq.read_table(path).to_pandas()
    else:
        header = read_header(path, base)
        spec = TableSpec(
            name=base.name,
            stem=base.stem,
            text_suffix=base.text_suffix,
            delimiter=base.delimiter,
            columns=tuple(Column(name, Kind.TEXT) for name in header),
        )
        frame = read_raw(path, spec)
    if KEY not in frame.columns:
        raise InputFormatError(f"{path}: missing column {KEY}")
    return frame.reset_index(drop=True)


def _read_input(data_dir: Path, spec: TableSpec) -> InputFile:
    path = resolve_input(data_dir, spec)
    return InputFile(path=path, sha256=file_sha256(path), frame=_read_all_columns(path, spec))


def _check_unique(file: InputFile) -> None:
    duplicated = np.flatnonzero(file.frame[KEY].duplicated(keep="first").to_numpy())
    if duplicated.size:
        raise InputFormatError(
            f"{file.path}: column {KEY} repeats in {duplicated.size} row(s) "
            f"({_row_list(duplicated, file.path)}); each unit needs exactly one row"
        )


def _comparable_keys(series: pd.Series) -> pd.Series:
    """MAFIDs comparable across text and Parquet files (``000000001`` and 1 are one unit)."""
    if pd.api.types.is_integer_dtype(series.dtype):
        return series.astype("int64")
    numeric = pd.to_numeric(series, errors="coerce")
    if numeric.isna().any():
        return series.astype(str)
    return numeric.astype("int64")


def read_unit_data(data_dir: str | Path) -> UnitData:
    """Read ``units`` and ``geo`` (``.csv`` or ``.parquet``) and join them 1:1 on MAFID.

    Every unit needs exactly one geo row and every geo row one unit (the swapped files must
    describe the same units); duplicates or unmatched rows are an input error.
    """
    data_dir = Path(data_dir)
    units = _read_input(data_dir, UNITS)
    geo = _read_input(data_dir, GEO)
    for file in (units, geo):
        _check_unique(file)
    unit_keys = pd.Index(_comparable_keys(units.frame[KEY]))
    geo_keys = pd.Index(_comparable_keys(geo.frame[KEY]))
    geo_to_record = unit_keys.get_indexer(geo_keys)
    unmatched_geo = np.flatnonzero(geo_to_record < 0)
    unmatched_units = np.flatnonzero(geo_keys.get_indexer(unit_keys) < 0)
    problems = []
    if unmatched_units.size:
        problems.append(
            f"{units.path}: {unmatched_units.size} unit(s) have no {geo.path.name} row "
            f"({_row_list(unmatched_units, units.path)})"
        )
    if unmatched_geo.size:
        problems.append(
            f"{geo.path}: {unmatched_geo.size} row(s) match no unit in {units.path.name} "
            f"({_row_list(unmatched_geo, geo.path)})"
        )
    if problems:
        raise InputFormatError("; ".join(problems))
    record_to_geo = np.empty(len(geo_to_record), dtype=np.int64)
    record_to_geo[geo_to_record] = np.arange(len(geo_to_record))
    geo_columns = [
        name for name in geo.frame.columns if name != KEY and name not in units.frame.columns
    ]
    aligned = geo.frame[geo_columns].take(record_to_geo).reset_index(drop=True)
    records = pd.concat([units.frame, aligned], axis=1)
    persons = None
    try:
        persons = resolve_input(data_dir, PERSONS)
    except FileNotFoundError:
        persons = None
    return UnitData(units, geo, persons, records, geo_to_record.astype(np.int64))


def _write_frame(frame: pd.DataFrame, path: Path, parquet: bool) -> None:
    """Write in the input's format: comma CSV (quoted only where needed) or Parquet."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if parquet:
        with atomic_path(path) as temporary:
            pq.write_table(table, temporary)
        return
    options = pa_csv.WriteOptions(include_header=False, delimiter=",", quoting_style="none")
    try:
        with atomic_open(path) as handle:
            handle.write((",".join(frame.columns) + "\n").encode("utf-8"))
            pa_csv.write_csv(table, handle, write_options=options)
    except pa.ArrowInvalid:
        # Some value holds a comma, quote or line break: quote those values, as the CSV
        # reader accepted them (slower, and rare in census files).
        with atomic_open(path) as handle:
            handle.write(frame.to_csv(index=False, lineterminator="\n").encode("utf-8"))


def write_frame_like(frame: pd.DataFrame, folder: Path, stem: str, like: Path) -> Path:
    """Write ``frame`` as ``folder/<stem>`` with the suffix (and format) of the file ``like``."""
    path = folder / f"{stem}{like.suffix}"
    _write_frame(frame, path, is_parquet(like))
    return path


def write_swapped_units(
    data: UnitData, swapped: pd.DataFrame, swap_columns: Sequence[str], folder: Path
) -> dict[str, Path]:
    """Write the swapped ``units`` and ``geo`` (and a copy of ``persons``) into ``folder``.

    Only the swapping columns change; each goes back to the file it came from, in that
    file's row order.
    """
    units = data.units.frame.copy()
    geo = data.geo.frame.copy()
    unit_columns = set(data.unit_variables)
    for name in swap_columns:
        if name in unit_columns:
            units[name] = swapped[name].array
        else:
            geo[name] = swapped[name].array.take(data.geo_to_record)
    written = {
        "units": write_frame_like(units, folder, UNITS.stem, data.units.path),
        "geo": write_frame_like(geo, folder, GEO.stem, data.geo.path),
    }
    if data.persons is not None:
        target = folder / data.persons.name
        shutil.copyfile(data.persons, target)
        written["persons"] = target
    return written
