"""Synthetic Census geography: states -> counties -> tracts -> blocks, with places and AIANNH areas.

The block table is what a GRF-C holds (one row per block, with its PLACEFP and AIANNHCE). Entity
counts scale with the persons a state receives, as a power of its scale
``s = persons / real 2020 population``, so that a small run keeps the whole hierarchy and a
full-scale run reaches the real counts:

    counties ~ C_real * s**0.35   (<= C_real; DC and Puerto Rico's municipios as real)
    tracts   ~ T_real * s**0.6    (>= counties; about 85,000 at s = 1)
    blocks   ~ B_real * s**0.8    (>= tracts; about 8.2 million at s = 1)
    places   ~ P_real * s**0.6    (about 32,000 at s = 1)
    AIANNH   ~ 600 * s**0.5       (national; at least one when any state can hold one)

Sizes are skewed the way real ones are: tracts per county and blocks per tract are 1 +
multinomial over log-normal weights (so small counties have a single tract), a quarter of the
blocks are empty, and persons per block follow a log-normal weight. Places and AIANNH areas are
runs of consecutive blocks in (county, tract, block) order, so a place can straddle a tract or a
county line; they do not cover everyone (PLACEFP 99999 / AIANNHCE 9999 = none). Coterminous
cases are built in: DC (state 11) is one county and one place covering all its blocks; some
counties are a single tract; some are a consolidated city-county (one place, exactly the
county's blocks); and some AIANNH areas reach into a neighbouring state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from das.synth.states import (
    AIANNH_NEIGHBOURS,
    FULL_SCALE_AIANNH,
    FULL_SCALE_BLOCKS,
    FULL_SCALE_PLACES,
    FULL_SCALE_TRACTS,
    STATES,
    apportion,
)

NO_PLACE = 99999
NO_AIANNH = 9999
DC_FIPS = "11"
DC_PLACEFP = 50000  # Washington city
MAX_BLOCKS_PER_TRACT = 9 * 999  # TABBLK = block group (1-9) * 1000 + a 3-digit number
PLACE_BLOCK_COVER = 0.6  # share of a state's blocks inside some place
PLACE_DENSITY = 1.6  # persons-per-block multiplier inside places (urban blocks are fuller)
EMPTY_BLOCK_SHARE = 0.25
CONSOLIDATED_SHARE = 0.2  # states with a county that is exactly one place


@dataclass(frozen=True)
class Geography:
    """All blocks, sorted by (state, county, tract, block); arrays are aligned per block.

    ``weight`` is the relative expected number of persons in the block, normalised to sum to 1
    within each state; ``state_start[i]:state_start[i + 1]`` are the blocks of ``states[i]``.
    """

    states: tuple[str, ...]
    state_start: np.ndarray
    state: np.ndarray  # uint8 FIPS code
    county: np.ndarray  # uint16
    tract: np.ndarray  # uint32 (6 digits)
    block: np.ndarray  # uint16 (4 digits)
    place: np.ndarray  # uint32 PLACEFP (5 digits), 99999 = none
    aiannh: np.ndarray  # uint16 AIANNHCE (4 digits), 9999 = none
    weight: np.ndarray  # float64

    @property
    def n_blocks(self) -> int:
        return int(self.state.size)

    def state_slice(self, fips: str) -> slice:
        """The block range of one state."""
        i = self.states.index(fips)
        return slice(int(self.state_start[i]), int(self.state_start[i + 1]))

    def sample_blocks(self, fips: str, size: int, rng: np.random.Generator) -> np.ndarray:
        """Global block indices of ``size`` draws from a state's blocks, proportional to weight.

        Inverse-CDF sampling: a block with zero weight owns an empty interval and is never drawn.
        """
        where = self.state_slice(fips)
        cumulative = np.cumsum(self.weight[where])
        draws = np.searchsorted(cumulative, rng.random(size) * cumulative[-1], side="right")
        return np.minimum(draws, cumulative.size - 1) + where.start


def persons_per_state(n_persons: int, states: tuple[str, ...]) -> np.ndarray:
    """Split ``n_persons`` among ``states`` in proportion to their 2020 population (exact sum)."""
    weights = np.array([STATES[fips].population_thousands for fips in states], dtype=np.float64)
    return apportion(n_persons, weights)


def _within_group_index(counts: np.ndarray) -> np.ndarray:
    """For groups of the given sizes laid end to end: each element's index inside its group."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)


