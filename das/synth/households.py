"""Synthetic housing units, group quarters and the persons in them, one state chunk at a time.

Shared by both products: SafeTab-P needs persons (age, sex, householder flag, block); PHSafe
also needs the units with their CEF codes. Everything is vectorized over households and
persons (``bincount`` for per-unit counts, ``repeat`` for per-person unit attributes).

CEF codes produced (2020 Census Edited File, as PHSafe reads them):

- RTYPE: unit 2 = housing unit, 4 = group quarters; person 3 = in a housing unit, 5 = in GQ.
- RELSHIP: 20 householder; 21/23 opposite-/same-sex spouse; 22/24 opposite-/same-sex
  unmarried partner; 25 biological, 26 adopted, 27 step child; 28 sibling; 29 parent;
  30 grandchild; 31 parent-in-law; 32 child-in-law; 33 other relative; 34 roommate;
  35 foster child; 36 other nonrelative; 37 institutional GQ; 38 noninstitutional GQ.
- HHT: 1 married couple; 2/3 other family, male/female householder; 4/6 male/female living
  alone; 5/7 male/female nonfamily not alone; 0 = not in universe (vacant, GQ).
- HHT2: 01/02 married couple with / without own children under 18; 03/04 cohabiting couple
  with / without; 05-08 female householder alone / with own children / with relatives / only
  nonrelatives; 09-12 the same for a male householder; 00 NIU.
- CPLT: 1 opposite-sex married, 2 same-sex married, 3 opposite-sex unmarried partners,
  4 same-sex unmarried partners, 5 all other households; 0 NIU.
- TEN: 1 owned with a mortgage or loan, 2 owned free and clear, 3 rented, 4 occupied without
  payment of rent; 0 NIU.
- NPF: persons in the family (householder + spouse + relatives), 0 for nonfamily households.
- FINAL_POP: persons in the unit (0 for a vacant unit).

Each occupied unit has exactly one householder, listed first among its persons. A family is a
married couple or a householder living with at least one relative (an unmarried partner alone
does not make a family, as in the CEF). A small share of households hold 11-20 persons, so the
PHSafe truncation threshold tau (at most 10 in the 2020 parameters) matters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Household size distribution (2020 shape) with a thin tail of 11-20 person households.
_SIZE_VALUES = np.arange(1, 21)
_SIZE_WEIGHTS = np.array(
    [
        *(0.280, 0.345, 0.152, 0.126, 0.058, 0.022, 0.0088, 0.0035, 0.0015, 0.0008),
        *(0.0004, 0.0003, 0.0002, 0.00015, 0.00012, 0.0001, 0.00008, 0.00006, 0.00005, 0.00004),
    ]
)
VACANT_PER_OCCUPIED = 0.107  # 9.7% of housing units were vacant in 2020
GQ_SHARE = 0.025  # share of persons living in group quarters (8.2 of 331 million)
GQ_SHARE_PR = 0.015

# Relationship to the householder of members other than the householder and partner.
_FAMILY_RELATIONSHIPS = np.array([25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36])
_FAMILY_WEIGHTS = np.array(
    [0.66, 0.02, 0.04, 0.03, 0.025, 0.07, 0.008, 0.015, 0.05, 0.03, 0.004, 0.048]
)
_NONFAMILY_RELATIONSHIPS = np.array([34, 36])
_NONFAMILY_WEIGHTS = np.array([0.55, 0.45])

# Group-quarters types: correctional, nursing (institutional, RELSHIP 37); college, other
# noninstitutional (RELSHIP 38).
_GQ_TYPE_WEIGHTS = np.array([0.25, 0.2, 0.3, 0.25])
_GQ_RELSHIP = np.array([37, 37, 38, 38])
_GQ_MALE_SHARE = np.array([0.9, 0.35, 0.45, 0.7])
MAX_AGE = 115

# Tenure by householder age (<35, 35-64, 65+): mortgage, free and clear, rented, no rent.
_TENURE_BY_AGE = np.array(
    [[0.25, 0.03, 0.70, 0.02], [0.50, 0.15, 0.33, 0.02], [0.25, 0.55, 0.19, 0.01]]
)

UNIT_OCCUPIED, UNIT_VACANT, UNIT_GQ = 0, 1, 2


@dataclass(frozen=True)
class UnitsAndPersons:
    """Units (occupied, vacant, group quarters) sorted by block, and their persons.

    Persons are grouped by unit, in unit order; an occupied unit's householder comes first.
    Unit codes use 0 (not in universe) for vacant and GQ units.
    """

    unit_kind: np.ndarray  # int8: UNIT_OCCUPIED / UNIT_VACANT / UNIT_GQ
    unit_block: np.ndarray  # int64 global block index (into the Geography arrays)
    unit_size: np.ndarray  # int32 FINAL_POP
    unit_npf: np.ndarray  # int32
    unit_ten: np.ndarray  # int8
    unit_hht: np.ndarray  # int8
    unit_hht2: np.ndarray  # int8
    unit_cplt: np.ndarray  # int8
    unit_first_person: np.ndarray  # int64 index of the unit's first person (its householder)
    person_unit: np.ndarray  # int64
    person_age: np.ndarray  # uint8
    person_sex: np.ndarray  # uint8: 1 male, 2 female
    person_relship: np.ndarray  # uint8

    @property
    def n_units(self) -> int:
        return int(self.unit_kind.size)

    @property
    def n_persons(self) -> int:
        return int(self.person_unit.size)

    @property
    def person_in_gq(self) -> np.ndarray:
        return self.person_relship >= 37

    @property
    def person_householder(self) -> np.ndarray:
        """Person index of each person's householder (a GQ person points at itself)."""
        first = self.unit_first_person[self.person_unit]
        return np.where(self.person_in_gq, np.arange(self.n_persons), first)


