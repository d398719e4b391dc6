"""PHSafe record inputs: ``persons.csv``, ``units.csv``, ``geo.csv``
(docs/explanation/architecture.md#phsafe).

Comma-delimited with a header (standard CSV quoting accepted), UTF-8, CRLF or LF, blank lines
skipped; or ``.parquet`` files of the same stems and columns. Extra columns are ignored. Engine
form: every column an unsigned integer of the smallest type that holds its documented codes
(two-digit codes such as CENRACE ``01`` or HHT2 ``09`` become 1 and 9).

MAFID is ``uint32`` (the 9-digit Master Address File id; at most 4,294,967,295). FINAL_POP and
NPF are ``uint32``/``uint16`` because group-quarters units hold thousands of people.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from das.io.tables import (
    DEFAULT_CHUNK_BYTES,
    Column,
    TableSpec,
    iter_table,
    read_table,
    resolve_input,
)

_RTYPE = Column("RTYPE", dtype="uint8", maximum=9, width=1)
_MAFID = Column("MAFID", dtype="uint32", maximum=4_294_967_295, width=9)


def _code(name: str, width: int = 1, maximum: int = 99) -> Column:
    return Column(name, dtype="uint8", maximum=maximum, width=width)


PERSONS = TableSpec(
    name="persons",
    stem="persons",
    text_suffix=".csv",
    delimiter=",",
    columns=(
        _RTYPE,
        _MAFID,
        Column("QAGE", dtype="uint8", maximum=255, width=3),
        _code("CENHISP"),
        _code("CENRACE", width=2),
        _code("RELSHIP", width=2),
    ),
)

UNITS = TableSpec(
    name="units",
    stem="units",
    text_suffix=".csv",
    delimiter=",",
    columns=(
        _RTYPE,
        _MAFID,
        Column("FINAL_POP", dtype="uint32", maximum=4_294_967_295, width=5),
        Column("NPF", dtype="uint16", maximum=65_535, width=2),
        _code("HHSPAN"),
        _code("HHRACE", width=2),
        _code("TEN"),
        _code("HHT"),
        _code("HHT2", width=2),
        _code("CPLT"),
    ),
)

GEO = TableSpec(
    name="geo",
    stem="geo",
    text_suffix=".csv",
    delimiter=",",
    columns=(
        _RTYPE,
        _MAFID,
        Column("TABBLKST", dtype="uint8", maximum=99, width=2),
        Column("TABBLKCOU", dtype="uint16", maximum=999, width=3),
        Column("TABTRACTCE", dtype="uint32", maximum=999_999, width=6),
        Column("TABBLK", dtype="uint16", maximum=9_999, width=4),
        _code("TABBLKGRPCE", maximum=9),
        _code("REGIONCE", maximum=9),
        _code("DIVISIONCE", maximum=9),
        Column("PLACEFP", dtype="uint32", maximum=99_999, width=5),
        Column("AIANNHCE", dtype="uint16", maximum=9_999, width=4),
    ),
)

PHSAFE_INPUTS = (PERSONS, UNITS, GEO)


def input_paths(data_dir: str | Path) -> dict[str, Path]:
    """``{"persons": path, "units": path, "geo": path}``; each ``.csv`` or ``.parquet``."""
    return {spec.name: resolve_input(data_dir, spec) for spec in PHSAFE_INPUTS}


def read_persons(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pd.DataFrame:
    return read_table(path, PERSONS, chunk_bytes)


def read_units(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pd.DataFrame:
    return read_table(path, UNITS, chunk_bytes)


def read_geo(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pd.DataFrame:
    return read_table(path, GEO, chunk_bytes)


def iter_persons(
    path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pd.DataFrame]:
    return iter_table(path, PERSONS, chunk_bytes)


def iter_units(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[pd.DataFrame]:
    return iter_table(path, UNITS, chunk_bytes)


def iter_geo(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[pd.DataFrame]:
    return iter_table(path, GEO, chunk_bytes)
