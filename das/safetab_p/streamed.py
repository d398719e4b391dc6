"""SafeTab-P at national scale in bounded memory: the same release as the in-memory engine.

:func:`das.safetab_p.engine.run_safetab_p` holds the person records and every level's arrays
at once (≈90 GiB at 330 M persons). This module computes the same T1/T2 from a work folder
(:mod:`das.safetab_p.spill`) step by step, each step holding one state's records or one chunk
of one level's key set, everything big on disk:

1. :func:`prepare_geography` / :func:`spill_persons` (:mod:`das.safetab_p.spill`): the GRF-C
   as integer maps, the person file as per-state spills of four integers per record.
2. :func:`count_state_totals` (one call per state): the state's records, a few million at a
   time, each expanded once per (iteration level, geography filter) to its combination's
   iterations (the incidence is computed per distinct combination) and counted with
   ``bincount`` into every level's block: the true totals of every group of the state at
   every tabulated level. :func:`combine_totals` lays the states' blocks end to end (levels
   contained in states: STATE, COUNTY, TRACT, PLACE and the PR ones) or adds them (USA,
   AIANNH) into ``true_total.npy``, one int64 per group in key-set order.
3. :func:`measure_level_streamed` (one call per level): stage 1 and the total-only branch,
   drawn as whole-level noise vectors streamed to disk (:func:`draw_noise_file`), chunk by
   chunk → ``workload.npy`` (int8 per group) and per-entity offsets; then the stage-2 vector
   (level-0 totals first, then the cells of every group with a breakdown).
4. :func:`count_state_cells` (one call per state): the sex × age23 counts of the groups whose
   stage 1 chose a breakdown (only those); :func:`combine_cells` → ``true_cells.npy``.
5. :func:`write_release_tables` (one call): per pass and level, chunk by chunk of entities,
   the T1/T2 rows (:func:`das.safetab_p.postprocess.tabulate_level` on the chunk) streamed to
   ``t1/t1.txt`` and ``t2/t2.txt``; coterminous targets are dropped as they pass and the
   donors' copies appended at the end of the pass, exactly where the in-memory engine's
   :func:`~das.safetab_p.coterminous.apply_coterminous` puts them.

The key sets are integer index spaces (group = entity · n_iterations + iteration), entities
from the GRF-C and iterations from the specs, never from the data. Each measurement is one
noise vector of the same size, drawn in the same order (per level: stage 1, total-only,
stage 2; levels in configuration order, US pass first) as the in-memory engine, and the
streamed sampler yields exactly the draws of the one-shot sampler: with the same source (or
the same per-measurement streams) the two engines publish byte-identical files.

Memory: one state's records in pieces of :data:`PIECE_ROWS` (≈0.5 GiB of temporaries), one
chunk of :data:`CHUNK_GROUPS` groups of one level, and the largest state's block of one level
(California's tracts × detailed iterations ≈ 0.2 GiB). Noise and level arrays are read by
range, never mapped whole. No step logs or returns a count of records or a true count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from das.io.arrays import read_npy_positions, read_npy_range, write_npy_blocks
from das.io.atomic import atomic_output_dir, atomic_write_text
from das.io.writers import open_pipe_table
from das.privacy.accounting import Measurement, PrivacyAccountant, compose, draw_noise_file
from das.runs.folder import safe_name
from das.safetab_p.coterminous import (
    coterminous_mapping,
    donor_copies,
    read_coterminous_file,
    restrict_sets,
    target_rows,
)
from das.safetab_p.engine import coterminous_members
from das.safetab_p.iterations import IterationFilter, iteration_filter, position_incidence
from das.safetab_p.keys import GeographyEntities
from das.safetab_p.measure import AGE23_TO, N_AGE23, N_BINS, N_SEX, LevelMeasurement
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.postprocess import T1_COLUMNS, T2_COLUMNS, tabulate_level
from das.safetab_p.spill import (
    N_SEXAGE,
    PASSES,
    CombinationCodec,
    PassGeography,
    SpillSummary,
    WorkFolder,
    combination_ids,
    derived_sets,
    load_geography,
    prepare_geography,
    spill_persons,
)
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import PopulationGroupLevel, SafeTabGeography, SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs

PIECE_ROWS = 4_000_000  # spilled records processed at once
CHUNK_GROUPS = 4_000_000  # groups of one level processed at once
NATIONAL = (SafeTabGeography.USA, SafeTabGeography.AIANNH)  # entities spanning states
_EMPTY = np.zeros(0, dtype=np.int64)

# (rng or noise provider, accountant) for one level's measurements, by partition name
NoiseForLevel = Callable[[str], tuple[Any, PrivacyAccountant | None]]


# ---------------------------------------------------------------------------- key sets


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
        return GeographyEntities(self.geography, self.region_ids, _EMPTY)

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


def plan_by_partition(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs
) -> dict[str, dict[str, Measurement]]:
    """The plan's measurements by level partition ("PASS/GEOGRAPHY/LEVEL"), keyed by stage."""
    plan = plan_safetab_p(
        config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
    )
    grouped: dict[str, dict[str, Measurement]] = {}
    for item in plan:
        grouped.setdefault(str(item.partition), {})[str(item.metadata["stage"])] = item
    return grouped


