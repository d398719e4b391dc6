"""Step 4 of the streamed SafeTab-P engine: the sex × age23 counts of the groups whose stage 1
chose a breakdown, and only those (after step 3: the workloads say which).

:func:`count_state_cells` counts one state's records (one call per state);
:func:`combine_cells` joins the states' parts into ``true_cells.npy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from das.io.arrays import read_npy_range, write_npy_blocks
from das.safetab_p.iterations import (
    CombinationCodes,
    IterationFilter,
    combination_codes,
    position_incidence,
)
from das.safetab_p.spill import N_SEXAGE, PASSES, CombinationCodec, WorkFolder, load_geography
from das.safetab_p.streamed.key_sets import LevelSpace, level_spaces
from das.safetab_p.streamed.state_records import (
    Piece,
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
            codes = combination_codes(specs, piece.positions)
            for key in keys:
                same_key = [lv for lv in levels if lv.space.key == key]
                _count_cells_of_key(specs, piece, same_key, codes)
    for level in levels:
        folder = parts_folder(work, level.space)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"cells-{state:02d}.npy", level.cells)


def _count_cells_of_key(
    specs: RaceEthnicitySpecs,
    piece: Piece,
    levels: list[_BrokenGroups],
    codes: CombinationCodes | None = None,
) -> None:
    """One piece, the levels of one (iteration level, filter), aggregated before expanded: per
    level, the records of its entities with a broken-down group are counted by (entity, sex ×
    age23, combination) — a sparse matrix H, as many rows as such entities × 46 (a state:
    46) — and H times the combinations' incidence in the iterations that have such a group
    gives every cell of those entities at once; the groups with a breakdown are read off.
    No record is expanded to its iterations, and a record whose combination reaches none of
    those iterations is not counted at all."""
    columns = np.unique(np.concatenate([level.column for level in levels]))
    space = levels[0].space
    subset = IterationFilter(
        index=space.iterations.index[columns], total_only=space.iterations.total_only[columns]
    )
    incidence = position_incidence(specs, piece.positions, piece.qspan_positions, subset, codes)
    incidence = incidence.astype(np.int64)
    reaches = np.diff(incidence.indptr) > 0  # per combination: some such iteration
    useful = reaches[piece.combination]
    for level in levels:
        local = level.geounit_local[piece.geounit - level.first_geounit]
        mine = np.flatnonzero((local < level.n_local) & useful)
        if mine.size == 0:
            continue
        counts = _row_counts(
            local[mine] * N_SEXAGE + piece.sexage[mine],
            piece.combination[mine],
            (level.n_local * N_SEXAGE, piece.n_combinations),
        )
        del mine, local
        cells = (counts @ incidence).tocoo()  # (entity, sex × age23) × iteration
        cells.sum_duplicates()
        lookup = np.full(level.n_local * columns.size, -1, dtype=np.int64)
        position = np.searchsorted(columns, level.column)
        lookup[level.entity * columns.size + position] = np.arange(level.entity.size)
        entity, sexage = np.divmod(cells.row.astype(np.int64), N_SEXAGE)
        group = lookup[entity * columns.size + cells.col]
        keep = group >= 0
        level.cells[group[keep] * N_SEXAGE + sexage[keep]] += cells.data[keep]


def _row_counts(rows: np.ndarray, columns: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """The 0/1 entries (row, column) as a CSR matrix of counts (duplicates left as such:
    a product sums them), its rows laid out by a stable counting sort (a radix sort when the
    rows fit 16 bits), without sorting each row's columns."""
    n_rows = shape[0]
    keys = rows.astype(np.uint16) if n_rows <= 1 << 16 else rows.astype(np.int32)
    order = np.argsort(keys, kind="stable")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    indices = columns[order].astype(np.int32 if shape[1] < 1 << 31 else np.int64)
    return sp.csr_matrix((np.ones(order.size, dtype=np.int64), indices, indptr), shape=shape)


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
