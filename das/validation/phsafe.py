"""Validate a PHSafe run's inputs before any noise is drawn: :func:`validate_phsafe`.

Inputs (docs/explanation/architecture.md#phsafe): ``persons``, ``units``, ``geo`` (``.csv`` or
``.parquet``) in the data directory and a PHSafe ``config.json``. Work order: config → units (codes
kept as integers, one row per unit) → geo → persons, streamed; per-unit aggregates of the persons
(``bincount`` over the unit index found by ``searchsorted`` on the sorted MAFIDs) are compared with
the units at the end. Besides each file's suite, the engine checks (codes: 2020 CEF, as in
:mod:`das.synth.households`; RELSHIP 20 householder, 21/23 opposite-/same-sex spouse, 22/24
unmarried partner, 25-27 own child, 25-33 relatives, 34-36 nonrelatives, 37/38 group quarters):

============================  ===============================================================
check                         rule (file, column)
============================  ===============================================================
config_parses                 config.json loads as a PHSafe config
person_unit_exists            persons: MAFID is a unit in units
person_rtype_matches_unit     persons: RTYPE 3 lives in an RTYPE 2 unit, RTYPE 5 in RTYPE 4
relship_matches_rtype         persons: RTYPE 5 ⇔ RELSHIP 37/38 (group quarters)
householder_unique            persons: at most one RELSHIP 20 per unit
partner_unique                persons: at most one spouse or unmarried partner per unit
final_pop_matches_persons     units: FINAL_POP = number of person records with the MAFID
householder_present           units: an occupied unit (RTYPE 2 with persons) has a householder
hhrace_matches_householder    units: HHRACE = the householder's CENRACE
hhspan_matches_householder    units: HHSPAN = the householder's CENHISP
niu_code_zero                 units: vacant and group-quarters units carry 0 (not in universe)
                              in NPF, HHSPAN, HHRACE, TEN, HHT, HHT2, CPLT
tenure_in_universe            units: an occupied unit has TEN 1-4
cplt_matches_relship          units: CPLT 1/2/3/4 for a 21/23/22/24 partner, else 5
hht_matches_relship           units: HHT 1 married; 2/3 other family (relatives, no spouse);
                              4/6 living alone; 5/7 nonfamily of 2 or more
hht2_matches_relship          units: HHT2 01/02 married with / without own children < 18;
                              03/04 cohabiting with / without; 05/09 alone; 06/10 own
                              children; 07/11 other relatives; 08/12 nonrelatives only
householder_sex_consistent    units: HHT and HHT2 agree on the householder's sex
npf_matches_relship           units: NPF = 1 + spouse + relatives for a family, else 0
unit_has_geo / geo_has_unit   the MAFIDs of units and geo are the same set
geo_rtype_matches_unit        geo: RTYPE equals the unit's
state_in_filter               geo: a unit's state is in ``state_filter`` (same pass)
state_not_tabulated           WARNING: units of the other pass (PR in a US run, or US in PR)
============================  ===============================================================

Household composition checks apply to occupied units with a unique MAFID, one householder and
at most one spouse/partner (otherwise the failures above already say what is wrong). MAFID
uniqueness in units and geo comes from the suites. The Census toy set
(``census_specs/phsafe/toy``) is deliberately inconsistent; see the tests for the exact list.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from das import allocator
from das.io.arrays import RawColumns
from das.io.open_files import ensure_open_files
from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.tables import (
    InputFormatError,
    TableSpec,
    estimated_rows,
    resolve_input,
)
from das.specs.config import PHSafeConfig, load_phsafe_config
from das.validation.findings import ValidationReport
from das.validation.runner import DEFAULT_SAMPLE_ROWS, Context, run_validation
from das.validation.scan import (
    SCAN_CHUNK_BYTES,
    ChunkHook,
    EngineTap,
    FileScan,
    column_array,
    first_values,
    joined_values,
    rows_of,
    scan_file,
)
from das.validation.suites import load_suite

PUERTO_RICO = "72"
UNIT_CODES = ("NPF", "HHSPAN", "HHRACE", "TEN", "HHT", "HHT2", "CPLT")
HOUSEHOLDER = 20
PERSON_CHECKS = (
    "person_unit_exists",
    "person_rtype_matches_unit",
    "relship_matches_rtype",
    "householder_unique",
    "partner_unique",
)
UNIT_CHECKS = (
    "final_pop_matches_persons",
    "householder_present",
    "hhrace_matches_householder",
    "hhspan_matches_householder",
    "niu_code_zero",
    "tenure_in_universe",
    "cplt_matches_relship",
    "hht_matches_relship",
    "hht2_matches_relship",
    "householder_sex_consistent",
    "npf_matches_relship",
)
GEO_CHECKS = ("unit_has_geo", "geo_has_unit", "geo_rtype_matches_unit")
STATE_CHECKS = ("state_in_filter", "state_not_tabulated")


def _lookup(sorted_keys: np.ndarray, order: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index (into the unsorted array) of each key's first occurrence; -1 if absent or < 0."""
    if sorted_keys.size == 0:
        return np.full(keys.size, -1, dtype=np.int64)
    position = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    hit = (sorted_keys[position] == keys) & (keys >= 0)
    return np.where(hit, order[position], -1)