def noise_files_in_use(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder
) -> dict[str, str]:
    """The noise file each measurement's answers are read from when the tables are written
    (the levels' ``noise.json``), by measurement name: what the run checks against the ledger."""
    files: dict[str, str] = {}
    for partition, measurements in plan_by_partition(config, specs).items():
        listed = work.level(partition) / "noise.json"
        if not listed.is_file():
            continue  # a level the run did not measure (its pass is off): nothing is read
        for stage, path in json.loads(listed.read_text()).items():
            # a stage the plan does not have is named as such, and matches no ledger record
            files[measurements[stage].name if stage in measurements else stage] = str(path)
    return files


def pass_of_state(state: int) -> str:
    return "PR" if state == 72 else "US"


def tabulated_states(work: WorkFolder) -> list[int]:
    """Every state with GRF-C blocks in an enabled pass (with or without persons)."""
    states: list[int] = []
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is not None:
            states.extend(geography.states)
    return states


def _state_range(
    space: LevelSpace, geography: PassGeography, state: int
) -> tuple[int, int, np.ndarray]:
    """(first entity, stop, entities) of the part of ``space`` a state's records reach."""
    if space.contained:
        start, stop = geography.state_entities(space.geography, state)
        return start, stop, np.arange(start, stop, dtype=np.int64)
    first, last = geography.state_geounits(state)
    entity = geography.geounit_entity[space.geography][first:last]
    return 0, space.n_entities, np.unique(entity[entity >= 0])


def _parts(work: WorkFolder, space: LevelSpace) -> Path:
    return work.level(space.partition) / "parts"


# ---------------------------------------------------------------------------- spill pieces


@dataclass(frozen=True)
class _Piece:
    """Up to PIECE_ROWS spilled records with their distinct combinations decoded."""

    geounit: np.ndarray
    sexage: np.ndarray
    combination: np.ndarray  # id per record
    positions: np.ndarray  # (m, 8) per distinct combination
    qspan_positions: np.ndarray  # (m,)

    @property
    def n_combinations(self) -> int:
        return int(self.qspan_positions.size)


def _pieces(work: WorkFolder, state: int, codec: CombinationCodec) -> Iterator[_Piece]:
    spill = work.spill(state)
    rows = spill.rows()
    for start in range(0, rows, PIECE_ROWS):
        columns = spill.read(start, start + PIECE_ROWS)
        ids, lo, hi = combination_ids(columns["lo"], columns["hi"])
        positions, qspan_positions = codec.unpack(lo, hi)
        yield _Piece(
            geounit=columns["geounit"].astype(np.int64),
            sexage=columns["sexage"].astype(np.int64),
            combination=ids,
            positions=positions,
            qspan_positions=qspan_positions,
        )


# ---------------------------------------------------------------------------- true totals


