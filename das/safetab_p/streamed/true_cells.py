"""Step 4 of the streamed SafeTab-P engine: the sex × age23 counts of the groups whose stage 1
chose a breakdown, and only those (after step 3: the workloads say which).

:func:`count_state_cells` counts one state's records (one call per state);
:func:`combine_cells` joins the states' parts into ``true_cells.npy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from das.io.arrays import read_npy_range, write_npy_blocks
from das.safetab_p.iterations import IterationFilter, position_incidence
from das.safetab_p.spill import N_SEXAGE, PASSES, CombinationCodec, WorkFolder, load_geography
from das.safetab_p.streamed.key_sets import LevelSpace, level_spaces
from das.safetab_p.streamed.state_records import (
    Piece,
    expand_records,
    local_entities,
    part_states,
    parts_folder,
    pass_of_state,
    record_pieces,
    state_range,
)
from das.specs.config import SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs


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
        start, stop, _ = state_range(space, geography, state)
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
        geounit_local, first = local_entities(
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
        for piece in record_pieces(work, state, codec):
            for key in keys:
                _count_cells_of_key(specs, piece, [lv for lv in levels if lv.space.key == key])
    for level in levels:
        folder = parts_folder(work, level.space)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"cells-{state:02d}.npy", level.cells)


def _count_cells_of_key(
    specs: RaceEthnicitySpecs, piece: Piece, levels: list[_BrokenGroups]
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
    records, sub_columns = expand_records(incidence, combo_local)
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


def _dense_ids(values: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, index of each value among them) for values in [0, bound)."""
    present = np.zeros(bound, dtype=bool)
    present[values] = True
    distinct = np.flatnonzero(present)
    index = np.full(bound, -1, dtype=np.int64)
    index[distinct] = np.arange(distinct.size)
    return distinct, index[values]


def combine_cells(config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder) -> None:
    """``true_cells.npy`` (46 per group with a breakdown, in group order) of every level."""
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is None:
            continue
        for space in level_spaces(config, specs, geography):
            folder = parts_folder(work, space)
            states = part_states(folder, "cells")
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
