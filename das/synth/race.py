"""Synthetic race and ethnicity: major race groups, CENRACE, detailed race codes and QSPAN.

Two layers, both vectorized over persons:

1. :func:`sample_major_races` draws each person's *set* of major race groups (White, Black,
   AIAN, Asian, NHPI, Some Other Race) as a 6-bit mask: the number of groups m from a skewed
   distribution (about 7% of non-Hispanic and a third of Hispanic persons report two or more,
   as in 2020), then m distinct groups by weighted sampling without replacement (Gumbel top-k:
   argmax of ``log w + Gumbel`` noise, taken m times, samples sequentially without
   replacement in proportion to ``w``). :data:`CENRACE_OF_MASK` turns the mask into the
   CEF's CENRACE 01..63.
2. :func:`sample_race_codes` (SafeTab-P) turns a mask into up to eight detailed 4-digit codes
   of those groups: one per group, plus a few extra codes of the same groups (rare beyond
   three), distinct, no code after the first ``Null``. Within a group, codes are Zipf-weighted
   in code-list order (checkbox and common write-ins first, long tail of detailed codes).
   CENRACE therefore always agrees with the codes' major groups.

The code pools come from the spec files (:class:`RaceCodePools`): a code's major group is the
LEVEL-0 ``<group> alone`` iteration it maps to in the code-to-iteration file.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from das.specs.race_specs import RaceEthnicitySpecs
from das.synth.states import StateFacts

MAJOR_GROUPS = (
    "White",
    "Black or African American",
    "American Indian and Alaska Native",
    "Asian",
    "Native Hawaiian and Other Pacific Islander",
    "Some Other Race",
)
WHITE, BLACK, AIAN, ASIAN, NHPI, SOR = range(6)
N_GROUPS = 6
MAX_CODES = 8
NULL_CODE = 0  # a `Null` race slot


def _cenrace_tables() -> tuple[np.ndarray, np.ndarray]:
    """CENRACE 01..63: one group alone (01-06), then every combination by size, lexicographic."""
    cenrace_of_mask = np.zeros(1 << N_GROUPS, dtype=np.uint8)
    mask_of_cenrace = np.zeros(64, dtype=np.uint8)
    code = 0
    for size in range(1, N_GROUPS + 1):
        for combination in itertools.combinations(range(N_GROUPS), size):
            code += 1
            mask = sum(1 << group for group in combination)
            cenrace_of_mask[mask] = code
            mask_of_cenrace[code] = mask
    return cenrace_of_mask, mask_of_cenrace


CENRACE_OF_MASK, MASK_OF_CENRACE = _cenrace_tables()

# Number of major groups reported (1..6), by ethnicity.
_GROUP_COUNT_NOT_HISPANIC = np.array([0.93, 0.062, 0.006, 0.0015, 0.0004, 0.0001])
_GROUP_COUNT_HISPANIC = np.array([0.65, 0.31, 0.03, 0.007, 0.002, 0.001])
# Extra detailed codes beyond one per group (0..6).
_EXTRA_CODES = np.array([0.78, 0.15, 0.045, 0.015, 0.006, 0.003, 0.001])
_HISPANIC_GROUP_WEIGHTS = np.array([0.40, 0.03, 0.03, 0.005, 0.002, 0.53])
AIANNH_AIAN_BOOST = 30.0  # AIAN weight multiplier for persons living in an AIANNH area
HOUSEHOLD_RACE_COPY = 0.8  # chance a household member shares the householder's race/ethnicity
ZIPF_EXPONENT = 1.2


@dataclass(frozen=True)
class RaceProfile:
    """Race/ethnicity proportions of one state: P(Hispanic) and group weights by ethnicity."""

    hispanic_share: float
    not_hispanic_weights: np.ndarray  # (6,)
    hispanic_weights: np.ndarray  # (6,)

    @classmethod
    def for_state(cls, facts: StateFacts) -> RaceProfile:
        """Approximate the 2020 state shares (the alone shares are of the whole population)."""
        hispanic = facts.hispanic_pct / 100
        not_hispanic = max(1 - hispanic, 0.01)
        black = min(facts.black_pct / 100 / not_hispanic, 0.8)
        asian = min(facts.asian_pct / 100 / not_hispanic, 0.8)
        aian = min(facts.aian_pct / 100 / not_hispanic, 0.5)
        nhpi = 0.10 if facts.abbreviation == "HI" else 0.002
        sor = 0.02
        white = max(0.05, 1 - black - asian - aian - nhpi - sor)
        weights = np.array([white, black, aian, asian, nhpi, sor])
        return cls(hispanic, weights / weights.sum(), _HISPANIC_GROUP_WEIGHTS)


def _categorical(probabilities: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Indices drawn from a probability vector (inverse CDF; vectorized)."""
    cumulative = np.cumsum(probabilities / probabilities.sum())
    return np.minimum(
        np.searchsorted(cumulative, rng.random(size), side="right"), cumulative.size - 1
    )