def _expand(incidence: sp.csr_matrix, combination: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(record, column) pairs: each record repeated once per iteration of its combination."""
    starts = incidence.indptr[combination].astype(np.int64)
    lengths = incidence.indptr[combination + 1].astype(np.int64) - starts
    total = int(lengths.sum())
    records = np.repeat(np.arange(combination.size, dtype=np.int64), lengths)
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    columns = incidence.indices[offsets + np.arange(total, dtype=np.int64)].astype(np.int64)
    return records, columns


def _dense_ids(values: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, index of each value among them) for values in [0, bound)."""
    present = np.zeros(bound, dtype=bool)
    present[values] = True
    distinct = np.flatnonzero(present)
    index = np.full(bound, -1, dtype=np.int64)
    index[distinct] = np.arange(distinct.size)
    return distinct, index[values]


def _local_entities(
    space: LevelSpace, geography: PassGeography, state: int, reached: np.ndarray
) -> tuple[np.ndarray, int]:
    """(local entity of each of the state's geounits, first geounit); entities outside
    ``reached`` (or none) map to ``reached.size``, a dummy row dropped at the end."""
    first, last = geography.state_geounits(state)
    entity = geography.geounit_entity[space.geography][first:last]
    local = np.full(entity.size, reached.size, dtype=np.int64)
    inside = entity >= 0
    position = np.searchsorted(reached, entity[inside])
    hit = position < reached.size
    hit[hit] = reached[position[hit]] == entity[inside][hit]
    local[np.flatnonzero(inside)[hit]] = position[hit]
    return local, first


def count_state_totals(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder, state: int
) -> None:
    """True totals of every group a state's records reach, at every tabulated level.

    Writes ``levels/<level>/parts/total-SS.npy`` ((entities reached × iterations) int64) and
    ``entities-SS.npy`` (which entities) for each level of the state's pass. Per piece of
    records and per (iteration level, geography filter): each record is expanded to its
    combination's iterations once, then counted into every level of that filter by
    ``bincount`` over (entity · iterations + iteration).
    """
    geography = load_geography(work, pass_of_state(state))
    if geography is None:
        return
    spaces = level_spaces(config, specs, geography)
    codec = CombinationCodec(specs)
    reached = {space.partition: _state_range(space, geography, state)[2] for space in spaces}
    local = {
        space.partition: _local_entities(space, geography, state, reached[space.partition])
        for space in spaces
    }
    blocks = {  # one dummy entity row at the end for records outside every entity
        space.partition: np.zeros((reached[space.partition].size + 1) * space.n_columns, np.int64)
        for space in spaces
    }
    keys = list(dict.fromkeys(space.key for space in spaces))
    for piece in _pieces(work, state, codec):
        for key in keys:
            same_key = [space for space in spaces if space.key == key]
            incidence = position_incidence(
                specs, piece.positions, piece.qspan_positions, same_key[0].iterations
            )
            records, columns = _expand(incidence, piece.combination)
            for space in same_key:
                geounit_local, first = local[space.partition]
                record_entity = geounit_local[piece.geounit - first]
                group = record_entity[records] * space.n_columns + columns
                block = blocks[space.partition]
                block += np.bincount(group, minlength=block.size)
            del records, columns
    for space in spaces:
        folder = _parts(work, space)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"total-{state:02d}.npy", blocks[space.partition][: -space.n_columns])
        np.save(folder / f"entities-{state:02d}.npy", reached[space.partition])


def _part_states(folder: Path, kind: str) -> list[int]:
    return sorted(int(p.name[len(kind) + 1 : -4]) for p in folder.glob(f"{kind}-*.npy"))


