"""SafeTab-P spec files: syntax via the suites, then the metadata rules GX cannot express.

Semantic checks (on the raw text of the four small files, vectorized; rows are 1-based file
rows, values the spec files' own public text):

- ``level0_flags_null``: DETAILED_ONLY / COARSE_ONLY are ``Null`` exactly on LEVEL 0 rows.
- ``flags_not_both_true``: an iteration is never both DETAILED_ONLY and COARSE_ONLY.
- ``iteration_codes_disjoint``: no ethnicity iteration reuses a race iteration's code.
- ``pair_iteration_known`` / ``pair_code_known``: each code-to-iteration pair names a listed
  iteration and a listed code.
- ``code_single_iteration``: within an iteration level 1 or 2, a geography filter (state-or-above
  keeps COARSE_ONLY≠True, sub-state keeps DETAILED_ONLY≠True) and, for race, ALONE, each code maps
  to at most one iteration. This bounds the stability h at 1 (Δ = 9 for the 2020 specs;
  docs/explanation/architecture.md#safetab-p); a violation would break the sensitivity the budget
  was planned with.
- ``spec_files_load``: finally :func:`das.specs.race_specs.load_race_specs` must accept them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.tables import Column, Kind, TableSpec, read_raw
from das.specs.race_specs import (
    CODE_TO_ITERATION_FILE,
    CODES_FILE,
    ETHNICITY_ITERATIONS_FILE,
    RACE_ITERATIONS_FILE,
    RaceEthnicitySpecs,
    SpecFileError,
    load_race_specs,
)
from das.validation.runner import Context
from das.validation.scan import joined_values, missing_file, scan_file
from das.validation.suites import load_suite

TABULATED_LEVELS = ("1", "2")


def _spec(file_name: str, *names: str) -> TableSpec:
    return TableSpec(
        name=file_name,
        stem=file_name.removesuffix(".txt"),
        text_suffix=".txt",
        delimiter="|",
        columns=tuple(Column(name, kind=Kind.TEXT) for name in names),
    )


_FLAGS = ("DETAILED_ONLY", "COARSE_ONLY")
SPEC_TABLES = {
    CODES_FILE: _spec(CODES_FILE, "RACE_ETH_CODE", "RACE_ETH_NAME"),
    RACE_ITERATIONS_FILE: _spec(
        RACE_ITERATIONS_FILE, "ITERATION_CODE", "ITERATION_NAME", "LEVEL", "ALONE", *_FLAGS
    ),
    ETHNICITY_ITERATIONS_FILE: _spec(
        ETHNICITY_ITERATIONS_FILE, "ITERATION_CODE", "ITERATION_NAME", "LEVEL", *_FLAGS
    ),
    CODE_TO_ITERATION_FILE: _spec(CODE_TO_ITERATION_FILE, "ITERATION_CODE", "RACE_ETH_CODE"),
}
SEMANTIC_CHECKS = (
    "level0_flags_null",
    "flags_not_both_true",
    "iteration_codes_disjoint",
    "pair_iteration_known",
    "pair_code_known",
    "code_single_iteration",
    "spec_files_load",
)


@dataclass
class SpecCheckResult:
    """Parsed specs when every spec check passed (else None), and the code list as text."""

    specs: RaceEthnicitySpecs | None
    codes: np.ndarray | None  # the listed RACE_ETH_CODE texts (for person-record checks)


def validate_spec_files(context: Context, directory: Path) -> SpecCheckResult:
    """Scan the four spec files with their suites, then run the semantic checks."""
    collector = context.collector
    frames: dict[str, pd.DataFrame] = {}
    for file_name, table in SPEC_TABLES.items():
        path = directory / file_name
        suite = load_suite(table.stem)
        if not path.is_file():
            missing_file(collector, file_name, f"{directory}: missing spec file {file_name}")
            context.add_scan(suite, scan_file(None, table, suite, collector, label=file_name))
            continue
        scan = context.add_scan(
            suite,
            scan_file(
                path,
                table,
                suite,
                collector,
                label=file_name,
                sample_rows=context.sample_rows,
                chunk_bytes=context.chunk_bytes,
            ),
        )
        if not scan.scanned:
            continue
        frames[file_name] = read_raw(path, table)

    codes = None
    if CODES_FILE in frames:
        codes = frames[CODES_FILE]["RACE_ETH_CODE"].to_numpy(dtype=str)
    if len(frames) < len(SPEC_TABLES):
        for check in SEMANTIC_CHECKS:
            context.skip(check, "a spec file is missing or unreadable")
        return SpecCheckResult(None, codes)
    context.ran(*SEMANTIC_CHECKS[:-1])
    _semantic_checks(context, frames)
    if any(collector.has(name) for name in SPEC_TABLES):
        context.skip("spec_files_load", "the spec files have errors reported above")
        return SpecCheckResult(None, codes)
    context.ran("spec_files_load")
    try:
        specs = load_race_specs(directory)
    except (SpecFileError, ValueError, FileNotFoundError) as exc:
        collector.add(CODES_FILE, None, "spec_files_load", str(exc), count=1)
        return SpecCheckResult(None, codes)
    return SpecCheckResult(specs, codes)


def _semantic_checks(context: Context, frames: dict[str, pd.DataFrame]) -> None:
    collector = context.collector
    race = frames[RACE_ITERATIONS_FILE]
    ethnicity = frames[ETHNICITY_ITERATIONS_FILE]
    for file_name, frame in ((RACE_ITERATIONS_FILE, race), (ETHNICITY_ITERATIONS_FILE, ethnicity)):
        level = frame["LEVEL"].to_numpy(dtype=str)
        for flag in _FLAGS:
            value = frame[flag].to_numpy(dtype=str)
            known = np.isin(level, ("0", "1", "2")) & np.isin(value, ("True", "False", "Null"))
            bad = known & ((level == "0") != (value == "Null"))
            collector.add(
                file_name,
                flag,
                "level0_flags_null",
                "Null exactly when LEVEL is 0 (LEVEL 0 iterations are never tabulated)",
                rows=frame.index.to_numpy()[bad],
                values=joined_values(frame, ("LEVEL", flag), bad, "|"),
            )
        both = (frame["DETAILED_ONLY"].to_numpy(dtype=str) == "True") & (
            frame["COARSE_ONLY"].to_numpy(dtype=str) == "True"
        )
        collector.add(
            file_name,
            "DETAILED_ONLY,COARSE_ONLY",
            "flags_not_both_true",
            "an iteration cannot be both DETAILED_ONLY and COARSE_ONLY",
            rows=frame.index.to_numpy()[both],
            values=joined_values(frame, ("ITERATION_CODE", *_FLAGS), both, "|"),
        )

    race_codes = race["ITERATION_CODE"].to_numpy(dtype=str)
    ethnicity_codes = ethnicity["ITERATION_CODE"].to_numpy(dtype=str)
    shared = np.isin(ethnicity_codes, race_codes)
    collector.add(
        ETHNICITY_ITERATIONS_FILE,
        "ITERATION_CODE",
        "iteration_codes_disjoint",
        f"ethnicity iteration codes must not also be race iteration codes ({RACE_ITERATIONS_FILE})",
        rows=ethnicity.index.to_numpy()[shared],
        values=ethnicity_codes[shared][:5],
    )

    pairs = frames[CODE_TO_ITERATION_FILE]
    pair_iteration = pairs["ITERATION_CODE"].to_numpy(dtype=str)
    pair_code = pairs["RACE_ETH_CODE"].to_numpy(dtype=str)
    unknown_iteration = ~np.isin(pair_iteration, np.concatenate([race_codes, ethnicity_codes]))
    collector.add(
        CODE_TO_ITERATION_FILE,
        "ITERATION_CODE",
        "pair_iteration_known",
        "ITERATION_CODE must be listed in the race or ethnicity iteration file",
        rows=pairs.index.to_numpy()[unknown_iteration],
        values=pair_iteration[unknown_iteration][:5],
    )
    listed = frames[CODES_FILE]["RACE_ETH_CODE"].to_numpy(dtype=str)
    unknown_code = ~np.isin(pair_code, listed)
    collector.add(
        CODE_TO_ITERATION_FILE,
        "RACE_ETH_CODE",
        "pair_code_known",
        f"RACE_ETH_CODE must be listed in {CODES_FILE}",
        rows=pairs.index.to_numpy()[unknown_code],
        values=pair_code[unknown_code][:5],
    )
    _single_iteration(context, race, ethnicity, pairs)


def _single_iteration(
    context: Context, race: pd.DataFrame, ethnicity: pd.DataFrame, pairs: pd.DataFrame
) -> None:
    """Each code -> at most one iteration per (level, alone, filter); rows of every offender."""
    iterations = pd.concat(
        [
            race.assign(IS_ETHNICITY=False),
            ethnicity.assign(IS_ETHNICITY=True, ALONE="-"),
        ],
        ignore_index=True,
    ).drop_duplicates("ITERATION_CODE")
    joined = (
        pairs.reset_index()
        .merge(iterations, on="ITERATION_CODE", how="inner")
        .loc[lambda f: f["LEVEL"].isin(TABULATED_LEVELS)]
    )
    offending = np.zeros(0, dtype=np.int64)
    for dropped in ("COARSE_ONLY", "DETAILED_ONLY"):  # state-or-above filter, sub-state filter
        kept = joined[joined[dropped] != "True"]
        keys = ["RACE_ETH_CODE", "IS_ETHNICITY", "LEVEL", "ALONE"]
        fan_out = kept.groupby(keys, sort=False)["ITERATION_CODE"].transform("size")
        offending = np.union1d(offending, kept.loc[fan_out.to_numpy() > 1, "row"].to_numpy())
    mask = np.isin(pairs.index.to_numpy(), offending)
    context.collector.add(
        CODE_TO_ITERATION_FILE,
        "RACE_ETH_CODE",
        "code_single_iteration",
        "a code maps to at most one iteration per level (1, 2), ALONE and geography filter "
        "(stability h = 1)",
        rows=offending,
        values=joined_values(pairs, ("ITERATION_CODE", "RACE_ETH_CODE"), mask, "|"),
    )
