"""The Permutation Algorithm (Algorithm 5.1 of "Can Swapping be Differentially Private?").

Records fall into strata j by their matching variables (the swap key). Within each stratum with
n_j ≥ 2, every record is selected independently with probability p; when *exactly one* record
is selected the whole stratum's selection is drawn again (a single record cannot be deranged);
then the swapping variables of the selected records are permuted by a uniformly random
derangement σ: record i receives the swapping values of record σ(i) ≠ i. Matching and holding
variables never move, which is why the margins n_jk (match × swap) and n_jl (match × hold) are
invariant (Proposition 5.3).

Everything is vectorized across strata. Selection runs in rounds over the strata still
pending (those that drew exactly one record). Derangements are drawn by rejection: per
stratum, a uniform permutation (the within-stratum order of independent 64-bit keys) is kept
if it has no fixed point and no tied keys, otherwise redrawn. Conditioning a uniform
permutation on an event that is invariant under relabelling (no fixed point, no tie) leaves it
uniform on that event, so the result is an exact uniform derangement; a stratum of m records
is accepted with probability D(m)/m! → 1/e, so ≈ e rounds per stratum and O(log #strata)
rounds overall, each a few numpy sorts over the records still pending.

Randomness comes only from ``source.uint64(n)``; Bernoulli(p) for a rational p is decided
exactly by comparing the binary expansion of a uniform U ∈ [0, 1) with p, 64 bits at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from das.privacy.exact import RationalLike, to_fraction
from das.privacy.rng import RandomSource

_TWO_TO_64 = 1 << 64


@dataclass(frozen=True)
class SwapScheme:
    """The roles of the variables (paper §5.1).

    ``match``: matching variables V_Match (the swap key; may be empty: one stratum).
    ``swap``: swapping variables V_Swap, the values that move between records (non-empty).
    ``hold``: the non-matching holding variables V_Hold − V_Match tabulated in H(Z) and checked
    in the n_jl invariant. Every other column of the data also stays with its record.
    """

    match: tuple[str, ...]
    swap: tuple[str, ...]
    hold: tuple[str, ...]

    def __post_init__(self) -> None:
        for role in ("match", "swap", "hold"):
            names = getattr(self, role)
            object.__setattr__(self, role, tuple(names))
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ValueError(f"{role} variables listed twice: {', '.join(duplicates)}")
        if not self.swap:
            raise ValueError("at least one swapping variable is needed")
        if not self.hold:
            raise ValueError("at least one holding variable is needed (else swapping is vacuous)")
        for first, second in (("match", "swap"), ("match", "hold"), ("swap", "hold")):
            shared = sorted(set(getattr(self, first)) & set(getattr(self, second)))
            if shared:
                raise ValueError(f"variables both {first} and {second}: {', '.join(shared)}")

    @property
    def columns(self) -> tuple[str, ...]:
        return self.match + self.swap + self.hold

    def check_columns(self, frame: pd.DataFrame) -> None:
        """Raise ``KeyError`` naming every scheme variable missing from ``frame``."""
        missing = [name for name in self.columns if name not in frame.columns]
        if missing:
            raise KeyError(f"column(s) not in the data: {', '.join(missing)}")


@dataclass(frozen=True)
class SwapDraw:
    """One draw of Algorithm 5.1 on stratum labels.

    ``source_row[i]`` is the record whose swapping values record ``i`` receives
    (``source_row[i] == i`` for unselected records; ``!= i`` for every selected one).
    """

    source_row: np.ndarray
    selected: np.ndarray
    strata_permuted: int
    selection_rounds: int
    derangement_rounds: int

    @property
    def records_selected(self) -> int:
        return int(self.selected.sum())


def parse_rate(rate: RationalLike) -> Fraction:
    """The swap rate p as an exact fraction in [0, 1] (``"0.05"`` is exactly 1/20).

    A float is read through its shortest decimal repr (0.1 → 1/10, not the binary double).
    """
    value = to_fraction(rate, name="swap rate", nonnegative=True)
    if value > 1:
        raise ValueError(f"swap rate must be in [0, 1], got {rate!r}")
    return value


def stratum_codes(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Dense int64 labels 0..J−1 of the distinct value combinations of ``columns`` (one per row).

    With no columns every record is in stratum 0. Missing values form their own category.
    """
    return combine_codes([factor_codes(frame[name]) for name in columns], len(frame))


