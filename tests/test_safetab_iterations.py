"""Record → iteration mapping: property tests on random small specs, and the 2020 specs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.safetab_p.iterations import combination_incidence, iteration_filter
from das.specs.race_specs import FALSE, NULL, TRUE, RaceEthnicitySpecs, load_race_specs

SHARED = Path(__file__).resolve().parents[2] / "shared"
PRODUCTION = SHARED / "census_specs" / "safetab_p" / "production_2020"


def _specs(codes, iterations, pairs) -> RaceEthnicitySpecs:
    """iterations: (code, level, alone, detailed_only, coarse_only, is_ethnicity)."""
    columns = list(zip(*iterations, strict=True))
    n = len(iterations)
    return RaceEthnicitySpecs(
        directory=Path("."),
        code=np.array(codes, dtype=np.int16),
        code_name=np.array([f"c{c}" for c in codes]),
        code_row=np.arange(len(codes), dtype=np.int32),
        iteration_code=np.array(columns[0], dtype=np.int16),
        iteration_name=np.array([f"i{c}" for c in columns[0]]),
        level=np.array(columns[1], dtype=np.uint8),
        alone=np.array(columns[2], dtype=np.int8),
        detailed_only=np.array(columns[3], dtype=np.int8),
        coarse_only=np.array(columns[4], dtype=np.int8),
        is_ethnicity=np.array(columns[5], dtype=bool),
        iteration_row=np.arange(n, dtype=np.int32),
        pair_iteration=np.array([p[0] for p in pairs], dtype=np.int16).reshape(-1),
        pair_code=np.array([p[1] for p in pairs], dtype=np.int16).reshape(-1),
        pair_row=np.arange(len(pairs), dtype=np.int32),
    )


@st.composite
def small_specs(draw):
    codes = [1000 + i for i in range(draw(st.integers(1, 6)))]
    iterations = []
    for i in range(draw(st.integers(1, 10))):
        ethnicity = draw(st.booleans())
        level = draw(st.integers(0, 2))
        if level == 0:
            flags = (NULL, NULL, NULL)
        else:
            only = draw(st.sampled_from([(FALSE, FALSE), (TRUE, FALSE), (FALSE, TRUE)]))
            flags = (NULL if ethnicity else draw(st.sampled_from([TRUE, FALSE])), *only)
        iterations.append((2000 + i, level, *flags, ethnicity))
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from([it[0] for it in iterations]), st.sampled_from(codes)),
            unique=True,
        )
    )
    specs = _specs(codes, iterations, pairs)
    known = [*codes, 9999]  # 9999: a code the specs do not know
    records = draw(
        st.lists(
            st.tuples(
                st.lists(st.sampled_from(known), min_size=1, max_size=8),
                st.sampled_from(known),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return specs, iterations, pairs, records


def _reference(iterations, pairs, races, ethnicity, level, state_or_above) -> set[int]:
    """The definition of docs/explanation/architecture.md#safetab-p, with Python sets."""
    eligible = {
        code
        for code, lvl, _, detailed, coarse, _ in iterations
        if lvl == level and (coarse != TRUE if state_or_above else detailed != TRUE)
    }
    of = {}
    for iteration, code in pairs:
        of.setdefault(code, set()).add(iteration)
    alone_its = {it[0] for it in iterations if not it[5] and it[2] == TRUE}
    combo_its = {it[0] for it in iterations if not it[5] and it[2] == FALSE}
    eth_its = {it[0] for it in iterations if it[5]}
    alone = set.intersection(*[of.get(c, set()) & alone_its for c in set(races)])
    combo = set().union(*[of.get(c, set()) & combo_its for c in set(races)])
    return (alone | combo | (of.get(ethnicity, set()) & eth_its)) & eligible


@settings(max_examples=150, deadline=None)
@given(small_specs(), st.sampled_from([1, 2]), st.booleans())
def test_incidence_matches_set_definition(case, level, state_or_above) -> None:
    specs, iterations, pairs, records = case
    race_codes = np.zeros((len(records), 8), dtype=np.int16)
    for i, (races, _) in enumerate(records):
        race_codes[i, : len(races)] = races
    qspan = np.array([e for _, e in records], dtype=np.int16)
    selected = iteration_filter(specs, level, state_or_above)
    incidence = combination_incidence(specs, race_codes, qspan, selected)
    codes = specs.iteration_code[selected.index]
    assert incidence.shape == (len(records), selected.size)
    for i, (races, ethnicity) in enumerate(records):
        got = set(codes[incidence[i].indices].tolist())
        assert got == _reference(iterations, pairs, races, ethnicity, level, state_or_above)
    detailed = specs.detailed_only[selected.index] == TRUE
    assert selected.total_only.tolist() == (detailed & state_or_above).tolist()


def test_level_zero_is_never_tabulated() -> None:
    specs = _specs([1000], [(2000, 0, NULL, NULL, NULL, False)], [(2000, 1000)])
    with pytest.raises(ValueError, match="iteration level"):
        iteration_filter(specs, 0, True)
    for level in (1, 2):
        assert iteration_filter(specs, level, False).size == 0


@pytest.mark.skipif(not PRODUCTION.is_dir(), reason="/work/shared absent")
def test_production_specs_respect_the_stability_bound() -> None:
    """With the 2020 specs a record with 8 codes is in at most 9 groups per level (Δ = 9)."""
    specs = load_race_specs(PRODUCTION)
    rng = np.random.default_rng(0)
    race_codes = np.sort(rng.choice(specs.code, size=(400, 8)), axis=1).astype(np.int16)
    race_codes[:100, 1:] = 0  # some single-code records
    qspan = rng.choice(specs.code, size=400).astype(np.int16)
    for level in (1, 2):
        for state_or_above in (True, False):
            selected = iteration_filter(specs, level, state_or_above)
            incidence = combination_incidence(specs, race_codes, qspan, selected)
            per_record = np.diff(incidence.indptr)
            assert per_record.max() <= 9
            assert per_record.sum() > 400  # not trivially empty
