"""Exact, vectorized samplers of discrete Gaussian and two-sided geometric noise.

Public entry points (docs/explanation/architecture.md#inputs-and-commands)::

    discrete_gaussian(sigma_squared, size, rng=None) -> int64 array, P(k) ∝ exp(-k²/(2σ²))
    geometric(scale, size, rng=None)                 -> int64 array, P(k) ∝ exp(-|k|/scale)
    seeded_rng(seed)                                 -> reproducible source (tests/demos)

``rng=None`` means the secure source (``das.privacy.rng.default_source``). Parameters are
exact rationals (``to_fraction``: ``Fraction(9, 2) / rho``, ``"0.159"``, ...); 0 gives
zeros (no noise); negative values raise.

Exactness (Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
2020 — CKS). Every accept/reject decision is a comparison of uniformly random integers with
integer thresholds; no floating-point number ever influences an output. Floats only size
the chunks.

* Bernoulli(exp(-γ)), γ = r/D in [0, 1) (CKS Algorithm 1): K is the first k >= 1 at which a
  Bernoulli(γ/k) fails, the answer is "K is odd". Only the law of K matters, and
  P(K > k) = γ^k/k!. We draw K by inversion, several steps per random word: conditional on
  K > k0, one uniform W in [0, R), R = D^j·(k0+1)···(k0+j), gives K = k0 + 1 + c with
  c = #{i in 1..j : W < r^i·D^(j-i)·(k0+j)!/(k0+i)!} when c < j (the thresholds are nested,
  and P(W < threshold_i) = γ^i·k0!/(k0+i)! = P(K > k0+i | K > k0)); when c = j the next
  block continues from k0 + j. Integer comparisons only.
* Bernoulli(exp(-1)) (γ = 1, used in bulk): the same inversion with D = 1 and 11 steps in
  one 32-bit word (W uniform in [0, 11!), K = j iff W in [11!/j!, 11!/(j-1)!)); the rare
  W = 0 (K > 11, probability 1/11!) continues with exact Bernoulli(1/k) trials.
* Geometric V with P(V >= v) = e^{-v}: the run lengths of successes between failures in a
  stream of Bernoulli(exp(-1)) trials (the runs are i.i.d.; partial runs are carried over).
* Bernoulli(exp(-γ)) for γ >= 1: exp(-γ) = exp(-1)^floor(γ)·exp(-frac γ), i.e.
  [V' >= floor(γ)] and Bernoulli(exp(-frac γ)), V' a fresh geometric as above.
* Two-sided geometric with scale t/s (CKS Algorithm 2): U uniform in [0, t), accept with
  Bernoulli(exp(-U/t)), X = U + t·V, Y = floor(X/s), random sign, reject (-, 0).
* Discrete Gaussian (CKS Algorithm 3, t = floor(σ) + 1): CKS draws Y from Algorithm 2 with
  s = 1 and accepts with exp(-(|Y| - σ²/t)²/(2σ²)). We draw (U, V, sign) at once and merge
  the two acceptance steps (independent Bernoulli factors multiply): the candidate X = U + tV
  has proposal weight e^{-V} and is accepted with exp(-γ),

      γ = X²/(2σ²) - V + m,   m = max(0, 1 - t²/(2σ²)),

  which gives P(Y = y) ∝ e^{-v}·exp(-y²/(2σ²) + v - m) ∝ exp(-y²/(2σ²)) (each y has one
  candidate). m is the least constant making γ >= 0 for every (U, V) (the maximum of
  v - t²v²/(2σ²) over integers v >= 0, attained at v ∈ {0, 1} since t > σ); CKS's constant
  σ²/(2t²) is >= m, so ours only accepts more often. With σ² = p/q,
  γ = (q·X² - 2p·V + max(0, 2p - q·t²)) / (2p): the denominator is 2p (CKS's expanded form
  needs 2pqt², which overflows 64 bits for large σ).

Both cores: a streamed vector from the secure source (``discrete_gaussian_blocks``,
``geometric_blocks``: every release draw) has its blocks drawn on worker threads, each block
independent exact draws, laid end to end in order (:func:`sampler_threads`); a seeded stream
stays one sequence drawn in order, so a seeded release is unchanged.

Overflow (numpy int64/uint64 wrap silently, so every product is bounded in advance):
σ² is rounded UP (``round_up_fraction``, more noise is always safe) to p <= 2^49 + 1 and
q <= 2^40 (``effective_sigma_squared`` reports the value used; the usual parameters need no
rounding); lanes with X > x_safe = isqrt(2^61 // q) (>= 50σ, probability < e^-25) are
finished with exact Python integers, and so is everything when σ² > 2^49. The bounds are
proved where they are used. The geometric's scale t/s is likewise rounded up to t <= 2^40.
"""