class _Units:
    """One bucket of the units file as integer columns, with MAFID lookup and per-unit person
    aggregates; ``file_rows`` are the units' row numbers in the file (for reports)."""

    def __init__(self, label: str, kept: dict[str, np.ndarray], file_rows: np.ndarray) -> None:
        self.label = label
        self.file_rows = np.asarray(file_rows, dtype=np.int64)
        self.mafid = kept["MAFID"].astype(np.int64)
        self.rtype = kept["RTYPE"].astype(np.int64)
        self.final_pop = kept["FINAL_POP"].astype(np.int64)
        self.codes = {name: kept[name].astype(np.int64) for name in UNIT_CODES}
        self.n = self.mafid.size
        self.order = np.argsort(self.mafid, kind="stable")
        self.sorted = self.mafid[self.order]
        repeated = np.zeros(self.n, dtype=bool)
        same = self.sorted[1:] == self.sorted[:-1]
        repeated[1:] |= same
        repeated[:-1] |= same
        self.duplicated = np.zeros(self.n, dtype=bool)
        self.duplicated[self.order] = repeated
        self.unique = (self.mafid >= 0) & ~self.duplicated
        zeros = np.zeros(self.n, dtype=np.int64)
        self.persons = zeros.copy()
        self.householders = zeros.copy()
        self.spouse_opposite = zeros.copy()  # RELSHIP 21
        self.spouse_same = zeros.copy()  # 23
        self.partner_opposite = zeros.copy()  # 22
        self.partner_same = zeros.copy()  # 24
        self.relatives = zeros.copy()  # 25-33
        self.own_children = zeros.copy()  # 25-27 under 18
        self.householder_race = np.full(self.n, -1, dtype=np.int64)
        self.householder_hisp = np.full(self.n, -1, dtype=np.int64)
        self.householder_rows: list[tuple[np.ndarray, np.ndarray]] = []
        self.partner_rows: list[tuple[np.ndarray, np.ndarray]] = []

    def lookup(self, mafid: np.ndarray) -> np.ndarray:
        return _lookup(self.sorted, self.order, mafid)

    def rows(self, mask: np.ndarray) -> np.ndarray:
        """Units-file row numbers (1-based) of a per-unit mask."""
        return self.file_rows[mask]


