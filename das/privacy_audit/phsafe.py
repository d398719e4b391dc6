"""Audit PHSafe: a synthetic population D, D′ = D + one person added to a household at τ.

The neighbour. PHSafe's sensitivity Δ = 2τ + 2 of the joined tables covers a person whose
arrival both displaces a truncated housemate and changes the household's own record (PHSafe
paper §5.1): every joined row of the household then moves. The audit adds to D one synthetic
household of τ persons (τ = the config's largest) — a female householder and her own children
under 18 — and tries a handful of additions (spouse, unmarried partner, child, grandchild,
parent, roommate). Each candidate D′ updates the household's unit record as the Census Edited
File defines it (:func:`household_codes`). The candidate kept is the one whose moves cost the
most, as the plan's own mechanisms compute the loss of the realised moves: with the 2020
configs a spouse, which turns a "female householder" family into a married couple, so that all
τ members move cell in PH2, PH3 and PH6.

What moves is found by the engine: per table ``tabulation_input`` (universe filters,
truncate-and-join) and per query ``measure_query`` with
:class:`~das.privacy_audit.neighbours.ExactAnswers`, on D and on D′. Trials redraw exactly the
moved cells. Rows: one per table (its queries' claims composed) and one for the pass.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das.io.phsafe import read_geo, read_persons, read_units
from das.phsafe.engine import prepare_records, queries_by_table, tabulation_input
from das.phsafe.measure import exact_counts, measure_query
from das.phsafe.plan import plan_phsafe
from das.phsafe.tables import SHELLS
from das.privacy.accounting import Measurement, compose
from das.privacy_audit.audit import (
    DEFAULT_CONFIDENCE,
    DEFAULT_DELTA,
    DEFAULT_PRODUCT_TRIALS,
    AuditReport,
    Composite,
    Family,
    audited,
)
from das.privacy_audit.neighbours import ExactAnswers, MovedQuery
from das.specs.config import (
    PHSafeConfig,
    PHSafeGeography,
    PHSafeIterationLevel,
    load_phsafe_config,
)
from das.synth.phsafe import generate_phsafe

DEFAULT_PERSONS = 3_000
POPULATION_SEED = 2020

HOUSEHOLDER, SPOUSE, PARTNER, OWN_CHILD = 20, 21, 22, 25
PARENT, GRANDCHILD, ROOMMATE = 29, 30, 34
SAME_SEX_SPOUSE, SAME_SEX_PARTNER = 23, 24
RELATIVES = range(25, 34)  # RELSHIP 25–33: children, siblings, parents, in-laws, other
OWN_CHILDREN = (25, 26, 27)
MALE, FEMALE = 1, 2


@dataclass(frozen=True)
class Member:
    relship: int
    age: int
    race: int = 1  # CENRACE 01 White alone
    hispanic: int = 1  # CENHISP 1 not Hispanic


def household_codes(members: Sequence[Member], householder_sex: int) -> dict[str, int]:
    """FINAL_POP, NPF, HHT, HHT2, CPLT of an occupied unit from its members (CEF definitions).

    A family is a married couple or a householder with a relative (RELSHIP 25–33); an unmarried
    partner alone does not make one. NPF counts the householder, a spouse and the relatives.
    The same rules :mod:`das.synth.households` generates units with.
    """
    relships = np.array([m.relship for m in members])
    ages = np.array([m.age for m in members])
    married = bool(np.isin(relships, (SPOUSE, SAME_SEX_SPOUSE)).any())
    cohabiting = not married and bool(np.isin(relships, (PARTNER, SAME_SEX_PARTNER)).any())
    same_sex = bool(np.isin(relships, (SAME_SEX_SPOUSE, SAME_SEX_PARTNER)).any())
    relatives = int(np.isin(relships, RELATIVES).sum())
    own_children = int((np.isin(relships, OWN_CHILDREN) & (ages < 18)).sum())
    spouses = int(np.isin(relships, (SPOUSE, SAME_SEX_SPOUSE)).sum())
    family = married or relatives > 0
    male = householder_sex == MALE
    if married:
        hht, hht2 = 1, (1 if own_children else 2)
    elif relatives:
        hht = 2 if male else 3
    elif len(members) == 1:
        hht = 4 if male else 6
    else:
        hht = 5 if male else 7
    if not married:
        if cohabiting:
            hht2 = 3 if own_children else 4
        elif len(members) == 1:
            hht2 = 9 if male else 5
        elif own_children:
            hht2 = 10 if male else 6
        elif relatives:
            hht2 = 11 if male else 7
        else:
            hht2 = 12 if male else 8
    if married or cohabiting:
        cplt = (2 if same_sex else 1) if married else (4 if same_sex else 3)
    else:
        cplt = 5
    return {
        "FINAL_POP": len(members),
        "NPF": 1 + spouses + relatives if family else 0,
        "HHT": hht,
        "HHT2": hht2,
        "CPLT": cplt,
    }


def target_household(size: int, householder_age: int = 40) -> list[Member]:
    """A female householder and ``size − 1`` own children aged 12–17 (one PH6 age bin)."""
    children = [Member(OWN_CHILD, 12 + index % 6) for index in range(size - 1)]
    return [Member(HOUSEHOLDER, householder_age), *children]


# Who may be added. Ages are then varied (householder and added person): truncation keeps the
# τ first members in a content-hash order, so ages decide whether the newcomer also displaces
# a child (one more move in PH1_num and PH4) or the householder (no extra move).
CANDIDATES: tuple[tuple[str, Member], ...] = (
    ("spouse", Member(SPOUSE, 41)),
    ("unmarried partner", Member(PARTNER, 41)),
    ("own child", Member(OWN_CHILD, 9)),
    ("grandchild", Member(GRANDCHILD, 3)),
    ("parent", Member(PARENT, 70)),
    ("roommate", Member(ROOMMATE, 30)),
)
HOUSEHOLDER_AGES = (34, 37, 40, 43, 46)
AGE_SHIFTS = (-1, 0, 1)


def synthetic_population(
    config_path: Path, persons: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """D: ``das synth phsafe`` output for this config, read back (engine form)."""
    with tempfile.TemporaryDirectory(prefix="das-audit-") as scratch:
        data = Path(scratch) / "data"
        generate_phsafe(data, persons, seed, config_path)
        return (
            read_persons(data / "persons.csv"),
            read_units(data / "units.csv"),
            read_geo(data / "geo.csv"),
        )


def _with_household(
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    members: Sequence[Member],
    mafid: int,
    geography: pd.Series,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """D (or D′) with the target household appended: its persons, unit and geo rows."""
    persons, units, geo = frames
    householder = members[0]
    new_persons = pd.DataFrame(
        {
            "RTYPE": 3,
            "MAFID": mafid,
            "QAGE": [m.age for m in members],
            "CENHISP": [m.hispanic for m in members],
            "CENRACE": [m.race for m in members],
            "RELSHIP": [m.relship for m in members],
        }
    )
    codes = household_codes(members, FEMALE)
    new_unit = pd.DataFrame(
        {
            "RTYPE": [2],
            "MAFID": [mafid],
            **{name: [value] for name, value in codes.items()},
            "HHSPAN": [householder.hispanic],
            "HHRACE": [householder.race],
            "TEN": [1],
        }
    )
    new_geo = geography.to_frame().T.assign(MAFID=mafid, RTYPE=2)
    return (
        pd.concat([persons, new_persons[persons.columns].astype(persons.dtypes.to_dict())],
                  ignore_index=True),
        pd.concat([units, new_unit[units.columns].astype(units.dtypes.to_dict())],
                  ignore_index=True),
        pd.concat([geo, new_geo[geo.columns].astype(geo.dtypes.to_dict())], ignore_index=True),
    )  # fmt: skip


def _answers(
    config: PHSafeConfig,
    plan: list[Measurement],
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
) -> dict[str, np.ndarray]:
    """Exact answers of every plan query through the release path (``measure_query`` with
    :class:`ExactAnswers`, which adds no noise)."""
    records = prepare_records(config, *frames)
    answers: dict[str, np.ndarray] = {}
    for table, measurements in queries_by_table(plan).items():
        tabulated = tabulation_input(table, config, records.persons, records.units)
        for measurement in measurements:
            frame = measure_query(measurement, tabulated, config.state_filter, ExactAnswers())
            answers[measurement.name] = frame["COUNT"].to_numpy().astype(np.int64)
    return answers


def _household_counts(
    config: PHSafeConfig,
    plan: list[Measurement],
    empty: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    members: list[Member],
    where: tuple[int, pd.Series],
) -> dict[str, np.ndarray]:
    """Exact answers of every query on the household alone (the engine's ``exact_counts``).

    The search for the worst addition runs on the household alone: adding a person to it
    changes no other household's rows, so the moves are the same as on D (the audit then
    measures them on D itself)."""
    records = prepare_records(config, *_with_household(empty, members, *where))
    counts = {}
    for table, measurements in queries_by_table(plan).items():
        tabulated = tabulation_input(table, config, records.persons, records.units)
        for m in measurements:
            counts[m.name] = exact_counts(
                SHELLS[table],
                PHSafeGeography(m.metadata["geography"]),
                PHSafeIterationLevel(m.metadata["iteration_level"]),
                tabulated,
                config.state_filter,
            ).ravel()
    return counts


def worst_case_addition(
    config: PHSafeConfig,
    plan: list[Measurement],
    empty: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    where: tuple[int, pd.Series],
) -> tuple[list[Member], str, Member]:
    """(household, relationship, person): the candidate whose moves cost the most.

    First the relationship (at the default ages), then the ages of householder and newcomer.
    """
    tau = max(config.tau.values(), default=1)
    households = {age: target_household(tau, age) for age in HOUSEHOLDER_AGES}
    before = {
        age: _household_counts(config, plan, empty, members, where)
        for age, members in households.items()
    }

    def loss(age: int, added: Member) -> float:
        after = _household_counts(config, plan, empty, [*households[age], added], where)
        return sum(move.realised_loss for move in _moves(plan, before[age], after).values())

    default_age = HOUSEHOLDER_AGES[len(HOUSEHOLDER_AGES) // 2]
    _, label, member = max(
        ((loss(default_age, member), label, member) for label, member in CANDIDATES),
        key=lambda item: item[0],
    )
    scored = [
        (loss(age, added), age, added)
        for age in HOUSEHOLDER_AGES
        for added in (Member(member.relship, member.age + shift) for shift in AGE_SHIFTS)
    ]
    _, age, added = max(scored, key=lambda item: item[0])
    return households[age], label, added


def _moves(
    plan: list[Measurement], before: dict[str, np.ndarray], after: dict[str, np.ndarray]
) -> dict[str, MovedQuery]:
    """The queries whose answers differ, with their moved cells (D′ − D)."""
    moves = {}
    for measurement in plan:
        change = after[measurement.name] - before[measurement.name]
        if np.any(change):
            moves[measurement.name] = MovedQuery(
                measurement.name, measurement.mechanism, change[change != 0]
            )
    return moves


def audit_phsafe(
    config_path: str | Path,
    *,
    trials: int = DEFAULT_PRODUCT_TRIALS,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    rng: Any = None,
    persons: int = DEFAULT_PERSONS,
    population_seed: int = POPULATION_SEED,
    plan: list[Measurement] | None = None,
) -> AuditReport:
    """Claimed versus lower bound for every table and the pass of a PHSafe config.

    ``plan`` exists for the self-test's broken copy (a plan with a wrong sensitivity); a real
    audit leaves it None and audits the config's own plan.
    """
    config_path = Path(config_path)
    config = load_phsafe_config(config_path)
    plan = plan_phsafe(config) if plan is None else plan
    population = synthetic_population(config_path, persons, population_seed)
    _, _, geo = population
    in_pass = geo["TABBLKST"].to_numpy().astype(np.int64)
    states = np.array([int(code) for code in config.state_filter], dtype=np.int64)
    geography = geo.loc[np.isin(in_pass, states)].iloc[0]
    mafid = int(max(population[0]["MAFID"].max(), population[1]["MAFID"].max())) + 1
    where = (mafid, geography)
    empty = tuple(frame.iloc[:0] for frame in population)
    household, label, added = worst_case_addition(config, plan, empty, where)
    before = _answers(config, plan, _with_household(population, household, *where))
    after = _answers(config, plan, _with_household(population, [*household, added], *where))
    moves = _moves(plan, before, after)

    families = []
    for table, measurements in queries_by_table(plan).items():
        table_moves = tuple(moves[m.name] for m in measurements if m.name in moves)
        families.append(
            Family(table, config.privacy_defn.value, compose(measurements), table_moves,
                   measurements=len(measurements))
        )  # fmt: skip
    composite = Composite(
        f"{config.pass_name} pass", tuple(f.name for f in families), compose(plan)
    )
    tau = max(config.tau.values(), default=1)
    neighbour = {
        "pass": config.pass_name,
        "household": (
            f"MAFID {mafid}: a female householder ({household[0].age}) and {tau - 1} own "
            "children aged 12–17, "
            f"state {int(geography['TABBLKST']):02d}"
        ),
        "tau": dict(config.tau),
        "added": {"relationship": label, "RELSHIP": added.relship, "QAGE": added.age},
        "unit_before": household_codes(household, FEMALE),
        "unit_after": household_codes([*household, added], FEMALE),
        "candidates": [name for name, _ in CANDIDATES],
        "measurements_moved": len(moves),
        "cells_moved": sum(move.cells_moved for move in moves.values()),
        "moved": {name: [int(v) for v in move.delta] for name, move in moves.items()},
    }
    return audited(
        "phsafe",
        f"Privacy audit: PHSafe, {config_path}",
        families,
        [composite],
        trials=trials,
        confidence=confidence,
        delta=delta,
        rng=rng,
        neighbours=[neighbour],
        notes=(
            f"D: {persons} synthetic persons (das synth, seed {population_seed}) plus the "
            "household described above; D′ adds the person whose moves cost the most among the "
            "candidates (realised loss, computed by the plan's mechanisms).",
        ),
    )
