"""Typed loader for SafeTab-P's four race/ethnicity spec files (the "parameters directory").

Files (pipe-delimited, header, UTF-8, CRLF or LF, blank lines ignored;
docs/explanation/architecture.md#safetab-p):

- ``race-and-ethnicity-codes.txt``: ``RACE_ETH_CODE|RACE_ETH_NAME``
- ``race-characteristic-iterations.txt``:
  ``ITERATION_CODE|ITERATION_NAME|LEVEL|ALONE|DETAILED_ONLY|COARSE_ONLY``
- ``ethnicity-characteristic-iterations.txt``: the same without ``ALONE``
- ``race-and-ethnicity-code-to-iteration.txt``: ``ITERATION_CODE|RACE_ETH_CODE``

This module checks *syntax* only, and reports every bad cell with file, row (1 = first record
after the header) and column: codes are exactly four digits, LEVEL is 0, 1 or 2, flags are
exactly ``True``, ``False`` or ``Null`` and ``Null`` only on LEVEL 0 rows, names are not empty.
Spec files are public, so the offending text is shown. The semantic rules (LEVEL 0 ⇔ Null
flags, not both DETAILED_ONLY and COARSE_ONLY, unique codes, pairs that reference known codes,
at most one iteration per code and (level, alone, filter)) belong to validation, which works on
the parsed arrays returned here; each entry keeps its source row for its messages.

Flags are tri-state ``int8``: :data:`TRUE` = 1, :data:`FALSE` = 0, :data:`NULL` = -1. The
ethnicity file has no ALONE column; its iterations carry ``alone = NULL``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.tables import Column, Kind, TableSpec, read_raw

TRUE, FALSE, NULL = 1, 0, -1
_FLAG_VALUES = {"True": TRUE, "False": FALSE, "Null": NULL}
_LEVELS = ("0", "1", "2")
_MAX_PROBLEMS = 20

CODES_FILE = "race-and-ethnicity-codes.txt"
RACE_ITERATIONS_FILE = "race-characteristic-iterations.txt"
ETHNICITY_ITERATIONS_FILE = "ethnicity-characteristic-iterations.txt"
CODE_TO_ITERATION_FILE = "race-and-ethnicity-code-to-iteration.txt"
SPEC_FILES = (CODES_FILE, RACE_ITERATIONS_FILE, ETHNICITY_ITERATIONS_FILE, CODE_TO_ITERATION_FILE)


class SpecFileError(ValueError):
    """A spec file is malformed; the message lists file, row, column and the offending text."""


def _spec(file_name: str, *names: str) -> TableSpec:
    return TableSpec(
        name=file_name,
        stem=file_name.removesuffix(".txt"),
        text_suffix=".txt",
        delimiter="|",
        columns=tuple(Column(name, kind=Kind.TEXT) for name in names),
        extra_columns="reject",
    )


_CODES = _spec(CODES_FILE, "RACE_ETH_CODE", "RACE_ETH_NAME")
_RACE_ITERATIONS = _spec(
    RACE_ITERATIONS_FILE,
    "ITERATION_CODE",
    "ITERATION_NAME",
    "LEVEL",
    "ALONE",
    "DETAILED_ONLY",
    "COARSE_ONLY",
)
_ETHNICITY_ITERATIONS = _spec(
    ETHNICITY_ITERATIONS_FILE,
    "ITERATION_CODE",
    "ITERATION_NAME",
    "LEVEL",
    "DETAILED_ONLY",
    "COARSE_ONLY",
)
_PAIRS = _spec(CODE_TO_ITERATION_FILE, "ITERATION_CODE", "RACE_ETH_CODE")


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class RaceEthnicitySpecs:
    """The four spec files, parsed: read-only numpy arrays, one entry per record, file order.

    Iterations: the race file's rows first, then the ethnicity file's (``is_ethnicity``).
    ``*_row`` arrays give each entry's row in its own file, for messages.
    """

    directory: Path
    # race-and-ethnicity-codes.txt
    code: np.ndarray  # int16
    code_name: np.ndarray  # str
    code_row: np.ndarray  # int32
    # race- and ethnicity-characteristic-iterations.txt
    iteration_code: np.ndarray  # int16
    iteration_name: np.ndarray  # str
    level: np.ndarray  # uint8: 0 never tabulated, 1 regional, 2 detailed
    alone: np.ndarray  # int8 tri-state (NULL for ethnicity iterations)
    detailed_only: np.ndarray  # int8 tri-state
    coarse_only: np.ndarray  # int8 tri-state
    is_ethnicity: np.ndarray  # bool
    iteration_row: np.ndarray  # int32
    # race-and-ethnicity-code-to-iteration.txt
    pair_iteration: np.ndarray  # int16 ITERATION_CODE
    pair_code: np.ndarray  # int16 RACE_ETH_CODE
    pair_row: np.ndarray  # int32

    @property
    def n_codes(self) -> int:
        return int(self.code.size)

    @property
    def n_race_iterations(self) -> int:
        return int((~self.is_ethnicity).sum())

    @property
    def n_ethnicity_iterations(self) -> int:
        return int(self.is_ethnicity.sum())

    def iteration_file(self, index: int) -> str:
        """The file an iteration entry came from (for messages)."""
        return ETHNICITY_ITERATIONS_FILE if self.is_ethnicity[index] else RACE_ITERATIONS_FILE

    @functools.cached_property
    def pair_iteration_index(self) -> np.ndarray:
        """Index into the iteration arrays of each pair's ITERATION_CODE; -1 when unknown.

        With duplicated iteration codes (a validation error) the first entry is used.
        """
        return _lookup(self.iteration_code, self.pair_iteration)

    @functools.cached_property
    def pair_code_index(self) -> np.ndarray:
        """Index into the code arrays of each pair's RACE_ETH_CODE; -1 when unknown."""
        return _lookup(self.code, self.pair_code)

    def frame(self) -> pd.DataFrame:
        """Iterations as a small DataFrame (for display and reports)."""
        return pd.DataFrame(
            {
                "ITERATION_CODE": self.iteration_code,
                "ITERATION_NAME": self.iteration_name,
                "LEVEL": self.level,
                "ALONE": self.alone,
                "DETAILED_ONLY": self.detailed_only,
                "COARSE_ONLY": self.coarse_only,
                "IS_ETHNICITY": self.is_ethnicity,
            }
        )


