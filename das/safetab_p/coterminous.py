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

The sets are public geography, so they can also be kept as a spec file,
``coterminous-geographies.txt``: pipe-delimited, header ``SET_ID|REGION_TYPE|REGION_ID``, one row
per member, the members of a set listed in the level order above (:func:`derive_coterminous`,
:func:`write_coterminous_file`, :func:`read_coterminous_file`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.safetab_p import block_key
from das.io.writers import write_pipe_table
from das.safetab_p.keys import (
    PR_STATE_FIPS,
    REGION_ID_WIDTH,
    GeographyEntities,
    geography_entities,
    pass_blocks,
)
from das.specs.config import SafeTabGeography, SafeTabPConfig

SET_COLUMNS = ("REGION_TYPE", "REGION_ID", "SET_ID", "RANK")
FILE_COLUMNS = ("SET_ID", "REGION_TYPE", "REGION_ID")
COTERMINOUS_FILE_NAME = "coterminous-geographies.txt"
LEVEL_ORDER = tuple(SafeTabGeography)  # the documented order R; RANK = position here
_RANK = {g.value: rank for rank, g in enumerate(LEVEL_ORDER)}
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
    # (entity, block) pairs of every level, int32 (8 M blocks × 6 levels at national size),
    # ordered by entity then block. Level by level (a level's entities are a range of their
    # own, after the previous level's): its pairs come in block order, so a stable sort by
    # entity orders them, with temporaries of one level, not of all six (0.9 GB less).
    n_entities = int(offsets[-1])
    fingerprint = np.zeros(n_entities, dtype=np.uint64)
    entity_parts, block_parts = [], []
    for offset, level in zip(offsets, entities, strict=False):  # a handful of levels
        inside = np.flatnonzero(level.block_entity >= 0)
        part = level.block_entity[inside]
        order = np.argsort(part, kind="stable")
        part_entity = (part[order] + offset).astype(np.int32)
        part_block = inside[order].astype(np.int32)
        del part, order, inside
        np.add.at(fingerprint, part_entity, weights[part_block])
        entity_parts.append(part_entity)
        block_parts.append(part_block)
    entity = np.concatenate(entity_parts)
    block = np.concatenate(block_parts)
    del entity_parts, block_parts
    count = np.bincount(entity, minlength=n_entities)
    start = np.cumsum(count) - count
    first = block[start]
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
    mapping = coterminous_mapping(t1, members, sets)
    if mapping.empty:
        return t1, t2
    return _replace(t1, mapping), _replace(t2, mapping)


def coterminous_mapping(
    t1: pd.DataFrame, members: pd.DataFrame, sets: pd.DataFrame
) -> pd.DataFrame:
    """Algorithm 4's copies: (DONOR_TYPE, DONOR_ID, ITERATION_CODE, REGION_TYPE, REGION_ID).

    One row per target group; only the T1 rows of coterminous members matter, so ``t1`` may
    be just those rows (the streamed engine passes only them).
    """
    empty = pd.DataFrame(
        columns=["DONOR_TYPE", "DONOR_ID", "ITERATION_CODE", "REGION_TYPE", "REGION_ID"]
    )
    if sets.empty or members.empty:
        return empty
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
        return empty
    return targets[["DONOR_TYPE", "DONOR_ID", "ITERATION_CODE", "REGION_TYPE", "REGION_ID"]]


def _replace(table: pd.DataFrame, mapping: pd.DataFrame) -> pd.DataFrame:
    """Drop the targets' rows, then append the donors' rows relabelled as the targets."""
    kept = table.loc[~target_rows(table, mapping)]
    return pd.concat([kept, donor_copies(table, mapping)], ignore_index=True)


def target_rows(table: pd.DataFrame, mapping: pd.DataFrame) -> np.ndarray:
    """Mask of the rows of ``table`` that belong to a target group of ``mapping``."""
    marked = table.merge(mapping[_GROUP].assign(_TARGET=True), on=_GROUP, how="left", sort=False)
    return marked["_TARGET"].notna().to_numpy()


def donor_copies(table: pd.DataFrame, mapping: pd.DataFrame) -> pd.DataFrame:
    """The donors' rows of ``table`` relabelled as their targets, in ``table``'s row order."""
    columns = list(table.columns)
    donor_rows = table.merge(
        mapping.rename(columns={"REGION_TYPE": "_T", "REGION_ID": "_I"}).rename(
            columns={"DONOR_TYPE": "REGION_TYPE", "DONOR_ID": "REGION_ID"}
        ),
        on=_GROUP,
    )
    copies = donor_rows.drop(columns=["REGION_TYPE", "REGION_ID"]).rename(
        columns={"_T": "REGION_TYPE", "_I": "REGION_ID"}
    )
    return copies[columns]


# ---------------------------------------------------------------------------- spec file


class CoterminousFileError(ValueError):
    """A coterminous-geographies file (or frame) breaks the format; the message says where."""


def derive_coterminous(grfc: pd.DataFrame, config: SafeTabPConfig | None = None) -> pd.DataFrame:
    """Coterminous sets of every level of each pass, from the GRF-C alone; RANK = level order.

    With ``config`` the blocks of a pass are exactly the engine's (``state_filter_us``, enabled
    passes only); without it the US pass is every state but Puerto Rico and the PR pass is 72.
    SET_IDs are 0.. over both passes (US first).
    """
    parts = []
    offset = 0
    for pass_name in ("US", "PR"):
        levels = [g for g in LEVEL_ORDER if g.pass_name == pass_name]
        if config is not None:
            if not config.runs(levels[0]):
                continue
            blocks = pass_blocks(grfc, config, pass_name)
        else:
            blocks = _all_pass_blocks(grfc, pass_name)
        sets = coterminous_sets([geography_entities(blocks, g) for g in levels])
        sets["RANK"] = sets["REGION_TYPE"].map(_RANK)
        sets["SET_ID"] = sets["SET_ID"].astype(np.int64) + offset  # passes' ids must not clash
        offset += int(sets["SET_ID"].max()) + 1 if len(sets) else 0
        parts.append(sets)
    return _renumber(pd.concat(parts, ignore_index=True) if parts else _empty_sets())


def _all_pass_blocks(grfc: pd.DataFrame, pass_name: str) -> pd.DataFrame:
    """Blocks of a pass with no state filter, sorted by block (the order of ``pass_blocks``)."""
    in_pr = grfc["TABBLKST"].to_numpy().astype(np.int64) == PR_STATE_FIPS
    blocks = grfc.loc[in_pr if pass_name == "PR" else ~in_pr].reset_index(drop=True)
    keys = block_key(blocks)
    order = np.argsort(keys, kind="stable")
    if np.any(np.diff(keys[order]) == 0):
        raise ValueError("GRF-C lists a block twice")
    return blocks.iloc[order].reset_index(drop=True)


def _empty_sets() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "REGION_TYPE": pd.Series([], dtype=str),
            "REGION_ID": pd.Series([], dtype=str),
            "SET_ID": pd.Series([], dtype=np.int64),
            "RANK": pd.Series([], dtype=np.int64),
        }
    )


