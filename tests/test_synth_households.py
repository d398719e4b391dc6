"""Synthetic units and persons: counts, one householder per household, consistent CEF codes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from das.synth.households import (
    UNIT_GQ,
    UNIT_OCCUPIED,
    UNIT_VACANT,
    _sizes_summing_to,
    generate_units,
)


def _uniform_blocks(size: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 500, size)


@pytest.fixture(scope="module", params=[11, 12])
def people(request):
    return generate_units(40_000, _uniform_blocks, np.random.default_rng(request.param))


def _frames(units) -> tuple[pd.DataFrame, pd.DataFrame]:
    unit = pd.DataFrame(
        {
            "kind": units.unit_kind,
            "block": units.unit_block,
            "size": units.unit_size,
            "npf": units.unit_npf,
            "ten": units.unit_ten,
            "hht": units.unit_hht,
            "hht2": units.unit_hht2,
            "cplt": units.unit_cplt,
        }
    )
    person = pd.DataFrame(
        {
            "unit": units.person_unit,
            "age": units.person_age.astype(int),
            "sex": units.person_sex,
            "rel": units.person_relship,
        }
    )
    return unit, person


def test_sizes_sum_exactly() -> None:
    rng = np.random.default_rng(0)
    for total in (1, 2, 17, 10_001):
        sizes = _sizes_summing_to(total, np.arange(1, 6), np.ones(5), rng)
        assert sizes.sum() == total and sizes.min() >= 1
    assert _sizes_summing_to(0, np.arange(1, 3), np.ones(2), rng).size == 0


def test_exact_person_count_and_unit_kinds(people) -> None:
    unit, person = _frames(people)
    assert len(person) == 40_000
    counts = person.groupby("unit").size().reindex(range(len(unit)), fill_value=0)
    np.testing.assert_array_equal(counts.to_numpy(), unit["size"].to_numpy())  # FINAL_POP
    assert (unit[unit.kind == UNIT_VACANT]["size"] == 0).all()
    assert (unit[unit.kind != UNIT_VACANT]["size"] > 0).all()
    vacancy = (unit.kind == UNIT_VACANT).sum() / (unit.kind != UNIT_GQ).sum()
    assert 0.06 < vacancy < 0.14
    gq_share = person.unit.map(unit.kind).eq(UNIT_GQ).mean()
    assert 0.015 < gq_share < 0.035
    assert unit.block.is_monotonic_increasing  # sorted by block
    assert person.unit.is_monotonic_increasing  # persons grouped by unit, in unit order


def test_one_householder_first_in_each_household(people) -> None:
    unit, person = _frames(people)
    person["kind"] = person.unit.map(unit.kind)
    occupied = person[person.kind == UNIT_OCCUPIED]
    assert ((occupied.rel == 20).groupby(occupied.unit).sum() == 1).all()
    assert (occupied.groupby("unit").rel.first() == 20).all()
    np.testing.assert_array_equal(
        people.person_relship[people.unit_first_person[unit.kind == UNIT_OCCUPIED]], 20
    )
    gq = person[person.kind == UNIT_GQ]
    assert set(gq.rel.unique()) == {37, 38}
    assert not occupied.rel.isin([37, 38]).any()
    assert occupied.rel.between(20, 36).all()


def test_household_codes_agree_with_members(people) -> None:
    unit, person = _frames(people)
    occupied_units = unit[unit.kind == UNIT_OCCUPIED]
    person = person[person.unit.isin(occupied_units.index)]
    flags = pd.DataFrame(
        {
            "unit": person.unit,
            "spouse": person.rel.isin([21, 23]),
            "partner": person.rel.isin([22, 24]),
            "same": person.rel.isin([23, 24]),
            "rel": person.rel.between(25, 33),
            "fam": person.rel.isin([21, 23]) | person.rel.between(25, 33),
            "kids": person.rel.isin([25, 26, 27]) & (person.age < 18),
        }
    )
    members = flags.groupby("unit").sum()
    householder_sex = person[person.rel == 20].set_index("unit").sex
    u = occupied_units.join(members).assign(male=householder_sex == 1)
    for column in ("spouse", "partner", "same", "kids"):
        u[column] = u[column] > 0
    family = u.spouse | (u.rel > 0)
    assert (u.hht == 1).eq(u.spouse).all()
    assert (u[~u.spouse & (u.rel > 0)].hht == np.where(u[~u.spouse & (u.rel > 0)].male, 2, 3)).all()
    alone = u["size"] == 1
    assert (u[alone].hht == np.where(u[alone].male, 4, 6)).all()
    others = ~family & ~alone
    assert (u[others].hht == np.where(u[others].male, 5, 7)).all()
    np.testing.assert_array_equal(u.npf, np.where(family, 1 + u.fam, 0))
    assert (u[family].npf >= 2).all()
    expected_cplt = np.select(
        [u.spouse & ~u.same, u.spouse & u.same, u.partner & ~u.same, u.partner & u.same],
        [1, 2, 3, 4],
        default=5,
    )
    np.testing.assert_array_equal(u.cplt, expected_cplt)
    expected_hht2 = np.select(
        [u.spouse, u.partner, alone, u.kids, u.rel > 0],
        [np.where(u.kids, 1, 2), np.where(u.kids, 3, 4), 5, 6, 7],
        default=8,
    ) + np.where(~u.spouse & ~u.partner & u.male, 4, 0)
    np.testing.assert_array_equal(u.hht2, expected_hht2)
    assert set(u.ten.unique()) == {1, 2, 3, 4}
    assert set(u.hht2.unique()) == set(range(1, 13))
    niu = unit[unit.kind != UNIT_OCCUPIED]
    assert (niu[["npf", "ten", "hht", "hht2", "cplt"]] == 0).all().all()


def test_ages_sexes_and_large_households(people) -> None:
    unit, person = _frames(people)
    assert person.age.between(0, 115).all() and person.age.max() > 95
    assert (person.age < 18).mean() > 0.15
    assert set(person.sex.unique()) == {1, 2}
    assert person[person.rel.isin([21, 22, 23, 24, 32])].age.min() >= 15
    households = unit[unit.kind == UNIT_OCCUPIED]["size"]
    assert (households > 10).sum() >= 3  # above every 2020 tau
    assert 2.3 < households.mean() < 2.7
    assert households.max() <= 20


def test_same_seed_same_units() -> None:
    a = generate_units(3_000, _uniform_blocks, np.random.default_rng(5))
    b = generate_units(3_000, _uniform_blocks, np.random.default_rng(5))
    c = generate_units(3_000, _uniform_blocks, np.random.default_rng(6))
    np.testing.assert_array_equal(a.person_age, b.person_age)
    np.testing.assert_array_equal(a.unit_block, b.unit_block)
    assert not np.array_equal(a.person_age[:2000], c.person_age[:2000])