def _combine_totals(work: WorkFolder, space: LevelSpace) -> None:
    """Lay the states' blocks end to end (contained levels) or add them (USA, AIANNH)."""
    folder = _parts(work, space)
    states = _part_states(folder, "total")
    target = work.level(space.partition) / "true_total.npy"
    if space.contained:
        next_entity = 0

        def blocks() -> Iterator[np.ndarray]:
            nonlocal next_entity
            for state in states:
                entities = np.load(folder / f"entities-{state:02d}.npy")
                if entities.size and entities[0] != next_entity:
                    raise ValueError(f"{space.partition}: the states' parts are not contiguous")
                next_entity += entities.size
                yield np.load(folder / f"total-{state:02d}.npy")

        write_npy_blocks(target, blocks(), space.n_groups)
        return
    total = np.zeros((space.n_entities, space.n_columns), dtype=np.int64)
    for state in states:
        entities = np.load(folder / f"entities-{state:02d}.npy")
        total[entities] += np.load(folder / f"total-{state:02d}.npy").reshape(-1, space.n_columns)
    write_npy_blocks(target, (total.ravel(),), space.n_groups)


def combine_totals(config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder) -> None:
    """``true_total.npy`` of every tabulated level from the states' parts."""
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is None:
            continue
        for space in level_spaces(config, specs, geography):
            _combine_totals(work, space)


# ---------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class LevelSummary:
    """What one level's measurement drew (sizes of the key set and of the noise vectors)."""

    partition: str
    groups: int
    draws: dict[str, int]


def _noise_path(work: WorkFolder, measurement: Measurement) -> Path:
    return work.noise() / f"{safe_name(measurement.name)}.npy"


def _entity_offsets(workload: np.ndarray) -> np.ndarray:
    """(3, entities) per entity: level-0 groups, groups with a breakdown, their cells."""
    level_0 = (workload == 0).sum(axis=1)
    broken = (workload >= 1).sum(axis=1)
    cells = (N_SEX * N_BINS[np.maximum(workload, 0)] * (workload >= 1)).sum(axis=1)
    return np.stack([level_0, broken, cells]).astype(np.int64)


def measure_level_streamed(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    work: WorkFolder,
    partition: str,
    rng: Any,
    accountant: PrivacyAccountant | None,
) -> LevelSummary:
    """Stage 1, total-only and stage 2 of one level (after :func:`combine_totals`).

    ``rng`` is a random source (None: the OS CSPRNG), or a noise provider with
    ``noise_file_for`` (the persisted :class:`das.runs.noise_store.NoiseStore` of this
    level); every planned measurement is charged and drawn, even when it has no group.
    Writes ``workload.npy``, ``offsets.npy`` and ``noise.json`` (where each vector is).
    """
    space = _space(config, specs, work, partition)
    measurements = plan_by_partition(config, specs)[partition]
    folder = work.level(partition)
    thresholds = config.thresholds.get(space.level)
    stage_2 = measurements.get("stage-2")
    adaptive, total_only = space.adaptive_columns, space.total_only_columns
    n_adaptive = space.n_entities * adaptive.size
    n_total_only = space.n_entities * total_only.size
    noise_files: dict[str, str] = {}
    draws: dict[str, int] = {}

    def draw(stage: str, size: int) -> None:
        measurement = measurements[stage]
        vector = draw_noise_file(measurement, size, rng, accountant, _noise_path(work, measurement))
        noise_files[stage] = str(vector.filename)
        draws[stage] = size
        del vector

    if "stage-1" in measurements:
        if thresholds is None or stage_2 is None:
            raise ValueError("an adaptive level needs thresholds and a stage-2 measurement")
        draw("stage-1", n_adaptive)
    elif n_adaptive:
        raise ValueError("adaptive groups but no stage-1 measurement in the plan")
    if "total-only" in measurements:
        draw("total-only", n_total_only)
    elif n_total_only:
        raise ValueError("total-only groups but no total-only measurement in the plan")

    offsets = np.zeros((3, space.n_entities), dtype=np.int64)
    edges = np.asarray(thresholds if thresholds is not None else (), dtype=np.int64)

    def workloads() -> Iterator[np.ndarray]:
        for start, stop in space.entity_chunks():
            count = stop - start
            workload = np.full((count, space.n_columns), -1, dtype=np.int64)
            if adaptive.size and n_adaptive:
                true = read_npy_range(
                    folder / "true_total.npy", start * space.n_columns, stop * space.n_columns
                ).reshape(count, space.n_columns)
                noise = read_npy_range(
                    noise_files["stage-1"], start * adaptive.size, stop * adaptive.size
                ).reshape(count, adaptive.size)
                workload[:, adaptive] = np.digitize(true[:, adaptive] + noise, edges)
            offsets[:, start:stop] = _entity_offsets(workload)
            yield workload.astype(np.int8).ravel()

    write_npy_blocks(folder / "workload.npy", workloads(), space.n_groups, np.int8)
    cumulative = np.zeros((3, space.n_entities + 1), dtype=np.int64)
    np.cumsum(offsets, axis=1, out=cumulative[:, 1:])
    np.save(folder / "offsets.npy", cumulative)
    if stage_2 is not None:
        draw("stage-2", int(cumulative[0, -1] + cumulative[2, -1]))
    atomic_write_text(folder / "noise.json", json.dumps(noise_files))
    return LevelSummary(partition, space.n_groups, draws)


