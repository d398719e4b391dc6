"""SafeTab-P end to end (no orchestration): plan → measure → postprocess → coterminous fix.

The US and PR passes hold disjoint people (parallel composition), so each has its own
:class:`PrivacyAccountant` whose total is the pass's planned loss; every draw is charged before
it happens and recorded with a digest of the noise (never the values) after.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das.io.atomic import atomic_output_dir
from das.io.safetab_p import RACE_COLUMNS
from das.io.writers import write_pipe_table
from das.privacy.accounting import Measurement, PrivacyAccountant, compose
from das.safetab_p.coterminous import (
    apply_coterminous,
    coterminous_sets,
    read_coterminous_file,
    restrict_sets,
)
from das.safetab_p.iterations import combination_incidence, iteration_filter
from das.safetab_p.keys import GeographyEntities, geography_entities, pass_blocks
from das.safetab_p.measure import aggregate_persons, measure_level
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.postprocess import T1_COLUMNS, T2_COLUMNS, tabulate_level
from das.safetab_p.stability import detailed_only_levels, require_race_code_bound, stability
from das.specs.config import SafeTabGeography, SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs

PASSES = ("US", "PR")


@dataclass(frozen=True)
class SafeTabPRelease:
    """The published tables and, per pass, the ledger of every measurement drawn."""

    t1: pd.DataFrame
    t2: pd.DataFrame
    accountants: dict[str, PrivacyAccountant]


def _plan_by_level(measurements: list[Measurement]) -> dict[str, dict[str, Measurement]]:
    """Plan entries grouped by partition ("PASS/GEOGRAPHY/LEVEL"), keyed by stage."""
    grouped: dict[str, dict[str, Measurement]] = {}
    for item in measurements:
        grouped.setdefault(str(item.partition), {})[str(item.metadata["stage"])] = item
    return grouped


def coterminous_members(
    entities: GeographyEntities, codes: np.ndarray, sets: pd.DataFrame
) -> pd.DataFrame:
    """Key-set groups of this level whose entity belongs to a coterminous set."""
    region_type = entities.geography.value
    ids = sets.loc[sets["REGION_TYPE"] == region_type, "REGION_ID"].to_numpy(dtype=str)
    return pd.DataFrame(
        {
            "REGION_TYPE": region_type,
            "REGION_ID": np.repeat(ids, codes.size),
            "ITERATION_CODE": np.tile(np.char.zfill(codes.astype(str), 4), ids.size),
        }
    )


def run_safetab_p(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    persons: pd.DataFrame,
    grfc: pd.DataFrame,
    rng: Any = None,
    coterminous_file: Path | None = None,
) -> SafeTabPRelease:
    """Measure and postprocess every tabulated level of the enabled passes.

    ``persons`` / ``grfc`` are in engine form (:mod:`das.io.safetab_p`); ``rng`` None draws
    from the OS CSPRNG, a seeded source is for tests and demos only. ``coterminous_file`` (a
    ``coterminous-geographies.txt`` spec) gives the coterminous sets instead of deriving them
    from the GRF-C; its sets are restricted to the levels tabulated in each pass.
    """
    require_race_code_bound(persons[list(RACE_COLUMNS)].to_numpy(), config.max_race_codes)
    file_sets = None if coterminous_file is None else read_coterminous_file(coterminous_file)
    plan = plan_safetab_p(
        config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
    )
    by_level = _plan_by_level(plan)
    t1_parts: list[pd.DataFrame] = []
    t2_parts: list[pd.DataFrame] = []
    accountants: dict[str, PrivacyAccountant] = {}
    for pass_name in PASSES:
        levels = [
            level for level in config.tabulated_levels() if level.geography.pass_name == pass_name
        ]
        if not levels:
            continue
        pass_plan = [m for m in plan if m.metadata["pass"] == pass_name]
        accountant = PrivacyAccountant(config.privacy_defn.value, compose(pass_plan))
        accountants[pass_name] = accountant
        blocks = pass_blocks(grfc, config, pass_name)
        agg = aggregate_persons(persons, blocks)
        geographies = [g for g in SafeTabGeography if any(lv.geography is g for lv in levels)]
        entities = {g: geography_entities(blocks, g) for g in geographies}
        sets = (
            coterminous_sets([entities[g] for g in geographies])
            if file_sets is None
            else restrict_sets(file_sets, geographies)
        )
        incidences: dict[tuple[int, bool], Any] = {}
        pass_t1, pass_t2, members = [], [], []
        for level in levels:
            geography = level.geography
            key = (level.iteration_level, geography.is_state_or_above)
            selected = iteration_filter(specs, *key)
            if key not in incidences:
                incidences[key] = combination_incidence(specs, agg.race_codes, agg.qspan, selected)
            codes = specs.iteration_code[selected.index].astype(np.int64)
            measured = measure_level(
                agg,
                entities[geography],
                selected,
                codes,
                incidences[key],
                by_level[f"{pass_name}/{geography.value}/{level.iteration_level}"],
                config.thresholds.get(level),
                rng,
                accountant,
            )
            t1, t2 = tabulate_level(
                measured, config.allow_negative_counts, config.zero_suppression_chance
            )
            pass_t1.append(t1)
            pass_t2.append(t2)
            members.append(coterminous_members(entities[geography], codes, sets))
        t1, t2 = apply_coterminous(
            pd.concat(pass_t1, ignore_index=True),
            pd.concat(pass_t2, ignore_index=True),
            pd.concat(members, ignore_index=True),
            sets,
        )
        t1_parts.append(t1)
        t2_parts.append(t2)
    t1 = (
        pd.concat(t1_parts, ignore_index=True)
        if t1_parts
        else pd.DataFrame(columns=list(T1_COLUMNS))
    )
    t2 = (
        pd.concat(t2_parts, ignore_index=True)
        if t2_parts
        else pd.DataFrame(columns=list(T2_COLUMNS))
    )
    return SafeTabPRelease(t1=t1, t2=t2, accountants=accountants)


def write_release(
    release: SafeTabPRelease, output_dir: str | Path, *, overwrite: bool = False
) -> dict[str, int]:
    """Write ``t1/t1.txt`` and ``t2/t2.txt`` (pipe-delimited, header) atomically; row counts."""
    rows = {}
    with atomic_output_dir(output_dir, overwrite=overwrite) as folder:
        for name, frame, columns in (
            ("t1", release.t1, T1_COLUMNS),
            ("t2", release.t2, T2_COLUMNS),
        ):
            (folder / name).mkdir()
            rows[name] = write_pipe_table(frame, folder / name / f"{name}.txt", list(columns))
    return rows