def _person_unit_checks(
    context: Context, label: str, units: _Units, columns: dict[str, np.ndarray]
) -> None:
    """One bucket's persons against its units, and the per-unit aggregates.

    Rows come out of file order (bucket by bucket): failures carry value columns, read
    back from the file for the first rows once every bucket is done."""
    add = context.collector.add
    mafid = columns["MAFID"].astype(np.int64)
    rtype = columns["RTYPE"].astype(np.int64)
    relship = columns["RELSHIP"].astype(np.int64)
    age = columns["QAGE"].astype(np.int64)
    file_rows = columns["row"].astype(np.int64)
    unit = units.lookup(mafid)
    bad = (mafid >= 0) & (unit < 0)
    add(
        label,
        "MAFID",
        "person_unit_exists",
        "the person's MAFID is not a unit in units",
        rows=file_rows[bad],
        value_columns=("MAFID",),
    )
    linked = unit >= 0
    unit_rtype = np.where(linked, units.rtype[np.maximum(unit, 0)], -1) if units.n else unit
    known = linked & np.isin(rtype, (3, 5)) & np.isin(unit_rtype, (2, 4))
    bad = known & ((rtype == 3) != (unit_rtype == 2))
    add(
        label,
        "RTYPE",
        "person_rtype_matches_unit",
        "RTYPE 3 (housing unit) persons belong to RTYPE 2 units, RTYPE 5 (group quarters) "
        "persons to RTYPE 4 units",
        rows=file_rows[bad],
        value_columns=("RTYPE", "MAFID"),
    )
    index = unit[linked]
    rel = relship[linked]
    rows = file_rows[linked]
    n = units.n

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(index[mask], minlength=n)

    units.persons += np.bincount(index, minlength=n)
    householder = rel == HOUSEHOLDER
    units.householders += count(householder)
    units.spouse_opposite += count(rel == 21)
    units.spouse_same += count(rel == 23)
    units.partner_opposite += count(rel == 22)
    units.partner_same += count(rel == 24)
    units.relatives += count((rel >= 25) & (rel <= 33))
    child_age = age[linked]
    units.own_children += count((rel >= 25) & (rel <= 27) & (child_age >= 0) & (child_age < 18))
    units.householder_race[index[householder]] = columns["CENRACE"][linked][householder]
    units.householder_hisp[index[householder]] = columns["CENHISP"][linked][householder]
    units.householder_rows.append((index[householder], rows[householder]))
    partner = (rel >= 21) & (rel <= 24)
    units.partner_rows.append((index[partner], rows[partner]))


class _RelshipChecks:
    """persons, per chunk: RELSHIP agrees with RTYPE (no other file needed)."""

    def __init__(self, context: Context, label: str) -> None:
        self.context = context
        self.label = label

    def __call__(self, frame, columns: dict[str, np.ndarray]) -> None:
        rtype = columns["RTYPE"]
        relship = columns["RELSHIP"]
        in_gq_code = (relship == 37) | (relship == 38)
        known = np.isin(rtype, (3, 5)) & (relship >= 20) & (relship <= 38)
        bad = known & ((rtype == 5) != in_gq_code)
        self.context.collector.add(
            self.label,
            "RELSHIP",
            "relship_matches_rtype",
            "RELSHIP 37/38 exactly for group-quarters persons (RTYPE 5), 20-36 for RTYPE 3",
            rows=rows_of(frame, bad),
            values=joined_values(frame, ("RTYPE", "RELSHIP"), bad, ","),
        )


# Integer copies of the three files, by MAFID bucket (rows with a MAFID that is not a number
# take part in no cross-file check). Codes are clipped to int16: a code beyond 32767 already
# breaks its suite rule.
_SPILLS = {
    "units": {"row": np.int64, "MAFID": np.int64, "RTYPE": np.int16, "FINAL_POP": np.int64,
              **dict.fromkeys(UNIT_CODES, np.int16)},
    "geo": {"row": np.int64, "MAFID": np.int64, "RTYPE": np.int16},
    "persons": {"row": np.int64, "MAFID": np.int64, "RTYPE": np.int16, "QAGE": np.int16,
                "CENHISP": np.int16, "CENRACE": np.int16, "RELSHIP": np.int16},
}  # fmt: skip
BUCKET_ROWS = 4_000_000


