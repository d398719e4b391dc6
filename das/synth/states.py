"""Public facts about the 52 state-equivalents that shape a synthetic population.

Numbers are rounded 2020 Census figures (population, county-equivalents, Census region and
division, percent Hispanic and percent Black / Asian / AIAN alone) plus two synthetic knobs for
AIANNH areas: how many areas a state holds (relative weight) and what share of its blocks they
cover. They set realistic proportions only; nothing here is confidential or exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StateFacts:
    """One state or state-equivalent (DC, Puerto Rico)."""

    fips: str
    abbreviation: str
    population_thousands: int
    counties: int
    region: int  # REGIONCE: 1 Northeast, 2 Midwest, 3 South, 4 West, 9 Puerto Rico
    division: int  # DIVISIONCE: 1..9, 0 for Puerto Rico
    hispanic_pct: float
    black_pct: float
    asian_pct: float
    aian_pct: float
    aiannh_areas: int  # relative number of AIANNH areas with their main part in the state
    aiannh_cover: float  # share of the state's blocks inside some AIANNH area


# fmt: off
_ROWS = [
    # fips abbr  pop(k) counties reg div  hisp  black asian aian  aiannh cover
    ("01", "AL",  5024,  67, 3, 6,  5.3, 25.8,  1.5,  0.7,   2, 0.005),
    ("02", "AK",   733,  30, 4, 9,  7.3,  2.9,  6.5, 14.8, 230, 0.25),
    ("04", "AZ",  7152,  15, 4, 8, 30.7,  4.5,  3.5,  4.5,  25, 0.20),
    ("05", "AR",  3012,  75, 3, 7,  8.5, 15.1,  1.6,  0.9,   0, 0.0),
    ("06", "CA", 39538,  58, 4, 9, 39.4,  5.7, 15.5,  1.6, 110, 0.02),
    ("08", "CO",  5774,  64, 4, 8, 21.9,  4.1,  3.5,  1.3,   2, 0.01),
    ("09", "CT",  3606,   8, 1, 1, 17.3, 10.8,  4.8,  0.4,   5, 0.005),
    ("10", "DE",   990,   3, 3, 5, 10.0, 22.1,  4.2,  0.5,   1, 0.005),
    ("11", "DC",   690,   1, 3, 5, 11.3, 44.2,  4.8,  0.5,   0, 0.0),
    ("12", "FL", 21538,  67, 3, 5, 26.5, 14.5,  2.9,  0.4,   4, 0.005),
    ("13", "GA", 10712, 159, 3, 5, 10.5, 31.0,  4.5,  0.5,   1, 0.002),
    ("15", "HI",  1455,   5, 4, 9, 11.1,  1.6, 37.2,  0.3,  75, 0.03),
    ("16", "ID",  1839,  44, 4, 8, 13.0,  0.7,  1.4,  1.4,   6, 0.05),
    ("17", "IL", 12813, 102, 2, 3, 18.2, 13.9,  6.0,  0.5,   0, 0.0),
    ("18", "IN",  6786,  92, 2, 3,  8.2,  9.4,  2.6,  0.3,   0, 0.0),
    ("19", "IA",  3190,  99, 2, 4,  6.8,  4.1,  2.6,  0.4,   1, 0.005),
    ("20", "KS",  2938, 105, 2, 4, 13.0,  5.7,  3.0,  1.0,   5, 0.01),
    ("21", "KY",  4506, 120, 3, 6,  4.6,  8.0,  1.6,  0.2,   0, 0.0),
    ("22", "LA",  4658,  64, 3, 7,  6.9, 31.4,  1.8,  0.7,   5, 0.005),
    ("23", "ME",  1362,  16, 1, 1,  1.9,  1.9,  1.2,  0.6,   5, 0.01),
    ("24", "MD",  6177,  24, 3, 5, 11.8, 29.5,  6.8,  0.5,   0, 0.0),
    ("25", "MA",  7030,  14, 1, 1, 12.6,  6.9,  7.2,  0.3,   2, 0.002),
    ("26", "MI", 10077,  83, 2, 3,  5.6, 13.7,  3.4,  0.6,  15, 0.02),
    ("27", "MN",  5706,  87, 2, 4,  6.1,  6.9,  5.2,  1.1,  15, 0.04),
    ("28", "MS",  2961,  82, 3, 6,  3.6, 36.6,  1.1,  0.5,   1, 0.005),
    ("29", "MO",  6154, 115, 2, 4,  4.7, 11.3,  2.1,  0.5,   0, 0.0),
    ("30", "MT",  1084,  56, 4, 8,  4.5,  0.5,  0.8,  6.2,   8, 0.15),
    ("31", "NE",  1962,  93, 2, 4, 12.0,  4.7,  2.7,  1.0,   5, 0.02),
    ("32", "NV",  3105,  17, 4, 8, 28.7,  9.4,  8.7,  1.3,  30, 0.03),
    ("33", "NH",  1378,  10, 1, 1,  4.3,  1.5,  2.6,  0.2,   0, 0.0),
    ("34", "NJ",  9289,  21, 1, 2, 21.6, 12.4, 10.3,  0.6,   2, 0.005),
    ("35", "NM",  2118,  33, 4, 8, 47.7,  2.1,  1.8, 10.0,  25, 0.12),
    ("36", "NY", 20201,  62, 1, 2, 19.5, 14.8,  9.6,  0.7,  10, 0.01),
    ("37", "NC", 10439, 100, 3, 5, 10.7, 20.5,  3.3,  1.2,   8, 0.03),
    ("38", "ND",   779,  53, 2, 4,  4.3,  3.4,  1.7,  5.0,   6, 0.10),
    ("39", "OH", 11799,  88, 2, 3,  4.4, 12.5,  2.5,  0.2,   0, 0.0),
    ("40", "OK",  3959,  77, 3, 7, 11.9,  7.3,  2.3,  8.8,  30, 0.50),
    ("41", "OR",  4237,  36, 4, 9, 13.9,  2.0,  4.8,  1.5,  10, 0.02),
    ("42", "PA", 13003,  67, 1, 2,  8.1, 10.9,  3.9,  0.2,   0, 0.0),
    ("44", "RI",  1097,   5, 1, 1, 16.6,  5.7,  3.6,  0.7,   1, 0.005),
    ("45", "SC",  5118,  46, 3, 5,  6.9, 25.0,  1.8,  0.4,   3, 0.01),
    ("46", "SD",   887,  66, 2, 4,  4.5,  2.0,  1.5,  8.8,  10, 0.15),
    ("47", "TN",  6911,  95, 3, 6,  6.9, 15.8,  2.0,  0.3,   0, 0.0),
    ("48", "TX", 29146, 254, 3, 7, 39.3, 12.1,  5.4,  1.0,   3, 0.002),
    ("49", "UT",  3272,  29, 4, 8, 15.1,  1.2,  2.5,  1.1,   8, 0.05),
    ("50", "VT",   643,  14, 1, 1,  2.4,  1.4,  1.8,  0.4,   0, 0.0),
    ("51", "VA",  8631, 133, 3, 5, 10.5, 18.6,  7.1,  0.5,   8, 0.01),
    ("53", "WA",  7705,  39, 4, 9, 13.7,  4.0,  9.4,  1.6,  30, 0.05),
    ("54", "WV",  1794,  55, 3, 5,  1.9,  3.6,  0.8,  0.2,   0, 0.0),
    ("55", "WI",  5894,  72, 2, 3,  7.6,  6.4,  3.0,  0.9,  12, 0.03),
    ("56", "WY",   577,  23, 4, 8, 10.2,  0.9,  0.9,  2.4,   1, 0.05),
    ("72", "PR",  3286,  78, 9, 0, 98.9,  7.0,  0.1,  0.5,   0, 0.0),
]
# fmt: on

STATES: dict[str, StateFacts] = {row[0]: StateFacts(*row) for row in _ROWS}
ALL_STATE_FIPS: tuple[str, ...] = tuple(STATES)
US_STATE_FIPS: tuple[str, ...] = tuple(fips for fips in STATES if fips != "72")

# The 2020 resident population of the 50 states, DC and Puerto Rico: scale 1 of the generator.
FULL_SCALE_PERSONS = 1000 * sum(state.population_thousands for state in STATES.values())
FULL_SCALE_TRACTS = 85_000  # 2020: about 84,400 tracts in the states and DC, 940 in Puerto Rico
FULL_SCALE_BLOCKS = 8_180_000
FULL_SCALE_PLACES = 32_000
FULL_SCALE_AIANNH = 600

# Neighbours used to let an AIANNH area reach into a second state (e.g. the Navajo Nation in
# AZ/NM/UT, Standing Rock in ND/SD, Duck Valley in ID/NV, Fort Mojave in AZ/CA/NV).
AIANNH_NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "04": ("35", "49", "06", "32"),
    "35": ("04", "08", "49"),
    "49": ("04", "35", "32", "08"),
    "38": ("46", "30"),
    "46": ("38", "31"),
    "16": ("32", "41"),
    "32": ("16", "41", "06", "49", "04"),
    "41": ("32", "16"),
    "06": ("04", "32"),
    "08": ("35", "49"),
    "30": ("38",),
    "31": ("46",),
    "40": ("20",),
    "20": ("40", "31"),
}


def apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Split ``total`` into integers proportional to ``weights`` (largest remainder; exact sum).

    Deterministic: ties go to the earlier index, so the split depends on the inputs alone.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if total < 0 or weights.size == 0 or weights.sum() <= 0:
        raise ValueError("apportion needs a non-negative total and positive weights")
    exact = weights / weights.sum() * total
    shares = np.floor(exact).astype(np.int64)
    missing = total - int(shares.sum())
    if missing:
        order = np.argsort(-(exact - shares), kind="stable")
        shares[order[:missing]] += 1
    return shares
