"""Permutation swapping (Algorithm 5.1): selection, derangements, invariants, b, MAPE, ε."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import permutations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from das.privacy.calculators import swap_epsilon
from das.privacy.rng import RandomSource, seeded_rng
from das.swapping.analysis import (
    check_invariants,
    contingency_table,
    largest_stratum,
    mean_absolute_percentage_error,
    varying_within_strata,
)
from das.swapping.definitions import (
    PHSAFE_2020_RHO,
    SAFETAB_P_2020_RHO,
    TOPDOWN_RHO,
    side_by_side,
)
from das.swapping.permutation import (
    SwapScheme,
    bernoulli,
    draw_permutation_swap,
    parse_rate,
    permutation_swap,
    select_records,
    uniform_derangements,
)
from das.swapping.swap_report import epsilon_note

SCHEME = SwapScheme(match=("ST", "SIZE"), swap=("COU", "TRACT"), hold=("TEN", "HHT"))


def households(n: int, seed: int) -> pd.DataFrame:
    """A small unit file: 2 states × 3 sizes, geography and holding variables varying."""
    rng = np.random.default_rng(seed)
    county = rng.integers(0, 4, n)
    return pd.DataFrame(
        {
            "ST": rng.choice(["01", "02"], n),
            "SIZE": rng.integers(1, 4, n).astype(str),
            "COU": [f"{c:03d}" for c in county],
            "TRACT": [f"{c}{t:05d}" for c, t in zip(county, rng.integers(0, 3, n), strict=True)],
            "TEN": rng.integers(1, 4, n).astype(str),
            "HHT": rng.integers(1, 8, n),
            "MAFID": np.arange(100_000_001, 100_000_001 + n),
        }
    )


class ScriptedSource(RandomSource):
    """Hands out the given words in order (to drive exact corner cases)."""

    def __init__(self, *chunks: list[int]) -> None:
        self.chunks = [np.asarray(chunk, dtype=np.uint64) for chunk in chunks]

    def uint64(self, n: int) -> np.ndarray:
        chunk = self.chunks.pop(0)
        assert chunk.size == n
        return chunk

    def describe(self) -> str:
        return "scripted"


class LowEntropySource(RandomSource):
    """Words in {0, ..., 7}: ties are frequent, so the tie rejection is exercised."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def uint64(self, n: int) -> np.ndarray:
        return self.rng.integers(0, 8, n).astype(np.uint64)

    def describe(self) -> str:
        return "low entropy"


# ------------------------------------------------------------------------------ derangements


def _derangements(m: int) -> list[tuple[int, ...]]:
    return [p for p in permutations(range(m)) if all(p[i] != i for i in range(m))]


@pytest.mark.parametrize(("m", "count", "blocks"), [(4, 9, 9_000), (5, 44, 22_000)])
def test_derangements_are_uniform_and_fixed_point_free(m: int, count: int, blocks: int) -> None:
    sigma, rounds = uniform_derangements(np.full(blocks, m), seeded_rng(11))
    local = sigma.reshape(blocks, m) - np.arange(blocks)[:, None] * m
    assert np.all((local >= 0) & (local < m)), "an element left its block"
    assert not np.any(local == np.arange(m)), "a fixed point"
    assert np.array_equal(np.sort(local, axis=1), np.tile(np.arange(m), (blocks, 1)))
    index = {d: i for i, d in enumerate(_derangements(m))}
    assert len(index) == count
    observed = np.bincount([index[tuple(row)] for row in local.tolist()], minlength=count)
    assert stats.chisquare(observed).pvalue > 1e-4
    assert rounds > 3  # rejection needs several rounds over thousands of blocks


def test_derangements_stay_uniform_when_keys_tie() -> None:
    blocks = 9_000
    sigma, _ = uniform_derangements(np.full(blocks, 4), LowEntropySource(5))
    local = sigma.reshape(blocks, 4) - np.arange(blocks)[:, None] * 4
    assert not np.any(local == np.arange(4))
    index = {d: i for i, d in enumerate(_derangements(4))}
    observed = np.bincount([index[tuple(row)] for row in local.tolist()], minlength=9)
    assert stats.chisquare(observed).pvalue > 1e-4


