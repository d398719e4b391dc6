"""Validate a SafeTab-P run's inputs before any noise is drawn: :func:`validate_safetab_p`.

Layout (docs/explanation/architecture.md#inputs-and-commands): ``config.json`` and the four spec
files in the parameters directory; ``person-records`` and ``GRF-C`` (``.txt`` or ``.parquet``) in
the data directory. Order of work: config → spec files → GRF-C (its block keys kept as sorted
``int64``) → person records, streamed chunk by chunk. Besides each file's suite (every rule on every
row), the engine checks:

==========================  ================================================================
check                       rule (file, column)
==========================  ================================================================
config_parses               config.json loads as a SafeTab-P config (one line per problem)
block_in_grf_c              each person's block SSCCCTTTTTTBBBB is a GRF-C block
race_code_present           QRACE1 is a code, not ``Null`` (everyone has a race)
race_null_order             no code after a ``Null`` in QRACE1..QRACE8
race_code_in_code_list      each QRACEk code is listed in race-and-ethnicity-codes.txt
race_codes_within_max       at most ``max_race_codes`` codes (the stability Δ assumes it)
qspan_in_code_list          QSPAN is listed in race-and-ethnicity-codes.txt
state_in_filter             a US person's TABBLKST is in ``state_filter_us`` (else it would
                            silently drop out of the US tabulation)
state_not_tabulated         WARNING: persons of a pass the config does not run (e.g. Puerto
                            Rico with ``run_pr`` false) are counted, not an error
filter_state_in_grf_c       every state the config tabulates has blocks in the GRF-C
==========================  ================================================================

plus the spec-file rules of :mod:`das.validation.specs`. The Census toy inputs
(``census_specs/safetab_p/toy``) validate, with one warning: 2 Puerto Rico persons (rows 7,
10) are not tabulated because the toy configs set ``run_pr`` false.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from das.io.safetab_p import GRF_C, PERSON_RECORDS, RACE_COLUMNS
from das.specs.config import SafeTabPConfig, load_safetab_p_config
from das.validation.findings import ValidationReport
from das.validation.runner import DEFAULT_SAMPLE_ROWS, Context, run_validation
from das.validation.scan import (
    SCAN_CHUNK_BYTES,
    EngineTap,
    RawChunk,
    first_values,
    joined_values,
    rows_of,
    scan_file,
)
from das.validation.specs import validate_spec_files
from das.validation.suites import load_suite

PUERTO_RICO = "72"
GEOGRAPHY = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")
_BLOCK_FACTORS = (10**13, 10**10, 10**4, 1)
_BLOCK_LIMITS = (99, 999, 999_999, 9_999)
RACE_LABEL = ",".join(RACE_COLUMNS)
PERSON_CHECKS = (
    "block_in_grf_c",
    "race_code_present",
    "race_null_order",
    "race_code_in_code_list",
    "race_codes_within_max",
    "qspan_in_code_list",
    "state_in_filter",
    "state_not_tabulated",
)


def block_keys(columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(key, valid): SSCCCTTTTTTBBBB as int64 where all four parts are numbers in range."""
    valid = np.ones(columns[GEOGRAPHY[0]].size, dtype=bool)
    key = np.zeros(valid.size, dtype=np.int64)
    for name, factor, limit in zip(GEOGRAPHY, _BLOCK_FACTORS, _BLOCK_LIMITS, strict=True):
        part = columns[name]
        valid &= (part >= 0) & (part <= limit)
        key += np.clip(part, 0, limit) * factor
    return key, valid


def _grf_c(
    context: Context, data_dir: Path, tap: EngineTap | None = None
) -> tuple[np.ndarray | None, set[int]]:
    """Scan the GRF-C; return its sorted unique block keys and its states (None if unread).

    Each chunk's valid block keys and states are kept (a worker thread makes them, they are
    kept in file order), not its geography columns: 8 M blocks at national size."""
    suite = load_suite("GRF-C")
    path, _ = context.locate(data_dir, GRF_C)
    keys: list[np.ndarray] = []
    states: set[int] = set()

    def blocks(frame: RawChunk, columns: dict[str, np.ndarray]) -> Callable[[], None]:
        key, valid = block_keys(columns)
        valid_keys = key[valid]
        chunk_states = {int(s) for s in np.unique(columns["TABBLKST"][valid])}

        def keep() -> None:
            keys.append(valid_keys)
            states.update(chunk_states)

        return keep

    scan = scan_file(
        path,
        GRF_C,
        suite,
        context.collector,
        label=path.name if path else "GRF-C.txt",
        convert={name: None for name in GEOGRAPHY},
        on_chunk=blocks,
        sample_rows=context.sample_rows,
        chunk_bytes=context.chunk_bytes,
        fingerprint=True,
        tap=tap,
    )
    context.add_scan(suite, scan)
    if not scan.scanned:
        return None, set()
    every = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    return np.unique(every), states


