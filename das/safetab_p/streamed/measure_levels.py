"""Step 3 of the streamed SafeTab-P engine: each level's noise, drawn to disk (one call per level).

Stage 1 and the total-only branch are whole-level noise vectors streamed to disk
(:func:`~das.privacy.accounting.draw_noise_file`) and read back chunk by chunk into
``workload.npy`` (int8 per group) and per-entity offsets; then the stage-2 vector (level-0
totals first, then the cells of every group with a breakdown). Same vectors, sizes and order
as the in-memory engine (per level: stage 1, total-only, stage 2), so that the same source
gives the same release.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from das.io.arrays import read_npy_range, write_npy_blocks
from das.io.atomic import atomic_write_text
from das.privacy.accounting import Measurement, PrivacyAccountant, draw_noise_file
from das.runs.folder import safe_name
from das.safetab_p.measure import N_BINS, N_SEX
from das.safetab_p.spill import WorkFolder
from das.safetab_p.streamed.key_sets import level_space, plan_by_partition
from das.specs.config import SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs


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
    space = level_space(config, specs, work, partition)
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