def _renumber(sets: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by (set, rank), SET_ID renumbered 0.. in order of first appearance."""
    if sets.empty:
        return _empty_sets()
    first = sets.groupby("SET_ID", sort=False).ngroup()
    out = sets.assign(SET_ID=first.to_numpy(dtype=np.int64))
    out = out.sort_values(["SET_ID", "RANK"], kind="stable").reset_index(drop=True)
    return out.astype({"REGION_TYPE": str, "REGION_ID": str, "SET_ID": np.int64, "RANK": np.int64})


def restrict_sets(sets: pd.DataFrame, geographies: Iterable[SafeTabGeography]) -> pd.DataFrame:
    """Members at the given levels only; sets left with fewer than two members are dropped.

    This is what :func:`coterminous_sets` yields when given just those levels, so a file's sets
    can stand in for a derivation (RANK keeps the level order; only its relative order matters).
    """
    wanted = [g.value for g in geographies]
    kept = sets.loc[sets["REGION_TYPE"].isin(wanted)]
    size = kept.groupby("SET_ID")["SET_ID"].transform("size")
    return kept.loc[size >= 2].reset_index(drop=True)


def check_sets(
    sets: pd.DataFrame, source: str = "coterminous sets", lines: np.ndarray | None = None
) -> pd.DataFrame:
    """Validate sets (SET_ID, REGION_TYPE, REGION_ID) and return them with RANK, in file order.

    Rules: known REGION_TYPE; REGION_ID of that type's form; SET_ID a whole number ≥ 0; each
    entity in at most one set; every set ≥ 2 members, all of one pass, one per level, listed
    coarsest first (the level order R decides the donor, so a file must agree with it).
    ``source`` names the file in messages, ``lines`` the file line of each row (default: row
    number + 2, the header being line 1).
    """
    missing = [name for name in FILE_COLUMNS if name not in sets.columns]
    if missing:
        raise CoterminousFileError(f"{source}: missing column(s) {', '.join(missing)}")
    frame = sets[list(FILE_COLUMNS)].astype(str).reset_index(drop=True)
    line = np.arange(len(frame)) + 2 if lines is None else np.asarray(lines)
    region_type = frame["REGION_TYPE"]
    region_id = frame["REGION_ID"]
    _fail(~region_type.isin(list(_RANK)), line, source, "unknown REGION_TYPE", region_type)
    set_text = frame["SET_ID"]
    _fail(~set_text.str.fullmatch(r"\d{1,18}"), line, source, "SET_ID is not a whole number")
    width = region_type.str.removeprefix("PR-").map(REGION_ID_WIDTH)
    bad_id = ~region_id.str.fullmatch(r"\d+") | (region_id.str.len() != width)
    _fail(bad_id, line, source, "REGION_ID does not have the form of its REGION_TYPE", region_id)
    rank = region_type.map(_RANK).to_numpy(dtype=np.int64)
    set_id = set_text.astype(np.int64).to_numpy()
    duplicate = frame.duplicated(["REGION_TYPE", "REGION_ID"], keep="first").to_numpy()
    _fail(duplicate, line, source, "entity listed twice (an entity is in at most one set)")
    grouped = pd.DataFrame(
        {"SET_ID": set_id, "RANK": rank, "PR": region_type.str.startswith("PR-")}
    )
    by_set = grouped.groupby("SET_ID")
    small = (by_set["SET_ID"].transform("size") < 2).to_numpy()
    _fail(small, line, source, "set has a single member (a set needs at least two)")
    mixed = (by_set["PR"].transform("nunique") > 1).to_numpy()
    _fail(mixed, line, source, "set mixes US and PR levels")
    same_level = grouped.duplicated(["SET_ID", "RANK"], keep="first").to_numpy()
    _fail(same_level, line, source, "set has two members at the same level")
    out_of_order = (by_set["RANK"].diff() <= 0).to_numpy()
    _fail(
        out_of_order,
        line,
        source,
        "set members not in level order (" + ", ".join(g.value for g in LEVEL_ORDER) + ")",
    )
    return pd.DataFrame(
        {
            "REGION_TYPE": region_type.to_numpy(dtype=str),
            "REGION_ID": region_id.to_numpy(dtype=str),
            "SET_ID": set_id,
            "RANK": rank,
        }
    ).astype({"REGION_TYPE": str, "REGION_ID": str})


def _fail(
    bad: np.ndarray | pd.Series,
    line: np.ndarray,
    source: str,
    problem: str,
    values: pd.Series | None = None,
) -> None:
    """Raise one message naming the first few offending lines (values: public geography)."""
    bad = np.asarray(bad, dtype=bool)
    if not bad.any():
        return
    where = np.flatnonzero(bad)
    shown = [
        f"line {line[i]}" + (f" ({values.iloc[i]!r})" if values is not None else "")
        for i in where[:5]
    ]
    more = f" and {where.size - 5} more" if where.size > 5 else ""
    raise CoterminousFileError(f"{source}: {problem}: {', '.join(shown)}{more}")


def write_coterminous_file(sets: pd.DataFrame, path: str | Path) -> int:
    """Write sets as ``SET_ID|REGION_TYPE|REGION_ID`` (atomic), sorted by set then level.

    The sets are checked first, so a written file always reads back; returns the row count.
    """
    if sets.empty:
        ordered = pd.DataFrame({name: pd.Series([], dtype=str) for name in FILE_COLUMNS})
    else:
        ranked = sets.assign(RANK=sets["REGION_TYPE"].astype(str).map(_RANK))
        ordered = ranked.sort_values(["SET_ID", "RANK"], kind="stable", na_position="first")
        check_sets(ordered, str(path))
    return write_pipe_table(ordered, path, list(FILE_COLUMNS))


def read_coterminous_file(path: str | Path) -> pd.DataFrame:
    """Read and validate a coterminous-geographies file into (REGION_TYPE, REGION_ID, SET_ID, RANK).

    UTF-8 (BOM tolerated), LF or CRLF, blank lines skipped; the header must be exactly
    ``SET_ID|REGION_TYPE|REGION_ID``. Raises :class:`CoterminousFileError` naming the lines.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8-sig")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "|".join(FILE_COLUMNS):
        raise CoterminousFileError(
            f"{path}: the first line must be the header {'|'.join(FILE_COLUMNS)}"
        )
    rows = pd.Series(lines[1:], dtype=str)
    line = np.arange(rows.size) + 2
    keep = (rows.str.strip() != "").to_numpy()
    rows, line = rows[keep], line[keep]
    fields = rows.str.split("|", regex=False)
    _fail((fields.str.len() != len(FILE_COLUMNS)).to_numpy(), line, str(path), "expected 3 fields")
    frame = pd.DataFrame(fields.tolist(), columns=list(FILE_COLUMNS), dtype=str)
    if frame.empty:
        return _empty_sets()
    return check_sets(frame, str(path), line)
