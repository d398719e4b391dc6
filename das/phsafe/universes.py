"""PHSafe record universes and race/ethnicity iterations (PHSafe paper §2.2–2.4, §3.1).

Codes are the 2020 Census Edited File codes that :mod:`das.io.phsafe` reads (two-digit codes
arrive as integers):

- persons ``RTYPE`` 3 = in a housing unit (5 = group quarters, out of every universe);
- units ``RTYPE`` 2 = housing unit, occupied when ``HHT`` is 1–7 (0 = vacant / NIU);
- geo ``RTYPE`` 4 or 5 = a group-quarters-only geography: the row is removed before units and
  persons are joined to their geography, whatever the units file says (the Census's runner
  does the same), so such a MAFID has no geography and is in no table;
- ``CENRACE``/``HHRACE`` 1–6 single major race, 7–63 two or more races;
- ``CENHISP``/``HHSPAN`` 1 not Hispanic or Latino, 2 Hispanic or Latino.

Iterations within a level are mutually exclusive, so a record maps to *at most one* iteration
per level, encoded as an index into :data:`ITERATIONS` (``-1`` = in no iteration of the level):
``*`` everyone; A–F CENRACE 01–06; G CENRACE 07–63; H Hispanic; I White alone, not Hispanic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from das.specs.config import PHSafeIterationLevel

PERSON_IN_HOUSING_UNIT = 3
UNIT_HOUSING = 2
GROUP_QUARTERS_GEOGRAPHY = (4, 5)
NOT_HISPANIC = 1
HISPANIC = 2
WHITE_ALONE = 1
TWO_OR_MORE_RACES = range(7, 64)

# Iteration codes of each level, in output order.
ITERATIONS: dict[PHSafeIterationLevel, tuple[str, ...]] = {
    PHSafeIterationLevel.TOTAL: ("*",),
    PHSafeIterationLevel.RACE: ("A", "B", "C", "D", "E", "F", "G"),
    PHSafeIterationLevel.ETHNICITY: ("H", "I"),
}

# CENRACE 0..63 -> A-G index: 1..6 -> 0..5 (A..F), 7..63 -> 6 (G), anything else -> -1.
_RACE_INDEX = np.full(256, -1, dtype=np.int8)
_RACE_INDEX[1:7] = np.arange(6)
_RACE_INDEX[7:64] = 6


def iteration_index(
    level: PHSafeIterationLevel, race: np.ndarray, hispanic: np.ndarray
) -> np.ndarray:
    """Index into ``ITERATIONS[level]`` of each record's iteration (-1: none), vectorized.

    ``race`` is a CENRACE-coded array, ``hispanic`` a CENHISP-coded array (same length).
    """
    race = np.asarray(race, dtype=np.int64)
    hispanic = np.asarray(hispanic, dtype=np.int64)
    if level is PHSafeIterationLevel.TOTAL:
        return np.zeros(len(race), dtype=np.int8)
    if level is PHSafeIterationLevel.RACE:
        return _RACE_INDEX[np.clip(race, 0, 255)]
    out = np.full(len(race), -1, dtype=np.int8)
    out[(race == WHITE_ALONE) & (hispanic == NOT_HISPANIC)] = 1  # I
    out[hispanic == HISPANIC] = 0  # H
    return out


def persons_in_housing_units(persons: pd.DataFrame) -> pd.DataFrame:
    """Persons of the PHSafe universe: in a housing unit (group-quarters persons dropped)."""
    return persons.loc[persons["RTYPE"].to_numpy() == PERSON_IN_HOUSING_UNIT]


def occupied_mask(units: pd.DataFrame) -> np.ndarray:
    """Which units are occupied housing units (RTYPE 2 with a household type)."""
    hht = units["HHT"].to_numpy()
    return (units["RTYPE"].to_numpy() == UNIT_HOUSING) & (hht >= 1) & (hht <= 7)


def occupied_units(units: pd.DataFrame) -> pd.DataFrame:
    """Occupied housing units (RTYPE 2 with a household type); vacant units and GQs dropped."""
    return units.loc[occupied_mask(units)]


def housing_unit_geography(geo: pd.DataFrame) -> pd.DataFrame:
    """Geo rows the join may use: group-quarters-only geographies (RTYPE 4, 5) removed first,
    so a unit the units file calls a housing unit is not tabulated on a GQ geography."""
    return geo.loc[~np.isin(geo["RTYPE"].to_numpy(), GROUP_QUARTERS_GEOGRAPHY)]
