"""Run the trials of every query family and turn them into claimed-versus-lower-bound rows.

A *family* is what one row of the report audits: a set of measurements with one claim (a
SafeTab-P population-group level, a PHSafe table, a single mechanism) and the answers the
added person moves in it. A *composite* row audits several families together (a whole pass:
the statistic is the sum of its families' statistics over the same releases, and the claim
their composed ledger total).

Per row and privacy definition:

* pure DP (geometric): claimed ε against a lower bound on ε (δ = 0);
* zCDP (discrete Gaussian): claimed ρ against a lower bound on ρ (binary Rényi bound), and
  the claimed (ε, δ) — the ledger's optimal conversion of ρ at the run's δ — against a lower
  bound on ε at that δ.

Each bound comes from its own threshold test (:func:`~das.privacy_audit.attack.threshold_test`).
All the bounds of one report hold *together* with probability at least the stated confidence
(Bonferroni over every statement of the report). A row whose lower bound exceeds its claim is
evidence, at that confidence, that the implementation leaks more than its ledger says.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from das.privacy import conversions
from das.privacy.mechanisms import PUREDP, ZCDP, Budget, fraction_text
from das.privacy_audit.attack import ThresholdTest, threshold_test
from das.privacy_audit.bounds import (
    COARSE_RENYI_ORDERS,
    epsilon_lower_bound,
    per_bound_confidence,
    rho_lower_bound,
)
from das.privacy_audit.neighbours import Moves, simulate

DEFAULT_CONFIDENCE = 0.95
DEFAULT_DELTA = 1e-10
DEFAULT_PRODUCT_TRIALS = 100_000  # the minimum; SafeTab-P moves ~200 answers a trial

MEANING = (
    "A lower bound is what an attack on the implementation proves: if the mechanism leaked "
    "less, tests as accurate as these would happen with probability below 1 − confidence. "
    "The claim is what the privacy proof and the ledger promise (an upper bound). A sound "
    "release has every lower bound at or below its claim; a lower bound above it is evidence "
    "of a broken mechanism."
)


@dataclass(frozen=True)
class Family:
    """One audited row: measurements with one claim, and the answers the person moves in them."""

    name: str
    definition: str  # "zcdp" or "puredp"
    claimed: Budget  # ρ or ε, exact, from the ledger / plan
    moves: tuple[Moves, ...]
    measurements: int  # ledger entries in the family

    @property
    def cells_moved(self) -> int:
        return sum(move.cells_moved for move in self.moves)

    @property
    def measurements_moved(self) -> int:
        return sum(move.measurements_moved for move in self.moves)

    @property
    def realised(self) -> float:
        """Exact loss of this neighbour (sum over moved answers, as the mechanisms compute it)."""
        return float(sum(move.realised_loss for move in self.moves))


@dataclass(frozen=True)
class Composite:
    """A row over several families (e.g. a pass): their statistics summed, their claim composed."""

    name: str
    members: tuple[str, ...]
    claimed: Budget


@dataclass(frozen=True)
class AuditRow:
    """Claimed versus lower bound for one family or composite."""

    name: str
    definition: str
    claimed: Budget
    realised: float
    measurements: int
    measurements_moved: int
    cells_moved: int
    delta: float  # δ of the ε statement (0 under pure DP)
    claimed_epsilon: float
    epsilon_lower_bound: float
    epsilon_test: ThresholdTest | None
    rho_lower_bound: float | None = None
    rho_test: ThresholdTest | None = None

    @property
    def exceeded(self) -> bool:
        """True when some lower bound is above its claim (the audit found a leak)."""
        if self.epsilon_lower_bound > self.claimed_epsilon:
            return True
        return self.rho_lower_bound is not None and self.rho_lower_bound > float(self.claimed)

    @property
    def budget_lower_bound(self) -> float:
        """The lower bound in the budget's own unit: ρ under zCDP, ε under pure DP."""
        if self.definition == ZCDP:
            return float(self.rho_lower_bound or 0.0)
        return self.epsilon_lower_bound

    def to_dict(self) -> dict[str, Any]:
        """``claimed``/``lower_bound`` are ε (pure DP) or ε at ``delta`` (zCDP), as the
        `mechanism` command prints them; zCDP rows add ``rho``/``rho_lower_bound``."""
        out: dict[str, Any] = {
            "family": self.name,
            "privacy_defn": self.definition,
            "claimed": _number(self.claimed_epsilon),
            "lower_bound": self.epsilon_lower_bound,
            "delta": self.delta,
            "realised_epsilon" if self.definition == PUREDP else "realised_rho": self.realised,
            "measurements": self.measurements,
            "measurements_moved": self.measurements_moved,
            "cells_moved": self.cells_moved,
            "exceeded": self.exceeded,
            "epsilon_test": None if self.epsilon_test is None else self.epsilon_test.to_dict(),
        }
        if self.definition == ZCDP:
            out["rho"] = _number(self.claimed)
            out["rho_exact"] = fraction_text(self.claimed)
            out["rho_lower_bound"] = self.rho_lower_bound
            out["rho_test"] = None if self.rho_test is None else self.rho_test.to_dict()
        else:
            out["epsilon_exact"] = fraction_text(self.claimed)
        return out


