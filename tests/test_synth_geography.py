"""Synthetic geography: hierarchy, scaling, coverage and the coterminous cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from das.synth.geography import (
    DC_FIPS,
    NO_AIANNH,
    NO_PLACE,
    build_geography,
    persons_per_state,
)
from das.synth.population import plan_geography, rng_for
from das.synth.states import ALL_STATE_FIPS, FULL_SCALE_PERSONS, STATES, apportion


def _frame(geography) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "state": geography.state,
            "county": geography.county,
            "tract": geography.tract,
            "block": geography.block,
            "place": geography.place,
            "aiannh": geography.aiannh,
            "weight": geography.weight,
        }
    )


def test_state_table_is_the_52_state_equivalents() -> None:
    assert len(STATES) == 52 and "72" in STATES and DC_FIPS in STATES
    assert sum(s.counties for s in STATES.values()) == 3221  # 3,143 + 78 municipios
    assert 330e6 < FULL_SCALE_PERSONS < 336e6
    assert STATES[DC_FIPS].counties == 1


def test_apportion_is_exact_and_proportional() -> None:
    shares = apportion(10, np.array([1.0, 1.0, 1.0]))
    assert shares.sum() == 10 and sorted(shares.tolist()) == [3, 3, 4]
    by_state = persons_per_state(1_000_003, ALL_STATE_FIPS)
    assert by_state.sum() == 1_000_003
    assert by_state[ALL_STATE_FIPS.index("06")] > 50 * by_state[ALL_STATE_FIPS.index("56")] / 10
    with pytest.raises(ValueError):
        apportion(5, np.zeros(3))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_run_keeps_the_whole_hierarchy(seed: int) -> None:
    geography, by_state = plan_geography(10_000, ALL_STATE_FIPS, seed)
    frame = _frame(geography)
    keys = ["state", "county", "tract", "block"]
    assert not frame.duplicated(keys).any()
    assert frame[keys].apply(tuple, axis=1).is_monotonic_increasing
    assert set(frame.state.unique()) == {int(f) for f in ALL_STATE_FIPS}
    counties = frame.groupby("state").county.nunique()
    assert counties.sum() > 60 and (counties > 1).sum() >= 3
    tracts = frame.drop_duplicates(["state", "county", "tract"])
    assert len(tracts) > 100
    assert (tracts.groupby(["state", "county"]).size() == 1).any()  # single-tract counties
    in_place = frame.place != NO_PLACE
    assert 0.4 < in_place.mean() < 0.8  # places do not cover everyone
    assert frame[in_place].groupby("state").place.nunique().sum() >= 20
    in_area = frame.aiannh != NO_AIANNH
    assert 0 < in_area.mean() < 0.2
    spans = frame[in_area].groupby("aiannh").state.nunique()
    assert (spans >= 2).any(), "an AIANNH area should reach into a second state"
    assert frame.block.between(1000, 9999).all() and (frame.tract < 1_000_000).all()
    assert (frame.county % 2 == 1).all()
    np.testing.assert_allclose(frame.groupby("state").weight.sum(), 1.0)
    assert (frame.weight == 0).mean() > 0.1  # empty blocks exist
    assert by_state.sum() == 10_000


def test_dc_is_one_county_and_one_place_covering_it() -> None:
    geography, _ = plan_geography(50_000, ALL_STATE_FIPS, 7)
    dc = _frame(geography)[geography.state == int(DC_FIPS)]
    assert dc.county.nunique() == 1 and dc.county.iloc[0] == 1
    assert dc.place.nunique() == 1 and dc.place.iloc[0] != NO_PLACE
    assert (dc.aiannh == NO_AIANNH).all()
    assert len(dc) > 1


@pytest.mark.parametrize("seed", [1, 2])
def test_a_consolidated_city_county_exists(seed: int) -> None:
    frame = _frame(plan_geography(10_000, ALL_STATE_FIPS, seed)[0])
    frame = frame[frame.state != int(DC_FIPS)]
    per_county = frame.groupby(["state", "county"]).place.agg(["nunique", "first", "size"])
    in_place = frame[frame.place != NO_PLACE]
    per_place = in_place.groupby(["state", "place"]).county.agg(["nunique", "size"])
    candidates = per_county[(per_county["nunique"] == 1) & (per_county["first"] != NO_PLACE)]
    found = [
        key
        for key, row in candidates.iterrows()
        if per_place.loc[(key[0], row["first"]), "nunique"] == 1
        and per_place.loc[(key[0], row["first"]), "size"] == row["size"]
    ]
    assert found, "some county should be exactly one place"


def test_entity_counts_grow_with_scale() -> None:
    small, _ = plan_geography(10_000, ALL_STATE_FIPS, 1)
    large, _ = plan_geography(1_000_000, ALL_STATE_FIPS, 1)
    for geography_small, geography_large in [(small, large)]:
        s, b = _frame(geography_small), _frame(geography_large)
        assert len(b) > 10 * len(s)
        assert (
            b.drop_duplicates(["state", "county"]).shape[0]
            > 2 * s.drop_duplicates(["state", "county"]).shape[0]
        )
        assert b.aiannh.nunique() > s.aiannh.nunique()


@pytest.mark.slow
def test_full_scale_reaches_the_real_counts() -> None:
    by_state = persons_per_state(FULL_SCALE_PERSONS, ALL_STATE_FIPS)
    frame = _frame(build_geography(by_state, ALL_STATE_FIPS, rng_for(5, 0)))
    assert frame.drop_duplicates(["state", "county"]).shape[0] == 3221
    assert 80_000 < frame.drop_duplicates(["state", "county", "tract"]).shape[0] < 90_000
    assert 7.5e6 < len(frame) < 8.5e6
    places = frame[frame.place != NO_PLACE].drop_duplicates(["state", "place"]).shape[0]
    assert 28_000 < places < 34_000
    areas = frame[frame.aiannh != NO_AIANNH]
    assert 500 < areas.aiannh.nunique() < 700
    assert (areas.groupby("aiannh").state.nunique() >= 2).sum() >= 10
    sizes = frame.groupby(["state", "county"]).size()
    assert sizes.max() > 50 * sizes.median()  # skewed county sizes


def test_subset_of_states_and_rejections() -> None:
    geography, by_state = plan_geography(5_000, ("72",), 3)
    assert set(np.unique(geography.state)) == {72}
    assert by_state.tolist() == [5_000]
    with pytest.raises(ValueError):
        plan_geography(0, ("01",), 1)
    with pytest.raises(ValueError):
        build_geography(np.array([10]), ("99",), rng_for(1, 0))


def test_block_sampling_follows_weights() -> None:
    geography, _ = plan_geography(20_000, ("11", "56"), 4)
    where = geography.state_slice("56")
    draws = geography.sample_blocks("56", 50_000, np.random.default_rng(0))
    assert draws.min() >= where.start and draws.max() < where.stop
    assert (geography.weight[draws] > 0).all()  # empty blocks are never drawn
    counts = np.bincount(draws - where.start, minlength=where.stop - where.start)
    expected = geography.weight[where] * draws.size
    busy = expected > 200
    assert busy.any()
    np.testing.assert_allclose(counts[busy], expected[busy], rtol=0.25)