def _skewed_split(total: int, parts: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Split ``total`` into ``parts`` groups of >= 1: 1 + multinomial(log-normal weights)."""
    weights = rng.lognormal(0.0, sigma, parts)
    return 1 + rng.multinomial(total - parts, weights / weights.sum())


def _runs(
    n_blocks: int, n_runs: int, cover: float, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """Label consecutive blocks with runs 0..n_runs-1 (-1 = outside every run).

    Runs and gaps alternate (gap, run, gap, ..., run, gap); run lengths are >= 1 and skewed
    (log-normal weights), the runs together cover about ``cover`` of the blocks, and at least
    one block stays outside when ``cover < 1``.
    """
    labels = np.full(n_blocks, -1, dtype=np.int64)
    free = n_blocks if cover >= 1 else n_blocks - 1
    n_runs = min(n_runs, free)
    if n_runs <= 0:
        return labels
    covered = int(np.clip(round(cover * n_blocks), n_runs, free))
    run_lengths = _skewed_split(covered, n_runs, sigma, rng)
    gap_weights = rng.lognormal(0.0, 0.5, n_runs + 1)
    gap_lengths = rng.multinomial(n_blocks - covered, gap_weights / gap_weights.sum())
    lengths = np.empty(2 * n_runs + 1, dtype=np.int64)
    lengths[0::2] = gap_lengths
    lengths[1::2] = run_lengths
    segment_label = np.full(2 * n_runs + 1, -1, dtype=np.int64)
    segment_label[1::2] = np.arange(n_runs)
    return np.repeat(segment_label, lengths)


def _distinct_codes(count: int, top: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct sorted codes in 1..top-1 (top itself is the 'none' code)."""
    return np.sort(rng.choice(top - 1, size=count, replace=False) + 1)


def _aiannh_memberships(
    states: tuple[str, ...], n_areas: int, rng: np.random.Generator
) -> dict[str, list[int]]:
    """Which AIANNH area indices have a part in each state; some areas span two states."""
    weights = np.array([STATES[fips].aiannh_areas for fips in states], dtype=np.float64)
    members: dict[str, list[int]] = {fips: [] for fips in states}
    if n_areas == 0 or weights.sum() == 0:
        return members
    home = rng.choice(len(states), size=n_areas, p=weights / weights.sum())
    for area, state_index in enumerate(home.tolist()):
        members[states[state_index]].append(area)
    eligible = [fips for fips, weight in zip(states, weights, strict=True) if weight > 0]
    if len(eligible) < 2:
        return members
    n_spanning = max(1, round(0.06 * n_areas))
    for area in rng.permutation(n_areas)[:n_spanning].tolist():
        home_fips = states[int(home[area])]
        neighbours = [
            fips for fips in AIANNH_NEIGHBOURS.get(home_fips, ()) if fips in eligible
        ] or [fips for fips in eligible if fips != home_fips]
        members[neighbours[int(rng.integers(len(neighbours)))]].append(area)
    return members


def build_geography(
    persons_by_state: np.ndarray, states: tuple[str, ...], rng: np.random.Generator
) -> Geography:
    """Build the block table for ``states`` sized for ``persons_by_state`` persons in each.

    Python loops here run per state (at most 52); everything per block is vectorized.
    """
    if len(states) == 0 or len(set(states)) != len(states):
        raise ValueError("build_geography needs a non-empty list of distinct states")
    unknown = [fips for fips in states if fips not in STATES]
    if unknown:
        raise ValueError(f"unknown state FIPS code(s): {', '.join(unknown)}")
    persons_by_state = np.asarray(persons_by_state, dtype=np.int64)
    total_population = sum(state.population_thousands for state in STATES.values())
    total_counties = sum(state.counties for state in STATES.values())
    chosen_population = 1000 * sum(STATES[fips].population_thousands for fips in states)
    scale_all = max(int(persons_by_state.sum()), 1) / chosen_population
    share_of_areas = sum(STATES[f].aiannh_areas for f in states) / sum(
        s.aiannh_areas for s in STATES.values()
    )
    n_areas = 0
    if share_of_areas > 0:
        n_areas = max(1, round(FULL_SCALE_AIANNH * share_of_areas * min(scale_all, 1.0) ** 0.5))
    memberships = _aiannh_memberships(states, n_areas, rng)
    anchor_state = max(states, key=lambda fips: (STATES[fips].counties, fips))
    area_codes = _distinct_codes(n_areas, NO_AIANNH, rng) if n_areas else np.zeros(0, np.int64)

    parts: dict[str, list[np.ndarray]] = {
        key: [] for key in ("state", "county", "tract", "block", "place", "aiannh", "weight")
    }
    state_start = [0]
    for fips, persons in zip(states, persons_by_state.tolist(), strict=True):
        facts = STATES[fips]
        scale = max(persons, 1) / (1000 * facts.population_thousands)
        population_share = facts.population_thousands / total_population
        n_counties = int(
            np.clip(round(facts.counties * min(scale, 1.0) ** 0.35), 1, facts.counties)
        )
        n_tracts = max(n_counties, round(FULL_SCALE_TRACTS * population_share * scale**0.6))
        n_blocks = max(n_tracts, round(FULL_SCALE_BLOCKS * population_share * scale**0.8))
        place_share = 0.5 * population_share + 0.5 * facts.counties / total_counties
        n_places = max(1, round(FULL_SCALE_PLACES * place_share * scale**0.6))

        county_codes = np.sort(rng.choice(facts.counties, n_counties, replace=False)) * 2 + 1
        tracts_per_county = _skewed_split(n_tracts, n_counties, 1.4, rng)
        tract_step = rng.integers(1, 4, n_tracts)
        first_of_county = np.repeat(
            np.cumsum(tracts_per_county) - tracts_per_county, tracts_per_county
        )
        step_sum = np.cumsum(tract_step)
        tract_base = step_sum - (step_sum - tract_step)[first_of_county]
        # A county with thousands of tracts numbers them consecutively (4-digit base).
        county_start = np.cumsum(tracts_per_county) - tracts_per_county
        crowded = np.repeat(np.maximum.reduceat(tract_base, county_start) > 9999, tracts_per_county)
        tract_base = np.where(crowded, np.arange(n_tracts) - first_of_county + 1, tract_base)
        tract_suffix = rng.choice(np.array([0, 1, 2]), n_tracts, p=[0.8, 0.1, 0.1])
        tract_codes = tract_base * 100 + tract_suffix
        tract_weight = rng.lognormal(0.0, 0.4, n_tracts)

        blocks_per_tract = np.minimum(
            _skewed_split(n_blocks, n_tracts, 0.6, rng), MAX_BLOCKS_PER_TRACT
        )
        n_blocks = int(blocks_per_tract.sum())
        index_in_tract = _within_group_index(blocks_per_tract)
        groups_per_tract = np.clip(-(-blocks_per_tract // 40), 1, 9)
        tract_of_block = np.repeat(np.arange(n_tracts), blocks_per_tract)
        block_group = (
            1
            + index_in_tract * groups_per_tract[tract_of_block] // blocks_per_tract[tract_of_block]
        )
        # Position inside the block group: blocks of a group are consecutive within the tract.
        group_key = tract_of_block * 10 + block_group
        change = np.ones(n_blocks, dtype=bool)
        change[1:] = group_key[1:] != group_key[:-1]
        group_sizes = np.diff(np.flatnonzero(np.append(change, True)))
        block_codes = block_group * 1000 + _within_group_index(group_sizes)

        county_of_tract = np.repeat(county_codes, tracts_per_county)
        if fips == DC_FIPS:
            place_codes = np.full(n_blocks, DC_PLACEFP, dtype=np.int64)
        else:
            run = _runs(n_blocks, n_places, PLACE_BLOCK_COVER, 1.3, rng)
            codes = _distinct_codes(int(run.max()) + 2, 10_000, rng) * 10
            place_codes = np.where(run >= 0, codes[np.maximum(run, 0)], NO_PLACE)
            # A consolidated city-county (like San Francisco or Philadelphia): one county
            # whose blocks are exactly one place, in the state with the most counties and in
            # a fifth of the others.
            chance, pick = rng.random(), int(rng.integers(n_counties))
            if n_counties >= 3 and (fips == anchor_state or chance < CONSOLIDATED_SHARE):
                place_codes[county_of_tract[tract_of_block] == county_codes[pick]] = codes[-1]
        areas = rng.permutation(np.asarray(memberships[fips], dtype=np.int64))
        aiannh_codes = np.full(n_blocks, NO_AIANNH, dtype=np.int64)
        if areas.size:
            run = _runs(n_blocks, int(areas.size), facts.aiannh_cover, 1.0, rng)
            inside = run >= 0
            aiannh_codes[inside] = area_codes[areas[run[inside]]]

        occupied = rng.random(n_blocks) >= EMPTY_BLOCK_SHARE
        weight = (
            rng.lognormal(0.0, 1.0, n_blocks)
            * occupied
            * tract_weight[tract_of_block]
            * np.where(place_codes != NO_PLACE, PLACE_DENSITY, 1.0)
        )
        if weight.sum() <= 0:
            weight = np.ones(n_blocks)
        weight /= weight.sum()

        parts["state"].append(np.full(n_blocks, int(fips), dtype=np.uint8))
        parts["county"].append(county_of_tract[tract_of_block].astype(np.uint16))
        parts["tract"].append(tract_codes[tract_of_block].astype(np.uint32))
        parts["block"].append(block_codes.astype(np.uint16))
        parts["place"].append(place_codes.astype(np.uint32))
        parts["aiannh"].append(aiannh_codes.astype(np.uint16))
        parts["weight"].append(weight)
        state_start.append(state_start[-1] + n_blocks)

    arrays = {key: np.concatenate(value) for key, value in parts.items()}
    return Geography(states=tuple(states), state_start=np.asarray(state_start), **arrays)