def _number(value: Budget | float) -> float | None:
    number = float(value)
    return None if math.isinf(number) else number


@dataclass(frozen=True)
class AuditReport:
    """The rows of one audit and everything needed to read them."""

    subject: str  # "mechanism", "safetab-p", "phsafe"
    title: str
    confidence: float
    trials: int  # releases simulated on D, and as many on D′
    delta: float
    randomness: str
    seconds: float  # drawing the trials and bounding (not building the neighbours)
    rows: tuple[AuditRow, ...]
    neighbours: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not any(row.exceeded for row in self.rows)

    @property
    def seconds_per_million_trials(self) -> float:
        return self.seconds * 1e6 / self.trials

    def to_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "title": self.title,
            "confidence": self.confidence,
            "trials": self.trials,
            "delta": self.delta,
            "randomness": self.randomness,
            "seconds": self.seconds,
            "seconds_per_million_trials": self.seconds_per_million_trials,
            "ok": self.ok,
            "meaning": MEANING,
            "neighbours": list(self.neighbours),
            "rows": [row.to_dict() for row in self.rows],
            "notes": list(self.notes),
        }


def claimed_epsilon(definition: str, claimed: Budget, delta: float) -> float:
    """The ε a claim implies: ε itself (pure DP) or the optimal conversion of ρ at δ (zCDP)."""
    if definition == PUREDP:
        return float(claimed)
    return conversions.zcdp_to_approx_dp_optimal(claimed, delta)


def audited(
    subject: str,
    title: str,
    families: Sequence[Family],
    composites: Sequence[Composite] = (),
    *,
    trials: int,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    rng: Any = None,
    neighbours: Sequence[dict[str, Any]] = (),
    notes: Sequence[str] = (),
) -> AuditReport:
    """:func:`run_audit` of ``families`` and ``composites``, as a report."""
    rows, seconds = run_audit(
        families, composites, trials=trials, confidence=confidence, delta=delta, rng=rng
    )
    return AuditReport(
        subject=subject,
        title=title,
        confidence=confidence,
        trials=trials,
        delta=delta,
        randomness=describe_randomness(rng),
        seconds=seconds,
        rows=tuple(rows),
        neighbours=tuple(neighbours),
        notes=tuple(notes),
    )


def describe_randomness(rng: Any) -> str:
    if rng is None:
        from das.privacy.rng import default_source

        return default_source().describe()
    describe = getattr(rng, "describe", None)
    return describe() if describe is not None else type(rng).__name__


def _statements(definition: str) -> int:
    return 2 if definition == ZCDP else 1


