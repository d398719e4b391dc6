"""Step 2 of the streamed SafeTab-P engine: the true total of every group at every level.

:func:`count_state_totals` counts one state's records (one call per state: the flow runs the
states in parallel); :func:`combine_totals` lays the states' blocks end to end (levels
contained in states: STATE, COUNTY, TRACT, PLACE and the PR ones) or adds them (USA, AIANNH)
into ``true_total.npy``, one int64 per group in key-set order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from das.io.arrays import write_npy_blocks
from das.safetab_p.iterations import combination_codes, position_incidence
from das.safetab_p.spill import PASSES, CombinationCodec, WorkFolder, load_geography
from das.safetab_p.streamed.key_sets import LevelSpace, level_spaces
from das.safetab_p.streamed.state_records import (
    add_sparse,
    entity_rows,
    geounit_combinations,
    local_entities,
    part_states,
    parts_folder,
    pass_of_state,
    record_pieces,
    state_range,
)
from das.specs.config import SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs


def count_state_totals(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder, state: int
) -> None:
    """True totals of every group a state's records reach, at every tabulated level.

    Writes ``levels/<level>/parts/total-SS.npy`` ((entities reached × iterations) int64) and
    ``entities-SS.npy`` (which entities) for each level of the state's pass. Aggregated before
    expanded: per piece of records, the counts of each (geounit, combination) — a sparse
    matrix C — are multiplied by each (iteration level, geography filter)'s incidence of the
    combinations (C · I: geounit × iteration), and the geounits' rows added up into each
    level's entities (A · C · I), in sparse integer arithmetic: a record is never expanded.
    """
    geography = load_geography(work, pass_of_state(state))
    if geography is None:
        return
    spaces = level_spaces(config, specs, geography)
    codec = CombinationCodec(specs)
    reached = {space.partition: state_range(space, geography, state)[2] for space in spaces}
    first, last = geography.state_geounits(state)
    to_entity = {  # geounit of the state → the level's entity reached (the last row: none)
        space.partition: entity_rows(
            local_entities(space, geography, state, reached[space.partition])[0],
            reached[space.partition].size + 1,
        )
        for space in spaces
    }
    blocks = {  # one dummy entity row at the end for records outside every entity
        space.partition: np.zeros((reached[space.partition].size + 1) * space.n_columns, np.int64)
        for space in spaces
    }
    keys = list(dict.fromkeys(space.key for space in spaces))
    for piece in record_pieces(work, state, codec):
        counts = geounit_combinations(piece, first, last)
        codes = combination_codes(specs, piece.positions)
        for key in keys:
            same_key = [space for space in spaces if space.key == key]
            incidence = position_incidence(
                specs, piece.positions, piece.qspan_positions, same_key[0].iterations, codes
            )
            by_geounit = (counts @ incidence.astype(np.int64)).tocsr()
            for space in same_key:
                add_sparse(blocks[space.partition], to_entity[space.partition] @ by_geounit)
    for space in spaces:
        folder = parts_folder(work, space)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"total-{state:02d}.npy", blocks[space.partition][: -space.n_columns])
        np.save(folder / f"entities-{state:02d}.npy", reached[space.partition])


def _combine_totals(work: WorkFolder, space: LevelSpace) -> None:
    """Lay the states' blocks end to end (contained levels) or add them (USA, AIANNH)."""
    folder = parts_folder(work, space)
    states = part_states(folder, "total")
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
