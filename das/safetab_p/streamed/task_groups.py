"""Which states and which levels one task of the flow takes.

A Prefect task run costs the orchestrator more than a small state's counting or a small
level's draws (on 20,000 synthetic persons, 52 one-state tasks took 14 s of a 40 s run), so
the flow hands each task a group of about equal work: a few groups per slot of its task runner
keep every slot busy to the end. Work is weighed by public sizes only — a state's GRF-C blocks,
a level's groups (entities × iterations, from the GRF-C and the specs) — never by records: the
groups are task parameters, which the Prefect server sees.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from das.safetab_p.spill import PASSES, WorkFolder, load_geography
from das.specs.config import SafeTabPConfig
from das.specs.race_specs import RaceEthnicitySpecs

from .key_sets import level_spaces

Item = TypeVar("Item", bound=Hashable)


def balanced_groups(
    items: Sequence[Item], weight: Mapping[Item, int], groups: int
) -> list[list[Item]]:
    """``items`` in at most ``groups`` groups of about equal total weight: largest first into
    the lightest group (no group heavier than the lightest by more than one item), each item
    counted one more than its weight (an item of weight 0 still takes a task's time).
    Deterministic; each group in the items' order, the groups in order of their first item."""
    if groups < 1:
        raise ValueError(f"groups must be at least 1, not {groups}")
    order = {item: index for index, item in enumerate(items)}
    loads = [(0, index) for index in range(min(groups, len(items)))]
    members: list[list[Item]] = [[] for _ in loads]
    for item in sorted(items, key=lambda item: (-weight.get(item, 0), order[item])):
        load, index = heapq.heappop(loads)
        members[index].append(item)
        heapq.heappush(loads, (load + weight.get(item, 0) + 1, index))
    grouped = [sorted(group, key=order.__getitem__) for group in members if group]
    return sorted(grouped, key=lambda group: order[group[0]])


# A small geography's stages take less than their task runs cost (~0.1 CPU-s each to submit and
# start): one group per slot below this many GRF-C blocks (100 k synthetic persons have 12 k).
SMALL_GEOGRAPHY_BLOCKS = 50_000


def groups_for(work: WorkFolder, slots: int, per_slot: int) -> int:
    """How many groups a per-state or per-level stage runs on ``slots`` task slots: ``per_slot``
    per slot, one below :data:`SMALL_GEOGRAPHY_BLOCKS` blocks (the GRF-C's size: public)."""
    blocks = sum(
        geography.blocks.size
        for geography in (load_geography(work, name) for name in PASSES)
        if geography is not None
    )
    return (1 if blocks < SMALL_GEOGRAPHY_BLOCKS else per_slot) * slots


def state_groups(work: WorkFolder, states: Sequence[int], groups: int) -> list[list[int]]:
    """``states`` in at most ``groups`` groups, weighed by their GRF-C blocks (states in
    order)."""
    blocks: dict[int, int] = {}
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is not None:
            per_state = np.bincount(geography.geounit_state[geography.block_geounit])
            blocks.update({state: int(per_state[state]) for state in geography.states})
    return balanced_groups(sorted(states), blocks, groups)


def level_groups(
    config: SafeTabPConfig, specs: RaceEthnicitySpecs, work: WorkFolder, groups: int
) -> list[list[str]]:
    """Every tabulated level's partition ("US/COUNTY/2") in at most ``groups`` groups, weighed
    by the level's groups (entities × iterations); levels in configuration order, US pass
    first (after :func:`das.safetab_p.spill.prepare_geography`)."""
    sizes: dict[str, int] = {}
    for pass_name in PASSES:
        geography = load_geography(work, pass_name)
        if geography is not None:
            for space in level_spaces(config, specs, geography):
                sizes[space.partition] = space.n_groups
    return balanced_groups(list(sizes), sizes, groups)
