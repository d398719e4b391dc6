"""Readers and writers for the production file formats, atomic outputs and file hashes.

- :mod:`das.io.tables`: generic reader (raw strings with row numbers, or compact engine
  columns; whole file or chunk by chunk; text or Parquet).
- :mod:`das.io.safetab_p` / :mod:`das.io.phsafe`: the layouts of each product's input files.
- :mod:`das.io.writers`: pipe-delimited output tables, SHA-256 of files.
- :mod:`das.io.atomic`: atomic files and output folders.
- :mod:`das.io.fingerprint`: the canonical fingerprint of a record file (engine-form values,
  any encoding, any row order): the privacy ledger's dataset identity.
"""

from das.io.atomic import (
    atomic_open,
    atomic_output_dir,
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
)
from das.io.tables import (
    InputFormatError,
    TableSpec,
    convert_to_parquet,
    iter_raw,
    iter_table,
    read_header,
    read_raw,
    read_table,
    resolve_input,
    zero_pad,
)
from das.io.writers import file_sha256, write_pipe_table

__all__ = [
    "InputFormatError",
    "TableSpec",
    "atomic_open",
    "atomic_output_dir",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "convert_to_parquet",
    "file_sha256",
    "iter_raw",
    "iter_table",
    "read_header",
    "read_raw",
    "read_table",
    "resolve_input",
    "write_pipe_table",
    "zero_pad",
]