class _BucketSpill:
    """Appends each chunk's converted columns to the MAFID buckets of one file."""

    def __init__(self, root: Path, file: str, buckets: int) -> None:
        self.root = root
        self.file = file
        self.buckets = buckets
        self.dtypes = _SPILLS[file]
        # every bucket's column files stay open while the file is read (das.io.open_files)
        ensure_open_files(buckets * len(self.dtypes), f"the one read of the {file} file")
        self._appenders = [self.columns(k).appender() for k in range(buckets)]

    def columns(self, bucket: int) -> RawColumns:
        return RawColumns(self.root / self.file / f"{bucket:04d}", self.dtypes)

    def __enter__(self) -> _BucketSpill:
        for appender in self._appenders:
            appender.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for appender in self._appenders:
            appender.__exit__(None, None, None)

    def __call__(self, frame, columns: dict[str, np.ndarray]) -> Callable[[], None]:
        """Split one chunk by bucket (a worker thread); appended in file order (the commit)."""
        mafid = columns["MAFID"]
        keep = np.flatnonzero(mafid >= 0)
        bucket = mafid[keep] % self.buckets
        order = keep[np.argsort(bucket, kind="stable")]
        bounds = np.searchsorted(np.sort(bucket, kind="stable"), np.arange(self.buckets + 1))
        values = {"row": frame.index.to_numpy()}
        for name, dtype in self.dtypes.items():
            if name != "row":  # narrowed before the split: the parts wait for their turn
                info = np.iinfo(dtype)
                values[name] = np.clip(columns[name], -1, info.max).astype(dtype, copy=False)
        parts = []
        for k in range(self.buckets):  # a loop over buckets, not over rows
            part = order[bounds[k] : bounds[k + 1]]
            if part.size:
                parts.append((k, {n: v[part] for n, v in values.items()}))

        def append() -> None:
            for k, columns_of_bucket in parts:
                self._appenders[k].append(columns_of_bucket)

        return append


def _both(*hooks):
    """One chunk hook calling several (their commits, in order, as one)."""
    active = [hook for hook in hooks if hook is not None]

    def call(frame, columns):
        commits = [commit for hook in active if (commit := hook(frame, columns)) is not None]
        if not commits:
            return None

        def commit_all() -> None:
            for commit in commits:
                commit()

        return commit_all

    return call


def _scan(
    context: Context,
    data_dir: Path,
    spec: TableSpec,
    hook: Callable[[str], ChunkHook] | None = None,
    **options,
) -> FileScan:
    """Locate and scan one input; ``hook(label)`` builds its per-chunk checks."""
    suite = load_suite(spec.stem)
    path, label = context.locate(data_dir, spec)
    options.setdefault("tap", None)
    scan = scan_file(
        path,
        spec,
        suite,
        context.collector,
        label=label,
        on_chunk=hook(label) if hook is not None else None,
        sample_rows=context.sample_rows,
        chunk_bytes=context.chunk_bytes,
        fingerprint=True,
        **options,
    )
    return context.add_scan(suite, scan)


class _StateChecks:
    """geo: each unit's state against the config's state_filter (per chunk)."""

    def __init__(self, context: Context, label: str, config: PHSafeConfig) -> None:
        self.context = context
        self.label = label
        self.config = config
        self.filter = pa.array(list(config.state_filter), pa.large_string())
        self.pr_pass = config.pass_name == "PR"

    def __call__(self, frame, columns: dict[str, np.ndarray]) -> None:
        state = column_array(frame, "TABBLKST")
        two_digits = np.asarray(
            pc.fill_null(pc.match_substring_regex(state, r"^[0-9]{2}$"), False), dtype=bool
        )
        is_pr = np.asarray(pc.fill_null(pc.equal(state, PUERTO_RICO), False), dtype=bool)
        in_filter = np.asarray(pc.fill_null(pc.is_in(state, value_set=self.filter), False))
        same_pass = is_pr == self.pr_pass
        bad = two_digits & same_pass & ~in_filter
        add = self.context.collector.add
        add(
            self.label,
            "TABBLKST",
            "state_in_filter",
            "the unit's state is not in the config's state_filter (it would drop out silently)",
            rows=rows_of(frame, bad),
            values=first_values(frame, "TABBLKST", bad),
        )
        other = two_digits & ~same_pass
        add(
            self.label,
            "TABBLKST",
            "state_not_tabulated",
            "units of the other pass (Puerto Rico vs US) are not tabulated by this config",
            rows=rows_of(frame, other),
            values=first_values(frame, "TABBLKST", other),
            severity="warning",
        )