class _PersonChecks:
    """Per-chunk cross-file checks of person records (vectorized over the chunk; a code column
    with few distinct values is checked on those)."""

    def __init__(
        self,
        context: Context,
        label: str,
        config: SafeTabPConfig | None,
        grf_keys: np.ndarray | None,
        codes: np.ndarray | None,
    ) -> None:
        self.context = context
        self.label = label
        self.config = config
        self.grf_keys = grf_keys
        self.codes = None
        if codes is not None:
            numeric = np.char.isdigit(codes.astype(str))
            self.codes = np.unique(codes[numeric].astype(np.int64))
        if config is not None:
            filter_states = list(config.state_filter_us)
            self.filter = pa.array(filter_states, pa.large_string())

    def _unlisted(self, values: np.ndarray, lowest: int) -> np.ndarray:
        """Values from ``lowest`` on that are not in the code list."""
        return (values >= lowest) & ~np.isin(values, self.codes)

    def __call__(self, frame: RawChunk, columns: dict[str, np.ndarray]) -> None:
        add = self.context.collector.add
        label = self.label
        if self.grf_keys is not None:
            key, valid = block_keys(columns)
            position = np.searchsorted(self.grf_keys, key)
            found = self.grf_keys[np.minimum(position, max(self.grf_keys.size - 1, 0))] == key
            if self.grf_keys.size == 0:
                found = np.zeros(key.size, dtype=bool)
            bad = valid & ~found
            add(
                label,
                ",".join(GEOGRAPHY),
                "block_in_grf_c",
                "the person's block (TABBLKST+TABBLKCOU+TABTRACTCE+TABBLK) is not in the GRF-C",
                rows=rows_of(frame, bad),
                values=joined_values(frame, GEOGRAPHY, bad, "|"),
            )

        race = [columns[name] for name in RACE_COLUMNS]
        null = [values == 0 for values in race]
        bad = null[0]
        add(
            label,
            "QRACE1",
            "race_code_present",
            "QRACE1 must be a race code (every person has at least one)",
            rows=rows_of(frame, bad),
            values=first_values(frame, "QRACE1", bad),
        )
        bad = np.zeros(bad.size, dtype=bool)
        for before, after in pairwise(null):  # a code after a Null
            bad |= before & ~after
        add(
            label,
            RACE_LABEL,
            "race_null_order",
            "no race code may follow a Null",
            rows=rows_of(frame, bad),
            values=joined_values(frame, RACE_COLUMNS, bad, "|"),
        )
        if self.codes is not None:
            for name, values in zip(RACE_COLUMNS, race, strict=True):
                bad = _per_distinct(frame, name, "Null", values, lambda v: self._unlisted(v, 1))
                add(
                    label,
                    name,
                    "race_code_in_code_list",
                    "race code not listed in race-and-ethnicity-codes.txt",
                    rows=rows_of(frame, bad),
                    values=first_values(frame, name, bad),
                )
            qspan = columns["QSPAN"]
            bad = _per_distinct(frame, "QSPAN", None, qspan, lambda v: self._unlisted(v, 0))
            add(
                label,
                "QSPAN",
                "qspan_in_code_list",
                "QSPAN not listed in race-and-ethnicity-codes.txt",
                rows=rows_of(frame, bad),
                values=first_values(frame, "QSPAN", bad),
            )
        config = self.config
        if config is None:
            return
        codes = np.zeros(bad.size, dtype=np.int8)
        for values in race:
            codes += values > 0
        bad = codes > config.max_race_codes
        add(
            label,
            RACE_LABEL,
            "race_codes_within_max",
            f"more than max_race_codes = {config.max_race_codes} race codes",
            rows=rows_of(frame, bad),
            values=joined_values(frame, RACE_COLUMNS, bad, "|"),
        )

        def states(state: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
            two_digits = np.asarray(
                pc.fill_null(pc.match_substring_regex(state, r"^[0-9]{2}$"), False), dtype=bool
            )
            is_pr = np.asarray(pc.fill_null(pc.equal(state, PUERTO_RICO), False), dtype=bool)
            in_filter = np.asarray(pc.fill_null(pc.is_in(state, value_set=self.filter), False))
            outside = two_digits & ~is_pr & ~in_filter & config.run_us
            off = two_digits & np.where(is_pr, not config.run_pr, not config.run_us)
            return outside, off

        bad = frame.per_value("TABBLKST", lambda state: states(state)[0])
        add(
            label,
            "TABBLKST",
            "state_in_filter",
            "a US person's state must be in state_filter_us (else it drops out of the US pass)",
            rows=rows_of(frame, bad),
            values=first_values(frame, "TABBLKST", bad),
        )
        off = frame.per_value("TABBLKST", lambda state: states(state)[1])
        add(
            label,
            "TABBLKST",
            "state_not_tabulated",
            "persons of a pass this config does not run (run_us / run_pr false): not tabulated",
            rows=rows_of(frame, off),
            values=first_values(frame, "TABBLKST", off),
            severity="warning",
        )


def _per_distinct(
    frame: RawChunk,
    name: str,
    token: str | None,
    values: np.ndarray,
    function: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """``function`` (a value-by-value map of converted codes to booleans) of every row, on the
    column's distinct values when it has few (only spread over the rows when one is True)."""
    view = frame.view(name) if isinstance(frame, RawChunk) else None
    distinct = view.ints_of_distinct(token) if view is not None else None
    encoded = view.distinct_values() if view is not None else None
    if distinct is None or encoded is None:
        return function(values)
    verdict = function(distinct)
    return verdict[encoded[0]] if verdict.any() else np.zeros(values.size, dtype=bool)


def _persons(
    context: Context,
    data_dir: Path,
    config: SafeTabPConfig | None,
    grf_keys: np.ndarray | None,
    codes: np.ndarray | None,
    tap: EngineTap | None = None,
) -> None:
    suite = load_suite("person-records")
    path, _ = context.locate(data_dir, PERSON_RECORDS)
    label = path.name if path else "person-records.txt"
    checks = list(PERSON_CHECKS)
    if grf_keys is None:
        context.skip("block_in_grf_c", "the GRF-C could not be read")
        checks.remove("block_in_grf_c")
    if codes is None:
        for check in ("race_code_in_code_list", "qspan_in_code_list"):
            context.skip(check, "race-and-ethnicity-codes.txt could not be read")
            checks.remove(check)
    if config is None:
        for check in ("race_codes_within_max", "state_in_filter", "state_not_tabulated"):
            context.skip(check, "config.json does not parse")
            checks.remove(check)
    hook = _PersonChecks(context, label, config, grf_keys, codes)
    convert: dict[str, str | None] = {name: None for name in GEOGRAPHY}
    convert.update({name: "Null" for name in RACE_COLUMNS})
    convert["QSPAN"] = None
    scan = scan_file(
        path,
        PERSON_RECORDS,
        suite,
        context.collector,
        label=label,
        convert=convert,
        on_chunk=hook,
        sample_rows=context.sample_rows,
        chunk_bytes=context.chunk_bytes,
        fingerprint=True,
        tap=tap,
    )
    context.add_scan(suite, scan)
    if scan.scanned:
        context.ran(*checks)


def _filter_states_in_grf_c(
    context: Context, config: SafeTabPConfig, grf_states: set[int], config_label: str
) -> None:
    context.ran("filter_state_in_grf_c")
    missing = []
    if config.run_us:
        missing += [s for s in config.state_filter_us if int(s) not in grf_states]
    if config.run_pr and int(PUERTO_RICO) not in grf_states:
        missing.append(PUERTO_RICO)
    context.collector.add(
        config_label,
        "state_filter_us",
        "filter_state_in_grf_c",
        "a state the config tabulates (state_filter_us, or 72 with run_pr) has no GRF-C block",
        count=len(missing),
        values=missing,
    )


def validate_safetab_p(
    config_path: str | Path,
    data_dir: str | Path,
    report_dir: str | Path | None = None,
    *,
    run_gx: bool = True,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    chunk_bytes: int = SCAN_CHUNK_BYTES,
    taps: Mapping[str, EngineTap] | None = None,
) -> ValidationReport:
    """Validate SafeTab-P inputs; always writes the report folder (default ``<data>/validation``).

    ``config_path`` is the parameters directory's ``config.json`` (spec files beside it);
    ``data_dir`` holds person-records and GRF-C. ``run_gx=False`` skips Great Expectations and
    its Data Docs (the engine still checks every suite rule on every row): for tests only.
    ``taps`` (spec name → :class:`~das.validation.scan.EngineTap`) receive the GRF-C and the
    person file in engine form from this read (a run's one pass over its inputs:
    :class:`das.safetab_p.spill.OnePass`).
    """
    taps = dict(taps or {})
    config_path = Path(config_path)
    data_dir = Path(data_dir)

    def checks(context: Context) -> None:
        config = context.load_config(config_path, load_safetab_p_config)
        specs = validate_spec_files(context, config_path.parent)
        grf_keys, grf_states = _grf_c(context, data_dir, taps.get(GRF_C.name))
        _persons(context, data_dir, config, grf_keys, specs.codes, taps.get(PERSON_RECORDS.name))
        if config is None:
            context.skip("filter_state_in_grf_c", "config.json does not parse")
        elif grf_keys is None:
            context.skip("filter_state_in_grf_c", "the GRF-C could not be read")
        else:
            _filter_states_in_grf_c(context, config, grf_states, config_path.name)

    return run_validation(
        "safetab-p",
        config_path,
        data_dir,
        report_dir,
        checks,
        run_gx=run_gx,
        sample_rows=sample_rows,
        chunk_bytes=chunk_bytes,
    )
