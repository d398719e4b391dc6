"""Prefect tasks of the SafeTab-P flow: load → prepare pass → measure level →
postprocess level → coterminous fix → write → privacy artifacts.

Each task calls the engine (:mod:`das.safetab_p`); this module adds retries on I/O, progress
logs (counts of levels and rows, never values) and the persisted noise store that makes a rerun
reuse every draw already made (:mod:`das.runs.noise_store`). No task caches or persists its
result (``NO_CACHE``, ``persist_result=False``): results hold confidential frames, and the
privacy ledger, not a result cache, is what guarantees no redraw on a rerun.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from prefect import get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.io.atomic import atomic_output_dir  # noqa: E402
from das.io.safetab_p import (  # noqa: E402
    grf_c_path,
    person_records_path,
    read_grf_c,
    read_person_records,
)
from das.io.writers import file_sha256, write_pipe_table  # noqa: E402
from das.privacy.accounting import Measurement, PrivacyAccountant, compose  # noqa: E402
from das.runs.curator_log import curator_log  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.runs.noise_store import (  # noqa: E402
    NoiseStore,
    secure_streams,
    seeded_streams,
)
from das.runs.release import RunLease  # noqa: E402
from das.safetab_p.coterminous import (  # noqa: E402
    apply_coterminous,
    coterminous_sets,
    read_coterminous_file,
    restrict_sets,
)
from das.safetab_p.engine import coterminous_members  # noqa: E402
from das.safetab_p.iterations import combination_incidence, iteration_filter  # noqa: E402
from das.safetab_p.keys import geography_entities, pass_blocks  # noqa: E402
from das.safetab_p.measure import (  # noqa: E402
    AggregatedPersons,
    LevelMeasurement,
    aggregate_persons,
    measure_level,
)
from das.safetab_p.plan import plan_safetab_p  # noqa: E402
from das.safetab_p.postprocess import T1_COLUMNS, T2_COLUMNS, tabulate_level  # noqa: E402
from das.safetab_p.stability import detailed_only_levels, stability  # noqa: E402
from das.specs.config import (  # noqa: E402
    ConfigError,
    PopulationGroupLevel,
    SafeTabGeography,
    SafeTabPConfig,
    load_safetab_p_config,
)
from das.specs.race_specs import RaceEthnicitySpecs, load_race_specs  # noqa: E402
from tasks.common import combine_ledgers, found_inputs  # noqa: E402
from tasks.run_context import RunInputs, RunPlan  # noqa: E402

PASSES = ("US", "PR")
TABLES = {"t1": T1_COLUMNS, "t2": T2_COLUMNS}


@dataclass(frozen=True)
class SafeTabPInputs:
    """Config, race/ethnicity specs and the two input files in engine form."""

    config: SafeTabPConfig
    specs: RaceEthnicitySpecs
    persons: pd.DataFrame
    grfc: pd.DataFrame
    plan: tuple[Measurement, ...]


@dataclass(frozen=True)
class PassContext:
    """What every level of one pass shares: its plan, aggregated records, geographies."""

    pass_name: str
    levels: tuple[PopulationGroupLevel, ...]
    plan: tuple[Measurement, ...]
    agg: AggregatedPersons
    entities: dict[SafeTabGeography, Any]
    sets: pd.DataFrame


@dataclass(frozen=True)
class LevelResult:
    """One level's measurement, with the noise store's counts of fresh and reused draws."""

    level: PopulationGroupLevel
    measured: LevelMeasurement
    ledger: dict[str, Any]
    fresh: tuple[str, ...]
    reused: tuple[str, ...]


def level_partition(pass_name: str, level: PopulationGroupLevel) -> str:
    """The plan's partition name of a level ("US/COUNTY/2")."""
    return f"{pass_name}/{level.geography.value}/{level.iteration_level}"