def factor_codes(values: pd.Series) -> tuple[np.ndarray, int]:
    """(codes 0..k−1, k) of one column; missing values are a category of their own."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), max(len(uniques), 1)


def combine_codes(factors: Sequence[tuple[np.ndarray, int]], n: int) -> np.ndarray:
    """Dense labels of the combinations of several factor codes (mixed radix, made dense).

    The radix is compacted whenever it would overflow int64: no per-row Python and no tuple
    hashing.
    """
    codes = np.zeros(n, dtype=np.int64)
    radix = 1
    for column_codes, levels in factors:
        if radix * levels >= 1 << 62:
            codes, radix = _dense(codes, radix)
        codes = codes * levels + column_codes
        radix *= levels
    return _dense(codes, radix)[0]


def _dense(codes: np.ndarray, radix: int) -> tuple[np.ndarray, int]:
    """Relabel codes in [0, radix) to 0..J−1 (order kept); returns (labels, J)."""
    if radix <= 4 * codes.size + 1024:
        present = np.bincount(codes, minlength=radix) > 0
        labels = np.cumsum(present) - 1
        return labels[codes], int(present.sum())
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    starts = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    labels = np.empty(codes.size, dtype=np.int64)
    labels[order] = np.cumsum(starts) - 1
    return labels, int(starts.sum())


def bernoulli(p: Fraction, n: int, source: RandomSource) -> np.ndarray:
    """n independent exact Bernoulli(p) draws for a rational p ∈ [0, 1].

    Select iff U < p for U uniform on [0, 1): compare U's next 64 bits u with t = ⌊p·2^64⌋;
    u < t ⇒ U < p, u > t ⇒ U > p, and only on u = t (probability 2^-64) compare the next 64
    bits with the remainder p·2^64 − t, recursively.
    """
    result = np.zeros(n, dtype=bool)
    if p <= 0 or n == 0:
        return result
    if p >= 1:
        result[:] = True
        return result
    pending = np.arange(n)
    remainder = Fraction(p)
    while pending.size and remainder > 0:
        scaled = remainder * _TWO_TO_64
        threshold = scaled.numerator // scaled.denominator
        remainder = scaled - threshold
        words = np.asarray(source.uint64(pending.size), dtype=np.uint64)
        limit = np.uint64(threshold)
        result[pending[words < limit]] = True
        pending = pending[words == limit]
    return result


def select_records(
    strata: np.ndarray, rate: Fraction, source: RandomSource
) -> tuple[np.ndarray, int]:
    """Lines 2–12 of Algorithm 5.1: the selection mask, and how many rounds it took.

    Strata of size 0 or 1 are skipped. Each round draws Bernoulli(p) for every record of the
    strata still pending; a stratum that drew exactly one record is pending again (its whole
    selection is redrawn), any other outcome is final.
    """
    strata = np.asarray(strata, dtype=np.int64)
    selected = np.zeros(strata.size, dtype=bool)
    if strata.size == 0 or rate <= 0:
        return selected, 0
    n_strata = int(strata.max()) + 1
    sizes = np.bincount(strata, minlength=n_strata)
    candidates = np.flatnonzero(sizes[strata] >= 2)
    rounds = 0
    while candidates.size:
        rounds += 1
        drawn = bernoulli(rate, candidates.size, source)
        counts = np.bincount(strata[candidates[drawn]], minlength=n_strata)
        redo = counts[strata[candidates]] == 1
        selected[candidates[drawn & ~redo]] = True
        candidates = candidates[redo]
    return selected, rounds


def uniform_derangements(block_sizes: np.ndarray, source: RandomSource) -> tuple[np.ndarray, int]:
    """Independent uniform derangements of consecutive blocks, as one index array.

    Blocks of sizes m_1, m_2, ... (each ≥ 2) tile positions 0..Σm−1. Returns ``sigma`` with
    ``sigma[t]`` in t's block and ``sigma[t] != t``, uniform over the D(m_b) derangements of
    each block, independently; and the number of rejection rounds used.
    """
    sizes = np.asarray(block_sizes, dtype=np.int64)
    if sizes.size and sizes.min() < 2:
        raise ValueError("a derangement needs at least 2 elements per block")
    offsets = np.cumsum(sizes) - sizes
    sigma = np.empty(int(sizes.sum()), dtype=np.int64)
    pending = np.arange(sizes.size)
    rounds = 0
    while pending.size:
        rounds += 1
        pending_sizes = sizes[pending]
        m = int(pending_sizes.sum())
        block = np.repeat(np.arange(pending.size), pending_sizes)
        local_start = np.cumsum(pending_sizes) - pending_sizes
        position = np.repeat(offsets[pending] - local_start, pending_sizes) + np.arange(m)
        keys = np.asarray(source.uint64(m), dtype=np.uint64)
        # Sorted by block, then key: order[t] is the element of t's block with t's key rank,
        # so t -> order[t] is a uniform permutation within each block (given distinct keys).
        order = np.lexsort((keys, block))
        rejected = np.zeros(pending.size, dtype=bool)
        rejected[block[order == np.arange(m)]] = True
        sorted_keys = keys[order]
        tied = (sorted_keys[1:] == sorted_keys[:-1]) & (block[1:] == block[:-1])
        rejected[block[1:][tied]] = True
        accepted = ~rejected[block]
        sigma[position[accepted]] = position[order[accepted]]
        pending = pending[rejected]
    return sigma, rounds


def draw_permutation_swap(strata: np.ndarray, rate: Fraction, source: RandomSource) -> SwapDraw:
    """Algorithm 5.1 on stratum labels: select records, then derange them within each stratum."""
    strata = np.asarray(strata, dtype=np.int64)
    selected, selection_rounds = select_records(strata, rate, source)
    source_row = np.arange(strata.size, dtype=np.int64)
    chosen = np.flatnonzero(selected)
    chosen = chosen[np.argsort(strata[chosen], kind="stable")]
    if chosen.size == 0:
        return SwapDraw(source_row, selected, 0, selection_rounds, 0)
    chosen_strata = strata[chosen]
    boundaries = np.flatnonzero(np.diff(chosen_strata)) + 1
    block_sizes = np.diff(np.concatenate(([0], boundaries, [chosen.size])))
    sigma, derangement_rounds = uniform_derangements(block_sizes, source)
    source_row[chosen] = chosen[sigma]
    return SwapDraw(
        source_row=source_row,
        selected=selected,
        strata_permuted=int(block_sizes.size),
        selection_rounds=selection_rounds,
        derangement_rounds=derangement_rounds,
    )


def apply_swap(
    frame: pd.DataFrame, swap_columns: Sequence[str], source_row: np.ndarray
) -> pd.DataFrame:
    """Z: a copy of ``frame`` whose swapping columns of row i are those of row source_row[i]."""
    swapped = frame.copy()
    for name in swap_columns:
        # Positional take on the underlying array: same dtype, no index alignment.
        swapped[name] = frame[name].array.take(source_row)
    return swapped


def permutation_swap(
    frame: pd.DataFrame, scheme: SwapScheme, rate: Fraction, source: RandomSource
) -> tuple[pd.DataFrame, SwapDraw]:
    """Run Algorithm 5.1 on a record frame; return the swapped frame Z and the draw."""
    scheme.check_columns(frame)
    draw = draw_permutation_swap(stratum_codes(frame, scheme.match), rate, source)
    return apply_swap(frame, scheme.swap, draw.source_row), draw
