"""SafeTab-P measurement, postprocessing and coterminous logic on hand-made cases."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from das.privacy.accounting import Measurement, PrivacyAccountant
from das.privacy.calculators import suppression_threshold
from das.privacy.rng import seeded_rng
from das.safetab_p.coterminous import apply_coterminous, coterminous_sets
from das.safetab_p.iterations import IterationFilter
from das.safetab_p.keys import GeographyEntities, geography_entities
from das.safetab_p.measure import AggregatedPersons, LevelMeasurement, age_bins, measure_level
from das.safetab_p.postprocess import level_threshold, tabulate_level
from das.specs.config import SafeTabGeography as G

RHO = Fraction(159, 1000)
F = Fraction(1, 10)


def _stage2(budget=RHO * (1 - F)) -> Measurement:
    return Measurement.create("l/stage-2", "zcdp", budget, 3, partition="l", branch="adaptive")


def _level(geography=G.COUNTY, workload=(0, 0, 1), total=(30, 5, 0), cells=None):
    """One county × three iterations; workload per iteration, cells counting -3, -2, ..."""
    workload = np.array(workload)
    broken = np.flatnonzero(workload >= 1)
    widths = 2 * np.array([4 if w == 1 else 9 if w == 2 else 23 for w in workload[broken]])
    n_cells = int(widths.sum())
    bins = np.concatenate([np.arange(w) % (w // 2) for w in widths]) if n_cells else []
    sex = np.concatenate([np.arange(w) // (w // 2) for w in widths]) if n_cells else []
    return LevelMeasurement(
        entities=GeographyEntities(geography, np.array(["01001"]), np.zeros(1, np.int64)),
        iterations=IterationFilter(np.arange(3), np.zeros(3, dtype=bool)),
        iteration_codes=np.array([2001, 2002, 3001]),
        workload=workload,
        total=np.array(total, dtype=np.int64),
        cell_group=np.repeat(broken, widths),
        cell_sex=np.asarray(sex, dtype=np.int64),
        cell_bin=np.asarray(bins, dtype=np.int64),
        cell_count=np.arange(n_cells, dtype=np.int64) - 3 if cells is None else np.array(cells),
        stage_2=_stage2(),
    )


def test_threshold_is_the_papers_table_6() -> None:
    level = _level()
    assert level_threshold(level, 0.9999) == 21
    assert level_threshold(level, 0.9999) == suppression_threshold(RHO, F, 0.9999, 3)


def test_zero_suppression_only_substate_workload_zero_rows() -> None:
    t1, t2 = tabulate_level(_level(total=(22, 21, 0)), True, 0.9999)
    # 2001 (22 > 21) kept, 2002 (21) suppressed, 3001 has a breakdown: never suppressed.
    assert t1.ITERATION_CODE.tolist() == ["2001", "3001"]
    state, _ = tabulate_level(_level(geography=G.STATE, total=(22, 21, 0)), True, 0.9999)
    assert state.ITERATION_CODE.tolist() == ["2001", "2002", "3001"]
    assert not t2.empty


def test_breakdown_sums_marginals_and_clamp() -> None:
    level = _level()
    cells = level.cell_count  # -3 .. 4 over sex × age4
    t1, t2 = tabulate_level(level, True, 0.5)
    assert t1.set_index("ITERATION_CODE").COUNT["3001"] == cells.sum()
    starts, ends = age_bins(1)
    rows = t2[t2.AGESTART != "*"]
    assert rows.AGESTART.tolist() == [str(s) for s in starts] * 2
    assert rows.AGEEND.tolist() == [str(e) for e in ends] * 2
    assert rows.AGEEND.tolist()[-1] == "115"
    marginal = t2[t2.AGESTART == "*"].set_index("SEX").COUNT
    assert marginal["1"] == cells[:4].sum() and marginal["2"] == cells[4:].sum()
    assert t2.columns.tolist() == [
        "REGION_ID",
        "REGION_TYPE",
        "ITERATION_CODE",
        "AGESTART",
        "AGEEND",
        "SEX",
        "COUNT",
    ]
    t1c, t2c = tabulate_level(level, False, 0.5)
    assert t1c.set_index("ITERATION_CODE").COUNT["3001"] == np.maximum(cells, 0).sum()
    assert (t2c.COUNT >= 0).all()
    assert t1c.set_index("ITERATION_CODE").COUNT["2001"] == 30


def _agg(rows) -> AggregatedPersons:
    """rows: (block, combination, sex, age23, count)."""
    block, combination, sex, age, count = (
        np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)
    )
    return AggregatedPersons(block, combination, sex, age, count, np.zeros((2, 8)), np.zeros(2))


def test_measure_level_exact_counts_stat_levels_and_ledger() -> None:
    # Two entities (blocks 0,1 → entity 0; block 2 → entity 1), three iterations; combination
    # 0 is in iterations {0, 2}, combination 1 in {1}. Column 2 is total-only.
    incidence = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0]], dtype=np.int8))
    agg = _agg([(0, 0, 0, 5, 6), (1, 0, 1, 22, 4), (2, 1, 1, 0, 2), (2, 0, 0, 3, 1)])
    entities = GeographyEntities(G.STATE, np.array(["01", "02"]), np.array([0, 0, 1]))
    selected = IterationFilter(np.arange(3), np.array([False, False, True]))
    inf = math.inf
    plan = {
        stage: Measurement.create(f"x/{stage}", "zcdp", inf, 3, partition="x", branch=branch)
        for stage, branch in (
            ("stage-1", "adaptive"),
            ("stage-2", "adaptive"),
            ("total-only", "total-only"),
        )
    }
    accountant = PrivacyAccountant("zcdp", inf)
    level = measure_level(
        agg,
        entities,
        selected,
        np.array([11, 12, 13]),
        incidence,
        plan,
        (2, 5, 10),
        seeded_rng(0),
        accountant,
    )
    # groups: (e0,i0)=10 → 3, (e0,i1)=0 → 0, (e0,i2) total-only 10, (e1,i0)=1 → 0,
    # (e1,i1)=2 → 1, (e1,i2) total-only 1.
    assert level.workload.tolist() == [3, 0, -1, 0, 1, -1]
    assert level.total[[1, 2, 3, 5]].tolist() == [0, 10, 1, 1]
    cells = pd.DataFrame(
        {"g": level.cell_group, "s": level.cell_sex, "b": level.cell_bin, "n": level.cell_count}
    )
    nonzero = cells[cells.n != 0].values.tolist()
    # (e0,i0): 6 × (sex 0, age23 bin 5) and 4 × (sex 1, bin 22); (e1,i1): 2 × (sex 1, age4 0).
    assert nonzero == [[0, 0, 5, 6], [0, 1, 22, 4], [4, 1, 0, 2]]
    assert len(cells) == 46 + 8
    assert {m.name for m in accountant.measurements} == set(m.name for m in plan.values())
    assert not accountant.pending


def test_measure_level_noise_and_budget_refusal() -> None:
    incidence = sp.csr_matrix(np.array([[1]], dtype=np.int8))
    agg = _agg([(0, 0, 0, 5, 3)])
    entities = GeographyEntities(G.COUNTY, np.array(["01001"]), np.array([0]))
    selected = IterationFilter(np.arange(1), np.array([False]))
    plan = {
        stage: Measurement.create(f"y/{stage}", "zcdp", b, 3, partition="y", branch="adaptive")
        for stage, b in (("stage-1", RHO * F), ("stage-2", RHO * (1 - F)))
    }
    with pytest.raises(ValueError, match="over the total"):
        measure_level(
            agg,
            entities,
            selected,
            np.array([1]),
            incidence,
            plan,
            (1, 2, 3),
            seeded_rng(0),
            PrivacyAccountant("zcdp", RHO / 2),
        )
    totals = [
        measure_level(
            agg,
            entities,
            selected,
            np.array([1]),
            incidence,
            plan,
            (10**6, 2 * 10**6, 3 * 10**6),
            seeded_rng(seed),
            PrivacyAccountant("zcdp", RHO),
        ).total[0]
        for seed in range(8)
    ]
    assert len(set(totals)) > 1  # noisy


def _entities(geography, keys, width=2):
    return GeographyEntities(
        geography,
        np.char.zfill(np.unique(keys[keys >= 0]).astype(str), width),
        np.unique(keys, return_inverse=True)[1] - (1 if (keys < 0).any() else 0),
    )


def test_coterminous_sets_from_block_sets() -> None:
    blocks = pd.DataFrame(
        {
            "TABBLKST": np.array([11, 24, 24, 24], dtype=np.uint8),
            "TABBLKCOU": np.array([1, 1, 1, 3], dtype=np.uint16),
            "TABTRACTCE": np.array([100, 200, 201, 300], dtype=np.uint32),
            "TABBLK": np.array([1, 1, 1, 1], dtype=np.uint16),
            "PLACEFP": np.array([50000, 99999, 7, 99999], dtype=np.uint32),
            "AIANNHCE": np.array([9999, 9999, 9999, 42], dtype=np.uint16),
        }
    )
    levels = [
        geography_entities(blocks, g)
        for g in (G.USA, G.STATE, G.COUNTY, G.TRACT, G.PLACE, G.AIANNH)
    ]
    sets = coterminous_sets(levels)
    groups = sorted(
        sorted(zip(frame.REGION_TYPE, frame.REGION_ID, strict=True))
        for _, frame in sets.groupby("SET_ID")
    )
    assert groups == [
        [("AIANNH", "0042"), ("COUNTY", "24003"), ("TRACT", "24003000300")],
        [("COUNTY", "11001"), ("PLACE", "1150000"), ("STATE", "11"), ("TRACT", "11001000100")],
        [("PLACE", "2400007"), ("TRACT", "24001000201")],
    ]
    ranks = dict(zip(sets.REGION_TYPE, sets.RANK, strict=True))
    assert ranks["STATE"] < ranks["COUNTY"] < ranks["TRACT"] < ranks["PLACE"] < ranks["AIANNH"]


def test_apply_coterminous_copies_highest_unsuppressed_member() -> None:
    sets = pd.DataFrame(
        {
            "REGION_TYPE": ["STATE", "COUNTY", "TRACT"],
            "REGION_ID": ["11", "11001", "11001000100"],
            "SET_ID": [0, 0, 0],
            "RANK": [1, 2, 3],
        }
    )
    members = pd.DataFrame(
        {
            "REGION_TYPE": ["COUNTY", "COUNTY", "TRACT", "TRACT", "STATE"],
            "REGION_ID": ["11001", "11001", "11001000100", "11001000100", "11"],
            "ITERATION_CODE": ["7000", "2001", "7000", "2001", "2001"],
        }
    )
    t1 = pd.DataFrame(
        {
            "REGION_ID": ["11", "11001", "11001000100", "99"],
            "REGION_TYPE": ["STATE", "COUNTY", "TRACT", "STATE"],
            "ITERATION_CODE": ["2001", "2001", "7000", "2001"],
            "COUNT": [40, 35, 8, 1],
        }
    )
    t2 = pd.DataFrame(
        {
            "REGION_ID": ["11", "11"],
            "REGION_TYPE": ["STATE", "STATE"],
            "ITERATION_CODE": ["2001", "2001"],
            "AGESTART": ["*", "*"],
            "AGEEND": ["*", "*"],
            "SEX": ["1", "2"],
            "COUNT": [19, 21],
        }
    )
    out1, out2 = apply_coterminous(t1, t2, members, sets)
    got = {(r.REGION_TYPE, r.REGION_ID, r.ITERATION_CODE): r.COUNT for r in out1.itertuples()}
    assert got == {
        ("STATE", "11", "2001"): 40,
        ("COUNTY", "11001", "2001"): 40,  # overwritten by the state
        ("TRACT", "11001000100", "2001"): 40,  # was suppressed: copied in
        ("TRACT", "11001000100", "7000"): 8,  # the county's 7000 was suppressed: tract donates
        ("COUNTY", "11001", "7000"): 8,
        ("STATE", "99", "2001"): 1,  # not in a set: untouched
    }
    assert sorted(out2.REGION_TYPE) == ["COUNTY", "COUNTY", "STATE", "STATE", "TRACT", "TRACT"]
    assert (out2.groupby("REGION_TYPE").COUNT.sum() == 40).all()


def test_measure_level_charges_planned_draws_even_without_groups_and_refuses_gaps() -> None:
    incidence = sp.csr_matrix((1, 2), dtype=np.int8)
    agg = _agg([(0, 0, 0, 5, 3)])
    no_entities = GeographyEntities(G.STATE, np.array([], dtype=str), np.array([-1]))
    selected = IterationFilter(np.arange(2), np.array([False, True]))
    plan = {
        stage: Measurement.create(f"z/{stage}", "zcdp", b, 3, partition="z", branch=branch)
        for stage, b, branch in (
            ("stage-1", RHO * F, "adaptive"),
            ("stage-2", RHO * (1 - F), "adaptive"),
            ("total-only", RHO, "total-only"),
        )
    }
    accountant = PrivacyAccountant("zcdp", RHO)
    level = measure_level(
        agg,
        no_entities,
        selected,
        np.array([1, 2]),
        incidence,
        plan,
        (1, 2, 3),
        seeded_rng(0),
        accountant,
    )
    assert level.workload.size == 0
    assert len(accountant) == 3 and accountant.spent == RHO
    one = GeographyEntities(G.STATE, np.array(["01"]), np.array([0]))
    partial = {k: v for k, v in plan.items() if k != "total-only"}
    with pytest.raises(ValueError, match="total-only"):
        measure_level(
            agg,
            one,
            selected,
            np.array([1, 2]),
            incidence,
            partial,
            (1, 2, 3),
            seeded_rng(0),
            PrivacyAccountant("zcdp", RHO),
        )


def test_zero_suppression_chance_zero_keeps_every_row() -> None:
    level = _level(total=(22, -5, 0))
    assert level_threshold(level, 0.0) is None
    t1, _ = tabulate_level(level, True, 0.0)
    assert t1.ITERATION_CODE.tolist() == ["2001", "2002", "3001"]
    assert suppression_threshold(RHO, F, 0.0, 3) is None
