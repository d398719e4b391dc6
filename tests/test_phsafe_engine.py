"""PHSafe engine: truncation effects, exact counts against a simple reference, variance, toy run."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from toy_configs import phsafe_toy_config

from das.phsafe.engine import run_phsafe, table_path, write_release
from das.phsafe.tables import SHELLS
from das.privacy.noise import seeded_rng
from das.specs.config import PHSafeConfig, load_phsafe_config

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "phsafe" / "toy"
INF = float("inf")
STATES = ("01", "44")


def _config(budgets: dict, tau: dict, defn: str = "zcdp", states=STATES) -> PHSafeConfig:
    return PHSafeConfig.model_validate(
        {"privacy_budget": budgets, "tau": tau, "state_filter": list(states), "privacy_defn": defn}
    )


def _geo(mafids, state: int = 44, rtype: int = 2) -> pd.DataFrame:
    n = len(mafids)
    return pd.DataFrame({"RTYPE": [rtype] * n, "MAFID": mafids, "TABBLKST": [state] * n})


def _unit(mafid: int, **codes: int) -> dict:
    base = dict(
        RTYPE=2, MAFID=mafid, FINAL_POP=0, NPF=0, HHSPAN=1, HHRACE=1, TEN=1, HHT=1, HHT2=1, CPLT=1
    )
    return base | codes


def _person(mafid: int, age: int, relship: int, race: int = 1, hisp: int = 1, rtype: int = 3):
    return dict(RTYPE=rtype, MAFID=mafid, QAGE=age, CENHISP=hisp, CENRACE=race, RELSHIP=relship)


# ------------------------------------------------------------------------------ truncation
@pytest.mark.parametrize(("tau", "expected"), [(4, 8), (5, 9), (6, 9)])
def test_own_children_truncated_to_tau_per_household(tau: int, expected: int) -> None:
    # Householder and spouse sit outside PH6's universe: filtered *before* truncation.
    persons = [_person(m, 40, 20) for m in (1, 2)] + [_person(m, 38, 21) for m in (1, 2)]
    persons += [_person(1, 7, 25)] * 4 + [_person(2, 7 + k % 3, 25) for k in range(5)]
    units = [_unit(1), _unit(2)]
    config = _config({"PH6": {"usa_*": INF, "state_*": INF}}, {"PH6": tau})
    release = run_phsafe(config, pd.DataFrame(persons), pd.DataFrame(units), _geo([1, 2]))
    counts = release.tables["PH6"]["COUNT"].to_numpy()
    assert set(counts[counts != 0]) == {expected}
    # USA and state 44 each have one nonzero cell (married couple, 6 to 11 years = cell 5).
    nonzero = release.tables["PH6"].loc[counts != 0]
    assert sorted(nonzero["REGION_ID"]) == ["1", "44"]
    assert set(nonzero["PH6_DATA_CELL"]) == {5}


# ------------------------------------------------------------- reference implementation
def _random_inputs(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    gen = np.random.default_rng(seed)
    n_units = 80
    mafid = np.arange(1, n_units + 1)
    mafid[5] = mafid[4]  # a duplicated unit: both rows dropped
    units = pd.DataFrame(
        {
            "RTYPE": gen.choice([2, 2, 2, 4], n_units),
            "MAFID": mafid,
            "FINAL_POP": 0,
            "NPF": 0,
            "HHSPAN": gen.integers(1, 3, n_units),
            "HHRACE": gen.choice([1, 2, 3, 4, 5, 6, 7, 30, 63], n_units),
            "TEN": gen.integers(0, 5, n_units),
            "HHT": gen.integers(0, 8, n_units),
            "HHT2": gen.integers(0, 13, n_units),
            "CPLT": gen.integers(0, 6, n_units),
        }
    )
    geo = pd.DataFrame(
        {
            "RTYPE": gen.choice([2, 2, 2, 2, 4, 5], n_units),
            "MAFID": np.arange(1, n_units + 1),
            "TABBLKST": gen.choice([1, 44, 6], n_units),
        }
    )
    geo.loc[len(geo)] = [2, 10, 44]  # MAFID 10 located twice: dropped
    geo.loc[len(geo)] = [4, 11, 44]  # a second, GQ-only geography: removed, MAFID 11 kept
    sizes = gen.integers(0, 6, n_units)
    owner = np.repeat(mafid, sizes)
    n = len(owner)
    persons = pd.DataFrame(
        {
            "RTYPE": gen.choice([3, 3, 3, 5], n),
            "MAFID": owner,
            "QAGE": gen.integers(0, 90, n),
            "CENHISP": gen.integers(1, 3, n),
            "CENRACE": gen.choice([1, 2, 3, 4, 5, 6, 7, 30, 63], n),
            "RELSHIP": gen.integers(20, 37, n),
        }
    )
    return persons, units, geo


def _iteration(level: str, race: int, hisp: int) -> str | None:
    if level == "*":
        return "*"
    if level == "A-G":
        return "ABCDEF"[race - 1] if race <= 6 else "G"
    if hisp == 2:
        return "H"
    return "I" if race == 1 else None


def _family_type(hht2: int) -> int:
    return {1: 0, 2: 0, 3: 1, 4: 1}.get(hht2, 2 if 9 <= hht2 <= 12 else 3 if 5 <= hht2 <= 8 else -1)


def _reference_cell(table: str, p: dict | None, u: dict) -> int:
    """Plain per-record rules, written independently of the engine's lookup arrays."""
    if table == "PH1_denom":
        return 1
    if table == "PH5_denom":
        return 1 if u["HHT"] in (1, 2, 3) else 0
    if table == "PH8_denom":
        return 2 if u["TEN"] in (1, 2) else 3 if u["TEN"] in (3, 4) else 0
    assert p is not None
    if table == "PH1_num":
        return 2 if p["QAGE"] < 18 else 3
    if table == "PH7":
        return {1: 2, 2: 3, 3: 4, 4: 4}.get(u["TEN"], 0)
    if table == "PH2":
        if u["CPLT"] in (1, 2, 3, 4):
            return {1: 3, 2: 4, 3: 6, 4: 7}[u["CPLT"]]
        if u["CPLT"] != 5:
            return 0
        if u["HHT2"] == 9:
            return 9
        if u["HHT2"] in (10, 11, 12):
            return 10
        if u["HHT2"] == 5:
            return 12
        return 13 if u["HHT2"] in (6, 7, 8) else 0
    if table == "PH3":
        if p["QAGE"] >= 18:
            return 0
        rel = p["RELSHIP"]
        if rel in (25, 26, 27):
            family = _family_type(u["HHT2"])
            return 4 + family if family >= 0 else 0
        if rel == 30:
            return 9
        if rel in (28, 29, 31, 32, 33):
            return 10
        return 2
    if table == "PH4":
        in_family = p["RELSHIP"] in (20, 21, 23, *range(25, 34))
        if not in_family or u["HHT"] not in (1, 2, 3):
            return 0
        return 2 if p["QAGE"] < 18 else 3
    if table == "PH6":
        if p["QAGE"] >= 18 or p["RELSHIP"] not in (25, 26, 27):
            return 0
        family = _family_type(u["HHT2"])
        if family < 0:
            return 0
        age = p["QAGE"]
        return 3 + 5 * family + (0 if age < 4 else 1 if age < 6 else 2 if age < 12 else 3)
    raise AssertionError(table)


