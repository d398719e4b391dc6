"""Every step of the streamed SafeTab-P engine in order, in this process.

The flow (:mod:`flows.safetab_p`) runs the same steps as Prefect tasks, states and levels in
parallel; this driver serves callers without Prefect (tests, benchmarks). Its release is the
one of :func:`das.safetab_p.engine.run_safetab_p`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from das.io.atomic import atomic_output_dir
from das.privacy.accounting import PrivacyAccountant, compose
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.spill import (
    PASSES,
    SpillSummary,
    WorkFolder,
    load_geography,
    prepare_geography,
    spill_persons,
)
from das.safetab_p.stability import detailed_only_levels, stability
from das.safetab_p.streamed.key_sets import level_spaces
from das.safetab_p.streamed.measure_levels import LevelSummary, measure_level_streamed
from das.safetab_p.streamed.release_tables import write_release_tables
from das.safetab_p.streamed.state_records import tabulated_states
from das.safetab_p.streamed.true_cells import combine_cells, count_state_cells
from das.safetab_p.streamed.true_totals import combine_totals, count_state_totals
from das.specs.config import SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs

# (rng or noise provider, accountant) for one level's measurements, by partition name
NoiseForLevel = Callable[[str], tuple[Any, PrivacyAccountant | None]]


@dataclass(frozen=True)
class StreamedRelease:
    """What a streamed run produced: rows per table, the ledgers (by pass, or by level when
    each level had its own provider), the levels measured, the spill."""

    rows: dict[str, int]
    accountants: dict[str, PrivacyAccountant]
    levels: tuple[LevelSummary, ...]
    spill: SpillSummary


def pass_accountants(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs
) -> dict[str, PrivacyAccountant]:
    """One accountant per enabled pass, total = the pass's planned loss (as the engine)."""
    plan = plan_safetab_p(
        config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
    )
    accountants = {}
    for pass_name in PASSES:
        pass_plan = [m for m in plan if m.metadata["pass"] == pass_name]
        if pass_plan:
            accountants[pass_name] = PrivacyAccountant(
                config.privacy_defn.value, compose(pass_plan)
            )
    return accountants


def run_safetab_p_streamed(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    person_path: str | Path,
    grfc: pd.DataFrame,
    work_dir: str | Path,
    output_dir: str | Path,
    *,
    rng: Any = None,
    noise_for_level: NoiseForLevel | None = None,
    coterminous_file: Path | None = None,
    overwrite: bool = False,
) -> StreamedRelease:
    """Every step in order, in this process: the release of :func:`run_safetab_p`.

    ``grfc`` is the GRF-C in engine form (public; 8 M blocks ≈ 100 MB); ``person_path`` the
    person file (text or Parquet), read once. ``noise_for_level(partition)`` gives each
    level's noise provider and accountant (e.g. a persisted noise store); without it every
    level draws from ``rng`` (None: the OS CSPRNG), charged to one accountant per pass.
    ``output_dir`` receives ``t1/`` and ``t2/`` atomically.
    """
    work = WorkFolder(Path(work_dir))
    prepare_geography(config, grfc, work)
    spilled = spill_persons(config, specs, person_path, work)
    states = tabulated_states(work)
    for state in states:
        count_state_totals(config, specs, work, state)
    combine_totals(config, specs, work)
    accountants: dict[str, PrivacyAccountant] = {}
    per_pass = pass_accountants(config, specs)
    summaries = []
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is None:
            continue
        for space in level_spaces(config, specs, geography):
            if noise_for_level is not None:
                provider, accountant = noise_for_level(space.partition)
                if accountant is not None:
                    accountants[space.partition] = accountant
            else:
                provider, accountant = rng, per_pass[pass_name]
                accountants[pass_name] = accountant
            summaries.append(
                measure_level_streamed(config, specs, work, space.partition, provider, accountant)
            )
    for state in states:
        count_state_cells(config, specs, work, state)
    combine_cells(config, specs, work)
    with atomic_output_dir(output_dir, overwrite=overwrite) as staging:
        rows = write_release_tables(config, specs, work, staging, coterminous_file)
    return StreamedRelease(rows, accountants, tuple(summaries), spilled)