def test_derangements_of_mixed_block_sizes() -> None:
    sizes = np.array([2, 7, 3, 2, 50, 2])
    sigma, _ = uniform_derangements(sizes, seeded_rng(3))
    block = np.repeat(np.arange(sizes.size), sizes)
    assert np.array_equal(block[sigma], block)
    assert not np.any(sigma == np.arange(sizes.sum()))
    assert np.array_equal(np.sort(sigma), np.arange(sizes.sum()))
    with pytest.raises(ValueError, match="at least 2"):
        uniform_derangements(np.array([3, 1]), seeded_rng(3))


# ------------------------------------------------------------------------------ selection


def test_bernoulli_is_exact_at_the_64_bit_boundary() -> None:
    p = Fraction(1, 3)
    threshold = (p * 2**64).numerator // (p * 2**64).denominator
    # u < t selects, u > t does not; u == t compares the next word with the remainder.
    source = ScriptedSource([threshold - 1, threshold, threshold + 1], [0])
    assert bernoulli(p, 3, source).tolist() == [True, True, False]
    source = ScriptedSource([threshold], [2**64 - 1])
    assert bernoulli(p, 1, source).tolist() == [False]
    # A dyadic p: u == t means U >= p exactly, no further word is drawn.
    assert bernoulli(Fraction(1, 2), 1, ScriptedSource([2**63])).tolist() == [False]


def test_bernoulli_rate() -> None:
    draws = bernoulli(Fraction(1, 20), 200_000, seeded_rng(1))
    assert abs(draws.mean() - 0.05) < 5 * math.sqrt(0.05 * 0.95 / 200_000)


def test_selection_redraws_a_stratum_that_chose_exactly_one() -> None:
    # Strata of 3 records at p = 1/2: P(k selected | k != 1) = C(3,k)/8 / (5/8) = 1/5, 3/5, 1/5.
    strata = np.repeat(np.arange(20_000), 3)
    selected, rounds = select_records(strata, Fraction(1, 2), seeded_rng(8))
    per_stratum = np.bincount(strata[selected], minlength=20_000)
    observed = np.bincount(per_stratum, minlength=4)
    assert observed[1] == 0
    assert rounds > 1
    expected = np.array([1, 3, 1]) / 5 * 20_000
    assert stats.chisquare(observed[[0, 2, 3]], expected).pvalue > 1e-4


def test_selection_skips_singleton_strata_and_follows_p() -> None:
    strata = np.array([0, 1, 1, 2, 3, 3, 3])
    selected, _ = select_records(strata, Fraction(1), seeded_rng(0))
    assert selected.tolist() == [False, True, True, False, True, True, True]
    selected, rounds = select_records(strata, Fraction(0), seeded_rng(0))
    assert not selected.any() and rounds == 0


def test_draw_moves_values_only_within_strata() -> None:
    strata = np.repeat(np.arange(300), np.arange(300) % 7 + 1)
    draw = draw_permutation_swap(strata, Fraction(3, 10), seeded_rng(4))
    moved = draw.source_row != np.arange(strata.size)
    assert np.array_equal(moved, draw.selected)
    assert np.array_equal(strata[draw.source_row], strata)
    assert np.array_equal(np.sort(draw.source_row), np.arange(strata.size))
    assert draw.strata_permuted == np.unique(strata[draw.selected]).size