def _categorical(values: np.ndarray, weights: np.ndarray, size: int, rng: np.random.Generator):
    cumulative = np.cumsum(weights / weights.sum())
    index = np.searchsorted(cumulative, rng.random(size), side="right")
    return values[np.minimum(index, values.size - 1)]


def _sizes_summing_to(
    total: int, values: np.ndarray, weights: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Random sizes (from ``values``/``weights``) whose sum is exactly ``total``.

    Draw a generous batch, keep the prefix that first reaches ``total`` and shorten the last.
    """
    if total <= 0:
        return np.zeros(0, dtype=np.int64)
    mean = float((values * weights).sum() / weights.sum())
    sizes = np.zeros(0, dtype=np.int64)
    while sizes.sum() < total:
        batch = int(1.2 * (total - sizes.sum()) / mean) + 16
        sizes = np.concatenate([sizes, _categorical(values, weights, batch, rng)])
    cumulative = np.cumsum(sizes)
    last = int(np.searchsorted(cumulative, total))
    sizes = sizes[: last + 1].copy()
    sizes[-1] -= int(cumulative[last]) - total
    return sizes


def _within(sizes: np.ndarray) -> np.ndarray:
    starts = np.cumsum(sizes) - sizes
    return np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts, sizes)


def _households(sizes: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Persons and unit codes of occupied housing units with the given sizes."""
    n_households = sizes.size
    household = np.repeat(np.arange(n_households), sizes)
    position = _within(sizes)
    n = household.size

    # Couple type: 0 none, 1 married, 2 cohabiting; partner is the second person.
    u = rng.random(n_households)
    married_p = np.where(sizes == 2, 0.50, np.where(sizes >= 3, 0.60, 0.0))
    cohabit_p = np.where(sizes == 2, 0.14, np.where(sizes >= 3, 0.10, 0.0))
    couple = np.where(u < married_p, 1, np.where(u < married_p + cohabit_p, 2, 0))
    same_sex = rng.random(n_households) < np.where(couple == 1, 0.015, 0.045)
    nonfamily = (couple == 0) & (rng.random(n_households) < 0.30)
    male_p = np.where(couple > 0, np.where(same_sex, 0.45, 0.55), np.where(sizes == 1, 0.46, 0.40))
    householder_sex = np.where(rng.random(n_households) < male_p, 1, 2)
    householder_age = np.clip(np.rint(rng.normal(51, 17, n_households)), 16, 105).astype(np.int64)

    is_householder = position == 0
    is_partner = (position == 1) & (couple[household] > 0)
    relship = np.where(
        nonfamily[household],
        _categorical(_NONFAMILY_RELATIONSHIPS, _NONFAMILY_WEIGHTS, n, rng),
        _categorical(_FAMILY_RELATIONSHIPS, _FAMILY_WEIGHTS, n, rng),
    )
    partner_code = np.where(couple == 1, np.where(same_sex, 23, 21), np.where(same_sex, 24, 22))
    relship = np.where(is_partner, partner_code[household], relship)
    relship = np.where(is_householder, 20, relship)

    base = householder_age[household]
    r = rng.random(n)
    age = np.select(
        [
            relship == 20,
            np.isin(relship, (21, 22, 23, 24)),
            np.isin(relship, (25, 26, 27)),
            relship == 35,
            relship == 28,
            np.isin(relship, (29, 31)),
            relship == 30,
            relship == 32,
            relship == 34,
        ],
        [
            base,
            base + np.rint(rng.normal(-1, 5, n)),
            base - 18 - np.floor(r * 24),
            np.floor(r * 18),
            base + np.rint(rng.normal(0, 7, n)),
            base + 18 + np.floor(r * 22),
            base - 38 - np.floor(r * 30),
            base - 18 - np.floor(r * 22),
            base + np.rint(rng.normal(0, 5, n)),
        ],
        default=np.floor(r * 90),
    )
    # A child or grandchild "born before" a young householder becomes a young child instead.
    young = (age < 0) & np.isin(relship, (25, 26, 27, 30))
    age = np.where(young, np.floor(rng.random(n) * 6), age)
    # Past 100 the count of persons falls off geometrically instead of piling up at the cap.
    very_old = age > 100
    age = np.where(very_old, 95 + np.floor(rng.exponential(3.0, n)), age)
    minimum = np.where(np.isin(relship, (21, 22, 23, 24, 32)), 15, 0)
    age = np.clip(age, minimum, MAX_AGE).astype(np.int64)

    sex = rng.integers(1, 3, n)
    sex = np.where(is_householder, householder_sex[household], sex)
    partner_sex = np.where(same_sex, householder_sex, 3 - householder_sex)
    sex = np.where(is_partner, partner_sex[household], sex)

    relative = (relship >= 25) & (relship <= 33)
    spouse = (relship == 21) | (relship == 23)
    own_child_u18 = np.isin(relship, (25, 26, 27)) & (age < 18)
    n_relatives = np.bincount(household, weights=relative, minlength=n_households)
    n_own = np.bincount(household, weights=own_child_u18, minlength=n_households)
    n_family = np.bincount(household, weights=relative | spouse, minlength=n_households)

    family = (couple == 1) | (n_relatives > 0)
    npf = np.where(family, 1 + n_family, 0).astype(np.int64)
    cplt = np.select(
        [
            (couple == 1) & ~same_sex,
            (couple == 1) & same_sex,
            (couple == 2) & ~same_sex,
            (couple == 2) & same_sex,
        ],
        [1, 2, 3, 4],
        default=5,
    )
    male = householder_sex == 1
    hht = np.select(
        [couple == 1, n_relatives > 0, sizes == 1],
        [1, np.where(male, 2, 3), np.where(male, 4, 6)],
        default=np.where(male, 5, 7),
    )
    hht2 = np.select(
        [couple == 1, couple == 2, sizes == 1, n_own > 0, n_relatives > 0],
        [
            np.where(n_own > 0, 1, 2),
            np.where(n_own > 0, 3, 4),
            np.where(male, 9, 5),
            np.where(male, 10, 6),
            np.where(male, 11, 7),
        ],
        default=np.where(male, 12, 8),
    )
    age_band = np.digitize(householder_age, [35, 65])
    tenure_cumulative = np.cumsum(_TENURE_BY_AGE, axis=1)[age_band]
    ten = 1 + (rng.random(n_households)[:, None] >= tenure_cumulative[:, :3]).sum(axis=1)
    return {
        "person_age": age,
        "person_sex": sex,
        "person_relship": relship,
        "unit_npf": npf,
        "unit_ten": ten,
        "unit_hht": hht,
        "unit_hht2": hht2,
        "unit_cplt": cplt,
    }


def _group_quarters(sizes: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Persons of group-quarters facilities with the given sizes (type drawn per facility)."""
    facility_type = _categorical(np.arange(4), _GQ_TYPE_WEIGHTS, sizes.size, rng)
    kind = np.repeat(facility_type, sizes)
    n = kind.size
    age = np.select(
        [kind == 0, kind == 1, kind == 2],
        [18 + rng.gamma(2.0, 8.0, n), 65 + rng.gamma(2.5, 7.0, n), 17 + rng.gamma(1.5, 1.5, n)],
        default=18 + rng.gamma(2.0, 10.0, n),
    )
    sex = np.where(rng.random(n) < _GQ_MALE_SHARE[kind], 1, 2)
    return {
        "person_age": np.clip(np.floor(age), 0, MAX_AGE).astype(np.int64),
        "person_sex": sex,
        "person_relship": _GQ_RELSHIP[kind],
    }


def generate_units(
    n_persons: int,
    block_sampler,
    rng: np.random.Generator,
    gq_share: float = GQ_SHARE,
) -> UnitsAndPersons:
    """Units and exactly ``n_persons`` persons of one state chunk, sorted by block.

    ``block_sampler(size, rng)`` returns global block indices drawn in proportion to the
    blocks' population weights (see :meth:`Geography.sample_blocks`).
    """
    n_gq = round(n_persons * gq_share)
    gq_sizes = _sizes_summing_to(n_gq, np.arange(1, 3001), 1.0 / np.arange(1, 3001) ** 1.3, rng)
    household_sizes = _sizes_summing_to(n_persons - n_gq, _SIZE_VALUES, _SIZE_WEIGHTS, rng)
    n_households = household_sizes.size
    n_vacant = int(rng.binomial(n_households, VACANT_PER_OCCUPIED)) if n_households else 0
    occupied = _households(household_sizes, rng)
    quarters = _group_quarters(gq_sizes, rng)

    kind = np.concatenate(
        [
            np.full(n_households, UNIT_OCCUPIED, np.int8),
            np.full(gq_sizes.size, UNIT_GQ, np.int8),
            np.full(n_vacant, UNIT_VACANT, np.int8),
        ]
    )
    size = np.concatenate([household_sizes, gq_sizes, np.zeros(n_vacant, np.int64)])
    niu = np.zeros(gq_sizes.size + n_vacant, np.int64)
    codes = {
        name: np.concatenate([occupied[name], niu])
        for name in ("unit_npf", "unit_ten", "unit_hht", "unit_hht2", "unit_cplt")
    }
    block = block_sampler(kind.size, rng)

    # Sort units by block (stable, so the generation order breaks ties) and carry persons along.
    order = np.argsort(block, kind="stable")
    old_start = np.cumsum(size) - size
    size_sorted = size[order]
    new_start = np.cumsum(size_sorted) - size_sorted
    person_order = np.repeat(old_start[order] - new_start, size_sorted) + np.arange(
        int(size.sum()), dtype=np.int64
    )
    person = {
        name: np.concatenate([occupied[name], quarters[name]])[person_order]
        for name in ("person_age", "person_sex", "person_relship")
    }
    return UnitsAndPersons(
        unit_kind=kind[order],
        unit_block=block[order],
        unit_size=size_sorted.astype(np.int32),
        unit_npf=codes["unit_npf"][order].astype(np.int32),
        unit_ten=codes["unit_ten"][order].astype(np.int8),
        unit_hht=codes["unit_hht"][order].astype(np.int8),
        unit_hht2=codes["unit_hht2"][order].astype(np.int8),
        unit_cplt=codes["unit_cplt"][order].astype(np.int8),
        unit_first_person=new_start.astype(np.int64),
        person_unit=np.repeat(np.arange(kind.size, dtype=np.int64), size_sorted),
        person_age=person["person_age"].astype(np.uint8),
        person_sex=person["person_sex"].astype(np.uint8),
        person_relship=person["person_relship"].astype(np.uint8),
    )