def _space(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder, partition: str
) -> LevelSpace:
    pass_name = partition.split("/", 1)[0]
    geography = load_geography(work, pass_name)
    spaces = [] if geography is None else level_spaces(config, specs, geography)
    for space in spaces:
        if space.partition == partition:
            return space
    raise ValueError(f"{partition}: not a tabulated level of this configuration")


# ---------------------------------------------------------------------------- true cells


@dataclass
class _BrokenGroups:
    """The groups with a breakdown of one level that a state's records reach."""

    space: LevelSpace
    n_local: int  # entities of the state's range; local index n_local = "none of them"
    entity: np.ndarray  # local entity of each group
    column: np.ndarray  # its iteration column
    geounit_local: np.ndarray  # per geounit of the state: its local entity if it has such
    first_geounit: int  # a group, else n_local
    cells: np.ndarray  # 46 per group, accumulated


def count_state_cells(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder, state: int
) -> None:
    """Sex × age23 counts of the groups with a breakdown that a state's records reach.

    Writes ``levels/<level>/parts/cells-SS.npy``: 46 values per group with a breakdown, in
    group order (contained levels: the state's groups; USA and AIANNH: every such group of
    the level, this state's share). Only the records of entities holding such a group are
    expanded, and only to the iterations that have one (once per iteration level and
    geography filter).
    """
    geography = load_geography(work, pass_of_state(state))
    if geography is None:
        return
    spaces = level_spaces(config, specs, geography)
    codec = CombinationCodec(specs)
    levels: list[_BrokenGroups] = []
    for space in spaces:
        start, stop, _ = _state_range(space, geography, state)
        workload = read_npy_range(
            work.level(space.partition) / "workload.npy",
            start * space.n_columns,
            stop * space.n_columns,
        )
        broken = np.flatnonzero(workload >= 1)
        entity = broken // space.n_columns
        n_local = stop - start
        has_broken = np.zeros(n_local + 1, dtype=bool)
        has_broken[entity] = True
        geounit_local, first = _local_entities(
            space, geography, state, np.arange(start, stop, dtype=np.int64)
        )
        levels.append(
            _BrokenGroups(
                space=space,
                n_local=n_local,
                entity=entity,
                column=broken % space.n_columns,
                geounit_local=np.where(has_broken[geounit_local], geounit_local, n_local),
                first_geounit=first,
                cells=np.zeros(broken.size * N_SEXAGE, dtype=np.int64),
            )
        )
    keys = list(dict.fromkeys(level.space.key for level in levels if level.entity.size))
    if keys:
        for piece in _pieces(work, state, codec):
            for key in keys:
                _count_cells_of_key(specs, piece, [lv for lv in levels if lv.space.key == key])
    for level in levels:
        folder = _parts(work, level.space)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"cells-{state:02d}.npy", level.cells)


