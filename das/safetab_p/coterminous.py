"""Coterminous geographies (SafeTab-P paper §5.3.3, Algorithm 4).

Entities of different summary levels made of exactly the same GRF-C blocks (D.C. as a state, a
county and a place; a county with a single tract) are *coterminous*. For each such set and each
iteration, the rows of the *donor* — the member at the highest summary level whose rows are in
the output (tabulated and not suppressed) — replace the rows of every other member that is in
the key set. The level order R is the release order of :class:`SafeTabGeography`, coarsest
first: USA, STATE, COUNTY, TRACT, PLACE, AIANNH (PR pass: PR-STATE, PR-COUNTY, PR-TRACT,
PR-PLACE); this is the order of the ``entities`` argument of :func:`coterminous_sets`.

Set detection is exact and vectorized: candidates share (block count, first block, a 64-bit
block-weight sum), and each candidate is then compared block by block with its set's first
member; a member that differs (a fingerprint collision) is left out, never merged wrongly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from das.safetab_p.keys import GeographyEntities

SET_COLUMNS = ("REGION_TYPE", "REGION_ID", "SET_ID", "RANK")
_GROUP = ["REGION_TYPE", "REGION_ID", "ITERATION_CODE"]


def coterminous_sets(entities: Sequence[GeographyEntities]) -> pd.DataFrame:
    """Sets (≥ 2 members) of entities with identical block sets; RANK = position in ``entities``.

    All levels must come from the same pass (same block order).
    """
    empty = pd.DataFrame({name: [] for name in SET_COLUMNS})
    if not entities:
        return empty
    n_blocks = entities[0].block_entity.size
    weights = np.random.default_rng(20200401).integers(0, 2**63, n_blocks, dtype=np.uint64)
    offsets = np.cumsum([0, *(e.size for e in entities)])
    entity_parts, block_parts = [], []
    for offset, level in zip(offsets, entities, strict=False):  # a handful of levels
        inside = np.flatnonzero(level.block_entity >= 0)
        entity_parts.append(level.block_entity[inside] + offset)
        block_parts.append(inside)
    entity = np.concatenate(entity_parts)
    block = np.concatenate(block_parts)
    order = np.lexsort((block, entity))
    entity, block = entity[order], block[order]
    n_entities = int(offsets[-1])
    count = np.bincount(entity, minlength=n_entities)
    start = np.cumsum(count) - count
    first = block[start]
    fingerprint = np.zeros(n_entities, dtype=np.uint64)
    np.add.at(fingerprint, entity, weights[block])
    signature = pd.DataFrame({"count": count, "first": first, "fp": fingerprint})
    candidate = signature.groupby(["count", "first", "fp"], sort=False).ngroup().to_numpy()
    size = np.bincount(candidate)
    representative = np.full(size.size, n_entities, dtype=np.int64)
    np.minimum.at(representative, candidate, np.arange(n_entities))
    members = np.flatnonzero(size[candidate] >= 2)
    reps = representative[candidate[members]]
    lengths = count[members]
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    same = (
        block[np.repeat(start[members], lengths) + within]
        == block[np.repeat(start[reps], lengths) + within]
    )
    mismatches = np.bincount(
        np.repeat(np.arange(members.size), lengths), weights=~same, minlength=members.size
    )
    exact = mismatches == 0
    members, reps = members[exact], reps[exact]
    set_size = np.bincount(reps, minlength=n_entities)
    keep = set_size[reps] >= 2
    members, reps = members[keep], reps[keep]
    rank = np.searchsorted(offsets, members, side="right") - 1
    region_type = np.array([e.geography.value for e in entities], dtype=object)[rank]
    region_ids = np.concatenate([e.region_ids.astype(object) for e in entities])
    return pd.DataFrame(
        {
            "REGION_TYPE": region_type,
            "REGION_ID": region_ids[members],
            "SET_ID": np.unique(reps, return_inverse=True)[1].ravel(),
            "RANK": rank,
        }
    ).astype({"REGION_TYPE": str, "REGION_ID": str})


def apply_coterminous(
    t1: pd.DataFrame, t2: pd.DataFrame, members: pd.DataFrame, sets: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Algorithm 4: copy each (set, iteration)'s donor rows onto the other members.

    ``members`` lists the key-set groups (REGION_TYPE, REGION_ID, ITERATION_CODE) of entities in
    ``sets`` (before suppression): only these receive copies.
    """
    if sets.empty or members.empty:
        return t1, t2
    tagged = members.merge(sets, on=["REGION_TYPE", "REGION_ID"])
    present = t1[_GROUP].merge(sets, on=["REGION_TYPE", "REGION_ID"])
    donors = (
        present.sort_values("RANK", kind="stable")
        .drop_duplicates(["SET_ID", "ITERATION_CODE"])
        .rename(columns={"REGION_TYPE": "DONOR_TYPE", "REGION_ID": "DONOR_ID"})
        .drop(columns="RANK")
    )
    targets = tagged.merge(donors, on=["SET_ID", "ITERATION_CODE"])
    targets = targets.loc[
        (targets["REGION_TYPE"] != targets["DONOR_TYPE"])
        | (targets["REGION_ID"] != targets["DONOR_ID"])
    ]
    if targets.empty:
        return t1, t2
    mapping = targets[["DONOR_TYPE", "DONOR_ID", "ITERATION_CODE", "REGION_TYPE", "REGION_ID"]]
    return _replace(t1, mapping), _replace(t2, mapping)


def _replace(table: pd.DataFrame, mapping: pd.DataFrame) -> pd.DataFrame:
    """Drop the targets' rows, then append the donors' rows relabelled as the targets."""
    columns = list(table.columns)
    marked = table.merge(mapping[_GROUP].assign(_TARGET=True), on=_GROUP, how="left", sort=False)
    kept = table.loc[marked["_TARGET"].isna().to_numpy()]
    donor_rows = table.merge(
        mapping.rename(columns={"REGION_TYPE": "_T", "REGION_ID": "_I"}).rename(
            columns={"DONOR_TYPE": "REGION_TYPE", "DONOR_ID": "REGION_ID"}
        ),
        on=_GROUP,
    )
    copies = donor_rows.drop(columns=["REGION_TYPE", "REGION_ID"]).rename(
        columns={"_T": "REGION_TYPE", "_I": "REGION_ID"}
    )
    return pd.concat([kept, copies[columns]], ignore_index=True)
