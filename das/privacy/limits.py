"""The one home of the budget limits: what the system refuses, and why.

An absurd budget is not a tuning choice. ρ = 1e300 gives noise of σ² ≈ 1e-300: every count is
the exact count, labelled a private release. ρ = 1e-300 asks the sampler for σ² ≈ 1e300, which
it cannot draw in any useful time (and overflows int64 long before), to release nothing
useful. So these are refused — never clipped — wherever a budget enters:

* :data:`MAX_PASS_TOTAL` — the largest total one pass may spend, by privacy definition
  (exact Fractions): ρ 10 under zCDP, ε 30 under pure DP, about twice the 2020 production
  passes (SafeTab-P US ρ 4.944, PR 2.643; PHSafe US 1.257281, PR 1.226649). The ceiling of the
  per-pass ledger, the default ceiling of a new ledger, and (since one query of a pass cannot
  spend more than its pass) the largest per-query budget.
* :data:`MIN_QUERY_BUDGET` — the smallest positive budget of one query, ρ or ε 1e-9. It keeps
  the noise of any query of sensitivity up to :data:`FLOOR_SENSITIVITY` (1000; the 2020
  products use 3 and 9 (SafeTab-P ρ / ε), 2τ + 2 = 22 (PHSafe)) inside the samplers' fast exact
  range below.
* :data:`SAMPLER_MAX_SIGMA_SQUARED` (2^49) and :data:`SAMPLER_MAX_SCALE` (2^40) — the noise the
  exact samplers of :mod:`das.privacy.noise` draw in 64-bit vectorized arithmetic. Measured
  (one process, 10⁶ draws, secure source and seeded PCG64, other jobs on the second core): the
  discrete Gaussian runs at 7–12 M draws/s for every σ² from 0.45 to 2^49 ≈ 5.6e14, the
  geometric at 17–31 M/s for every scale from 1 to 2^40 ≈ 1.1e12. Beyond, both fall back to the
  reference algorithm in Python integers — still exact, but 0.026–0.032 M/s (Gaussian) and
  0.046–0.062 M/s (geometric), some 300× slower (a national level of 10⁸ cells would take about
  an hour) — and their draws overflow int64 near σ² ≈ 1e37 and scale ≈ 1e18
  (``OverflowError``). A mechanism is never built from a budget whose noise lies outside this
  range, whatever its sensitivity.

``Infinity`` (no noise: golden tests, labelled NOT-PRIVATE and refused in production by the run
policy) and 0 (the query is not measured) are not budgets these limits apply to.

This module sits in the privacy foundation: it imports nothing but the standard library, so
the configs (:mod:`das.specs.config`), the mechanisms, the ledger and the CLI all share it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, localcontext
from fractions import Fraction
from types import MappingProxyType

__all__ = [
    "FLOOR_SENSITIVITY",
    "MAX_PASS_TOTAL",
    "MIN_QUERY_BUDGET",
    "SAMPLER_MAX_SCALE",
    "SAMPLER_MAX_SIGMA_SQUARED",
    "BudgetLimitError",
    "check_noise",
    "check_pass_total",
    "check_query_budget",
    "noise_problem",
    "pass_total_problem",
    "query_budget_problem",
    "query_ceiling_problem",
    "query_floor_problem",
    "show",
]

# Keys are the privacy definitions' names ("zcdp", "puredp"; das.privacy.mechanisms.ZCDP and
# PUREDP), read-only so that no caller can loosen a limit for everybody.
MAX_PASS_TOTAL: Mapping[str, Fraction] = MappingProxyType(
    {"zcdp": Fraction(10), "puredp": Fraction(30)}
)
MIN_QUERY_BUDGET: Mapping[str, Fraction] = MappingProxyType(
    {"zcdp": Fraction(1, 10**9), "puredp": Fraction(1, 10**9)}
)
SAMPLER_MAX_SIGMA_SQUARED = Fraction(2**49)  # das.privacy.noise: p <= 2^49 (+1) vectorized
SAMPLER_MAX_SCALE = Fraction(2**40)  # das.privacy.noise: t <= 2^40 (+1) vectorized
FLOOR_SENSITIVITY = 1000  # at MIN_QUERY_BUDGET, sensitivities up to this stay in range

_UNIT = {"zcdp": "ρ", "puredp": "ε"}
_PRODUCTION_2020 = "about twice the 2020 production passes"


class BudgetLimitError(ValueError):
    """A budget (or the noise it buys) outside the limits the system accepts."""


def show(value: Fraction | float | int, digits: int = 4) -> str:
    """A budget or noise parameter for a message: 4 significant digits, any magnitude."""
    if isinstance(value, float) and math.isinf(value):
        return "Infinity"
    x = Fraction(value)
    if x == 0:
        return "0"
    with localcontext() as context:
        context.prec = digits
        number = (Decimal(x.numerator) / Decimal(x.denominator)).normalize()
    text = format(number, "f" if -5 <= number.adjusted() <= 6 else "e")
    return text.replace("e+", "e")


def show_against(value: Fraction | float, bound: Fraction | float) -> str:
    """``value`` with as many digits as it takes to read differently from ``bound`` (a total
    of 10.0001 is not "ρ 10 is above ρ ≤ 10")."""
    for digits in range(4, 40):
        text = show(value, digits)
        if Fraction(value) == Fraction(bound) or text != show(bound, digits):
            return text
    return show(value, 40)


def _unit(definition: str) -> str:
    key = str(definition).lower()
    if key not in _UNIT:
        raise ValueError(f"Invalid privacy definition: {definition!r} (use 'zcdp' or 'puredp')")
    return _UNIT[key]


def _applies(budget: Fraction | float) -> bool:
    """Limits apply to positive finite budgets (0: not measured; Infinity: no noise)."""
    return not (isinstance(budget, float) and math.isinf(budget)) and budget > 0


def query_ceiling_problem(definition: str, budget: Fraction | float, what: str) -> str | None:
    """Why one query's budget is above the ceiling (more than a whole pass may spend), or None."""
    problem = pass_total_problem(definition, budget, what)
    if problem is None:
        return None
    return f"{problem}; its noise would be negligible and the counts effectively exact, not private"