def _row(
    name: str,
    definition: str,
    claimed: Budget,
    realised: float,
    counts: tuple[int, int, int],
    statistics: tuple[np.ndarray, np.ndarray] | None,
    confidence: float,
    delta: float,
) -> AuditRow:
    """Bounds for one row from its statistics on D and D′ (None: nothing moved, bound 0)."""
    epsilon_delta = 0.0 if definition == PUREDP else delta
    epsilon_test = rho_test = None
    epsilon_lb = 0.0
    rho_lb: float | None = 0.0 if definition == ZCDP else None
    if statistics is not None:
        null, alternative = statistics
        epsilon_test = threshold_test(
            null,
            alternative,
            lambda f, g: epsilon_lower_bound(f, g, epsilon_delta),
            confidence,
        )
        epsilon_lb = epsilon_test.bound
        if definition == ZCDP:
            rho_test = threshold_test(
                null,
                alternative,
                rho_lower_bound,
                confidence,
                ranking=lambda f, g: rho_lower_bound(f, g, COARSE_RENYI_ORDERS),
            )
            rho_lb = rho_test.bound
    measurements, measurements_moved, cells_moved = counts
    return AuditRow(
        name=name,
        definition=definition,
        claimed=claimed,
        realised=realised,
        measurements=measurements,
        measurements_moved=measurements_moved,
        cells_moved=cells_moved,
        delta=epsilon_delta,
        claimed_epsilon=claimed_epsilon(definition, claimed, delta),
        epsilon_lower_bound=epsilon_lb,
        epsilon_test=epsilon_test,
        rho_lower_bound=rho_lb,
        rho_test=rho_test,
    )


def run_audit(
    families: Sequence[Family],
    composites: Sequence[Composite] = (),
    *,
    trials: int,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    rng: Any = None,
) -> tuple[list[AuditRow], float]:
    """Simulate every family on D and D′, bound each row; (rows, seconds spent).

    Families are simulated one at a time and only composite sums are kept, so memory stays at
    a few arrays of ``trials`` floats whatever the number of families.
    """
    if trials < 4:
        raise ValueError(f"Invalid number of trials: {trials} (need >= 4)")
    definitions = {family.definition for family in families}
    if len(definitions) > 1:
        raise ValueError("one audit covers one privacy definition")
    by_name = {family.name: family for family in families}
    for composite in composites:
        unknown = [name for name in composite.members if name not in by_name]
        if unknown:
            raise ValueError(f"{composite.name}: unknown families {unknown}")
    moving = [family for family in families if family.cells_moved]
    moving_composites = [c for c in composites if any(by_name[m].cells_moved for m in c.members)]
    definition = definitions.pop() if definitions else ZCDP
    statements = (len(moving) + len(moving_composites)) * _statements(definition)
    each = per_bound_confidence(confidence, max(statements, 1))

    started = time.perf_counter()
    sums = {c.name: [np.zeros(trials), np.zeros(trials)] for c in moving_composites}
    rows: list[AuditRow] = []
    for family in families:
        statistics = None
        if family.cells_moved:
            statistics = (
                simulate(family.moves, 0, trials, rng),
                simulate(family.moves, 1, trials, rng),
            )
            for composite in moving_composites:
                if family.name in composite.members:
                    sums[composite.name][0] += statistics[0]
                    sums[composite.name][1] += statistics[1]
        counts = (family.measurements, family.measurements_moved, family.cells_moved)
        rows.append(
            _row(
                family.name,
                family.definition,
                family.claimed,
                family.realised,
                counts,
                statistics,
                each,
                delta,
            )
        )
    for composite in composites:
        members = [by_name[name] for name in composite.members]
        counts = (
            sum(m.measurements for m in members),
            sum(m.measurements_moved for m in members),
            sum(m.cells_moved for m in members),
        )
        summed = sums.get(composite.name)
        rows.append(
            _row(
                composite.name,
                definition,
                composite.claimed,
                sum(m.realised for m in members),
                counts,
                None if summed is None else (summed[0], summed[1]),
                each,
                delta,
            )
        )
    return rows, time.perf_counter() - started