def _reference_counts(table: str, persons, units, geo, states) -> dict[tuple, int]:
    mafid_counts = units["MAFID"].value_counts()
    geo = geo[[rtype not in (4, 5) for rtype in geo["RTYPE"]]]  # GQ-only geographies
    geo_counts = geo["MAFID"].value_counts()
    state_of = {int(r.MAFID): int(r.TABBLKST) for r in geo.itertuples()}
    good = {}
    for u in units.to_dict("records"):
        m = u["MAFID"]
        occupied = u["RTYPE"] == 2 and 1 <= u["HHT"] <= 7
        located = geo_counts.get(m, 0) == 1 and f"{state_of.get(m, 0):02d}" in states
        if occupied and mafid_counts[m] == 1 and located:
            good[m] = u
    counts: dict[tuple, int] = {}
    shell = SHELLS[table]
    if shell.joined:
        records = [
            (p, good[p["MAFID"]])
            for p in persons.to_dict("records")
            if p["RTYPE"] == 3 and p["MAFID"] in good
        ]
    else:
        records = [(None, u) for u in good.values()]
    for p, u in records:
        cell = _reference_cell(table, p, u)
        if cell == 0:
            continue
        carrier = p if shell.iterates_on == "person" else None
        race = carrier["CENRACE"] if carrier else u["HHRACE"]
        hisp = carrier["CENHISP"] if carrier else u["HHSPAN"]
        for level in ("*",) if shell.total_only else ("*", "A-G", "H,I"):
            code = _iteration(level, race, hisp)
            if code is None:
                continue
            for region in ("1", f"{state_of[u['MAFID']]:02d}"):
                key = (region, code, cell)
                counts[key] = counts.get(key, 0) + 1
    return counts


