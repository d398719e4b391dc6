"""A state's spilled person records, as the two per-state steps of the streamed SafeTab-P
engine (true totals, true cells) read them.

One state at a time, :data:`PIECE_ROWS` records at a time (≈0.5 GiB of temporaries), each
distinct race/QSPAN combination decoded once; a record is expanded to its combination's
iterations without a Python loop. Each step leaves one file per state in a level's ``parts/``
folder, which its combine step joins.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.safetab_p.spill import (
    PASSES,
    CombinationCodec,
    PassGeography,
    WorkFolder,
    combination_ids,
    load_geography,
)
from das.safetab_p.streamed.key_sets import LevelSpace

PIECE_ROWS = 4_000_000  # spilled records processed at once


def pass_of_state(state: int) -> str:
    """The pass whose geography holds a state: Puerto Rico (72) is tabulated on its own."""
    return "PR" if state == 72 else "US"


def tabulated_states(work: WorkFolder) -> list[int]:
    """Every state with GRF-C blocks in an enabled pass (with or without persons)."""
    states: list[int] = []
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is not None:
            states.extend(geography.states)
    return states


def state_range(
    space: LevelSpace, geography: PassGeography, state: int
) -> tuple[int, int, np.ndarray]:
    """(first entity, stop, entities) of the part of ``space`` a state's records reach."""
    if space.contained:
        start, stop = geography.state_entities(space.geography, state)
        return start, stop, np.arange(start, stop, dtype=np.int64)
    first, last = geography.state_geounits(state)
    entity = geography.geounit_entity[space.geography][first:last]
    return 0, space.n_entities, np.unique(entity[entity >= 0])


def local_entities(
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


def parts_folder(work: WorkFolder, space: LevelSpace) -> Path:
    """Where the per-state steps leave a level's parts for its combine step."""
    return work.level(space.partition) / "parts"


def part_states(folder: Path, kind: str) -> list[int]:
    """The states with a ``KIND-SS.npy`` part, ascending: the order a combine step joins."""
    return sorted(int(p.name[len(kind) + 1 : -4]) for p in folder.glob(f"{kind}-*.npy"))


@dataclass(frozen=True)
class Piece:
    """Up to PIECE_ROWS spilled records with their distinct combinations decoded."""

    geounit: np.ndarray
    sexage: np.ndarray
    combination: np.ndarray  # id per record
    positions: np.ndarray  # (m, 8) per distinct combination
    qspan_positions: np.ndarray  # (m,)

    @property
    def n_combinations(self) -> int:
        return int(self.qspan_positions.size)


def record_pieces(work: WorkFolder, state: int, codec: CombinationCodec) -> Iterator[Piece]:
    """A state's spill, :data:`PIECE_ROWS` records at a time: memory bounded by the piece."""
    spill = work.spill(state)
    rows = spill.rows()
    for start in range(0, rows, PIECE_ROWS):
        columns = spill.read(start, start + PIECE_ROWS)
        ids, lo, hi = combination_ids(columns["lo"], columns["hi"])
        positions, qspan_positions = codec.unpack(lo, hi)
        yield Piece(
            geounit=columns["geounit"].astype(np.int64),
            sexage=columns["sexage"].astype(np.int64),
            combination=ids,
            positions=positions,
            qspan_positions=qspan_positions,
        )


def geounit_combinations(piece: Piece, first: int, last: int) -> sp.csr_matrix:
    """Records of a piece counted by (geounit of the state, combination): a sparse
    ((last - first) × combinations) int64 matrix; the aggregate every level's counts come
    from (a record reaches a level's groups through its geounit and its combination only)."""
    return sp.csr_matrix(
        (np.ones(piece.geounit.size, dtype=np.int64), (piece.geounit - first, piece.combination)),
        shape=(last - first, piece.n_combinations),
    )  # duplicates summed: counts


def entity_rows(local: np.ndarray, n_rows: int) -> sp.csr_matrix:
    """The 0/1 (rows × geounits) matrix adding each geounit's row into its entity's row
    ``local[geounit]`` (:func:`local_entities`)."""
    geounits = np.arange(local.size, dtype=np.int64)
    ones = np.ones(local.size, dtype=np.int64)
    return sp.csr_matrix((ones, (local, geounits)), shape=(n_rows, local.size))


def add_sparse(block: np.ndarray, counts: sp.spmatrix) -> None:
    """Add a sparse (rows × columns) matrix into ``block``, its dense row-major copy."""
    counts = counts.tocoo()
    counts.sum_duplicates()
    n_columns = counts.shape[1]
    block[counts.row.astype(np.int64) * n_columns + counts.col] += counts.data
