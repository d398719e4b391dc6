"""The shared population stream: geography once, then units and persons state by state, in chunks.

Randomness is split with :class:`numpy.random.SeedSequence` spawn keys: ``(0,)`` for the
geography and ``(1, state index, chunk index)`` for each chunk. A chunk's draws therefore
depend only on the seed and its own position, so output is byte-identical across runs with the
same seed, and memory is bounded by one chunk (``chunk_persons`` persons) plus the block table.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from das.synth.geography import NO_AIANNH, Geography, build_geography, persons_per_state
from das.synth.households import GQ_SHARE, GQ_SHARE_PR, UnitsAndPersons, generate_units
from das.synth.race import (
    N_GROUPS,
    RaceProfile,
    copy_from_householder,
    sample_major_races,
)
from das.synth.states import STATES, apportion

CHUNK_PERSONS = 1_000_000
PUERTO_RICO = "72"


def random_seed() -> int:
    """A fresh seed from the OS (printed by the CLI so the run can be repeated)."""
    return secrets.randbelow(10**10)


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """An independent generator for one part of the output (see the module docstring)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


@dataclass(frozen=True)
class SynthSummary:
    """What a generator wrote (counts only: enough for a one-line report)."""

    product: str
    output: Path
    seed: int
    persons: int
    blocks: int
    units: int
    seconds: float

    def line(self) -> str:
        return (
            f"das synth {self.product}: {self.persons:,} person{'s' * (self.persons != 1)}, "
            f"{self.blocks:,} blocks, "
            f"{self.units:,} units (seed {self.seed}) -> {self.output} in {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class PopulationChunk:
    """Units and persons of one state chunk, with each person's race mask and ethnicity."""

    fips: str
    units: UnitsAndPersons
    race_mask: np.ndarray  # uint8, bit g = major group g
    hispanic: np.ndarray  # bool
    rng: np.random.Generator  # for the product's own further draws (same stream, continued)


def plan_geography(
    n_persons: int, states: tuple[str, ...], seed: int
) -> tuple[Geography, np.ndarray]:
    """Persons per state and the block table for a run of ``n_persons``."""
    if n_persons < 1:
        raise ValueError("the number of persons must be at least 1")
    by_state = persons_per_state(n_persons, states)
    return build_geography(by_state, states, rng_for(seed, 0)), by_state


def iter_population(
    geography: Geography,
    persons_by_state: np.ndarray,
    seed: int,
    available_groups: np.ndarray | None = None,
    max_groups: int = N_GROUPS,
    chunk_persons: int = CHUNK_PERSONS,
) -> Iterator[PopulationChunk]:
    """Yield the population one chunk (at most ``chunk_persons`` persons of one state) at a time.

    Race is drawn per person from the state's profile (more AIAN inside AIANNH areas), then
    household members share the householder's race and ethnicity with probability 0.8.
    """
    for state_index, (fips, persons) in enumerate(
        zip(geography.states, persons_by_state.tolist(), strict=True)
    ):
        if persons == 0:
            continue
        n_chunks = -(-persons // chunk_persons)
        profile = RaceProfile.for_state(STATES[fips])
        gq_share = GQ_SHARE_PR if fips == PUERTO_RICO else GQ_SHARE

        def sampler(size: int, rng: np.random.Generator, fips: str = fips) -> np.ndarray:
            return geography.sample_blocks(fips, size, rng)

        for chunk_index, size in enumerate(apportion(persons, np.ones(n_chunks)).tolist()):
            rng = rng_for(seed, 1, state_index, chunk_index)
            units = generate_units(size, sampler, rng, gq_share)
            person_block = units.unit_block[units.person_unit]
            in_aiannh = geography.aiannh[person_block] != NO_AIANNH
            hispanic = rng.random(size) < profile.hispanic_share
            mask = sample_major_races(
                hispanic, in_aiannh, profile, rng, available_groups, max_groups
            )
            eligible = (units.person_relship != 20) & ~units.person_in_gq
            shared = copy_from_householder(
                mask.astype(np.int64) | (hispanic.astype(np.int64) << N_GROUPS),
                units.person_householder,
                eligible,
                rng,
            )
            yield PopulationChunk(
                fips=fips,
                units=units,
                race_mask=(shared & ((1 << N_GROUPS) - 1)).astype(np.uint8),
                hispanic=(shared >> N_GROUPS).astype(bool),
                rng=rng,
            )
