"""The key set of each tabulated SafeTab-P level as an integer index space (streamed engine).

Group = entity · n_iterations + iteration, entities from the GRF-C and iterations from the
specs, never from the data: every step of :mod:`das.safetab_p.streamed` reads and writes a
level's arrays in this order, :data:`CHUNK_GROUPS` groups at a time, and finds the level's
planned measurements by its partition ("PASS/GEOGRAPHY/LEVEL").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from das.privacy.accounting import Measurement
from das.safetab_p.iterations import IterationFilter, iteration_filter
from das.safetab_p.keys import GeographyEntities
from das.safetab_p.memo import of_specs
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.spill import PassGeography, WorkFolder, load_geography
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import PopulationGroupLevel, SafeTabGeography, SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs

CHUNK_GROUPS = 4_000_000  # groups of one level processed at once
NATIONAL = (SafeTabGeography.USA, SafeTabGeography.AIANNH)  # entities spanning states
EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class LevelSpace:
    """The key set of one population-group level as an integer index space."""

    pass_name: str
    level: PopulationGroupLevel
    iterations: IterationFilter
    codes: np.ndarray  # ITERATION_CODE of each column
    region_ids: np.ndarray  # one per entity, sorted

    @property
    def geography(self) -> SafeTabGeography:
        return self.level.geography

    @property
    def partition(self) -> str:
        return f"{self.pass_name}/{self.geography.value}/{self.level.iteration_level}"

    @property
    def key(self) -> tuple[int, bool]:
        return (self.level.iteration_level, self.geography.is_state_or_above)

    @property
    def contained(self) -> bool:
        """Every entity lies in one state (all geographies but USA and AIANNH)."""
        return self.geography not in NATIONAL

    @property
    def n_entities(self) -> int:
        return int(self.region_ids.size)

    @property
    def n_columns(self) -> int:
        return self.iterations.size

    @property
    def n_groups(self) -> int:
        return self.n_entities * self.n_columns

    @property
    def adaptive_columns(self) -> np.ndarray:
        return np.flatnonzero(~self.iterations.total_only)

    @property
    def total_only_columns(self) -> np.ndarray:
        return np.flatnonzero(self.iterations.total_only)

    def entities(self) -> GeographyEntities:
        """The entities in the form :func:`coterminous_members` reads (no blocks)."""
        return GeographyEntities(self.geography, self.region_ids, EMPTY)

    def entity_chunks(self) -> Iterator[tuple[int, int]]:
        step = max(1, CHUNK_GROUPS // max(self.n_columns, 1))
        for start in range(0, self.n_entities, step):
            yield start, min(start + step, self.n_entities)


def level_spaces(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, geography: PassGeography
) -> list[LevelSpace]:
    """The tabulated levels of a pass, in configuration order."""
    spaces = []
    for level in config.tabulated_levels():
        if level.geography.pass_name != geography.pass_name:
            continue
        selected = iteration_filter(specs, level.iteration_level, level.geography.is_state_or_above)
        spaces.append(
            LevelSpace(
                pass_name=geography.pass_name,
                level=level,
                iterations=selected,
                codes=specs.iteration_code[selected.index].astype(np.int64),
                region_ids=geography.region_ids[level.geography],
            )
        )
    return spaces


def level_space(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder, partition: str
) -> LevelSpace:
    """The key set of one level by its partition name: a task gets a name, not the object."""
    pass_name = partition.split("/", 1)[0]
    geography = load_geography(work, pass_name)
    spaces = [] if geography is None else level_spaces(config, specs, geography)
    for space in spaces:
        if space.partition == partition:
            return space
    raise ValueError(f"{partition}: not a tabulated level of this configuration")


def plan_by_partition(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs
) -> dict[str, dict[str, Measurement]]:
    """The plan's measurements by level partition ("PASS/GEOGRAPHY/LEVEL"), keyed by stage.

    The plan is made once per specs and config (every level asks: :mod:`das.safetab_p.memo`);
    the caller gets its own dictionaries."""

    def grouped() -> dict[str, dict[str, Measurement]]:
        plan = plan_safetab_p(
            config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
        )
        by_partition: dict[str, dict[str, Measurement]] = {}
        for item in plan:
            by_partition.setdefault(str(item.partition), {})[str(item.metadata["stage"])] = item
        return by_partition

    kept = of_specs(specs, ("plan-by-partition", config.model_dump_json()), grouped)
    return {partition: dict(stages) for partition, stages in kept.items()}
