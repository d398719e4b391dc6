"""Exact rationals: the single place where budgets and noise parameters become numbers.

Everything privacy-relevant (budgets ρ and ε, σ², geometric scales) is carried as a
``fractions.Fraction`` so that sums, comparisons against a configured total and the
noise parameters derived from them are exact. Floats are accepted at the edge (JSON
configs, command-line flags) and taken by their *shortest decimal repr*: the budget
``0.159`` read from JSON becomes exactly 159/1000, not the binary float
0.1589999999999999913...

Convention for infinity: an infinite budget means "no noise" for that query (golden
tests). It is only accepted where the caller says so (``allow_infinite=True``) and is then
returned as ``math.inf``; every other path raises.
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from fractions import Fraction
from typing import Literal, overload

__all__ = ["RationalLike", "round_up_fraction", "to_fraction"]

RationalLike = int | float | str | Fraction | Decimal

_POS_INF_WORDS = frozenset({"inf", "+inf", "infinity", "+infinity"})
_NEG_INF_WORDS = frozenset({"-inf", "-infinity"})
_NAN_WORDS = frozenset({"nan", "+nan", "-nan"})


@overload
def to_fraction(
    x: object,
    *,
    name: str = ...,
    nonnegative: bool = ...,
    positive: bool = ...,
    allow_infinite: Literal[False] = ...,
) -> Fraction: ...


@overload
def to_fraction(
    x: object,
    *,
    name: str = ...,
    nonnegative: bool = ...,
    positive: bool = ...,
    allow_infinite: Literal[True],
) -> Fraction | float: ...


def to_fraction(
    x: object,
    *,
    name: str = "value",
    nonnegative: bool = False,
    positive: bool = False,
    allow_infinite: bool = False,
) -> Fraction | float:
    """Convert ``x`` to an exact ``Fraction`` (or ``math.inf`` when explicitly allowed).

    Accepted: ``int`` (and numpy integers), ``Fraction``, ``Decimal``, ``str`` (``"0.159"``,
    ``"9/2"``, ``"1e-3"``, ``"Infinity"``) and ``float`` (numpy floats too), a float being
    read as its shortest round-tripping decimal, ``Fraction(repr(x))``, so 0.159 -> 159/1000.

    ``nonnegative``/``positive`` add a sign check; ``name`` is used in the error message.
    NaN is always rejected; -inf is always rejected; +inf raises unless ``allow_infinite``.
    """
    value = _parse(x, name)
    if isinstance(value, float):  # +inf or -inf; NaN was rejected by _parse
        if value < 0:
            raise ValueError(f"{name} must be finite and not -infinity, got {x!r}")
        if not allow_infinite:
            raise ValueError(f"{name} must be finite, got {x!r}")
        return math.inf
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {x!r}")
    if nonnegative and value < 0:
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return value


def _parse(x: object, name: str) -> Fraction | float:
    """Exact value of ``x``; infinities come back as floats, NaN raises."""
    if isinstance(x, bool):  # bool is an int subclass; True is not a budget
        raise TypeError(f"{name} must be a number, got a bool ({x!r})")
    if isinstance(x, Fraction):
        return x
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    if isinstance(x, Decimal):
        if x.is_nan():
            raise ValueError(f"{name} must not be NaN")
        if x.is_infinite():
            return math.inf if x > 0 else -math.inf
        return Fraction(x)
    if isinstance(x, float):
        if math.isnan(x):
            raise ValueError(f"{name} must not be NaN")
        if math.isinf(x):
            return float(x)
        # float.__repr__ (not repr) so numpy float64 also gives "0.159", not "np.float64(0.159)"
        return Fraction(float.__repr__(float(x)))
    if isinstance(x, numbers.Real):  # numpy float32/float16 etc.: their str is the short repr
        f = float(x)
        if math.isnan(f):
            raise ValueError(f"{name} must not be NaN")
        if math.isinf(f):
            return f
        return Fraction(str(x))
    if isinstance(x, str):
        s = x.strip()
        low = s.lower()
        if low in _NAN_WORDS:
            raise ValueError(f"{name} must not be NaN, got {x!r}")
        if low in _POS_INF_WORDS:
            return math.inf
        if low in _NEG_INF_WORDS:
            return -math.inf
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError) as exc:
            raise ValueError(f"{name}: cannot read {x!r} as an exact number ({exc})") from None
    raise TypeError(f"{name} must be a number or a numeric string, got {type(x).__name__}")


def round_up_fraction(x: Fraction, max_denominator: int) -> Fraction:
    """Smallest fraction ``>= x`` whose denominator is at most ``max_denominator``.

    Used to bound the denominator of σ² (or of a geometric scale) so that the samplers'
    integer arithmetic fits in 64 bits: rounding *up* only ever adds noise, which is always
    safe for privacy. ``x`` itself is returned when its denominator already fits.

    Method: the continued-fraction walk of ``Fraction.limit_denominator`` ends with the two
    neighbours of ``x`` in the Farey sequence of order ``max_denominator``; no fraction with
    a denominator ``<= max_denominator`` lies strictly between them, so the upper one is the
    answer.
    """
    if not isinstance(x, Fraction):
        x = to_fraction(x, name="x")
    if isinstance(max_denominator, bool) or not isinstance(max_denominator, numbers.Integral):
        raise TypeError("max_denominator must be an integer")
    max_denominator = int(max_denominator)
    if max_denominator < 1:
        raise ValueError(f"max_denominator must be >= 1, got {max_denominator}")
    if x.denominator <= max_denominator:
        return x
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = x.numerator, x.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_denominator:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_denominator - q0) // q1
    bound1 = Fraction(p0 + k * p1, q0 + k * q1)
    bound2 = Fraction(p1, q1)
    return bound1 if bound1 >= x else bound2