def popcount6(mask: np.ndarray) -> np.ndarray:
    """Number of set bits of 6-bit masks."""
    mask = np.asarray(mask, dtype=np.uint8)
    return sum(((mask >> bit) & 1) for bit in range(N_GROUPS)).astype(np.int64)


def sample_major_races(
    hispanic: np.ndarray,
    in_aiannh: np.ndarray,
    profile: RaceProfile,
    rng: np.random.Generator,
    available: np.ndarray | None = None,
    max_groups: int = N_GROUPS,
) -> np.ndarray:
    """Each person's set of major race groups as a 6-bit mask (bit g = group g).

    ``available`` (6 booleans) excludes groups that the code list cannot express; at most
    ``max_groups`` groups are drawn (the spec's ``max_race_codes`` bounds the codes, and each
    group needs one code).
    """
    hispanic = np.asarray(hispanic, dtype=bool)
    n = hispanic.size
    available = np.ones(N_GROUPS, dtype=bool) if available is None else np.asarray(available)
    if not available.any():
        raise ValueError("no major race group has a code in the code list")
    max_groups = min(max_groups, int(available.sum()))
    count = (
        np.where(
            hispanic,
            _categorical(_GROUP_COUNT_HISPANIC, n, rng),
            _categorical(_GROUP_COUNT_NOT_HISPANIC, n, rng),
        )
        + 1
    )
    count = np.minimum(count, max_groups)
    weights = np.where(
        hispanic[:, None], profile.hispanic_weights[None, :], profile.not_hispanic_weights[None, :]
    )
    weights = weights * np.where(
        np.asarray(in_aiannh, dtype=bool)[:, None] & (np.arange(N_GROUPS) == AIAN),
        AIANNH_AIAN_BOOST,
        1.0,
    )
    with np.errstate(divide="ignore"):
        keys = np.log(np.where(available, weights, 0.0)) + rng.gumbel(size=(n, N_GROUPS))
    order = np.argsort(-keys, axis=1, kind="stable")
    take = np.arange(N_GROUPS)[None, :] < count[:, None]
    return (np.left_shift(1, order) * take).sum(axis=1).astype(np.uint8)