def _unit_checks(context: Context, units: _Units) -> None:
    """Compare each unit with the aggregates of its persons (vectorized over units)."""
    add = context.collector.add
    label = units.label
    code = units.codes
    unique = units.unique
    n_persons = units.persons

    def report(mask, column, check, message) -> None:
        add(label, column, check, message, rows=units.rows(mask), value_columns=(column,))

    report(
        unique & (units.final_pop >= 0) & (units.final_pop != n_persons),
        "FINAL_POP",
        "final_pop_matches_persons",
        "FINAL_POP must equal the number of person records with this MAFID",
    )
    occupied = unique & (units.rtype == 2) & (n_persons >= 1)
    report(
        occupied & (units.householders == 0),
        "MAFID",
        "householder_present",
        "an occupied housing unit (RTYPE 2 with persons) needs a householder (RELSHIP 20)",
    )
    single = occupied & (units.householders == 1)
    for column, value, check in (
        ("HHRACE", units.householder_race, "hhrace_matches_householder"),
        ("HHSPAN", units.householder_hisp, "hhspan_matches_householder"),
    ):
        bad = single & (code[column] >= 0) & (value >= 0) & (code[column] != value)
        source = "CENRACE" if column == "HHRACE" else "CENHISP"
        report(bad, column, check, f"{column} must equal the householder's {source}")
    niu = unique & (
        (units.rtype == 4) | ((units.rtype == 2) & (units.final_pop == 0) & (n_persons == 0))
    )
    for column in UNIT_CODES:
        report(
            niu & (code[column] > 0),
            column,
            "niu_code_zero",
            "vacant and group-quarters units are not in the household universe: code 0",
        )
    ten = code["TEN"]
    report(
        occupied & (ten >= 0) & ((ten < 1) | (ten > 4)),
        "TEN",
        "tenure_in_universe",
        "an occupied housing unit has tenure 1-4",
    )

    spouse = units.spouse_opposite + units.spouse_same
    partner = units.partner_opposite + units.partner_same
    composed = single & (spouse + partner <= 1)
    has_spouse = spouse == 1
    has_partner = partner == 1
    relatives = units.relatives
    own = units.own_children > 0
    alone = n_persons == 1

    expected_cplt = np.select(
        [
            units.spouse_opposite == 1,
            units.spouse_same == 1,
            units.partner_opposite == 1,
            units.partner_same == 1,
        ],
        [1, 2, 3, 4],
        default=5,
    )
    cplt = code["CPLT"]
    report(
        composed & (cplt >= 0) & (cplt != expected_cplt),
        "CPLT",
        "cplt_matches_relship",
        "CPLT: 1/2 opposite-/same-sex spouse (RELSHIP 21/23), 3/4 partner (22/24), else 5",
    )
    hht_low = np.select([has_spouse, relatives > 0, alone], [1, 2, 4], default=5)
    hht_high = np.select([has_spouse, relatives > 0, alone], [1, 3, 6], default=7)
    hht = code["HHT"]
    hht_ok = (hht == hht_low) | (hht == hht_high)
    report(
        composed & (hht >= 0) & ~hht_ok,
        "HHT",
        "hht_matches_relship",
        "HHT: 1 with a spouse; else 2/3 with relatives; 4/6 alone; 5/7 otherwise",
    )
    conditions = [has_spouse, has_partner, alone, own, relatives > 0]
    hht2_low = np.select(conditions, [np.where(own, 1, 2), np.where(own, 3, 4), 5, 6, 7], default=8)
    hht2_high = np.select(
        conditions, [np.where(own, 1, 2), np.where(own, 3, 4), 9, 10, 11], default=12
    )
    hht2 = code["HHT2"]
    hht2_ok = (hht2 == hht2_low) | (hht2 == hht2_high)
    report(
        composed & (hht2 >= 0) & ~hht2_ok,
        "HHT2",
        "hht2_matches_relship",
        "HHT2: 01/02 married, 03/04 cohabiting (with/without own children under 18); "
        "no spouse or partner: 05/09 alone, 06/10 own children, 07/11 relatives, 08/12 others",
    )
    sexed = composed & hht_ok & hht2_ok & (hht >= 2) & (hht2 >= 5)
    bad = sexed & (np.isin(hht, (2, 4, 5)) != (hht2 >= 9))
    add(
        label,
        "HHT,HHT2",
        "householder_sex_consistent",
        "HHT (2/4/5 male, 3/6/7 female) and HHT2 (09-12 male, 05-08 female) disagree",
        rows=units.rows(bad),
        value_columns=("HHT", "HHT2"),
    )
    family = has_spouse | (relatives > 0)
    expected_npf = np.where(family, 1 + spouse + relatives, 0)
    npf = code["NPF"]
    report(
        composed & (npf >= 0) & (npf != expected_npf),
        "NPF",
        "npf_matches_relship",
        "NPF: 1 + spouse + relatives (RELSHIP 21/23, 25-33) for a family, 0 otherwise",
    )


