"""The largest privacy loss the system accepts per pass (placeholder; see the limits branch)."""

from __future__ import annotations

from fractions import Fraction

MAX_PASS_TOTAL: dict[str, Fraction] = {"zcdp": Fraction(10), "puredp": Fraction(30)}
