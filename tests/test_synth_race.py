"""Synthetic race and ethnicity: CENRACE table, major-group sampling, detailed codes, QSPAN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from spec_fixtures import DEMO_SPECS, group_of_code

from das.specs.race_specs import load_race_specs
from das.synth.race import (
    CENRACE_OF_MASK,
    MASK_OF_CENRACE,
    RaceCodePools,
    RaceProfile,
    copy_from_householder,
    popcount6,
    sample_major_races,
    sample_qspan,
    sample_race_codes,
)
from das.synth.states import STATES


def test_cenrace_table_follows_the_cef_order() -> None:
    codes = CENRACE_OF_MASK[1:]
    assert sorted(codes.tolist()) == list(range(1, 64))
    assert [CENRACE_OF_MASK[1 << g] for g in range(6)] == [1, 2, 3, 4, 5, 6]
    assert CENRACE_OF_MASK[0b000011] == 7  # White and Black
    assert CENRACE_OF_MASK[0b100001] == 11  # White and Some Other Race
    assert CENRACE_OF_MASK[0b000110] == 12  # Black and AIAN
    assert CENRACE_OF_MASK[0b000111] == 22  # first three-group combination
    assert CENRACE_OF_MASK[0b111111] == 63
    assert all(CENRACE_OF_MASK[MASK_OF_CENRACE[c]] == c for c in range(1, 64))
    sizes = popcount6(MASK_OF_CENRACE[1:])
    assert (np.diff(sizes) >= 0).all()  # grouped by number of races


def test_major_races_shares_by_state() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    hispanic = np.zeros(n, dtype=bool)
    outside = np.zeros(n, dtype=bool)
    masks = {
        fips: sample_major_races(hispanic, outside, RaceProfile.for_state(STATES[fips]), rng)
        for fips in ("28", "15", "23")
    }
    black = {fips: ((m >> 1) & 1).mean() for fips, m in masks.items()}
    asian = {fips: ((m >> 3) & 1).mean() for fips, m in masks.items()}
    assert black["28"] > 0.3 > black["23"]  # Mississippi vs Maine
    assert asian["15"] > 0.3 > asian["23"]  # Hawaii vs Maine
    inside = sample_major_races(hispanic, ~outside, RaceProfile.for_state(STATES["23"]), rng)
    assert ((inside >> 2) & 1).mean() > 5 * ((masks["23"] >> 2) & 1).mean()  # AIAN in AIANNH
    multi = (popcount6(masks["23"]) >= 2).mean()
    assert 0.03 < multi < 0.12
    hispanic_multi = sample_major_races(
        ~hispanic, outside, RaceProfile.for_state(STATES["23"]), rng
    )
    assert (popcount6(hispanic_multi) >= 2).mean() > 0.25


def test_unavailable_groups_and_max_groups() -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    available = np.array([True, True, False, False, False, True])
    masks = sample_major_races(
        rng.random(n) < 0.5,
        np.ones(n, bool),
        RaceProfile.for_state(STATES["06"]),
        rng,
        available,
        2,
    )
    assert (masks & 0b011100 == 0).all()
    assert popcount6(masks).max() == 2 and popcount6(masks).min() == 1


def test_copy_from_householder() -> None:
    rng = np.random.default_rng(2)
    values = np.arange(10_000)
    householder = np.zeros(10_000, dtype=np.int64)
    eligible = np.ones(10_000, dtype=bool)
    eligible[0] = False
    copied = copy_from_householder(values, householder, eligible, rng)
    share = (copied[1:] == 0).mean()
    assert 0.75 < share < 0.85
    assert copied[0] == 0 and ((copied == 0) | (copied == values)).all()


@pytest.fixture(scope="module")
def demo_specs():
    return load_race_specs(DEMO_SPECS)


def test_pools_from_demo_specs(demo_specs) -> None:
    pools = RaceCodePools.from_specs(demo_specs)
    truth = group_of_code(demo_specs)
    assert pools.available_groups.all()
    for group, codes in enumerate(pools.race_codes):
        assert codes.size and all(truth[int(c)] == group for c in codes)
        np.testing.assert_allclose(pools.race_probabilities[group].sum(), 1.0)
    assert all(2000 <= c < 3000 for c in pools.hispanic_codes.tolist())
    assert 9950 in pools.not_hispanic_codes.tolist()
    top = pools.not_hispanic_codes[np.argmax(pools.not_hispanic_probabilities)]
    assert top == 9950  # the "Not Hispanic" checkbox dominates


def _check_codes(codes: np.ndarray, masks: np.ndarray, truth: dict[int, int], max_codes: int):
    present = codes != 0
    assert (present[:, 0]).all()
    assert not (~present[:, :-1] & present[:, 1:]).any()  # no code after a Null
    assert present.sum(axis=1).max() <= max_codes
    for j in range(1, 8):  # codes within a person are distinct
        assert not ((codes[:, :j] == codes[:, j : j + 1]) & present[:, j : j + 1]).any()
    lookup = np.full(10_000, -1)
    for code, group in truth.items():
        lookup[code] = group
    groups = np.where(present, lookup[codes], -1)
    assert (groups[present] >= 0).all()
    rebuilt = np.zeros(codes.shape[0], dtype=np.int64)
    for j in range(8):
        rebuilt |= np.where(groups[:, j] >= 0, 1 << np.maximum(groups[:, j], 0), 0)
    np.testing.assert_array_equal(rebuilt, masks)


@pytest.mark.parametrize("max_codes", [8, 3])
def test_detailed_codes_match_the_mask(demo_specs, max_codes: int) -> None:
    pools = RaceCodePools.from_specs(demo_specs)
    rng = np.random.default_rng(3)
    n = 50_000
    hispanic = rng.random(n) < 0.2
    masks = sample_major_races(
        hispanic,
        np.zeros(n, bool),
        RaceProfile.for_state(STATES["06"]),
        rng,
        pools.available_groups,
        max_codes,
    )
    codes = sample_race_codes(masks, pools, rng, max_codes)
    _check_codes(codes, masks.astype(np.int64), group_of_code(demo_specs), max_codes)
    several = ((codes != 0).sum(axis=1) >= 2).mean()
    if max_codes == 8:
        assert 0.15 < several < 0.45
        assert ((codes != 0).sum(axis=1) >= 5).any()
    qspan = sample_qspan(hispanic, pools, rng)
    assert np.isin(qspan[hispanic], pools.hispanic_codes).all()
    assert np.isin(qspan[~hispanic], pools.not_hispanic_codes).all()


def test_pools_from_production_specs(census_specs: Path) -> None:
    specs = load_race_specs(census_specs / "safetab_p" / "production_2020")
    pools = RaceCodePools.from_specs(specs)
    sizes = [codes.size for codes in pools.race_codes]
    assert sizes[2] > 1000 and min(sizes) > 50  # AIAN has the long tail of tribes
    assert pools.hispanic_codes.size == 162
    rng = np.random.default_rng(4)
    masks = sample_major_races(
        rng.random(20_000) < 0.3, np.zeros(20_000, bool), RaceProfile.for_state(STATES["35"]), rng
    )
    codes = sample_race_codes(masks, pools, rng)
    _check_codes(codes, masks.astype(np.int64), group_of_code(specs), 8)


def test_toy_specs_without_some_groups(census_specs: Path) -> None:
    specs = load_race_specs(census_specs / "safetab_p" / "toy" / "input_dir_zcdp")
    pools = RaceCodePools.from_specs(specs)
    assert pools.available_groups.tolist() == [True, True, False, False, False, True]
    rng = np.random.default_rng(5)
    masks = sample_major_races(
        np.zeros(5_000, bool),
        np.zeros(5_000, bool),
        RaceProfile.for_state(STATES["04"]),
        rng,
        pools.available_groups,
    )
    codes = sample_race_codes(masks, pools, rng)
    assert (codes[:, 0] != 0).all() and (masks & 0b011100 == 0).all()
