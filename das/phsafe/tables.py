"""The PHSafe table shells PH1–PH8 as data: cells, codes, universes and cell rules (paper §2.4).

One home for every table: each :class:`TableShell` lists its cells in shell order (``code`` is
the ``<T>_DATA_CELL`` value, 1 = the table total) and marks the *basis* cells, the disjoint
cells that PHSafe measures; aggregate cells are derived later. A record maps to exactly one
basis cell or to none (code 0: out of universe, e.g. an inconsistent code), vectorized through
lookup arrays indexed by CEF code.

CEF codes used (see :mod:`das.synth.households`): RELSHIP 20 householder, 21/23 spouse,
22/24 unmarried partner, 25–27 biological/adopted/step child, 28 sibling, 29 parent,
30 grandchild, 31 parent-in-law, 32 child-in-law, 33 other relative, 34 roommate, 35 foster
child, 36 other nonrelative; HHT 1 married couple, 2/3 other family (male/female householder),
4–7 nonfamily; HHT2 01–02 married couple, 03–04 cohabiting couple, 05–08 female householder
(05 alone), 09–12 male householder (09 alone); CPLT 1/2 opposite-/same-sex married, 3/4
opposite-/same-sex unmarried partners, 5 other; TEN 1 owned with a mortgage or loan, 2 owned
free and clear, 3 rented, 4 occupied without payment of rent (a renter-occupied unit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from das.specs.config import PHSAFE_JOINED_TABLES, PHSAFE_TOTAL_ONLY_TABLES


@dataclass(frozen=True)
class Cell:
    code: int
    label: str
    basis: bool


@dataclass(frozen=True)
class TableShell:
    """A table: its cells, universe, and which record carries its race/ethnicity iteration."""

    name: str
    universe: str
    cells: tuple[Cell, ...]
    iterates_on: Literal["householder", "person"]

    @property
    def joined(self) -> bool:
        """Built by joining persons to their unit (Δ = 2τ + 2); else unit-only (Δ = 2)."""
        return self.name in PHSAFE_JOINED_TABLES

    @property
    def total_only(self) -> bool:
        """Tabulated on the ``*`` iteration only (no ITERATION_CODE column in the output)."""
        return self.name in PHSAFE_TOTAL_ONLY_TABLES

    @property
    def basis_codes(self) -> np.ndarray:
        return np.array([cell.code for cell in self.cells if cell.basis], dtype=np.int16)

    @property
    def cell_column(self) -> str:
        return f"{self.name.upper()}_DATA_CELL"


def _shell(spec: list[tuple[str, bool]]) -> tuple[Cell, ...]:
    return tuple(Cell(code, label, basis) for code, (label, basis) in enumerate(spec, start=1))


_AGE_SPLIT = [("Total", False), ("Under 18 years", True), ("18 years and over", True)]
_AGE4 = ["Under 4 years", "4 and 5 years", "6 to 11 years", "12 to 17 years"]
_FAMILY_TYPES = [
    "In married couple family",
    "In cohabiting couple family",
    "In male householder, no spouse or partner present family",
    "In female householder, no spouse or partner present family",
]

SHELLS: dict[str, TableShell] = {
    "PH1_num": TableShell("PH1_num", "Population in households", _shell(_AGE_SPLIT), "householder"),
    "PH1_denom": TableShell(
        "PH1_denom", "Households", _shell([("Total households", True)]), "householder"
    ),
    "PH2": TableShell(
        "PH2",
        "Population in households",
        _shell(
            [
                ("Total", False),
                ("In married couple household", False),
                ("Opposite-sex married couple", True),
                ("Same-sex married couple", True),
                ("In cohabiting couple family", False),
                ("Opposite-sex cohabiting couple", True),
                ("Same-sex cohabiting couple", True),
                ("Male householder, no spouse or partner present", False),
                ("Male householder, living alone", True),
                ("Male householder, living with others", True),
                ("Female householder, no spouse or partner present", False),
                ("Female householder, living alone", True),
                ("Female householder, living with others", True),
            ]
        ),
        "householder",
    ),
    "PH3": TableShell(
        "PH3",
        "Population in households under 18 years",
        _shell(
            [
                ("Total", False),
                ("Householder, spouse, unmarried partner, or nonrelative", True),
                ("Own child", False),
                *((label, True) for label in _FAMILY_TYPES),
                ("Other relatives", False),
                ("Grandchild", True),
                ("Other relatives", True),
            ]
        ),
        "person",
    ),
    "PH4": TableShell("PH4", "Population in families", _shell(_AGE_SPLIT), "householder"),
    "PH5_num": TableShell("PH5_num", "Population in families", _shell(_AGE_SPLIT), "householder"),
    "PH5_denom": TableShell(
        "PH5_denom", "Families", _shell([("Total families", True)]), "householder"
    ),
    "PH6": TableShell(
        "PH6",
        "Own children under 18 years",
        _shell(
            [
                ("Total", False),
                *(
                    item
                    for family in _FAMILY_TYPES
                    for item in [(family, False), *((age, True) for age in _AGE4)]
                ),
            ]
        ),
        "householder",
    ),
    "PH7": TableShell(
        "PH7",
        "Population in occupied housing units",
        _shell(
            [
                ("Total", False),
                ("Owned with a mortgage or a loan", True),
                ("Owned free and clear", True),
                ("Renter occupied", True),
            ]
        ),
        "householder",
    ),
    "PH8_num": TableShell(
        "PH8_num",
        "Population in occupied housing units",
        _shell([("Total", False), ("Owner occupied", True), ("Renter occupied", True)]),
        "householder",
    ),
    "PH8_denom": TableShell(
        "PH8_denom",
        "Occupied housing units",
        _shell([("Total", False), ("Owner occupied", True), ("Renter occupied", True)]),
        "householder",
    ),
}

# ---------------------------------------------------------------------------- code groups
SPOUSE_PARTNER_NONRELATIVE = (20, 21, 22, 23, 24, 34, 35, 36)  # PH3 cell 2 (with householder)
OWN_CHILD = (25, 26, 27)
GRANDCHILD = (30,)
OTHER_RELATIVE = (28, 29, 31, 32, 33)
FAMILY_MEMBER = (20, 21, 23, *OWN_CHILD, *OTHER_RELATIVE, *GRANDCHILD)
FAMILY_HHT = (1, 2, 3)


def _table(mapping: Mapping[int, int]) -> np.ndarray:
    lookup = np.zeros(256, dtype=np.int16)
    for code, value in mapping.items():
        lookup[code] = value
    return lookup


def _lookup(table: np.ndarray, values: pd.Series) -> np.ndarray:
    return table[np.clip(values.to_numpy().astype(np.int64), 0, 255)]


def _isin(values: pd.Series, codes: tuple[int, ...]) -> np.ndarray:
    return np.isin(values.to_numpy(), codes)


# HHT2 -> family type 1..4 (married, cohabiting, male no spouse/partner, female), 0 = none.
_FAMILY_TYPE = _table(
    {1: 1, 2: 1, 3: 2, 4: 2, **dict.fromkeys(range(9, 13), 3), **dict.fromkeys(range(5, 9), 4)}
)
# PH2: couples by CPLT; CPLT 5 (no spouse/partner) by HHT2 (alone vs with others, by sex).
_PH2_CPLT = _table({1: 3, 2: 4, 3: 6, 4: 7})
_PH2_HHT2 = _table({9: 9, 10: 10, 11: 10, 12: 10, 5: 12, 6: 13, 7: 13, 8: 13})
_PH3_RELSHIP = _table(
    {
        **dict.fromkeys(SPOUSE_PARTNER_NONRELATIVE, 2),
        **dict.fromkeys(GRANDCHILD, 9),
        **dict.fromkeys(OTHER_RELATIVE, 10),
    }
)
_TENURE_PH7 = _table({1: 2, 2: 3, 3: 4, 4: 4})
_TENURE_PH8 = _table({1: 2, 2: 2, 3: 3, 4: 3})


def _age_split(frame: pd.DataFrame) -> np.ndarray:
    return np.where(frame["QAGE"].to_numpy() < 18, 2, 3).astype(np.int16)


def _ph2(frame: pd.DataFrame) -> np.ndarray:
    couple = _lookup(_PH2_CPLT, frame["CPLT"])
    alone_or_not = _lookup(_PH2_HHT2, frame["HHT2"])
    return np.where(couple > 0, couple, np.where(frame["CPLT"].to_numpy() == 5, alone_or_not, 0))


def _ph3(frame: pd.DataFrame) -> np.ndarray:
    family = _lookup(_FAMILY_TYPE, frame["HHT2"])
    own_child = np.where(family > 0, 3 + family, 0)
    by_relationship = _lookup(_PH3_RELSHIP, frame["RELSHIP"])
    return np.where(_isin(frame["RELSHIP"], OWN_CHILD), own_child, by_relationship)


# PH6 age bins: [0,4) [4,6) [6,12) [12,18).
_PH6_AGE_EDGES = np.array([4, 6, 12])


def _ph6(frame: pd.DataFrame) -> np.ndarray:
    family = _lookup(_FAMILY_TYPE, frame["HHT2"]).astype(np.int64)
    age_bin = np.searchsorted(_PH6_AGE_EDGES, frame["QAGE"].to_numpy(), side="right")
    return np.where(family > 0, 3 + 5 * (family - 1) + age_bin, 0)


def _ones(frame: pd.DataFrame) -> np.ndarray:
    return np.ones(len(frame), dtype=np.int16)


# Person-side universe filters (applied before truncation) and unit-side ones.
PERSON_FILTERS: dict[str, Callable[[pd.DataFrame], np.ndarray]] = {
    "PH3": lambda p: p["QAGE"].to_numpy() < 18,
    "PH4": lambda p: _isin(p["RELSHIP"], FAMILY_MEMBER),
    "PH6": lambda p: (p["QAGE"].to_numpy() < 18) & _isin(p["RELSHIP"], OWN_CHILD),
}
UNIT_FILTERS: dict[str, Callable[[pd.DataFrame], np.ndarray]] = {
    "PH4": lambda u: _isin(u["HHT"], FAMILY_HHT),
    "PH5_denom": lambda u: _isin(u["HHT"], FAMILY_HHT),
}
CELL_RULES: dict[str, Callable[[pd.DataFrame], np.ndarray]] = {
    "PH1_num": _age_split,
    "PH1_denom": _ones,
    "PH2": _ph2,
    "PH3": _ph3,
    "PH4": _age_split,
    "PH5_denom": _ones,
    "PH6": _ph6,
    "PH7": lambda f: _lookup(_TENURE_PH7, f["TEN"]),
    "PH8_denom": lambda f: _lookup(_TENURE_PH8, f["TEN"]),
}


def person_filter(table: str, persons: pd.DataFrame) -> np.ndarray:
    """Mask of persons in the table's person universe (all True when the table has none)."""
    rule = PERSON_FILTERS.get(table)
    return np.ones(len(persons), dtype=bool) if rule is None else np.asarray(rule(persons))


def unit_filter(table: str, units: pd.DataFrame) -> np.ndarray:
    """Mask of occupied units in the table's unit universe."""
    rule = UNIT_FILTERS.get(table)
    return np.ones(len(units), dtype=bool) if rule is None else np.asarray(rule(units))


def cell_codes(table: str, records: pd.DataFrame) -> np.ndarray:
    """Basis cell code of each record (joined person×unit rows or unit rows); 0 = no cell.

    Records outside the table's person or unit universe also get 0, so the rule stands alone.
    """
    codes = np.asarray(CELL_RULES[table](records), dtype=np.int16)
    in_universe = unit_filter(table, records)
    if SHELLS[table].joined:
        in_universe &= person_filter(table, records)
    basis = SHELLS[table].basis_codes
    return np.where(in_universe & np.isin(codes, basis), codes, 0).astype(np.int16)
