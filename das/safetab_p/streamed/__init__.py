"""SafeTab-P at national scale in bounded memory: the same release as the in-memory engine.

:func:`das.safetab_p.engine.run_safetab_p` holds the person records and every level's arrays
at once (≈90 GiB at 330 M persons). This package computes the same T1/T2 from a work folder
(:mod:`das.safetab_p.spill`) step by step, each step holding one state's records or one chunk
of one level's key set, everything big on disk. One module per step; this face re-exports what
callers use:

1. :func:`~das.safetab_p.spill.prepare_geography` / :func:`~das.safetab_p.spill.spill_persons`
   (:mod:`das.safetab_p.spill`): the GRF-C as integer maps, the person file as per-state
   spills of four integers per record.
2. :mod:`.true_totals`: :func:`count_state_totals` (one call per state) counts a state's
   records into every level's block, each record expanded once per (iteration level,
   geography filter) to its combination's iterations (:mod:`.state_records`);
   :func:`combine_totals` → ``true_total.npy``, one int64 per group in key-set order.
3. :mod:`.measure_levels`: :func:`measure_level_streamed` (one call per level): stage 1 and
   the total-only branch as whole-level noise vectors streamed to disk → ``workload.npy`` and
   per-entity offsets; then the stage-2 vector.
4. :mod:`.true_cells`: :func:`count_state_cells` (one call per state): the sex × age23 counts
   of the groups whose stage 1 chose a breakdown (only those); :func:`combine_cells` →
   ``true_cells.npy``.
5. :mod:`.release_tables`: :func:`write_release_tables` (one call): per pass and level, chunk
   by chunk of entities, the T1/T2 rows streamed to ``t1/t1.txt`` and ``t2/t2.txt``, with the
   coterminous fix where the in-memory engine applies it.

:mod:`.key_sets` holds the key sets, integer index spaces (group = entity · n_iterations +
iteration), entities from the GRF-C and iterations from the specs, never from the data;
:mod:`.task_groups` says which states and levels one task of the flow takes;
:mod:`.run_in_process` runs every step in one process (:func:`run_safetab_p_streamed`). Each
measurement is one noise vector of the same size, drawn in the same order (per level: stage
1, total-only, stage 2; levels in configuration order, US pass first) as the in-memory engine,
and the streamed sampler yields exactly the draws of the one-shot sampler: with the same source
(or the same per-measurement streams) the two engines publish byte-identical files.

Memory: one state's records in pieces of :data:`.state_records.PIECE_ROWS` (≈0.5 GiB of
temporaries), one chunk of :data:`.key_sets.CHUNK_GROUPS` groups of one level, and the largest
state's block of one level (California's tracts × detailed iterations ≈ 0.2 GiB). Noise and
level arrays are read by range, never mapped whole. No step logs or returns a count of records
or a true count.
"""

from __future__ import annotations

from das.safetab_p.streamed.key_sets import LevelSpace, level_spaces, plan_by_partition
from das.safetab_p.streamed.measure_levels import (
    LevelSummary,
    measure_level_streamed,
    noise_files_in_use,
)
from das.safetab_p.streamed.release_tables import chunk_measurement, write_release_tables
from das.safetab_p.streamed.run_in_process import (
    NoiseForLevel,
    StreamedRelease,
    pass_accountants,
    run_safetab_p_streamed,
)
from das.safetab_p.streamed.state_records import pass_of_state, tabulated_states
from das.safetab_p.streamed.task_groups import groups_for, level_groups, state_groups
from das.safetab_p.streamed.true_cells import combine_cells, count_state_cells
from das.safetab_p.streamed.true_totals import combine_totals, count_state_totals

__all__ = [
    "LevelSpace",
    "LevelSummary",
    "NoiseForLevel",
    "StreamedRelease",
    "chunk_measurement",
    "combine_cells",
    "combine_totals",
    "count_state_cells",
    "count_state_totals",
    "groups_for",
    "level_groups",
    "level_spaces",
    "measure_level_streamed",
    "noise_files_in_use",
    "pass_accountants",
    "pass_of_state",
    "plan_by_partition",
    "run_safetab_p_streamed",
    "state_groups",
    "tabulated_states",
    "write_release_tables",
]