def _count_cells_of_key(
    specs: RaceEthnicitySpecs, piece: _Piece, levels: list[_BrokenGroups]
) -> None:
    """One piece, the levels of one (iteration level, filter): expand once, count per level."""
    record_local = [lv.geounit_local[piece.geounit - lv.first_geounit] for lv in levels]
    in_some = np.zeros(piece.geounit.size, dtype=bool)
    for level, local in zip(levels, record_local, strict=True):
        in_some |= local < level.n_local
    selected = np.flatnonzero(in_some)
    if selected.size == 0:
        return
    columns = np.unique(np.concatenate([level.column for level in levels]))
    space = levels[0].space
    subset = IterationFilter(
        index=space.iterations.index[columns], total_only=space.iterations.total_only[columns]
    )
    combos, combo_local = _dense_ids(piece.combination[selected], piece.n_combinations)
    incidence = position_incidence(
        specs, piece.positions[combos], piece.qspan_positions[combos], subset
    )
    records, sub_columns = _expand(incidence, combo_local)
    sexage = piece.sexage[selected][records]
    for level, local in zip(levels, record_local, strict=True):
        lookup = np.full((level.n_local + 1) * columns.size, -1, dtype=np.int64)
        position = np.searchsorted(columns, level.column)
        lookup[level.entity * columns.size + position] = np.arange(level.entity.size)
        group = lookup[local[selected][records] * columns.size + sub_columns]
        keep = group >= 0
        level.cells += np.bincount(
            group[keep] * N_SEXAGE + sexage[keep], minlength=level.cells.size
        )


def combine_cells(config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder) -> None:
    """``true_cells.npy`` (46 per group with a breakdown, in group order) of every level."""
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is None:
            continue
        for space in level_spaces(config, specs, geography):
            folder = _parts(work, space)
            states = _part_states(folder, "cells")
            target = work.level(space.partition) / "true_cells.npy"
            size = int(np.load(work.level(space.partition) / "offsets.npy")[1, -1]) * N_SEXAGE
            if space.contained:
                parts = (np.load(folder / f"cells-{state:02d}.npy") for state in states)
                write_npy_blocks(target, parts, size)
                continue
            total = np.zeros(size, dtype=np.int64)
            for state in states:
                total += np.load(folder / f"cells-{state:02d}.npy")
            write_npy_blocks(target, (total,), size)


# ---------------------------------------------------------------------------- tabulation


def _merge_bins(true_cells: np.ndarray, workload: np.ndarray) -> np.ndarray:
    """Per group with a breakdown: its 46 sex × age23 counts merged into its workload's bins,
    laid out as the in-memory engine's cells (sex-major, bins ascending), concatenated."""
    widths = N_SEX * N_BINS[workload]
    out = np.zeros(int(widths.sum()), dtype=np.int64)
    offsets = np.cumsum(widths) - widths
    by_sex = true_cells.reshape(-1, N_SEX, N_AGE23)
    for level, mapping in AGE23_TO.items():  # three workloads, not a loop per group
        here = np.flatnonzero(workload == level)
        if not here.size:
            continue
        starts = np.flatnonzero(np.r_[True, mapping[1:] != mapping[:-1]])
        merged = np.add.reduceat(by_sex[here], starts, axis=2).reshape(here.size, -1)
        positions = offsets[here][:, None] + np.arange(merged.shape[1])
        out[positions.ravel()] = merged.ravel()
    return out