def _extra_person_rows(pairs: list[tuple[np.ndarray, np.ndarray]], n_units: int) -> np.ndarray:
    """Rows of the persons in units where more than one person holds the role."""
    if not pairs:
        return np.zeros(0, dtype=np.int64)
    index = np.concatenate([p[0] for p in pairs])
    rows = np.concatenate([p[1] for p in pairs])
    per_unit = np.bincount(index, minlength=n_units)
    return np.sort(rows[per_unit[index] > 1])


def _geo_checks(context: Context, label: str, geo: dict[str, np.ndarray], units: _Units) -> None:
    add = context.collector.add
    geo_mafid = geo["MAFID"].astype(np.int64)
    geo_rows = geo["row"].astype(np.int64)
    geo_unit = units.lookup(geo_mafid)
    bad = (geo_mafid >= 0) & (geo_unit < 0)
    add(
        label,
        "MAFID",
        "geo_has_unit",
        "a geo MAFID that is not in units",
        rows=geo_rows[bad],
        value_columns=("MAFID",),
    )
    geo_sorted_order = np.argsort(geo_mafid, kind="stable")
    geo_sorted = geo_mafid[geo_sorted_order]
    in_geo = _lookup(geo_sorted, geo_sorted_order, units.mafid) >= 0
    bad = (units.mafid >= 0) & ~in_geo
    add(
        units.label,
        "MAFID",
        "unit_has_geo",
        "a unit MAFID that is not in geo",
        rows=units.rows(bad),
        value_columns=("MAFID",),
    )
    geo_rtype = geo["RTYPE"].astype(np.int64)
    linked = geo_unit >= 0
    # (a bucket without units links nothing: no index into it)
    unit_rtype = np.where(linked, units.rtype[np.maximum(geo_unit, 0)], -1) if units.n else geo_unit
    bad = linked & (geo_rtype >= 0) & (unit_rtype >= 0) & (geo_rtype != unit_rtype)
    add(
        label,
        "RTYPE",
        "geo_rtype_matches_unit",
        "geo RTYPE must equal the unit's RTYPE in units",
        rows=geo_rows[bad],
        value_columns=("RTYPE",),
    )


def _buckets_for(data_dir: Path) -> int:
    """MAFID buckets so that one bucket of the largest file holds about BUCKET_ROWS rows."""
    rows = 0
    for spec in (PERSONS, UNITS, GEO):
        try:
            rows = max(rows, estimated_rows(resolve_input(data_dir, spec), spec))
        except (FileNotFoundError, InputFormatError):
            continue
    return max(1, math.ceil(rows / BUCKET_ROWS))