def copy_from_householder(
    values: np.ndarray, householder: np.ndarray, eligible: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Household members share the householder's value with probability 0.8 (others keep theirs).

    ``householder[i]`` is the person index of person i's householder; ``eligible`` marks
    household members other than the householder (group-quarters persons are not eligible).
    """
    copy = np.asarray(eligible, dtype=bool) & (rng.random(values.shape[0]) < HOUSEHOLD_RACE_COPY)
    result = values.copy()
    result[copy] = values[householder[copy]]
    return result


@dataclass(frozen=True)
class RaceCodePools:
    """The codes a synthetic person may carry, from one SafeTab-P spec set.

    ``race_codes[g]`` are the race codes of major group g (maybe empty) with their sampling
    probabilities ``race_probabilities[g]``; ``hispanic_codes`` / ``not_hispanic_codes`` are the
    QSPAN codes of the two level-0 ethnicity iterations, likewise weighted.
    """

    race_codes: tuple[np.ndarray, ...]
    race_probabilities: tuple[np.ndarray, ...]
    hispanic_codes: np.ndarray
    hispanic_probabilities: np.ndarray
    not_hispanic_codes: np.ndarray
    not_hispanic_probabilities: np.ndarray

    @property
    def available_groups(self) -> np.ndarray:
        return np.array([codes.size > 0 for codes in self.race_codes])

    @classmethod
    def from_specs(cls, specs: RaceEthnicitySpecs) -> RaceCodePools:
        """Build the pools from a parsed SafeTab-P spec set.

        A race code is any code mapped to a race iteration; its major group is the LEVEL-0
        ``<group> alone`` iteration it maps to, or (for spec sets without those iterations)
        the 2020 code block of its first two digits. QSPAN codes are the codes of the level-0
        ethnicity iterations "Hispanic or Latino ..." and "Not Hispanic or Latino ...".
        (Loops run over spec rows, a few thousand at most, never over persons.)
        """
        group_of_iteration: dict[int, int] = {}
        hispanic_iterations: set[int] = set()
        not_hispanic_iterations: set[int] = set()
        race_iterations: set[int] = set()
        for code, name, level, alone, ethnicity in zip(
            specs.iteration_code.tolist(),
            specs.iteration_name.tolist(),
            specs.level.tolist(),
            specs.alone.tolist(),
            specs.is_ethnicity.tolist(),
            strict=True,
        ):
            lowered = str(name).strip().lower()
            if ethnicity:
                if level == 0 and lowered.startswith("not hispanic"):
                    not_hispanic_iterations.add(code)
                elif level == 0 and lowered.startswith("hispanic"):
                    hispanic_iterations.add(code)
                continue
            race_iterations.add(code)
            if level == 0 and alone == 1:
                for group, group_name in enumerate(MAJOR_GROUPS):
                    if lowered == f"{group_name} alone".lower():
                        group_of_iteration[code] = group

        race_group: dict[int, int] = {}
        unplaced: set[int] = set()
        hispanic: set[int] = set()
        not_hispanic: set[int] = set()
        for iteration, code in zip(
            specs.pair_iteration.tolist(), specs.pair_code.tolist(), strict=True
        ):
            if iteration in group_of_iteration:
                race_group[code] = group_of_iteration[iteration]
            elif iteration in race_iterations:
                unplaced.add(code)
            if iteration in hispanic_iterations:
                hispanic.add(code)
            elif iteration in not_hispanic_iterations:
                not_hispanic.add(code)
        for code in unplaced - set(race_group):
            group = _group_by_code_block(code)
            if group is not None:
                race_group[code] = group
        if not hispanic and not not_hispanic:
            raise ValueError(
                f"{specs.directory}: no level-0 Hispanic / Not Hispanic ethnicity iteration "
                "with codes; cannot draw QSPAN"
            )

        race_codes = tuple(
            np.array(sorted(c for c, g in race_group.items() if g == group), dtype=np.int16)
            for group in range(N_GROUPS)
        )
        hispanic_codes = np.array(sorted(hispanic), dtype=np.int16)
        not_hispanic_codes = np.array(sorted(not_hispanic), dtype=np.int16)
        names = dict(zip(specs.code.tolist(), specs.code_name.tolist(), strict=True))
        not_hispanic_probabilities = _zipf(not_hispanic_codes.size)
        checkbox = np.array(
            ["not hispanic" in str(names.get(c, "")).lower() for c in not_hispanic_codes.tolist()],
            dtype=bool,
        )
        if checkbox.any():
            # The "Not Hispanic" checkbox is by far the most common answer.
            not_hispanic_probabilities = np.where(
                checkbox, 0.97 / checkbox.sum(), 0.03 * not_hispanic_probabilities
            )
            not_hispanic_probabilities /= not_hispanic_probabilities.sum()
        return cls(
            race_codes=race_codes,
            race_probabilities=tuple(_zipf(codes.size) for codes in race_codes),
            hispanic_codes=hispanic_codes,
            hispanic_probabilities=_zipf(hispanic_codes.size),
            not_hispanic_codes=not_hispanic_codes,
            not_hispanic_probabilities=not_hispanic_probabilities,
        )


# 2020 code blocks (first two digits) -> major group, for spec sets without "X alone" iterations.
_CODE_BLOCKS = (
    (range(10, 20), WHITE),
    (range(70, 75), WHITE),
    (range(30, 40), BLACK),
    (range(50, 70), AIAN),
    (range(40, 50), ASIAN),
    (range(75, 80), NHPI),
    (range(20, 30), SOR),
    (range(80, 90), SOR),
)


def _group_by_code_block(code: int) -> int | None:
    prefix = code // 100
    for block, group in _CODE_BLOCKS:
        if prefix in block:
            return group
    return None


def _zipf(size: int) -> np.ndarray:
    """Zipf probabilities over ``size`` ranks (rank 1 most likely)."""
    if size == 0:
        return np.zeros(0)
    weights = 1.0 / np.arange(1, size + 1) ** ZIPF_EXPONENT
    return weights / weights.sum()


def _draw(codes: np.ndarray, probabilities: np.ndarray, size: int, rng: np.random.Generator):
    return codes[_categorical(probabilities, size, rng)]


def sample_qspan(
    hispanic: np.ndarray, pools: RaceCodePools, rng: np.random.Generator
) -> np.ndarray:
    """QSPAN codes: a Hispanic code for Hispanic persons, a Not-Hispanic code otherwise."""
    hispanic = np.asarray(hispanic, dtype=bool)
    qspan = np.zeros(hispanic.size, dtype=np.int16)
    n_hispanic = int(hispanic.sum())
    if n_hispanic:
        qspan[hispanic] = _draw(pools.hispanic_codes, pools.hispanic_probabilities, n_hispanic, rng)
    if n_hispanic < hispanic.size:
        qspan[~hispanic] = _draw(
            pools.not_hispanic_codes,
            pools.not_hispanic_probabilities,
            hispanic.size - n_hispanic,
            rng,
        )
    return qspan


def sample_race_codes(
    mask: np.ndarray, pools: RaceCodePools, rng: np.random.Generator, max_codes: int = MAX_CODES
) -> np.ndarray:
    """(n, 8) int16 detailed race codes for persons with the given group masks; 0 = ``Null``.

    Slot j < m (m = number of groups) holds a code of the j-th group in a random order; further
    slots (up to ``max_codes``) hold codes of a random one of the person's groups. Duplicates
    are dropped and the codes packed to the left, so no code follows a ``Null``.
    """
    mask = np.asarray(mask, dtype=np.uint8)
    n = mask.size
    bits = (mask[:, None] >> np.arange(N_GROUPS)[None, :]) & 1
    count = bits.sum(axis=1)
    # The person's groups in random order: set bits get a uniform key, unset bits sort last.
    group_order = np.argsort(np.where(bits == 1, rng.random((n, N_GROUPS)), 2.0), axis=1)
    total = np.minimum(count + _categorical(_EXTRA_CODES, n, rng), max_codes)
    extra_pick = (rng.random((n, MAX_CODES)) * np.maximum(count, 1)[:, None]).astype(np.int64)
    slot = np.arange(MAX_CODES)[None, :]
    group_position = np.where(slot < count[:, None], np.minimum(slot, N_GROUPS - 1), extra_pick)
    slot_group = np.take_along_axis(group_order, np.minimum(group_position, N_GROUPS - 1), axis=1)
    used = slot < total[:, None]
    codes = np.zeros((n, MAX_CODES), dtype=np.int16)
    for group in range(N_GROUPS):
        where = used & (slot_group == group)
        k = int(where.sum())
        if k:
            codes[where] = _draw(pools.race_codes[group], pools.race_probabilities[group], k, rng)
    # Drop repeats of an earlier slot, then pack the codes to the left (stable: order kept).
    for j in range(1, MAX_CODES):
        repeated = (codes[:, :j] == codes[:, j : j + 1]).any(axis=1)
        codes[repeated & (codes[:, j] != NULL_CODE), j] = NULL_CODE
    packed = np.argsort(codes == NULL_CODE, axis=1, kind="stable")
    return np.take_along_axis(codes, packed, axis=1)