from __future__ import annotations

import math
import numbers
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from das.privacy.exact import round_up_fraction, to_fraction
from das.privacy.rng import (
    RandomSource,
    default_source,
    randbelow,
    seeded_rng,
    uniform_below,
)

__all__ = [
    "DEFAULT_BLOCK",
    "discrete_gaussian",
    "discrete_gaussian_blocks",
    "effective_scale",
    "effective_sigma_squared",
    "geometric",
    "geometric_blocks",
    "seeded_rng",
    "zero_blocks",
]

_TWO32 = 1 << 32
_TWO64 = 1 << 64
_CHUNK = 1 << 17  # candidates per vectorized round: arrays stay in cache
DEFAULT_BLOCK = 1 << 22  # draws per block of the streamed samplers (32 MiB of int64)
MAX_SAMPLER_THREADS = 4  # threads drawing one secure vector's blocks (sampler_threads)

# Discrete Gaussian limits (see the module docstring and _gauss_plan).
_P_MAX = 1 << 49
_Q_MAX = 1 << 40
_X_SAFE_MAX = 1 << 62  # tests lower this to exercise the exact-integer lanes
# Geometric limits.
_T_MAX = 1 << 40
_V_CAP_MAX = 1 << 62  # tests lower this to exercise the exact-integer lanes