def run_inputs(
    config_path: str | Path, data_dir: str | Path, coterminous: str | Path | None = None
) -> RunInputs:
    """Every file a SafeTab-P run reads, by role: config, the spec files beside it (and a
    reviewed coterminous file), the person records (confidential), the GRF-C (reference)."""
    config_path = Path(config_path)
    specs = {spec.name: spec for spec in sorted(config_path.parent.glob("*.txt"))}
    if coterminous is not None:
        specs[Path(coterminous).name] = Path(coterminous)
    return RunInputs(
        config=config_path,
        specs=specs,
        confidential=found_inputs(data_dir, (person_records_path,)),
        reference=found_inputs(data_dir, (grf_c_path,)),
    )


def plan_run(config_path: str | Path) -> RunPlan | None:
    """The run's planned measurements from config and spec files alone (no record is read);
    None when they cannot be read (validation then says why, and nothing is drawn)."""
    try:
        config = load_safetab_p_config(config_path)
        specs = load_race_specs(Path(config_path).parent)
        plan = plan_safetab_p(
            config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
        )
    except (ConfigError, OSError, ValueError):
        return None
    return RunPlan(config.privacy_defn.value, tuple(plan))


@task(name="load-inputs", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def load_inputs(config_path: str, data_dir: str, folder: RunFolder) -> SafeTabPInputs:
    """Read config, spec files, person records and GRF-C; plan every measurement.

    The number of person records goes to the curator's local log only."""
    config = load_safetab_p_config(config_path)
    specs = load_race_specs(Path(config_path).parent)
    persons = read_person_records(person_records_path(data_dir))
    grfc = read_grf_c(grf_c_path(data_dir))
    plan = plan_safetab_p(
        config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
    )
    curator_log(folder, "loaded %d person records, %d GRF-C blocks", len(persons), len(grfc))
    get_run_logger().info(
        "loaded the inputs; %d levels, %d planned measurements",
        len(config.tabulated_levels()), len(plan),
    )  # fmt: skip
    return SafeTabPInputs(config, specs, persons, grfc, tuple(plan))


@task(name="prepare-pass", cache_policy=NO_CACHE, persist_result=False)
def prepare_pass(
    inputs: SafeTabPInputs,
    pass_name: str,
    folder: RunFolder,
    coterminous_file: str | None = None,
) -> PassContext | None:
    """Aggregate the pass's records and build its geography entities and coterminous sets
    (from the reviewed ``coterminous_file`` when given, else derived from the GRF-C)."""
    config = inputs.config
    levels = tuple(
        level for level in config.tabulated_levels() if level.geography.pass_name == pass_name
    )
    if not levels:
        return None
    blocks = pass_blocks(inputs.grfc, config, pass_name)
    agg = aggregate_persons(inputs.persons, blocks)
    geographies = [g for g in SafeTabGeography if any(lv.geography is g for lv in levels)]
    entities = {g: geography_entities(blocks, g) for g in geographies}
    sets = (
        coterminous_sets([entities[g] for g in geographies])
        if coterminous_file is None
        else restrict_sets(read_coterminous_file(coterminous_file), geographies)
    )
    plan = tuple(m for m in inputs.plan if m.metadata["pass"] == pass_name)
    curator_log(
        folder, "pass %s: %d distinct record rows, %d blocks", pass_name, agg.count.size,
        len(blocks),
    )  # fmt: skip
    get_run_logger().info("pass %s: %d levels prepared", pass_name, len(levels))
    return PassContext(pass_name, levels, plan, agg, entities, sets)


@task(name="measure-level", cache_policy=NO_CACHE, persist_result=False)
def measure_level_task(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    context: PassContext,
    level: PopulationGroupLevel,
    folder: RunFolder,
    seed: int | None,
    lease: RunLease | None = None,
) -> LevelResult:
    """Two-stage measurement of one level; draws go through the level's persisted noise store.

    Takes the pass's aggregated records (``context``), never the person file itself: on a
    Dask cluster every argument is shipped to the worker that runs the level."""
    partition = level_partition(context.pass_name, level)
    planned = {str(m.metadata["stage"]): m for m in context.plan if m.partition == partition}
    store = NoiseStore.open(
        folder,
        partition,
        config.privacy_defn.value,
        compose(planned.values()),
        secure_streams() if seed is None else seeded_streams(seed),
        guard=None if lease is None else lease.check,
    )
    key = (level.iteration_level, level.geography.is_state_or_above)
    selected = iteration_filter(specs, *key)
    incidence = combination_incidence(
        specs, context.agg.race_codes, context.agg.qspan, selected
    )
    codes = specs.iteration_code[selected.index].astype(np.int64)
    measured = measure_level(
        context.agg,
        context.entities[level.geography],
        selected,
        codes,
        incidence,
        planned,
        config.thresholds.get(level),
        store,
        store.accountant,
    )
    get_run_logger().info(
        "level %s measured: %d groups, %d measurements drawn now, %d reused",
        partition, measured.workload.size, len(store.fresh), len(store.reused),
    )  # fmt: skip
    return LevelResult(
        level, measured, store.accountant.to_dict(), tuple(store.fresh), tuple(store.reused)
    )


@task(name="postprocess-level", cache_policy=NO_CACHE, persist_result=False)
def postprocess_level(
    config: SafeTabPConfig, context: PassContext, result: LevelResult
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """T1/T2 rows of one level (suppression, non-negativity) and its coterminous members."""
    t1, t2 = tabulate_level(
        result.measured, config.allow_negative_counts, config.zero_suppression_chance
    )
    members = coterminous_members(
        context.entities[result.level.geography], result.measured.iteration_codes, context.sets
    )
    get_run_logger().info(
        "level %s postprocessed: %d T1 rows, %d T2 rows",
        level_partition(context.pass_name, result.level), len(t1), len(t2),
    )  # fmt: skip
    return t1, t2, members


@task(name="fix-coterminous", cache_policy=NO_CACHE, persist_result=False)
def fix_coterminous(
    context: PassContext, parts: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One pass's tables with coterminous geographies made to agree."""
    t1, t2 = apply_coterminous(
        pd.concat([p[0] for p in parts], ignore_index=True),
        pd.concat([p[1] for p in parts], ignore_index=True),
        pd.concat([p[2] for p in parts], ignore_index=True),
        context.sets,
    )
    get_run_logger().info(
        "pass %s: %d coterminous sets; %d T1 rows, %d T2 rows",
        context.pass_name, len(context.sets), len(t1), len(t2),
    )  # fmt: skip
    return t1, t2


@task(name="write-tables", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def write_tables(
    tables: dict[str, list[pd.DataFrame]], output: str
) -> dict[str, dict[str, Any]]:
    """Write ``t1/t1.txt`` and ``t2/t2.txt`` into the staging folder ``output`` (each folder
    atomically, so a retried write replaces a partial one); hashes and row counts."""
    written: dict[str, dict[str, Any]] = {}
    for name, columns in TABLES.items():
        parts = tables.get(name, [])
        frame = (
            pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(columns))
        )
        with atomic_output_dir(Path(output) / name, overwrite=True) as folder:
            rows = write_pipe_table(frame, folder / f"{name}.txt", list(columns))
        path = Path(output) / name / f"{name}.txt"
        written[f"{name}/{name}.txt"] = {"rows": rows, "sha256": file_sha256(path)}
        get_run_logger().info("wrote %s/%s.txt: %d rows", name, name, rows)
    return written


def pass_accountant(
    config: SafeTabPConfig, context: PassContext, results: list[LevelResult]
) -> PrivacyAccountant:
    """The pass's ledger: every level's entries under the pass total (parallel with the other
    pass: disjoint people)."""
    return combine_ledgers(
        config.privacy_defn.value, context.plan, [result.ledger for result in results]
    )