def _gather(path: str | Path, positions: np.ndarray) -> np.ndarray:
    """Values of a 1-D ``.npy`` at ascending positions: one range read when contiguous."""
    if positions.size == 0:
        return read_npy_range(path, 0, 0)
    first, last = int(positions[0]), int(positions[-1])
    if last - first + 1 == positions.size:
        return read_npy_range(path, first, last + 1)
    return read_npy_positions(path, positions)


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ranges [start, start + length) (vectorized)."""
    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)


def chunk_measurement(
    space: LevelSpace,
    work: WorkFolder,
    stage_2: Measurement | None,
    entities: np.ndarray,
) -> LevelMeasurement:
    """The noisy answers of the given entities (ascending) of a measured level, as the
    in-memory engine's :class:`LevelMeasurement` restricted to them (group ids relative to
    the selection: local entity · n_iterations + iteration)."""
    folder = work.level(space.partition)
    noise_files = json.loads((folder / "noise.json").read_text())
    offsets = np.load(folder / "offsets.npy")
    entities = np.asarray(entities, dtype=np.int64)
    n_columns = space.n_columns
    count = entities.size
    groups = (entities[:, None] * n_columns + np.arange(n_columns)).ravel()
    workload = _gather(folder / "workload.npy", groups).astype(np.int64)
    true = _gather(folder / "true_total.npy", groups)
    total = np.zeros(count * n_columns, dtype=np.int64)
    only = space.total_only_columns
    if only.size and count:
        positions = (entities[:, None] * only.size + np.arange(only.size)).ravel()
        local = (np.arange(count)[:, None] * n_columns + only).ravel()
        total[local] = true[local] + _gather(noise_files["total-only"], positions)
    table = workload.reshape(count, n_columns)
    level_0 = np.flatnonzero(workload == 0)
    broken = np.flatnonzero(workload >= 1)
    widths = N_SEX * N_BINS[workload[broken]]
    if stage_2 is not None:
        # Stage-2 vector: every level-0 total of the level (entity order), then every cell.
        is_0 = table == 0
        rank_0 = offsets[0, entities][:, None] + np.cumsum(is_0, axis=1) - 1
        stage_2_file = noise_files["stage-2"]
        total[level_0] = true[level_0] + _gather(stage_2_file, rank_0[is_0])
        is_broken = table >= 1
        rank_broken = offsets[1, entities][:, None] + np.cumsum(is_broken, axis=1) - 1
        broken_rank = rank_broken[is_broken]
        true_cells = _gather(
            folder / "true_cells.npy",
            _spans(broken_rank * N_SEXAGE, np.full(broken.size, N_SEXAGE, dtype=np.int64)),
        )
        cell_widths = np.where(is_broken, N_SEX * N_BINS[np.maximum(table, 0)], 0)
        first_cell = offsets[2, entities][:, None] + np.cumsum(cell_widths, axis=1) - cell_widths
        cell_start = int(offsets[0, -1]) + first_cell[is_broken]
        cell_count = _merge_bins(true_cells, workload[broken]) + _gather(
            stage_2_file, _spans(cell_start, widths)
        )
    else:
        cell_count = np.zeros(0, dtype=np.int64)
        widths = widths[:0]
        broken = broken[:0]
    n_cells = int(widths.sum())
    offsets_local = np.cumsum(widths) - widths
    within = np.arange(n_cells, dtype=np.int64) - np.repeat(offsets_local, widths)
    bins_of_cell = np.repeat(N_BINS[workload[broken]], widths)
    return LevelMeasurement(
        entities=GeographyEntities(space.geography, space.region_ids[entities], _EMPTY),
        iterations=space.iterations,
        iteration_codes=space.codes,
        workload=workload,
        total=total,
        cell_group=np.repeat(broken, widths),
        cell_sex=within // np.maximum(bins_of_cell, 1),
        cell_bin=within % np.maximum(bins_of_cell, 1),
        cell_count=cell_count,
        stage_2=stage_2,
    )


@dataclass(frozen=True)
class _PassCoterminous:
    """The coterminous fix of one pass: target groups to drop, and the donors' copies."""

    mapping: pd.DataFrame
    copies_t1: pd.DataFrame
    copies_t2: pd.DataFrame
    target_entities: dict[str, np.ndarray]  # by partition: entities holding a target group


