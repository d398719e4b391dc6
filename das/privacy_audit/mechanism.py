"""Audit one noise mechanism of the ledger on its worst-case neighbour.

The mechanism is the ledger's own (:func:`das.privacy.mechanisms.mechanism_for` from budget
and sensitivity); the neighbour moves integer counts by a vector d whose norm realises the
claimed sensitivity S:

* geometric (pure DP, L1): one cell moved by ⌊S⌋;
* discrete Gaussian (zCDP, L2): the fewest cells whose integer moves have ‖d‖² = ⌊S²⌋ (every
  whole number is a sum of at most four squares; 9 is one cell moved by 3, 2 two cells by 1).

An integer S (or S² for the Gaussian) is realised exactly, so a perfect attack could reach the
claim; otherwise the realised norm is the largest integer one below S.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from das.privacy.mechanisms import PUREDP, ZCDP, exact, mechanism_for
from das.privacy_audit.audit import (
    DEFAULT_CONFIDENCE,
    DEFAULT_DELTA,
    AuditReport,
    Family,
    audited,
)
from das.privacy_audit.neighbours import MovedQuery

MECHANISMS = {"geometric": PUREDP, "discrete-gaussian": ZCDP}


def fewest_squares(total: int) -> list[int]:
    """Positive integers, as few as possible, whose squares sum to ``total`` (Lagrange: ≤ 4)."""
    if total < 1:
        raise ValueError(f"Invalid total: {total} (need >= 1)")

    def search(rest: int, parts: int, largest: int) -> list[int] | None:
        if parts == 1:
            root = math.isqrt(rest)
            return [root] if root * root == rest and 0 < root <= largest else None
        for first in range(min(math.isqrt(rest), largest), 0, -1):
            if first * first * parts < rest:  # the remaining parts cannot catch up
                return None
            tail = search(rest - first * first, parts - 1, first)
            if tail is not None:
                return [first, *tail]
        return None

    for parts in range(1, 5):
        found = search(total, parts, math.isqrt(total))
        if found is not None:
            return found
    raise AssertionError("Lagrange's four-square theorem")  # pragma: no cover


def neighbour_moves(definition: str, sensitivity: Any) -> np.ndarray:
    """The integer moves of the worst-case neighbour for a claimed sensitivity (module doc)."""
    value = exact(sensitivity, "sensitivity")
    if value < 1:
        raise ValueError(f"Invalid sensitivity {value}: an audit needs at least one count move")
    if definition == PUREDP:
        return np.array([math.floor(value)], dtype=np.int64)
    return np.array(fewest_squares(math.floor(value * value)), dtype=np.int64)


def mechanism_family(kind: str, budget: Any, sensitivity: Any, name: str | None = None) -> Family:
    """The ledger's mechanism for (budget, sensitivity) and its worst-case neighbour."""
    if kind not in MECHANISMS:
        raise ValueError(f"Unknown mechanism {kind!r} (use {', '.join(MECHANISMS)})")
    definition = MECHANISMS[kind]
    mechanism = mechanism_for(definition, budget, sensitivity)
    claimed = mechanism.privacy_function(sensitivity)
    query = MovedQuery(kind, mechanism, neighbour_moves(definition, sensitivity))
    label = name or f"{kind} (budget {budget}, sensitivity {sensitivity})"
    return Family(label, definition, claimed, (query,), measurements=1)


def audit_mechanism(
    kind: str,
    budget: Any,
    sensitivity: Any,
    trials: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    rng: Any = None,
) -> AuditReport:
    """Claimed versus lower bound for one mechanism (``rng`` None = the secure source)."""
    family = mechanism_family(kind, budget, sensitivity)
    moves = family.moves[0].delta
    neighbour = {
        "description": "one query's cells moved by the neighbour (D′ − D)",
        "moves": [int(v) for v in moves],
        "realised_sensitivity": float(
            np.abs(moves).sum() if family.definition == PUREDP else math.sqrt((moves**2).sum())
        ),
        "claimed_sensitivity": float(Fraction(exact(sensitivity, "sensitivity"))),
    }
    return audited(
        "mechanism",
        f"Privacy audit: {kind}, budget {budget}, sensitivity {sensitivity}",
        [family],
        trials=trials,
        confidence=confidence,
        delta=delta,
        rng=rng,
        neighbours=[neighbour],
    )