ALL_LEVELS = {
    "usa_*": INF,
    "usa_A-G": INF,
    "usa_H,I": INF,
    "state_*": INF,
    "state_A-G": INF,
    "state_H,I": INF,
}
TOTAL_LEVELS = {"usa_*": INF, "state_*": INF}


@pytest.mark.parametrize("seed", [0, 1])
def test_infinite_budget_gives_exact_counts(seed: int) -> None:
    persons, units, geo = _random_inputs(seed)
    tables = ["PH1_num", "PH1_denom", "PH2", "PH3", "PH4", "PH5_denom", "PH6", "PH7", "PH8_denom"]
    budgets = {t: TOTAL_LEVELS if SHELLS[t].total_only else ALL_LEVELS for t in tables}
    tau = {t: 10 for t in ("PH1_num", "PH2", "PH3", "PH4", "PH6", "PH7")}
    release = run_phsafe(_config(budgets, tau), persons, units, geo)
    nonzero_total = 0
    for table in tables:
        frame = release.tables[table]
        cell = SHELLS[table].cell_column
        codes = frame["ITERATION_CODE"] if "ITERATION_CODE" in frame else ["*"] * len(frame)
        got = {
            (r, c, int(k)): int(n)
            for r, c, k, n in zip(
                frame["REGION_ID"], codes, frame[cell], frame["COUNT"], strict=True
            )
        }
        expected = _reference_counts(table, persons, units, geo, STATES)
        assert {k: v for k, v in got.items() if v} == expected, table
        assert set(expected) <= set(got)
        nonzero_total += len(expected)
        assert (frame["VARIANCE"] == 0).all()
    assert nonzero_total > 50  # the fixture really exercises the tables
    # Key sets are complete: regions × iterations × basis cells, zeros included.
    ph3 = release.tables["PH3"]
    assert len(ph3) == (1 + len(STATES)) * (1 + 7 + 2) * len(SHELLS["PH3"].basis_codes)
    # Derived tables.
    ph7 = release.tables["PH7"].set_index(["REGION_ID", "ITERATION_CODE", "PH7_DATA_CELL"])
    ph8 = release.tables["PH8_num"].set_index(["REGION_ID", "ITERATION_CODE", "PH8_NUM_DATA_CELL"])
    for (region, code, cell), row in ph8.iterrows():
        parts = [2, 3] if cell == 2 else [4]
        assert row["COUNT"] == sum(ph7.loc[(region, code, k), "COUNT"] for k in parts)
    ph5 = release.tables["PH5_num"]
    assert ph5["COUNT"].tolist() == release.tables["PH4"]["COUNT"].tolist()


# ------------------------------------------------------------------------------ variance
def test_variance_column_zcdp_and_derived_sums() -> None:
    persons, units, geo = _random_inputs(3)
    budgets = {
        "PH7": {"usa_*": "0.01", "state_A-G": "0.02"},
        "PH8_denom": {"usa_H,I": "0.005"},
        "PH2": {"state_*": "0"},
    }
    release = run_phsafe(_config(budgets, {"PH7": 3}), persons, units, geo, seeded_rng(5))
    assert "PH2" not in release.tables  # budget 0: skipped, table not written
    ph7 = release.tables["PH7"]
    rho = np.where(ph7["REGION_TYPE"] == "USA", 0.01, 0.02)
    assert np.allclose(ph7["VARIANCE"], 8**2 / (2 * rho), rtol=1e-9)
    assert (ph7["NOISE_DISTRIBUTION"] == "Discrete Gaussian").all()
    assert np.allclose(release.tables["PH8_denom"]["VARIANCE"], 2**2 / (2 * 0.005), rtol=1e-9)
    ph8 = release.tables["PH8_num"]
    cells_summed = np.where(ph8["PH8_NUM_DATA_CELL"] == 2, 2, 1)
    rho = np.where(ph8["REGION_TYPE"] == "USA", 0.01, 0.02)
    assert np.allclose(ph8["VARIANCE"], cells_summed * 8**2 / (2 * rho), rtol=1e-9)