def query_floor_problem(definition: str, budget: Fraction | float, what: str) -> str | None:
    """Why one query's budget is below :data:`MIN_QUERY_BUDGET`, or None."""
    if not _applies(budget):
        return None
    key, unit = str(definition).lower(), _unit(definition)
    floor = MIN_QUERY_BUDGET[key]
    if budget >= floor:
        return None
    if key == "zcdp":
        noise = (
            f"its noise σ² = Δ²/(2ρ) would be {show(1 / (2 * Fraction(budget)))}·Δ² at "
            f"sensitivity Δ, while the exact sampler supports σ² ≤ "
            f"{show(SAMPLER_MAX_SIGMA_SQUARED)} in reasonable time"
        )
    else:
        noise = (
            f"its noise scale Δ/ε would be {show(1 / Fraction(budget))}·Δ at sensitivity Δ, "
            f"while the exact sampler supports scales ≤ {show(SAMPLER_MAX_SCALE)} in "
            "reasonable time"
        )
    return (
        f"{what}: {unit} {show_against(budget, floor)} is below the smallest per-query budget "
        f"({unit} ≥ {show(floor)}): {noise}; a query this noisy releases nothing useful"
    )


def query_budget_problem(definition: str, budget: Fraction | float, what: str) -> str | None:
    """Why the budget of one query is refused (ceiling or floor), or None when accepted."""
    return query_ceiling_problem(definition, budget, what) or query_floor_problem(
        definition, budget, what
    )


def pass_total_problem(definition: str, total: Fraction | float, what: str) -> str | None:
    """Why a pass's composed total is refused (above :data:`MAX_PASS_TOTAL`), or None."""
    if not _applies(total):
        return None
    key, unit = str(definition).lower(), _unit(definition)
    ceiling = MAX_PASS_TOTAL[key]
    if total > ceiling:
        return (
            f"{what}: {unit} {show_against(total, ceiling)} is above the largest total a pass "
            f"may spend ({unit} ≤ {show(ceiling)}, {_PRODUCTION_2020})"
        )
    return None


def noise_problem(
    definition: str, budget: Fraction | float, noise_parameter: Fraction, what: str
) -> str | None:
    """Why the noise a budget buys is refused: beyond the exact samplers' fast range, or None.

    ``noise_parameter`` is σ² (zCDP) or the geometric scale (pure DP) for the query's own
    sensitivity; this is the check that holds whatever the sensitivity.
    """
    key, unit = str(definition).lower(), _unit(definition)
    name, limit = (
        ("σ²", SAMPLER_MAX_SIGMA_SQUARED) if key == "zcdp" else ("scale", SAMPLER_MAX_SCALE)
    )
    if noise_parameter > limit:
        return (
            f"{what}: {unit} {show(budget)}: noise {name} would be {show(noise_parameter)}, "
            f"beyond what the exact sampler supports in reasonable time ({name} ≤ {show(limit)}); "
            "a query this noisy releases nothing useful"
        )
    return None


def _raise(problem: str | None) -> None:
    if problem is not None:
        raise BudgetLimitError(problem)


def check_query_budget(definition: str, budget: Fraction | float, what: str = "budget") -> None:
    """Raise :class:`BudgetLimitError` unless one query's budget is within the limits."""
    _raise(query_budget_problem(definition, budget, what))


def check_pass_total(definition: str, total: Fraction | float, what: str = "pass") -> None:
    """Raise :class:`BudgetLimitError` when a pass's total is above :data:`MAX_PASS_TOTAL`."""
    _raise(pass_total_problem(definition, total, what))


def check_noise(
    definition: str, budget: Fraction | float, noise_parameter: Fraction, what: str = "budget"
) -> None:
    """Raise :class:`BudgetLimitError` when the noise lies beyond the samplers' fast range."""
    _raise(noise_problem(definition, budget, noise_parameter, what))
