"""SafeTab-P record inputs: ``person-records.txt`` and ``GRF-C.txt``
(docs/explanation/architecture.md#safetab-p).

Pipe-delimited with a header, UTF-8 (BOM tolerated), CRLF or LF, blank lines skipped; or a
``.parquet`` file of the same stem and columns. Engine form (compact, one numpy column each):

==============  ===========  ==========================================================
column          dtype        meaning
==============  ===========  ==========================================================
QAGE            uint8        0..255 (zero padding accepted; the 0..115 rule is validation's)
QSEX            uint8        1/2 (any 0..9 converts)
HOUSEHOLDER     bool         ``True``/``False``
TABBLKST        uint8        state FIPS (2-digit text)
TABBLKCOU       uint16       county (3-digit text)
TABTRACTCE      uint32       tract (6-digit text)
TABBLK          uint16       block (4-digit text)
CENRACE         uint8        01..63
QRACE1..QRACE8  int16        race code 1..9999, or **0 for the literal Null**
QSPAN           int16        ethnicity code 1..9999
PLACEFP         uint32       GRF-C: place (5-digit text; 99999 = not in a place)
AIANNHCE        uint16       GRF-C: AIANNH area (4-digit text; 9999 = not in one)
==============  ===========  ==========================================================

Geography stays integer: :func:`block_key` combines the four parts into one ``int64`` (for
joins and ``bincount`` keys) and :func:`block_id` renders the canonical 15-character block id
``SSCCCTTTTTTBBBB`` only where text is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.tables import (
    DEFAULT_CHUNK_BYTES,
    Column,
    Kind,
    TableSpec,
    iter_table,
    read_table,
    resolve_input,
    zero_pad,
)

NULL_RACE_CODE = 0  # engine value of a `Null` race slot; real codes are 1000..9999
RACE_COLUMNS = tuple(f"QRACE{k}" for k in range(1, 9))

_GEOGRAPHY = (
    Column("TABBLKST", dtype="uint8", maximum=99, width=2),
    Column("TABBLKCOU", dtype="uint16", maximum=999, width=3),
    Column("TABTRACTCE", dtype="uint32", maximum=999_999, width=6),
    Column("TABBLK", dtype="uint16", maximum=9_999, width=4),
)

PERSON_RECORDS = TableSpec(
    name="person-records",
    stem="person-records",
    text_suffix=".txt",
    delimiter="|",
    columns=(
        Column("QAGE", dtype="uint8", maximum=255, width=3),
        Column("QSEX", dtype="uint8", maximum=9, width=1),
        Column("HOUSEHOLDER", kind=Kind.BOOL, dtype="bool", width=5),
        *_GEOGRAPHY,
        Column("CENRACE", dtype="uint8", maximum=99, width=2),
        *(
            Column(name, kind=Kind.CODE_OR_NULL, dtype="int16", minimum=1, maximum=9_999, width=4)
            for name in RACE_COLUMNS
        ),
        Column("QSPAN", dtype="int16", minimum=1, maximum=9_999, width=4),
    ),
)

GRF_C = TableSpec(
    name="GRF-C",
    stem="GRF-C",
    text_suffix=".txt",
    delimiter="|",
    columns=(
        *_GEOGRAPHY,
        Column("PLACEFP", dtype="uint32", maximum=99_999, width=5),
        Column("AIANNHCE", dtype="uint16", maximum=9_999, width=4),
    ),
)

NOT_IN_PLACE = 99_999
NOT_IN_AIANNH = 9_999

_BLOCK_FACTORS = (10**13, 10**10, 10**4, 1)  # SS CCC TTTTTT BBBB


def person_records_path(data_dir: str | Path) -> Path:
    """``<data_dir>/person-records.txt`` or ``.parquet`` (exactly one must exist)."""
    return resolve_input(data_dir, PERSON_RECORDS)


def grf_c_path(data_dir: str | Path) -> Path:
    """``<data_dir>/GRF-C.txt`` or ``.parquet`` (exactly one must exist)."""
    return resolve_input(data_dir, GRF_C)


def read_person_records(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pd.DataFrame:
    """The whole person file in engine form (see the module table)."""
    return read_table(path, PERSON_RECORDS, chunk_bytes)


def iter_person_records(
    path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pd.DataFrame]:
    """The person file in engine form, one frame per ~``chunk_bytes`` of text."""
    return iter_table(path, PERSON_RECORDS, chunk_bytes)


def read_grf_c(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pd.DataFrame:
    """The GRF-C block file in engine form (extra columns are ignored)."""
    return read_table(path, GRF_C, chunk_bytes)


def iter_grf_c(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[pd.DataFrame]:
    return iter_table(path, GRF_C, chunk_bytes)


def block_key(frame: pd.DataFrame) -> np.ndarray:
    """One ``int64`` per row: the decimal number SSCCCTTTTTTBBBB (order-preserving, unique).

    15 digits < 2^63, so it is exact; ``zero_pad(block_key, 15)`` is the block id.
    """
    key = np.zeros(len(frame), dtype=np.int64)
    for column, factor in zip(_GEOGRAPHY, _BLOCK_FACTORS, strict=True):
        key += frame[column.name].to_numpy().astype(np.int64) * factor
    return key


def block_id(frame: pd.DataFrame) -> np.ndarray:
    """Canonical block ids ``SSCCCTTTTTTBBBB`` (15-character numpy strings), vectorized."""
    return zero_pad(block_key(frame), 15)


def race_code_matrix(frame: pd.DataFrame) -> np.ndarray:
    """QRACE1..QRACE8 as one ``(n, 8)`` int16 array (0 = Null slot)."""
    return np.column_stack([frame[name].to_numpy() for name in RACE_COLUMNS])