# ---------------------------------------------------------------------------------------
# Bernoulli(exp(-1)) from one 32-bit word: W = floor(w / 107) uniform on [0, 11!) for
# w < 107·11! (other words are invalid and skipped); K = j iff W in [11!/j!, 11!/(j-1)!).
# ---------------------------------------------------------------------------------------
_F11 = math.factorial(11)
_E1_MULT = _TWO32 // _F11  # 107
_E1_LIMIT = _E1_MULT * _F11  # 4_271_097_600 < 2^32
_E1_T = np.array([_F11 // math.factorial(j) for j in range(1, 12)], dtype=np.int64)  # T_1..T_11
_FAIL, _SUCCESS, _AMBIGUOUS, _INVALID = 0, 1, 2, 3


def _e1_outcome_exact(w: NDArray[np.uint32]) -> NDArray[np.uint8]:
    """Outcome of each word: 0 fail (K even), 1 success (K odd), 3 invalid, 2 if K > 11."""
    w64 = w.astype(np.int64)
    out = np.full(w64.shape, _INVALID, dtype=np.uint8)
    valid = w64 < _E1_LIMIT
    big_w = w64[valid] // _E1_MULT
    k = 1 + (big_w[:, None] < _E1_T[None, :]).sum(axis=1)  # K = 1 + #{j : W < T_j}
    res = np.where(big_w == 0, _AMBIGUOUS, k % 2).astype(np.uint8)
    out[valid] = res
    return out


def _build_e1_table() -> NDArray[np.uint8]:
    """Outcome by the top 16 bits of the word, or AMBIGUOUS when the 2^16 words of that
    block do not all share one outcome (blocks holding an interval end, and block 0)."""
    lows = np.arange(1 << 16, dtype=np.int64) << 16
    first = _e1_outcome_exact(lows.astype(np.uint32))
    last = _e1_outcome_exact((lows + 0xFFFF).astype(np.uint32))
    bounds = np.append(_E1_MULT * _E1_T, _E1_LIMIT)  # every place the outcome can change
    cut = np.zeros(lows.size, dtype=bool)
    cut[(bounds >> 16)[(bounds & 0xFFFF) != 0]] = True
    table = np.where((first == last) & ~cut, first, _AMBIGUOUS).astype(np.uint8)
    table[0] = _AMBIGUOUS  # holds W = 0 (K > 11)
    return table


_E1_TABLE = _build_e1_table()


def _continue_gamma_one(src: RandomSource, k_start: int) -> int:
    """Algorithm 1 with γ = 1 given K >= k_start: Bernoulli(1/k) trials until one fails."""
    k = k_start
    while randbelow(src, k) == 0:
        k += 1
    return k


def _e1_outcomes(src: RandomSource, count: int) -> NDArray[np.uint8]:
    """``count`` words turned into Bernoulli(exp(-1)) outcomes (1/0) or INVALID (3)."""
    words = src.uint32(count)
    out = _E1_TABLE[words >> 16]
    amb = np.flatnonzero(out == _AMBIGUOUS)
    if amb.size:
        exact = _e1_outcome_exact(words[amb])
        for i in np.flatnonzero(exact == _AMBIGUOUS).tolist():  # prob. 1/11! per word
            exact[i] = _continue_gamma_one(src, 12) % 2
        out[amb] = exact
    return out


def _geom_e1(src: RandomSource, n: int) -> NDArray[np.int64]:
    """n i.i.d. V with P(V >= v) = e^{-v}: run lengths of Bernoulli(exp(-1)) successes.

    Runs end at failures; invalid words are skipped (subtracted from the run they sit in);
    the unfinished run at the end of a block is carried into the next block, and whatever
    follows the n-th failure is discarded (a stopping time: the n runs stay i.i.d.).
    """
    out = np.empty(n, dtype=np.int64)
    have = 0
    carry = 0
    while have < n:
        need = n - have
        count = int(need * 1.6) + 64  # E[words per run] = 1/(1 - e^-1) = 1.582
        oc = _e1_outcomes(src, count)
        fails = np.flatnonzero(oc == _FAIL)
        invalid = np.flatnonzero(oc == _INVALID)
        if fails.size == 0:
            carry += count - invalid.size
            continue
        runs = np.empty(fails.size, dtype=np.int64)
        runs[0] = fails[0]
        np.subtract(fails[1:], fails[:-1], out=runs[1:])
        runs[1:] -= 1
        trailing_invalid = 0
        if invalid.size:
            seg = np.searchsorted(fails, invalid)  # run that each invalid word sits in
            inside = seg < fails.size
            runs -= np.bincount(seg[inside], minlength=fails.size)
            trailing_invalid = int((~inside).sum())
        runs[0] += carry
        take = min(need, runs.size)
        out[have : have + take] = runs[:take]
        have += take
        carry = count - 1 - int(fails[-1]) - trailing_invalid
    return out


# ---------------------------------------------------------------------------------------
# Bernoulli(exp(-r/D)) for 0 <= r < D, vectorized inversion of K (module docstring).
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Stage:
    j: int  # steps of K decided by one word (0: use exact Python integers)
    mult: int  # M = floor(2^64 / R): W = floor(w / M) for w < M·R
    limit: int  # M·R (2^64 when every word is valid)
    scaled: tuple[int, ...]  # A_i = M·D^(j-i)·(k0+j)!/(k0+i)!, i = 1..j


@lru_cache(maxsize=4096)
def _stage(denominator: int, k0: int) -> _Stage:
    """Pick j (steps per word) for Bernoulli(exp(-r/D)) given K > k0.

    Costs: words rejected (1 - M·R/2^64 <= R/2^64) and lanes left for the next block
    (P(K > k0+j | K > k0) <= k0!/(k0+j)!). R <= 2^62 keeps rejections under 1/4.
    """
    best: tuple[float, int] | None = None
    for j in range(1, 64):
        span = denominator**j * math.prod(range(k0 + 1, k0 + j + 1))
        if span > 1 << 62:
            break
        mult = _TWO64 // span
        reject = 1.0 - (mult * span) / _TWO64  # <= span/2^64 <= 1/4
        left = math.exp(math.lgamma(k0 + 1) - math.lgamma(k0 + j + 1))
        cost = 1.0 / (1.0 - reject) + left + 0.02 * j  # words, next block, work per step
        if best is None or cost < best[0]:
            best = (cost, j)
    if best is None:
        return _Stage(0, 0, 0, ())
    j = best[1]
    span = denominator**j * math.prod(range(k0 + 1, k0 + j + 1))
    mult = _TWO64 // span
    scaled = []
    for i in range(1, j + 1):
        fall = math.prod(range(k0 + i + 1, k0 + j + 1))  # (k0+j)!/(k0+i)!
        scaled.append(mult * denominator ** (j - i) * fall)
    return _Stage(j, mult, mult * span, tuple(scaled))


def _stage_count(words: NDArray[np.uint64], rr: NDArray[np.uint64], st: _Stage) -> NDArray:
    """c = #{i in 1..j : W < r^i·D^(j-i)·(k0+j)!/(k0+i)!}, compared as w < A_i·r^i.

    Overflow: r < D so r^i <= (D-1)^i < D^i <= R < 2^64, and
    A_i·r^i < A_i·D^i = M·D^j·(k0+j)!/(k0+i)! <= M·R <= 2^64: no uint64 product wraps.
    """
    count = (words < np.uint64(st.scaled[0]) * rr).view(np.uint8)
    power = rr
    for a_i in st.scaled[1:]:
        power = power * rr
        count = count + (words < np.uint64(a_i) * power)
    return count


def _bern_exp_frac(src: RandomSource, r: NDArray, denominator: int) -> NDArray[np.bool_]:
    """Exact Bernoulli(exp(-r/D)) per lane, 0 <= r < D <= 2^62 (CKS Algorithm 1).

    One word per lane decides K = 1 + c in the first block; the few lanes whose word was
    rejected (redo the block) or with K > j (next block) go through ``_bern_exp_frac_from``.
    """
    rr = r.astype(np.uint64)
    st = _stage(denominator, 0)
    if st.j == 0:
        return _bern_exp_frac_from(src, rr, denominator, 0)
    words = src.uint64(rr.size)
    count = _stage_count(words, rr, st)
    result = (count & 1) == 0  # K = 1 + c is odd
    more = np.flatnonzero(count >= st.j)
    if more.size:
        result[more] = _bern_exp_frac_from(src, rr[more], denominator, st.j)
    if st.limit < _TWO64:
        redo = np.flatnonzero(words >= np.uint64(st.limit))  # W undefined: start again
        if redo.size:
            result[redo] = _bern_exp_frac_from(src, rr[redo], denominator, 0)
    return result


def _bern_exp_frac_from(
    src: RandomSource, rr: NDArray[np.uint64], denominator: int, k0: int
) -> NDArray[np.bool_]:
    """Bernoulli(exp(-r/D)) given K > k0, block by block until every lane is decided."""
    result = np.empty(rr.size, dtype=bool)
    lanes = np.arange(rr.size)
    while lanes.size:
        st = _stage(denominator, k0)
        if st.j == 0:  # only reachable for K beyond ~2^11: exact Python integers
            for lane, ri in zip(lanes.tolist(), rr.tolist(), strict=True):
                result[lane] = _py_bern_exp_le1(int(ri), denominator, src, k0)
            break
        words = src.uint64(lanes.size)
        if st.limit < _TWO64:
            lim = np.uint64(st.limit)
            bad = np.flatnonzero(words >= lim)
            if bad.size:
                words = words.copy()
            while bad.size:
                words[bad] = src.uint64(bad.size)
                bad = bad[words[bad] >= lim]
        count = _stage_count(words, rr, st).astype(np.int64)
        done = count < st.j
        result[lanes[done]] = ((k0 + 1 + count[done]) & 1) == 1
        keep = ~done
        lanes = lanes[keep]
        rr = rr[keep]
        k0 += st.j
    return result


def _uniform_ints(src: RandomSource, t: int, n: int) -> NDArray[np.int64]:
    """n exact uniform integers in [0, t) (32-bit words when t < 2^32)."""
    if t == 1:
        return np.zeros(n, dtype=np.int64)
    if t >= _TWO32:
        return uniform_below(src, t, n)
    mult = _TWO32 // t
    limit = mult * t
    words = src.uint32(n)
    if limit < _TWO32:
        lim = np.uint32(limit)
        bad = np.flatnonzero(words >= lim)
        if bad.size:
            words = words.copy()
        while bad.size:
            words[bad] = src.uint32(bad.size)
            bad = bad[words[bad] >= lim]
    return (words // np.uint32(mult)).astype(np.int64)


# ---------------------------------------------------------------------------------------
# Reference CKS in exact Python integers: parameters beyond 64-bit bounds, rare lanes.
# ---------------------------------------------------------------------------------------
def _py_bern_exp_le1(n: int, d: int, src: RandomSource, k0: int = 0) -> bool:
    """CKS Algorithm 1 for γ = n/d in [0, 1], continued from K > k0."""
    k = k0 + 1
    while randbelow(src, d * k) < n:
        k += 1
    return k % 2 == 1


def _py_bern_exp(gamma: Fraction, src: RandomSource) -> bool:
    """Bernoulli(exp(-γ)) for rational γ >= 0: floor(γ) Bernoulli(exp(-1)) then the rest."""
    n, d = gamma.numerator, gamma.denominator
    while n > d:
        if not _py_bern_exp_le1(1, 1, src):
            return False
        n -= d
    return _py_bern_exp_le1(n, d, src)


def _py_discrete_laplace(t: int, s: int, src: RandomSource) -> int:
    """CKS Algorithm 2: P(y) ∝ exp(-|y|·s/t)."""
    while True:
        u = randbelow(src, t)
        if not _py_bern_exp(Fraction(u, t), src):
            continue
        v = 0
        while _py_bern_exp_le1(1, 1, src):
            v += 1
        y = (u + t * v) // s
        b = randbelow(src, 2)
        if b == 1 and y == 0:
            continue
        return -y if b else y


def _py_discrete_gaussian(sigma_squared: Fraction, src: RandomSource) -> int:
    """CKS Algorithm 3: P(y) ∝ exp(-y²/(2σ²)), t = floor(σ) + 1."""
    t = math.isqrt(math.floor(sigma_squared)) + 1
    while True:
        y = _py_discrete_laplace(t, 1, src)
        gamma = (abs(y) - sigma_squared / t) ** 2 / (2 * sigma_squared)
        if _py_bern_exp(gamma, src):
            return y


def _to_int64(values: list[int]) -> NDArray[np.int64]:
    if any(abs(v) >= 1 << 63 for v in values):
        raise OverflowError("a noise draw does not fit in int64")
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------------------------------
# Discrete Gaussian
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _GaussPlan:
    sigma_squared: Fraction  # effective σ² = p/q (>= the requested one)
    p: int
    q: int
    t: int  # floor(σ) + 1
    m_num: int  # 2p·m = max(0, 2p - q·t²)
    x_safe: int  # lanes with X > x_safe use Python integers
    v_cap: int  # V > v_cap implies X > x_safe
    vectorized: bool


def _gauss_plan(sigma_squared: Fraction) -> _GaussPlan:
    """Exact parameters of the vectorized sampler, σ² rounded up only when needed."""
    s2 = sigma_squared
    if s2.numerator > _P_MAX or s2.denominator > _Q_MAX:
        max_den = min(_Q_MAX, max(1, _P_MAX // math.ceil(s2)))
        s2 = round_up_fraction(s2, max_den)
    p, q = s2.numerator, s2.denominator
    t = math.isqrt(p // q) + 1  # floor(σ) = isqrt(floor(σ²))
    # p <= ceil(σ²·max_den) <= P_MAX + 1 after rounding unless σ² itself exceeds P_MAX.
    vectorized = p <= _P_MAX + 1 and q <= _Q_MAX
    # q·x² <= q·x_safe² <= 2^61; see _gauss_chunk for the rest of the bound.
    x_safe = min(math.isqrt((1 << 61) // q), _X_SAFE_MAX)
    return _GaussPlan(
        sigma_squared=s2,
        p=p,
        q=q,
        t=t,
        m_num=max(0, 2 * p - q * t * t),
        x_safe=x_safe,
        v_cap=x_safe // t,
        vectorized=vectorized,
    )


def effective_sigma_squared(sigma_squared: object) -> Fraction:
    """The σ² the sampler actually uses: the requested value, or the nearest larger rational
    with a bounded denominator when 64-bit arithmetic needs it (more noise, never less)."""
    s2 = to_fraction(sigma_squared, name="sigma_squared", nonnegative=True)
    return s2 if s2 == 0 else _gauss_plan(s2).sigma_squared


def _gauss_chunk(plan: _GaussPlan, n: int, src: RandomSource) -> NDArray[np.int64]:
    """Accepted draws from n candidates, in candidate order.

    Bounds (int64): for V <= v_cap, t·V <= x_safe and X = U + t·V < x_safe + t < 2^62.
    For X <= x_safe: q·X² <= 2^61; if V >= 1 then X >= t·V > σ·V and σ < X, so
    2p·V = 2q·σ²·V < 2q·X² <= 2^62; 0 <= m_num <= 2p <= 2^51. Hence
    N = q·X² - 2p·V + m_num lies in [0, 2^62] (N >= 0 because m is the exact minimum).
    Lanes beyond x_safe ("rare") are zeroed here and finished in Python integers.
    """
    t, p, q = plan.t, plan.p, plan.q
    denom = 2 * p
    u = _uniform_ints(src, t, n)
    v = _geom_e1(src, n)
    neg = (src.uint8(n) & 1).view(bool)
    rare = v > plan.v_cap
    any_rare = bool(rare.any())
    x = u + t * (np.where(rare, 0, v) if any_rare else v)
    rare |= x > plan.x_safe
    any_rare = bool(rare.any())
    v_all = v
    if any_rare:
        x[rare] = 0
        v = np.where(rare, 0, v)
    num = q * x * x - denom * v + plan.m_num
    whole = num // denom
    frac = num - whole * denom
    ok = ~(neg & (x == 0))  # (-, 0) is always rejected
    if any_rare:
        ok &= ~rare
    sel = np.flatnonzero(whole > 0)
    if sel.size:  # exp(-floor γ): a fresh geometric must reach floor(γ)
        ok[sel] &= _geom_e1(src, sel.size) >= whole[sel]
    alive = np.flatnonzero(ok)
    ok[alive] = _bern_exp_frac(src, frac[alive], denom)
    if any_rare:  # X beyond 64-bit comfort: finish these candidates in Python integers
        kept, vals = [], []
        for lane in np.flatnonzero(rare).tolist():
            xi = int(u[lane]) + t * int(v_all[lane])
            gamma = Fraction(q * xi * xi - denom * int(v_all[lane]) + plan.m_num, denom)
            if _py_bern_exp(gamma, src):
                kept.append(lane)
                vals.append(xi)
        x[kept] = _to_int64(vals)
        ok[kept] = True
    np.negative(x, out=x, where=neg)
    return x[ok]


# ---------------------------------------------------------------------------------------
# Two-sided geometric
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _GeomPlan:
    scale: Fraction  # effective scale t/s (>= the requested one)
    t: int
    s: int
    v_cap: int  # t·(V+1) <= 2^62 for V <= v_cap
    vectorized: bool


def _geom_plan(scale: Fraction) -> _GeomPlan:
    sc = scale
    if sc.numerator > _T_MAX:
        sc = round_up_fraction(sc, max(1, _T_MAX // math.ceil(sc)))
    t, s = sc.numerator, sc.denominator
    v_cap = min((1 << 62) // t - 1, _V_CAP_MAX)
    return _GeomPlan(scale=sc, t=t, s=s, v_cap=v_cap, vectorized=t <= _T_MAX + 1)


def effective_scale(scale: object) -> Fraction:
    """The geometric scale the sampler actually uses (rounded up only beyond 2^40)."""
    sc = to_fraction(scale, name="scale", nonnegative=True)
    return sc if sc == 0 else _geom_plan(sc).scale


def _geom_chunk(plan: _GeomPlan, n: int, src: RandomSource) -> NDArray[np.int64]:
    """Accepted two-sided geometric draws from n candidates, in candidate order.

    Bounds (int64): U < t <= 2^40 + 1 and V <= v_cap give X = U + t·V < t·(V+1) <= 2^62.
    Lanes with V > v_cap ("rare") are finished in Python integers.
    """
    t, s = plan.t, plan.s
    u = _uniform_ints(src, t, n)
    if t > 1:  # CKS Algorithm 2: accept U with probability exp(-U/t)
        u = u[_bern_exp_frac(src, u, t)]
    m = u.size
    v = _geom_e1(src, m)
    neg = (src.uint8(m) & 1).view(bool)
    rare = v > plan.v_cap
    any_rare = bool(rare.any())
    x = u + t * (np.where(rare, 0, v) if any_rare else v)
    y = x // s if s > 1 else x
    if any_rare:
        for i in np.flatnonzero(rare).tolist():
            y[i] = _to_int64([(int(u[i]) + t * int(v[i])) // s])[0]
    ok = ~(neg & (y == 0))  # (-, 0) is always rejected
    np.negative(y, out=y, where=neg)
    return y[ok]


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------
def _normalize_size(size: object) -> tuple[int, ...]:
    if isinstance(size, bool):
        raise TypeError("size must be an int or a tuple of ints")
    if isinstance(size, numbers.Integral):
        dims: tuple[object, ...] = (size,)
    elif isinstance(size, tuple):
        dims = size
    else:
        raise TypeError("size must be an int or a tuple of ints")
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or int(d) < 0:
            raise ValueError(f"size entries must be non-negative integers, got {size!r}")
        out.append(int(d))
    return tuple(out)


def _resolve_rng(rng: RandomSource | None) -> RandomSource:
    if rng is None:
        return default_source()
    if not isinstance(rng, RandomSource):
        raise TypeError(
            "rng must be a das.privacy.rng.RandomSource (e.g. seeded_rng(seed)) or None"
        )
    return rng


def _fill_pieces(total: int, chunk, acceptance: float) -> Iterator[NDArray[np.int64]]:
    """Yield the accepted draws of successive candidate rounds until ``total`` are out.

    The rounds depend only on ``total`` and the source, so the pieces, laid end to end, are
    exactly what :func:`_fill` returns for the same source state.
    """
    filled = 0
    while filled < total:
        need = total - filled
        n = min(_CHUNK, int(need / acceptance * 1.05) + 16)
        got = chunk(n)
        take = min(need, got.size)
        if take:
            yield got[:take]
        filled += take
        acceptance = max(0.05, got.size / n)


def _fill(total: int, chunk, acceptance: float) -> NDArray[np.int64]:
    """Run chunks of candidates until ``total`` draws are accepted (first ones kept)."""
    out = np.empty(total, dtype=np.int64)
    filled = 0
    for piece in _fill_pieces(total, chunk, acceptance):
        out[filled : filled + piece.size] = piece
        filled += piece.size
    return out


def _blocks(pieces: Iterable[NDArray[np.int64]], block: int) -> Iterator[NDArray[np.int64]]:
    """Regroup pieces into arrays of ``block`` values (the last one shorter), order kept."""
    buffer: list[NDArray[np.int64]] = []
    held = 0
    for piece in pieces:
        buffer.append(piece)
        held += piece.size
        while held >= block:
            joined = np.concatenate(buffer) if len(buffer) > 1 else buffer[0]
            yield np.ascontiguousarray(joined[:block], dtype=np.int64)
            rest = joined[block:]
            buffer = [rest] if rest.size else []
            held = rest.size
    if held:
        yield np.ascontiguousarray(np.concatenate(buffer), dtype=np.int64)


def _python_pieces(draw, total: int, block: int) -> Iterator[NDArray[np.int64]]:
    """The reference (Python-integer) sampler, ``block`` draws at a time."""
    for start in range(0, total, block):
        yield _to_int64([draw() for _ in range(min(block, total - start))])


def discrete_gaussian(
    sigma_squared: object, size: int | tuple[int, ...], rng: RandomSource | None = None
) -> NDArray[np.int64]:
    """Exact samples of the discrete Gaussian N_Z(0, σ²): P(k) ∝ exp(-k²/(2σ²)).

    ``sigma_squared``: an exact rational or anything ``to_fraction`` accepts
    (``Fraction(9, 2) / rho``); 0 gives zeros; negative or infinite raises ValueError.
    It is used exactly unless its numerator exceeds 2^49 or its denominator 2^40; then it is
    rounded up (``effective_sigma_squared`` tells which value was used — record that one).
    ``rng=None`` uses the secure source. Returns an int64 array of shape ``size``.
    """
    s2 = to_fraction(sigma_squared, name="sigma_squared", nonnegative=True)
    shape = _normalize_size(size)
    src = _resolve_rng(rng)
    total = math.prod(shape)
    if s2 == 0 or total == 0:
        return np.zeros(shape, dtype=np.int64)
    plan = _gauss_plan(s2)
    if not plan.vectorized:  # σ² > 2^49: the reference algorithm in Python integers
        draws = _to_int64([_py_discrete_gaussian(plan.sigma_squared, src) for _ in range(total)])
        return draws.reshape(shape)
    return _fill(total, lambda n: _gauss_chunk(plan, n, src), 0.45).reshape(shape)


def geometric(
    scale: object, size: int | tuple[int, ...], rng: RandomSource | None = None
) -> NDArray[np.int64]:
    """Exact samples of the two-sided geometric: P(k) ∝ exp(-|k|/scale).

    ``scale``: an exact rational or anything ``to_fraction`` accepts (Δ/ε); 0 gives zeros;
    negative or infinite raises ValueError; a numerator beyond 2^40 is rounded up
    (``effective_scale``). ``rng=None`` uses the secure source. Returns an int64 array of
    shape ``size``.
    """
    sc = to_fraction(scale, name="scale", nonnegative=True)
    shape = _normalize_size(size)
    src = _resolve_rng(rng)
    total = math.prod(shape)
    if sc == 0 or total == 0:
        return np.zeros(shape, dtype=np.int64)
    plan = _geom_plan(sc)
    if not plan.vectorized:  # scale > 2^40: the reference algorithm in Python integers
        draws = [_py_discrete_laplace(plan.t, plan.s, src) for _ in range(total)]
        return _to_int64(draws).reshape(shape)
    return _fill(total, lambda n: _geom_chunk(plan, n, src), 0.6).reshape(shape)


def zero_blocks(size: int, block: int = DEFAULT_BLOCK) -> Iterator[NDArray[np.int64]]:
    """``size`` zeros as ``block``-sized int64 arrays (a mechanism without noise, streamed)."""
    block = _check_block(block)
    for start in range(0, size, block):
        yield np.zeros(min(block, size - start), dtype=np.int64)


def _check_block(block: int) -> int:
    if isinstance(block, bool) or not isinstance(block, numbers.Integral) or int(block) < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    return int(block)


def discrete_gaussian_blocks(
    sigma_squared: object, size: int, rng: RandomSource | None = None, block: int = DEFAULT_BLOCK
) -> Iterator[NDArray[np.int64]]:
    """:func:`discrete_gaussian` as a stream: int64 arrays of ``block`` draws (the last shorter).

    Laid end to end, the blocks are *exactly* ``discrete_gaussian(sigma_squared, size, rng)``
    for the same source state (same candidate rounds, same accepted draws), so a vector of
    hundreds of millions of draws can be written to disk with memory for one block only.
    """
    s2 = to_fraction(sigma_squared, name="sigma_squared", nonnegative=True)
    (total,) = _normalize_size(size)
    block = _check_block(block)
    src = _resolve_rng(rng)
    if total == 0:
        return iter(())
    if s2 == 0:
        return zero_blocks(total, block)
    plan = _gauss_plan(s2)
    if not plan.vectorized:
        return _python_pieces(lambda: _py_discrete_gaussian(plan.sigma_squared, src), total, block)
    if _parallel(src, total, block):
        return _secure_blocks(
            total, block, lambda n: _fill(n, lambda k: _gauss_chunk(plan, k, src), 0.45)
        )
    return _blocks(_fill_pieces(total, lambda n: _gauss_chunk(plan, n, src), 0.45), block)


def geometric_blocks(
    scale: object, size: int, rng: RandomSource | None = None, block: int = DEFAULT_BLOCK
) -> Iterator[NDArray[np.int64]]:
    """:func:`geometric` as a stream of ``block``-sized int64 arrays (exactly the same draws)."""
    sc = to_fraction(scale, name="scale", nonnegative=True)
    (total,) = _normalize_size(size)
    block = _check_block(block)
    src = _resolve_rng(rng)
    if total == 0:
        return iter(())
    if sc == 0:
        return zero_blocks(total, block)
    plan = _geom_plan(sc)
    if not plan.vectorized:
        return _python_pieces(lambda: _py_discrete_laplace(plan.t, plan.s, src), total, block)
    if _parallel(src, total, block):
        return _secure_blocks(
            total, block, lambda n: _fill(n, lambda k: _geom_chunk(plan, k, src), 0.6)
        )
    return _blocks(_fill_pieces(total, lambda n: _geom_chunk(plan, n, src), 0.6), block)


def sampler_threads() -> int:
    """Threads drawing the blocks of one secure noise vector: the machine's cores (at most
    :data:`MAX_SAMPLER_THREADS`)."""
    return max(1, min(MAX_SAMPLER_THREADS, os.cpu_count() or 1))


def _parallel(src: RandomSource, total: int, block: int) -> bool:
    """Blocks drawn on several threads: only from the secure source (a seeded stream is one
    sequence, drawn in order: its release must stay the same), and only for two blocks or
    more."""
    return src.is_secure and total > block and sampler_threads() > 1


def _secure_blocks(
    total: int, block: int, sample: Callable[[int], NDArray[np.int64]]
) -> Iterator[NDArray[np.int64]]:
    """``total`` draws as ``block``-sized arrays, each drawn on a worker thread by
    ``sample(n)`` and yielded in order, a few blocks ahead of the reader (bounded memory).

    Each block is ``n`` independent exact draws from the secure source (thread-safe), so the
    blocks laid end to end are ``total`` independent exact draws: the same distribution as
    one thread's, in about 1/threads of the time (numpy releases the interpreter lock in the
    vectorized candidate rounds)."""
    threads = sampler_threads()
    sizes = [min(block, total - start) for start in range(0, total, block)]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="das-noise") as pool:
        pending: deque[Future[NDArray[np.int64]]] = deque()
        try:
            for size in sizes:
                pending.append(pool.submit(sample, size))
                if len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
