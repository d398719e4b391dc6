"""Step 5 of the streamed SafeTab-P engine: T1 and T2 written from the work folder (one call).

Per pass and level, chunk by chunk of entities, the noisy answers are read back as the
in-memory engine's :class:`~das.safetab_p.measure.LevelMeasurement` and tabulated by
:func:`das.safetab_p.postprocess.tabulate_level`; coterminous targets are dropped as they pass
and the donors' copies appended at the end of the pass, exactly where the in-memory engine's
:func:`~das.safetab_p.coterminous.apply_coterminous` puts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.arrays import read_npy_positions, read_npy_range
from das.io.writers import open_pipe_table
from das.privacy.accounting import Measurement
from das.safetab_p.coterminous import (
    coterminous_mapping,
    donor_copies,
    read_coterminous_file,
    restrict_sets,
    target_rows,
)
from das.safetab_p.engine import coterminous_members
from das.safetab_p.keys import GeographyEntities
from das.safetab_p.measure import AGE23_TO, N_AGE23, N_BINS, N_SEX, LevelMeasurement
from das.safetab_p.postprocess import T1_COLUMNS, T2_COLUMNS, tabulate_level
from das.safetab_p.spill import N_SEXAGE, PASSES, WorkFolder, derived_sets, load_geography
from das.safetab_p.streamed.key_sets import EMPTY, LevelSpace, level_spaces, plan_by_partition
from das.specs.config import SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs


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
        entities=GeographyEntities(space.geography, space.region_ids[entities], EMPTY),
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
                targets = fix.target_entities.get(space.partition, EMPTY)
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