def test_variance_column_puredp() -> None:
    persons, units, geo = _random_inputs(4)
    budgets = {"PH3": {"usa_*": "0.5"}, "PH1_denom": {"state_*": "0.25"}}
    release = run_phsafe(_config(budgets, {"PH3": 5}, "puredp"), persons, units, geo, seeded_rng(6))

    def geometric_variance(sensitivity: int, epsilon: float) -> float:
        a = math.exp(-epsilon / sensitivity)
        return 2 * a / (1 - a) ** 2

    assert np.allclose(release.tables["PH3"]["VARIANCE"], geometric_variance(12, 0.5))
    assert np.allclose(release.tables["PH1_denom"]["VARIANCE"], geometric_variance(2, 0.25))
    assert (release.tables["PH3"]["NOISE_DISTRIBUTION"] == "Two-Sided Geometric").all()


def test_noise_is_added_and_seeded_runs_reproduce() -> None:
    persons, units, geo = _random_inputs(5)
    config = _config({"PH7": ALL_LEVELS | {"usa_*": Fraction(1, 10)}}, {"PH7": 4})
    first = run_phsafe(config, persons, units, geo, seeded_rng(9)).tables["PH7"]
    again = run_phsafe(config, persons, units, geo, seeded_rng(9)).tables["PH7"]
    assert first["COUNT"].tolist() == again["COUNT"].tolist()
    noisy = first["REGION_TYPE"] == "USA"
    exact = run_phsafe(_config({"PH7": ALL_LEVELS}, {"PH7": 4}), persons, units, geo)
    diff = first["COUNT"].to_numpy() - exact.tables["PH7"]["COUNT"].to_numpy()
    assert np.any(diff[noisy.to_numpy()] != 0)


# ------------------------------------------------------------------------------ toy inputs
@pytest.fixture
def toy_inputs():
    if not TOY.is_dir():
        pytest.skip("shared census specs not available")
    from das.io.phsafe import input_paths, read_geo, read_persons, read_units

    paths = input_paths(TOY)
    return read_persons(paths["persons"]), read_units(paths["units"]), read_geo(paths["geo"])


@pytest.mark.parametrize("definition", ["zcdp", "puredp"])
def test_toy_inputs_end_to_end(toy_inputs, definition: str, tmp_path: Path) -> None:
    config = load_phsafe_config(phsafe_toy_config(definition, tmp_path / "config"))
    release = run_phsafe(config, *toy_inputs, rng=seeded_rng(2020))
    written = write_release(release, tmp_path / "out")
    assert set(written) == set(release.tables)
    assert {"PH5_num", "PH8_num"} <= set(written)
    for table, rows in written.items():
        lines = table_path(tmp_path / "out", table).read_text().splitlines()
        assert len(lines) == rows + 1
        header = lines[0].split("|")
        assert header[-3:] == ["COUNT", "NOISE_DISTRIBUTION", "VARIANCE"]
        assert ("ITERATION_CODE" in header) == (table not in ("PH2", "PH6"))
    assert written["PH2"] == (1 + len(config.state_filter)) * 8