def test_parse_rate_is_exact() -> None:
    assert parse_rate("0.05") == Fraction(1, 20)
    assert parse_rate(0.1) == Fraction(1, 10)
    assert parse_rate(1) == 1
    for bad in ("1.5", "-0.1", "abc"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_scheme_roles_must_be_disjoint_and_non_empty() -> None:
    with pytest.raises(ValueError, match="both match and swap"):
        SwapScheme(("ST",), ("ST",), ("TEN",))
    with pytest.raises(ValueError, match="swapping variable"):
        SwapScheme(("ST",), (), ("TEN",))
    with pytest.raises(ValueError, match="holding variable"):
        SwapScheme(("ST",), ("COU",), ())
    with pytest.raises(KeyError, match="NOPE"):
        permutation_swap(
            households(5, 0),
            SwapScheme(("ST",), ("NOPE",), ("TEN",)),
            Fraction(1, 2),
            seeded_rng(0),
        )


# ------------------------------------------------------------------------------ invariants


def test_invariants_exact_for_many_seeds() -> None:
    x = households(60, 0)
    changed = 0
    for seed in range(200):
        rate = Fraction((seed % 9) + 1, 10)
        z, draw = permutation_swap(x, SCHEME, rate, seeded_rng(seed))
        report = check_invariants(x, z, SCHEME)
        assert report.exact, seed
        # Everything except the swapping variables stays with its record.
        others = [c for c in x.columns if c not in SCHEME.swap]
        pd.testing.assert_frame_equal(z[others], x[others])
        assert np.array_equal(draw.selected, draw.source_row != np.arange(len(x)))
        changed += report.interior_cells_changed > 0
    assert changed > 150  # the interior table does change: the check is not vacuous


def test_invariant_check_catches_a_broken_swap() -> None:
    x = households(60, 1)
    z = x.copy()
    z.loc[0, "COU"], z.loc[1, "COU"] = x.loc[1, "COU"], x.loc[0, "COU"]  # ignores the strata
    z.loc[2, "TEN"] = "9"
    broken = check_invariants(x, z, SCHEME)
    if x.loc[0, ["ST", "SIZE"]].tolist() != x.loc[1, ["ST", "SIZE"]].tolist():
        assert not broken.margins[0].exact
    assert not broken.margins[1].exact and not broken.exact


def test_rate_zero_changes_nothing_and_has_no_finite_epsilon() -> None:
    x = households(40, 2)
    z, draw = permutation_swap(x, SCHEME, Fraction(0), seeded_rng(1))
    pd.testing.assert_frame_equal(z, x)
    assert draw.records_selected == 0
    b = largest_stratum(x, SCHEME)
    epsilon = swap_epsilon(b, Fraction(0))
    assert b > 0 and math.isinf(epsilon)
    assert "no finite epsilon" in epsilon_note(b, Fraction(0), epsilon)
    assert "p = 0" in epsilon_note(b, Fraction(0), epsilon)


def test_rate_one_moves_every_record_of_every_stratum() -> None:
    x = households(40, 3)
    z, draw = permutation_swap(x, SCHEME, Fraction(1), seeded_rng(2))
    sizes = x.groupby(list(SCHEME.match))["MAFID"].transform("size").to_numpy()
    assert np.array_equal(draw.selected, sizes >= 2)
    assert np.all(draw.source_row[sizes >= 2] != np.flatnonzero(sizes >= 2))
    assert check_invariants(x, z, SCHEME).exact
    epsilon = swap_epsilon(largest_stratum(x, SCHEME), Fraction(1))
    assert math.isinf(epsilon) and "p = 1" in epsilon_note(5, Fraction(1), epsilon)


# ------------------------------------------------------------------------------ b, H(Z), MAPE


def test_b_counts_strata_with_two_different_swapping_values() -> None:
    frame = pd.DataFrame(
        {
            "ST": ["01"] * 5 + ["02"] * 3 + ["03"],
            "SIZE": ["1"] * 9,
            "COU": ["001"] * 5 + ["001", "002", "002"] + ["004"],  # state 01: one county only
            "TRACT": ["1"] * 9,
            "TEN": ["1", "2", "1", "2", "1", "1", "1", "1", "1"],
            "HHT": [1] * 9,
        }
    )
    # Stratum 01 is bigger but cannot change; stratum 03 has one record.
    assert largest_stratum(frame, SCHEME) == 3
    assert largest_stratum(frame.iloc[:5], SCHEME) == 0
    assert largest_stratum(frame.iloc[:0], SCHEME) == 0
    assert epsilon_note(0, Fraction(1, 2), swap_epsilon(0, Fraction(1, 2))).startswith(
        "epsilon = 0"
    )


def test_b_without_matching_variables_is_the_whole_file() -> None:
    frame = households(30, 4)
    scheme = SwapScheme((), ("COU",), ("TEN",))
    assert largest_stratum(frame, scheme) == 30


def test_contingency_table_and_margins() -> None:
    x = households(200, 5)
    z, _ = permutation_swap(x, SCHEME, Fraction(1, 2), seeded_rng(5))
    table = contingency_table(z, SCHEME.columns)
    assert table["COUNT"].sum() == 200 and (table["COUNT"] > 0).all()
    margin_x = contingency_table(x, SCHEME.match + SCHEME.swap)
    margin_z = table.groupby(list(SCHEME.match + SCHEME.swap))["COUNT"].sum().reset_index()
    assert margin_x["COUNT"].tolist() == margin_z["COUNT"].tolist()


def test_mape_by_hand() -> None:
    x = pd.DataFrame({"COU": ["a", "a", "a", "b", "b", "c"], "TEN": ["1", "1", "2", "1", "2", "2"]})
    z = pd.DataFrame({"COU": ["a", "a", "b", "b", "b", "c"], "TEN": ["1", "1", "2", "1", "2", "1"]})
    # Cells X: a1=2 a2=1 b1=1 b2=1 c2=1; Z: a1=2 b2=2 b1=1 c1=1.
    # Errors: a1 0, a2 1, b1 0, b2 1, c2 1 -> 3/5; c1 is empty in X (left out, counted).
    result = mean_absolute_percentage_error(x, z, ("COU",), ("TEN",))
    assert result.mape == pytest.approx(3 / 5)
    assert result.cells == 5 and result.cells_zero_true == 1
    assert mean_absolute_percentage_error(x, x, ("COU",), ("TEN",)).mape == 0.0


def test_varying_within_strata() -> None:
    frame = pd.DataFrame(
        {"ST": ["1", "1", "2"], "REGION": ["4", "4", "3"], "PLACE": ["a", "b", "a"]}
    )
    assert varying_within_strata(frame, ("ST",), ("REGION", "PLACE")) == ("PLACE",)


# ------------------------------------------------------------------------------ definitions


def test_side_by_side_rows() -> None:
    rows = {(row.mechanism, row.release): row for row in side_by_side(12.5, "n_jk, n_jl")}
    swap = side_by_side(12.5, "n_jk, n_jl")[0]
    assert swap.mechanism == "Swapping (Algorithm 5.1)"
    assert swap.privacy_unit == "household" and swap.epsilon_at_delta == 12.5
    dhc = rows[("TopDown", "DHC (includes the PL budget)")]
    assert dhc.epsilon_at_delta == pytest.approx(52.83, abs=0.02)  # Table 6.1
    assert dhc.epsilon_at_delta_optimal < dhc.epsilon_at_delta
    assert rows[("SafeTab-P", "Detailed DHC-A, US pass")].privacy_unit == "person"
    assert TOPDOWN_RHO["DHC"] == Fraction("15.29")
    assert side_by_side(math.inf, "x")[0].as_dict()["epsilon_at_delta"] == "inf"


def test_production_budgets_match_the_2020_configs(census_specs) -> None:
    from das.specs.config import load_phsafe_config, load_safetab_p_config

    safetab = load_safetab_p_config(census_specs / "safetab_p/production_2020/config.json")
    us = sum(b for level, b in safetab.budgets.items() if level.geography.pass_name == "US")
    pr = sum(b for level, b in safetab.budgets.items() if level.geography.pass_name == "PR")
    assert {"US": us, "PR": pr} == SAFETAB_P_2020_RHO
    for name in ("us", "pr"):
        config = load_phsafe_config(census_specs / f"phsafe/production_2020/{name}/config.json")
        assert PHSAFE_2020_RHO[name.upper()] == sum(config.privacy_budget.values())
