"""Exact privacy amounts as the ledger counts and shows them.

Cumulative totals are exact: under zCDP they add ρ (a pure-DP ε counts as ε²/2); under pure DP
they add ε (a zCDP spend has no pure-DP equivalent: ∞). Amounts are :class:`~fractions.Fraction`
or ``float('inf')`` (an ``Infinity`` budget: no noise); they are written into entries as exact
fraction text and shown to people as the decimal they would type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from das.privacy.mechanisms import ZCDP, Budget, fraction_text, parse_fraction_text

INFINITY = float("inf")


def unit(definition: str) -> str:
    """The name of a definition's budget, as refusals say it: ``rho`` or ``epsilon``."""
    return "rho" if definition == ZCDP else "epsilon"


def decimal_text(value: Budget) -> str:
    """An exact budget as the operator types it: a finite decimal when there is one
    (``"9.888"``), else ``"n/d"``; ``"Infinity"`` for ∞."""
    if isinstance(value, float):
        return "Infinity"
    value = Fraction(value)
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    digits = max(twos, fives)
    scaled = value * 10**digits
    sign = "-" if scaled < 0 else ""
    whole = str(abs(scaled.numerator))
    if digits == 0:
        return sign + whole
    whole = whole.rjust(digits + 1, "0")
    return f"{sign}{whole[:-digits]}.{whole[-digits:]}".rstrip("0").rstrip(".")


def parse_total(text: str) -> Budget:
    """A cumulative total as typed by the operator (``"9.888"``, ``"1/3"``, ``"Infinity"``)."""
    cleaned = str(text).strip()
    if cleaned.lower() in ("inf", "infinity"):
        return INFINITY
    try:
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a number: {text!r}") from None
    if value < 0:
        raise ValueError(f"a cumulative total cannot be negative: {text!r}")
    return value


def in_definition(definition: str, spend_definition: str, budget: Budget) -> Budget:
    """A recorded spend in the unit of ``definition`` (see the module docstring)."""
    if isinstance(budget, float):
        return INFINITY
    if definition == spend_definition:
        return Fraction(budget)
    if definition == ZCDP:  # an ε-DP spend is ε²/2-zCDP
        return Fraction(budget) ** 2 / 2
    return INFINITY  # zCDP has no pure-DP equivalent


def add(a: Budget, b: Budget) -> Budget:
    if isinstance(a, float) or isinstance(b, float):
        return INFINITY
    return Fraction(a) + Fraction(b)


@dataclass(frozen=True)
class PassSpend:
    """One pass of an authorized spend: before, this run, the new cumulative total."""

    pass_name: str
    definition: str
    prior: Budget
    this_run: Budget
    cumulative: Budget
    prior_runs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass": self.pass_name,
            "definition": self.definition,
            "prior": decimal_text(self.prior),
            "this_run": decimal_text(self.this_run),
            "cumulative": decimal_text(self.cumulative),
            "prior_runs": list(self.prior_runs),
        }

    def exact(self) -> dict[str, Any]:
        return {
            "pass": self.pass_name,
            "definition": self.definition,
            "prior": fraction_text(self.prior),
            "this_run": fraction_text(self.this_run),
            "cumulative": fraction_text(self.cumulative),
            "prior_runs": list(self.prior_runs),
        }

    @classmethod
    def from_exact(cls, data: Mapping[str, Any]) -> PassSpend:
        return cls(
            str(data["pass"]),
            str(data["definition"]),
            parse_fraction_text(data["prior"]),
            parse_fraction_text(data["this_run"]),
            parse_fraction_text(data["cumulative"]),
            tuple(data.get("prior_runs", ())),
        )