def test_toy_exact_counts_follow_census_semantics(toy_inputs) -> None:
    # Unit 100000002 has two geographies (dropped); GQ persons and vacant units are out of
    # universe; unit 100000001 (state 44, married couple, owned free and clear) has 3 persons.
    config = _config({"PH7": TOTAL_LEVELS, "PH1_denom": TOTAL_LEVELS}, {"PH7": 2}, states=("44",))
    release = run_phsafe(config, *toy_inputs)
    ph7 = release.tables["PH7"]
    assert ph7.loc[ph7["PH7_DATA_CELL"] == 3, "COUNT"].tolist() == [2, 2]  # τ = 2 of 3
    assert ph7["COUNT"].sum() == 4
    assert release.tables["PH1_denom"]["COUNT"].tolist() == [1, 1]


def test_a_housing_unit_on_a_group_quarters_geography_is_not_a_household() -> None:
    # Without validation, PHSafe follows the Census's geography semantics: geo rows with RTYPE
    # 4 or 5 are removed before the join, so unit 1 (RTYPE 2 in units.csv, RTYPE 4 in
    # geo.csv) and its persons are in no table; unit 2 is an ordinary household.
    persons = pd.DataFrame([_person(m, 40, 20) for m in (1, 2)] + [_person(1, 10, 25)])
    units = pd.DataFrame([_unit(1, FINAL_POP=2), _unit(2, FINAL_POP=1)])
    budgets = {"PH1_denom": TOTAL_LEVELS, "PH1_num": TOTAL_LEVELS}
    config = _config(budgets, {"PH1_num": 10}, states=("44",))
    for gq_rtype in (4, 5):
        geo = pd.concat([_geo([1], rtype=gq_rtype), _geo([2])], ignore_index=True)
        release = run_phsafe(config, persons, units, geo)
        assert release.tables["PH1_denom"]["COUNT"].tolist() == [1, 1]  # USA, state 44
        ph1_num = release.tables["PH1_num"].set_index(["REGION_ID", "PH1_NUM_DATA_CELL"])
        assert ph1_num.loc[("1", 3), "COUNT"] == 1  # adults: unit 2's one, not unit 1's
        assert ph1_num.loc[("1", 2), "COUNT"] == 0  # the child lives in unit 1
    # With a housing-unit geography, unit 1 counts.
    release = run_phsafe(config, persons, units, _geo([1, 2]))
    assert release.tables["PH1_denom"]["COUNT"].tolist() == [2, 2]
    ph1_num = release.tables["PH1_num"].set_index(["REGION_ID", "PH1_NUM_DATA_CELL"])
    assert ph1_num.loc[("1", 3), "COUNT"] == 2 and ph1_num.loc[("1", 2), "COUNT"] == 1


def test_write_release_is_atomic_and_refuses_existing(tmp_path: Path) -> None:
    persons, units, geo = _random_inputs(6)
    release = run_phsafe(_config({"PH1_denom": TOTAL_LEVELS}, {}), persons, units, geo)
    out = tmp_path / "release"
    write_release(release, out)
    assert (out / "PH1_denom" / "PH1_denom.txt").is_file()
    with pytest.raises(FileExistsError):
        write_release(release, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]


def test_accountant_records_every_query_and_refuses_overspend() -> None:
    from das.privacy.accounting import BudgetExceededError, PrivacyAccountant

    persons, units, geo = _random_inputs(7)
    config = _config({"PH7": {"usa_*": "0.5", "state_*": "0.5"}}, {"PH7": 4})
    ledger = PrivacyAccountant("zcdp", 1)
    release = run_phsafe(config, persons, units, geo, seeded_rng(1), accountant=ledger)
    assert len(ledger) == 2 and not ledger.pending
    assert [m.name for m in release.measurements] == [e.measurement.name for e in ledger.entries]
    with pytest.raises(BudgetExceededError):
        run_phsafe(
            config,
            persons,
            units,
            geo,
            seeded_rng(1),
            accountant=PrivacyAccountant("zcdp", Fraction(3, 4)),
        )


@given(
    codes=st.lists(st.integers(0, 120), min_size=1, max_size=12, unique=True),
    values=st.lists(st.integers(-5, 200), max_size=60),
)
def test_code_index_matches_a_dictionary_lookup(codes: list[int], values: list[int]) -> None:
    from das.phsafe.measure import code_index

    position = {code: i for i, code in enumerate(codes)}
    expected = [position.get(value, -1) for value in values]
    got = code_index(np.array(values, dtype=np.int16), np.array(codes))
    assert got.tolist() == expected