def _pass_coterminous(
    config: SafeTabPConfig,
    spaces: list[LevelSpace],
    work: WorkFolder,
    stages: dict[str, dict[str, Measurement]],
    sets: pd.DataFrame,
) -> _PassCoterminous:
    """Tabulate the member entities only, then Algorithm 4 on those rows (as the engine)."""
    t1_parts, t2_parts, member_parts, member_entities = [], [], [], {}
    for space in spaces:
        ids = sets.loc[sets["REGION_TYPE"] == space.geography.value, "REGION_ID"].to_numpy(str)
        position = np.searchsorted(space.region_ids, ids)
        found = (position < space.n_entities) & (
            space.region_ids[np.minimum(position, max(space.n_entities - 1, 0))] == ids
            if space.n_entities
            else np.zeros(ids.size, dtype=bool)
        )
        entities = np.unique(position[found])
        member_entities[space.partition] = entities
        member_parts.append(coterminous_members(space.entities(), space.codes, sets))
        if entities.size:
            t1, t2 = tabulate_level(
                chunk_measurement(space, work, stages[space.partition].get("stage-2"), entities),
                config.allow_negative_counts,
                config.zero_suppression_chance,
            )
            t1_parts.append(t1)
            t2_parts.append(t2)
    empty_t1 = pd.DataFrame(columns=list(T1_COLUMNS))
    empty_t2 = pd.DataFrame(columns=list(T2_COLUMNS))
    t1 = pd.concat(t1_parts, ignore_index=True) if t1_parts else empty_t1
    t2 = pd.concat(t2_parts, ignore_index=True) if t2_parts else empty_t2
    members = pd.concat(member_parts, ignore_index=True) if member_parts else pd.DataFrame()
    mapping = coterminous_mapping(t1, members, sets)
    if mapping.empty:
        return _PassCoterminous(mapping, empty_t1, empty_t2, {})
    targets = {}
    for space in spaces:
        mine = mapping.loc[mapping["REGION_TYPE"] == space.geography.value, "REGION_ID"]
        targets[space.partition] = np.searchsorted(space.region_ids, np.unique(mine.to_numpy(str)))
    return _PassCoterminous(mapping, donor_copies(t1, mapping), donor_copies(t2, mapping), targets)


def _without_targets(frame: pd.DataFrame, mapping: pd.DataFrame) -> pd.DataFrame:
    return frame.loc[~target_rows(frame, mapping)] if len(frame) else frame


def write_release_tables(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    work: WorkFolder,
    folder: str | Path,
    coterminous_file: Path | None = None,
    coterminous_sets: pd.DataFrame | None = None,
) -> dict[str, int]:
    """Write ``t1/t1.txt`` and ``t2/t2.txt`` into ``folder`` (an existing staging folder).

    Streamed: one chunk of one level at a time; each file appears atomically. Returns the
    rows written per table. Reviewed coterminous sets come as a file or already read
    (``coterminous_sets``, as :func:`read_coterminous_file` returns them); else they are
    derived from the GRF-C.
    """
    folder = Path(folder)
    file_sets = coterminous_sets
    if file_sets is None and coterminous_file is not None:
        file_sets = read_coterminous_file(coterminous_file)
    stages = plan_by_partition(config, specs)
    (folder / "t1").mkdir(exist_ok=True)
    (folder / "t2").mkdir(exist_ok=True)
    with (
        open_pipe_table(folder / "t1" / "t1.txt", T1_COLUMNS) as t1_out,
        open_pipe_table(folder / "t2" / "t2.txt", T2_COLUMNS) as t2_out,
    ):
        for pass_name in PASSES:
            geography = load_geography(work, pass_name)
            if geography is None:
                continue
            spaces = level_spaces(config, specs, geography)
            sets = (
                derived_sets(work, pass_name)
                if file_sets is None
                else restrict_sets(file_sets, geography.geographies)
            )
            fix = _pass_coterminous(config, spaces, work, stages, sets)
            for space in spaces:
                stage_2 = stages[space.partition].get("stage-2")
                targets = fix.target_entities.get(space.partition, _EMPTY)
                for start, stop in space.entity_chunks():
                    t1, t2 = tabulate_level(
                        chunk_measurement(space, work, stage_2, np.arange(start, stop)),
                        config.allow_negative_counts,
                        config.zero_suppression_chance,
                    )
                    if np.any((targets >= start) & (targets < stop)):
                        t1 = _without_targets(t1, fix.mapping)
                        t2 = _without_targets(t2, fix.mapping)
                    t1_out.write(t1)
                    t2_out.write(t2)
            t1_out.write(fix.copies_t1)
            t2_out.write(fix.copies_t2)
    return {"t1": t1_out.rows, "t2": t2_out.rows}


# ---------------------------------------------------------------------------- driver


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
