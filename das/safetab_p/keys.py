"""Geography entities and key sets, from the GRF-C and the specs only (never the person data).

REGION_IDs (docs/explanation/architecture.md#safetab-p): USA ``1``, STATE ``SS``, COUNTY ``SSCCC``,
TRACT ``SSCCCTTTTTT``, PLACE ``SS`` + PLACEFP (99999 = in no place), AIANNH the 4-digit code (9999 =
in none; national, not split by state). The PR pass uses the same forms for PR-STATE / PR-COUNTY /
PR-TRACT / PR-PLACE. Keys stay integers until the REGION_ID text is rendered, once per entity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from das.io.safetab_p import NOT_IN_AIANNH, NOT_IN_PLACE, block_key
from das.io.tables import zero_pad
from das.specs.config import SafeTabGeography, SafeTabPConfig

PR_STATE_FIPS = 72

# (integer key of a block's entity, REGION_ID width) per geography, without the PR- prefix.
REGION_ID_WIDTH = {"USA": 1, "STATE": 2, "COUNTY": 5, "TRACT": 11, "PLACE": 7, "AIANNH": 4}


@dataclass(frozen=True)
class GeographyEntities:
    """The entities of one geography level: ``block_entity[b]`` is block b's entity (-1: none)."""

    geography: SafeTabGeography
    region_ids: np.ndarray  # str, one per entity, sorted
    block_entity: np.ndarray  # int64, one per block of the pass

    @property
    def size(self) -> int:
        return int(self.region_ids.size)


def pass_blocks(grfc: pd.DataFrame, config: SafeTabPConfig, pass_name: str) -> pd.DataFrame:
    """GRF-C blocks of a pass (US: ``state_filter_us`` minus PR; PR: state 72), sorted by block."""
    state = grfc["TABBLKST"].to_numpy().astype(np.int64)
    if pass_name == "PR":
        keep = state == PR_STATE_FIPS
    elif pass_name == "US":
        wanted = np.array([int(s) for s in config.state_filter_us], dtype=np.int64)
        keep = np.isin(state, wanted) & (state != PR_STATE_FIPS)
    else:
        raise ValueError(f"Invalid pass {pass_name!r} (use 'US' or 'PR')")
    blocks = grfc.loc[keep].reset_index(drop=True)
    order = np.argsort(block_key(blocks), kind="stable")
    blocks = blocks.iloc[order].reset_index(drop=True)
    if np.any(np.diff(block_key(blocks)) == 0):
        raise ValueError("GRF-C lists a block twice")
    return blocks


def _entity_keys(blocks: pd.DataFrame, geography: SafeTabGeography) -> tuple[np.ndarray, str]:
    """Integer entity key per block (-1 = not in any entity) and the base geography name."""
    base = geography.value.removeprefix("PR-")
    state = blocks["TABBLKST"].to_numpy().astype(np.int64)
    county = state * 1_000 + blocks["TABBLKCOU"].to_numpy().astype(np.int64)
    if base == "USA":
        return np.ones(len(blocks), dtype=np.int64), base
    if base == "STATE":
        return state, base
    if base == "COUNTY":
        return county, base
    if base == "TRACT":
        return county * 1_000_000 + blocks["TABTRACTCE"].to_numpy().astype(np.int64), base
    if base == "PLACE":
        place = blocks["PLACEFP"].to_numpy().astype(np.int64)
        return np.where(place == NOT_IN_PLACE, -1, state * 100_000 + place), base
    aiannh = blocks["AIANNHCE"].to_numpy().astype(np.int64)
    return np.where(aiannh == NOT_IN_AIANNH, -1, aiannh), base


def geography_entities(blocks: pd.DataFrame, geography: SafeTabGeography) -> GeographyEntities:
    """Every entity of ``geography`` that holds at least one block of the pass."""
    keys, base = _entity_keys(blocks, geography)
    inside = keys >= 0
    unique, inverse = np.unique(keys[inside], return_inverse=True)
    block_entity = np.full(keys.size, -1, dtype=np.int64)
    block_entity[inside] = inverse
    return GeographyEntities(
        geography=geography,
        region_ids=zero_pad(unique, REGION_ID_WIDTH[base]),
        block_entity=block_entity,
    )