def validate_phsafe(
    config_path: str | Path,
    data_dir: str | Path,
    report_dir: str | Path | None = None,
    *,
    run_gx: bool = True,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    chunk_bytes: int = SCAN_CHUNK_BYTES,
    taps: Mapping[str, EngineTap] | None = None,
) -> ValidationReport:
    """Validate PHSafe inputs; always writes the report folder (default ``<data>/validation``).

    ``run_gx=False`` skips Great Expectations and its Data Docs (the engine still checks every
    suite rule on every row): for tests only. ``taps`` (spec name →
    :class:`~das.validation.scan.EngineTap`) receive persons, units and geo in engine form from
    this read (a run's one pass over its inputs: :class:`das.phsafe.streamed.OnePass`).
    """
    config_path = Path(config_path)
    data_dir = Path(data_dir)
    taps = dict(taps or {})

    def checks(context: Context) -> None:
        config = context.load_config(config_path, load_phsafe_config)
        buckets = _buckets_for(data_dir)
        spill_root = Path(tempfile.mkdtemp(prefix=".spill-", dir=context.report.report_dir))
        try:
            _checks(context, config, buckets, spill_root)
        finally:
            shutil.rmtree(spill_root, ignore_errors=True)
            allocator.release()  # the buckets' checks: not held while the engine counts

    def _checks(
        context: Context, config: PHSafeConfig | None, buckets: int, spill_root: Path
    ) -> None:
        options: dict[str, Any] = {"spill_dir": spill_root, "buckets": buckets}
        with _BucketSpill(spill_root, "units", buckets) as unit_spill:
            units_scan = _scan(
                context,
                data_dir,
                UNITS,
                lambda label: unit_spill,
                convert={name: None for name in ("RTYPE", "MAFID", "FINAL_POP", *UNIT_CODES)},
                tap=taps.get(UNITS.name),
                **options,
            )
        with _BucketSpill(spill_root, "geo", buckets) as geo_spill:
            geo_scan = _scan(
                context,
                data_dir,
                GEO,
                lambda label: _both(
                    None if config is None else _StateChecks(context, label, config), geo_spill
                ),
                convert={"MAFID": None, "RTYPE": None},
                tap=taps.get(GEO.name),
                **options,
            )
        if config is None:
            for check in STATE_CHECKS:
                context.skip(check, "config.json does not parse")
        elif geo_scan.scanned:
            context.ran(*STATE_CHECKS)
        if not units_scan.scanned:
            for check in (*PERSON_CHECKS, *UNIT_CHECKS, *GEO_CHECKS):
                context.skip(check, "units could not be read")
            _scan(context, data_dir, PERSONS, tap=taps.get(PERSONS.name), **options)
            return
        with _BucketSpill(spill_root, "persons", buckets) as person_spill:
            persons_scan = _scan(
                context,
                data_dir,
                PERSONS,
                lambda label: _both(_RelshipChecks(context, label), person_spill),
                convert={name: None for name in PERSONS.column_names},
                tap=taps.get(PERSONS.name),
                **options,
            )
        if geo_scan.scanned:
            context.ran(*GEO_CHECKS)
        else:
            for check in GEO_CHECKS:
                context.skip(check, "geo could not be read")
        if persons_scan.scanned:
            context.ran(*PERSON_CHECKS, *UNIT_CHECKS)
        else:
            for check in (*PERSON_CHECKS, *UNIT_CHECKS):
                context.skip(check, "persons could not be read")
        for bucket in range(buckets):  # one bucket of households in memory at a time
            kept = unit_spill.columns(bucket).read()
            units = _Units(units_scan.label, kept, kept["row"])
            if geo_scan.scanned:
                _geo_checks(context, geo_scan.label, geo_spill.columns(bucket).read(), units)
            if not persons_scan.scanned:
                continue
            people = person_spill.columns(bucket).read()
            _person_unit_checks(context, persons_scan.label, units, people)
            for pairs, check, message in (
                (units.householder_rows, "householder_unique", "more than one householder"),
                (units.partner_rows, "partner_unique", "more than one spouse or partner"),
            ):
                context.collector.add(
                    persons_scan.label,
                    "RELSHIP",
                    check,
                    message,
                    rows=_extra_person_rows(pairs, units.n),
                    value_columns=("MAFID", "RELSHIP"),
                )
            _unit_checks(context, units)

    return run_validation(
        "phsafe",
        config_path,
        data_dir,
        report_dir,
        checks,
        run_gx=run_gx,
        sample_rows=sample_rows,
        chunk_bytes=chunk_bytes,
    )
