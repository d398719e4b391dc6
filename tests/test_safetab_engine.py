"""SafeTab-P engine on the Census toy inputs, against a plain-Python reference implementation."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from das.io.safetab_p import read_grf_c, read_person_records
from das.privacy.accounting import compose
from das.privacy.rng import seeded_rng
from das.safetab_p.engine import run_safetab_p, write_release
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import load_safetab_p_config
from das.specs.race_specs import load_race_specs

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "safetab_p" / "toy"
AGE = {
    1: [18, 45, 65],
    2: [5, 18, 25, 35, 45, 55, 65, 75],
    3: [5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85],
}
STATE_OR_ABOVE = {"USA", "STATE", "PR-STATE"}
SPEC_FILES = (
    "race-and-ethnicity-codes.txt",
    "race-characteristic-iterations.txt",
    "ethnicity-characteristic-iterations.txt",
    "race-and-ethnicity-code-to-iteration.txt",
)

pytestmark = pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return [row for row in csv.DictReader(handle, delimiter="|") if any(row.values())]


# ------------------------------------------------------------------ independent reference
class Reference:
    """Exact SafeTab-P counts by brute force over the toy records (plain Python sets)."""

    def __init__(self, specs_dir: Path, states: list[str]) -> None:
        self.race = _rows(specs_dir / "race-characteristic-iterations.txt")
        self.eth = _rows(specs_dir / "ethnicity-characteristic-iterations.txt")
        self.pairs: dict[str, set[str]] = {}
        for row in _rows(specs_dir / "race-and-ethnicity-code-to-iteration.txt"):
            self.pairs.setdefault(row["RACE_ETH_CODE"], set()).add(row["ITERATION_CODE"])
        blocks = [b for b in _rows(TOY / "GRF-C.txt") if b["TABBLKST"] in states]
        self.blocks = {self._block(b): b for b in blocks}
        self.persons = [
            p for p in _rows(TOY / "person-records.txt") if self._block(p) in self.blocks
        ]

    @staticmethod
    def _block(row: dict[str, str]) -> str:
        return row["TABBLKST"] + row["TABBLKCOU"] + row["TABTRACTCE"] + row["TABBLK"]

    def eligible(self, level: int, geography: str) -> dict[str, bool]:
        """Iteration code → total-only flag, for (level, geography)."""
        state_or_above = geography in STATE_OR_ABOVE
        result = {}
        for row in self.race + self.eth:
            if row["LEVEL"] != str(level):
                continue
            if state_or_above and row["COARSE_ONLY"] == "True":
                continue
            if not state_or_above and row["DETAILED_ONLY"] == "True":
                continue
            result[row["ITERATION_CODE"]] = state_or_above and row["DETAILED_ONLY"] == "True"
        return result

    def iterations(self, person: dict[str, str], level: int, geography: str) -> set[str]:
        eligible = self.eligible(level, geography)
        codes = [person[f"QRACE{k}"] for k in range(1, 9) if person[f"QRACE{k}"] != "Null"]
        alone_rows = {r["ITERATION_CODE"] for r in self.race if r["ALONE"] == "True"}
        combo_rows = {r["ITERATION_CODE"] for r in self.race if r["ALONE"] == "False"}
        alone = set.intersection(*[self.pairs.get(c, set()) & alone_rows for c in codes])
        combined = set().union(*[self.pairs.get(c, set()) & combo_rows for c in codes])
        eth_rows = {r["ITERATION_CODE"] for r in self.eth}
        ethnicity = self.pairs.get(person["QSPAN"], set()) & eth_rows
        return (alone | combined | ethnicity) & set(eligible)

    @staticmethod
    def region(block: dict[str, str], geography: str) -> str | None:
        base = geography.removeprefix("PR-")
        st, cou, tract = block["TABBLKST"], block["TABBLKCOU"], block["TABTRACTCE"]
        if base == "USA":
            return "1"
        if base == "STATE":
            return st
        if base == "COUNTY":
            return st + cou
        if base == "TRACT":
            return st + cou + tract
        if base == "PLACE":
            return None if block["PLACEFP"] == "99999" else st + block["PLACEFP"]
        return None if block["AIANNHCE"] == "9999" else block["AIANNHCE"]

    def keys(self, geography: str, level: int) -> dict[tuple[str, str], bool]:
        """Every (REGION_ID, ITERATION_CODE) of the level → total-only flag."""
        regions = {self.region(b, geography) for b in self.blocks.values()} - {None}
        eligible = self.eligible(level, geography)
        return {(r, i): flag for r in regions for i, flag in eligible.items()}

    def people(self, geography: str, level: int) -> dict[tuple[str, str], list[dict[str, str]]]:
        groups: dict[tuple[str, str], list[dict[str, str]]] = {}
        for person in self.persons:
            region = self.region(self.blocks[self._block(person)], geography)
            if region is None:
                continue
            for iteration in self.iterations(person, level, geography):
                groups.setdefault((region, iteration), []).append(person)
        return groups


def _config(specs_dir: Path, **changes):
    config = load_safetab_p_config(specs_dir / "config.json")
    return config.model_copy(update=changes)


def _inputs(specs_dir: Path):
    return (
        load_race_specs(specs_dir),
        read_person_records(TOY / "person-records.txt"),
        read_grf_c(TOY / "GRF-C.txt"),
    )


def _infinite(config):
    return {level: (math.inf if budget > 0 else budget) for level, budget in config.budgets.items()}


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("thresholds", [None, (1, 3, 5)])
def test_infinite_budget_gives_exact_counts(thresholds) -> None:
    specs_dir = TOY / "input_dir_zcdp"
    base = load_safetab_p_config(specs_dir / "config.json")
    changes = {"budgets": _infinite(base), "run_pr": True}
    if thresholds is not None:
        changes["thresholds"] = {level: thresholds for level in base.thresholds}
    config = base.model_copy(update=changes)
    release = run_safetab_p(config, *_inputs(specs_dir), seeded_rng(3))
    t1 = {
        (r.REGION_TYPE, r.REGION_ID, r.ITERATION_CODE): r.COUNT
        for r in release.t1.itertuples(index=False)
    }
    t2 = release.t2
    checked_cells = 0
    for level in config.tabulated_levels():
        geography = level.geography.value
        states = ["72"] if geography.startswith("PR-") else list(config.state_filter_us)
        reference = Reference(specs_dir, states)
        people = reference.people(geography, level.iteration_level)
        for (region, iteration), total_only in reference.keys(
            geography, level.iteration_level
        ).items():
            members = people.get((region, iteration), [])
            key = (geography, region, iteration)
            if key not in t1:  # only zero sub-state totals may be suppressed
                assert not members and geography not in STATE_OR_ABOVE, key
                continue
            assert t1[key] == len(members), key
            workload = 0 if total_only else int(np.digitize(len(members), config.thresholds[level]))
            rows = t2[
                (geography == t2.REGION_TYPE)
                & (region == t2.REGION_ID)
                & (iteration == t2.ITERATION_CODE)
            ]
            if workload == 0:
                assert rows.empty, key
                continue
            edges = AGE[workload]
            starts = [0, *edges]
            assert len(rows) == 2 * (len(edges) + 1) + 2, key
            for sex in ("1", "2"):
                marginal = rows[(sex == rows.SEX) & (rows.AGESTART == "*")]
                expected = sum(p["QSEX"] == sex for p in members)
                assert marginal.COUNT.tolist() == [expected]
                for b, start in enumerate(starts):
                    cell = rows[(sex == rows.SEX) & (str(start) == rows.AGESTART)]
                    end = edges[b] - 1 if b < len(edges) else 115
                    assert cell.AGEEND.tolist() == [str(end)]
                    want = sum(
                        p["QSEX"] == sex and int(np.digitize(int(p["QAGE"]), edges)) == b
                        for p in members
                    )
                    assert cell.COUNT.tolist() == [want], (key, sex, start)
                    checked_cells += 1
    if thresholds is not None:
        assert checked_cells > 0  # the breakdown path was exercised


@pytest.mark.parametrize("definition", ["zcdp", "puredp"])
def test_toy_end_to_end_complete_key_set_and_ledger(definition: str, tmp_path: Path) -> None:
    specs_dir = TOY / f"input_dir_{definition}"
    config = _config(specs_dir, zero_suppression_chance=1e-12)  # T far below 0: keep all
    inputs = _inputs(specs_dir)
    release = run_safetab_p(config, *inputs, seeded_rng(11))
    present = set(
        zip(release.t1.REGION_TYPE, release.t1.REGION_ID, release.t1.ITERATION_CODE, strict=True)
    )
    expected = set()
    for level in config.tabulated_levels():
        reference = Reference(specs_dir, list(config.state_filter_us))
        geography = level.geography.value
        expected |= {(geography, *key) for key in reference.keys(geography, level.iteration_level)}
    assert present == expected
    assert len(release.t1) == len(expected)  # one row per group
    # The ledger holds exactly the plan of the pass; nothing overspent.
    plan = plan_safetab_p(
        config, stability(inputs[0], config.max_race_codes), detailed_only_levels(inputs[0])
    )
    ledger = release.accountants["US"]
    assert {m.name for m in ledger.measurements} == {m.name for m in plan}
    assert ledger.spent == compose(plan)
    assert not ledger.pending
    # Seeded runs reproduce; another seed differs.
    again = run_safetab_p(config, *inputs, seeded_rng(11))
    pd.testing.assert_frame_equal(release.t1, again.t1)
    other = run_safetab_p(config, *inputs, seeded_rng(12))
    assert not release.t1.COUNT.equals(other.t1.COUNT)
    rows = write_release(release, tmp_path / "out")
    t1_text = (tmp_path / "out" / "t1" / "t1.txt").read_text().splitlines()
    t2_text = (tmp_path / "out" / "t2" / "t2.txt").read_text().splitlines()
    assert t1_text[0] == "REGION_ID|REGION_TYPE|ITERATION_CODE|COUNT"
    assert t2_text[0] == "REGION_ID|REGION_TYPE|ITERATION_CODE|AGESTART|AGEEND|SEX|COUNT"
    assert rows == {"t1": len(t1_text) - 1, "t2": len(t2_text) - 1}
    with pytest.raises(FileExistsError):
        write_release(release, tmp_path / "out")


def test_toy_noise_is_added_and_coterminous_copies_agree() -> None:
    specs_dir = TOY / "input_dir_zcdp"
    config = _config(specs_dir, zero_suppression_chance=1e-12)
    release = run_safetab_p(config, *_inputs(specs_dir), seeded_rng(5))
    t1 = release.t1.set_index(["REGION_TYPE", "REGION_ID", "ITERATION_CODE"]).COUNT
    # D.C. (one block): STATE 11, COUNTY 11001, TRACT 11001000100 are coterminous; STATE donates.
    # (COARSE_ONLY iterations exist at the county only: the county is their own donor.)
    dc_county = t1.xs(("COUNTY", "11001"), level=[0, 1])
    dc_state = t1.xs(("STATE", "11"), level=[0, 1])
    dc_tract = t1.xs(("TRACT", "11001000100"), level=[0, 1])
    shared = dc_county.index.intersection(dc_state.index)
    assert len(shared) > 10
    assert dc_county[shared].equals(dc_state[shared])
    coarse_only = dc_county.index.difference(dc_state.index)
    assert len(coarse_only) > 0
    assert dc_tract[coarse_only].equals(dc_county[coarse_only])
    # AIANNH 0001 is exactly county 01001's blocks: the county (higher level) donates.
    aiannh = t1.xs(("AIANNH", "0001"), level=[0, 1])
    county = t1.xs(("COUNTY", "01001"), level=[0, 1]).reindex(aiannh.index)
    assert aiannh.equals(county)
    # Non-coterminous entities get independent noise: state 01 ≠ state 02 somewhere.
    reference = Reference(specs_dir, list(config.state_filter_us))
    exact = {k: len(v) for k, v in reference.people("STATE", 2).items()}
    noisy = t1.xs("STATE", level=0)
    differs = sum(noisy[key] != exact.get(key, 0) for key in noisy.index)
    assert differs > len(noisy) // 2


def test_records_outside_the_grfc_are_dropped_and_empty_input_runs() -> None:
    specs_dir = TOY / "input_dir_zcdp"
    config = _config(specs_dir)
    specs, persons, grfc = _inputs(specs_dir)
    stray = persons.iloc[:2].copy()
    stray["TABBLK"] = stray["TABBLK"] + 7000  # blocks absent from the GRF-C
    with_stray = pd.concat([persons, stray], ignore_index=True)
    base = run_safetab_p(config, specs, persons, grfc, seeded_rng(4))
    other = run_safetab_p(config, specs, with_stray, grfc, seeded_rng(4))
    pd.testing.assert_frame_equal(base.t1, other.t1)
    empty = run_safetab_p(config, specs, persons.iloc[:0], grfc, seeded_rng(4))
    assert len(empty.t1) > 0  # every state-level group is still published (noise only)
    assert empty.accountants["US"].spent == base.accountants["US"].spent


def test_the_engines_refuse_a_person_with_more_race_codes_than_delta_assumes(
    tmp_path: Path,
) -> None:
    """Δ = h_r·max(2, max_race_codes) + h_e covers a person with at most max_race_codes codes;
    both engines check every record read, whatever validation did, before any draw."""
    from das.safetab_p.spill import WorkFolder, prepare_geography, spill_persons
    from das.safetab_p.stability import RaceCodeBoundError

    specs_dir = TOY / "input_dir_zcdp"
    specs, persons, grfc = _inputs(specs_dir)
    codes = (persons[[f"QRACE{k}" for k in range(1, 9)]] > 0).sum(axis=1)
    bound = int(codes.max()) - 1
    config = _config(specs_dir, max_race_codes=bound)
    with pytest.raises(RaceCodeBoundError, match=f"more than max_race_codes = {bound} "):
        run_safetab_p(config, specs, persons, grfc, seeded_rng(4))
    work = WorkFolder(tmp_path / "work")
    prepare_geography(config, grfc, work)
    with pytest.raises(RaceCodeBoundError):
        spill_persons(config, specs, TOY / "person-records.txt", work)
    within = _config(specs_dir, max_race_codes=bound + 1)
    spill_persons(within, specs, TOY / "person-records.txt", work)  # at the bound: measured


def test_zero_suppression_chance_zero_publishes_every_row(tmp_path: Path) -> None:
    # The Census accepts 0 <= p < 1, and p = 0 means no suppression: a config file with 0
    # loads, and the release holds every group of the key set, true zeros included.
    specs_dir = TOY / "input_dir_zcdp"
    data = json.loads((specs_dir / "config.json").read_text())
    data["zero_suppression_chance"] = 0
    for name in SPEC_FILES:
        shutil.copy(specs_dir / name, tmp_path / name)
    (tmp_path / "config.json").write_text(json.dumps(data))
    config = load_safetab_p_config(tmp_path / "config.json")
    assert config.zero_suppression_chance == 0
    inputs = _inputs(tmp_path)
    release = run_safetab_p(config, *inputs, seeded_rng(3))
    expected = set()
    for level in config.tabulated_levels():
        reference = Reference(specs_dir, list(config.state_filter_us))
        geography = level.geography.value
        expected |= {(geography, *key) for key in reference.keys(geography, level.iteration_level)}
    present = set(
        zip(release.t1.REGION_TYPE, release.t1.REGION_ID, release.t1.ITERATION_CODE, strict=True)
    )
    assert present == expected
    # The same draws with suppression on hide sub-state rows (the toy has many true zeros).
    suppressed = run_safetab_p(
        config.model_copy(update={"zero_suppression_chance": 0.9999}), *inputs, seeded_rng(3)
    )
    assert len(suppressed.t1) < len(release.t1)
    # Without the key (as the Census allows) there is no suppression either.
    del data["zero_suppression_chance"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert load_safetab_p_config(tmp_path / "config.json").zero_suppression_chance == 0