def _lookup(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Position of each query in ``keys`` (first occurrence in file order), -1 if absent."""
    result = np.full(queries.size, -1, dtype=np.int32)
    if keys.size:
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        position = np.minimum(np.searchsorted(sorted_keys, queries), keys.size - 1)
        hit = sorted_keys[position] == queries
        result[hit] = order[position[hit]]
    return _frozen(result)


class _Problems:
    """Collects bad cells of one file: (row, column, text, expectation)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []
        self.count = 0

    def check(self, raw: pd.DataFrame, column: str, ok: np.ndarray, expected: str) -> None:
        bad = np.flatnonzero(~ok)
        self.count += bad.size
        for position in bad[: max(0, _MAX_PROBLEMS - len(self.items))]:
            row = int(raw.index[position])
            text = raw[column].iloc[position]
            self.items.append(f"row {row}, {column}: {text!r} is not {expected}")

    def raise_if_any(self) -> None:
        if not self.count:
            return
        lines = list(self.items)
        if self.count > len(self.items):
            lines.append(f"... and {self.count - len(self.items)} more")
        body = "\n  ".join(lines)
        raise SpecFileError(f"{self.path}: {self.count} malformed value(s)\n  {body}")


def _strings(raw: pd.DataFrame, column: str) -> np.ndarray:
    return raw[column].to_numpy(dtype=object)


def _code_column(raw: pd.DataFrame, column: str, problems: _Problems) -> np.ndarray:
    """Exactly four digits -> int16."""
    text = raw[column].astype("str")
    ok = text.str.fullmatch(r"[0-9]{4}").to_numpy(dtype=bool, na_value=False)
    problems.check(raw, column, ok, "a 4-digit code")
    return np.where(ok, text.where(ok, "0").astype("int64").to_numpy(), 0).astype(np.int16)


def _flag_column(
    raw: pd.DataFrame, column: str, level: np.ndarray, problems: _Problems
) -> np.ndarray:
    """True/False/Null (exact spelling) -> int8 tri-state; Null only where LEVEL is 0."""
    values = raw[column].map(_FLAG_VALUES).to_numpy(dtype=float, na_value=np.nan)
    known = ~np.isnan(values)
    problems.check(raw, column, known, "True, False or Null")
    flags = np.where(known, values, FALSE).astype(np.int8)
    allowed = ~known | (flags != NULL) | (level == 0)
    problems.check(raw, column, allowed, "allowed here (Null only on LEVEL 0 rows)")
    return flags


def _name_column(raw: pd.DataFrame, column: str, problems: _Problems) -> np.ndarray:
    names = _strings(raw, column)
    problems.check(raw, column, raw[column].str.len().to_numpy() > 0, "a non-empty name")
    return names.astype(str)


def _load_iterations(path: Path, spec: TableSpec, has_alone: bool) -> dict[str, np.ndarray]:
    raw = read_raw(path, spec)
    problems = _Problems(path)
    code = _code_column(raw, "ITERATION_CODE", problems)
    names = _name_column(raw, "ITERATION_NAME", problems)
    level_ok = raw["LEVEL"].isin(_LEVELS).to_numpy()
    problems.check(raw, "LEVEL", level_ok, "0, 1 or 2")
    level = np.where(level_ok, raw["LEVEL"].where(level_ok, "0").astype("int64"), 0).astype(
        np.uint8
    )
    n = len(raw)
    alone = _flag_column(raw, "ALONE", level, problems) if has_alone else np.full(n, NULL, np.int8)
    detailed_only = _flag_column(raw, "DETAILED_ONLY", level, problems)
    coarse_only = _flag_column(raw, "COARSE_ONLY", level, problems)
    problems.raise_if_any()
    return {
        "iteration_code": code,
        "iteration_name": names,
        "level": level,
        "alone": alone,
        "detailed_only": detailed_only,
        "coarse_only": coarse_only,
        "is_ethnicity": np.full(n, not has_alone),
        "iteration_row": raw.index.to_numpy(dtype=np.int32),
    }


def load_race_specs(directory: str | Path) -> RaceEthnicitySpecs:
    """Parse the four spec files of a parameters directory; raise :class:`SpecFileError`.

    Missing files raise :class:`FileNotFoundError`; a wrong header (missing or extra column)
    raises :class:`das.io.tables.InputFormatError` naming the file.
    """
    directory = Path(directory)
    missing = [name for name in SPEC_FILES if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{directory}: missing spec file(s) {', '.join(missing)}")

    path = directory / CODES_FILE
    raw = read_raw(path, _CODES)
    problems = _Problems(path)
    code = _code_column(raw, "RACE_ETH_CODE", problems)
    code_name = _name_column(raw, "RACE_ETH_NAME", problems)
    problems.raise_if_any()
    code_row = raw.index.to_numpy(dtype=np.int32)

    race = _load_iterations(directory / RACE_ITERATIONS_FILE, _RACE_ITERATIONS, has_alone=True)
    ethnicity = _load_iterations(
        directory / ETHNICITY_ITERATIONS_FILE, _ETHNICITY_ITERATIONS, has_alone=False
    )
    iterations = {key: np.concatenate([race[key], ethnicity[key]]) for key in race}

    path = directory / CODE_TO_ITERATION_FILE
    raw = read_raw(path, _PAIRS)
    problems = _Problems(path)
    pair_iteration = _code_column(raw, "ITERATION_CODE", problems)
    pair_code = _code_column(raw, "RACE_ETH_CODE", problems)
    problems.raise_if_any()

    return RaceEthnicitySpecs(
        directory=directory,
        code=_frozen(code),
        code_name=_frozen(code_name),
        code_row=_frozen(code_row),
        **{key: _frozen(value) for key, value in iterations.items()},
        pair_iteration=_frozen(pair_iteration),
        pair_code=_frozen(pair_code),
        pair_row=_frozen(raw.index.to_numpy(dtype=np.int32)),
    )
