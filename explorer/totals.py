"""Whole-run privacy figures shared by both products: (ε, δ) against δ for each pass."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from das.privacy.accounting import Measurement, PrivacyAccountant, summarize

# δ from 1e-3 down to 1e-16: four points a decade under zCDP (closed forms), one a decade under
# pure DP (each point minimises the exact geometric Rényi bound over α: ~0.14 s a point).
DELTAS = tuple(float(10.0 ** -(k / 4)) for k in range(12, 65))
PURE_DP_DELTAS = tuple(float(10.0**-k) for k in range(3, 17))


def _number(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else float(value)


def epsilon_against_delta(
    measurements: Sequence[Measurement], deltas: Sequence[float] | None = None
) -> dict[str, Any]:
    """(ε, δ) of one pass at every δ, by the same conversions as `das budget report`.

    zCDP: the analytic ρ + 2√(ρ ln 1/δ) and the optimal Rényi conversion; pure DP: ε itself
    and the exact Rényi conversion of the geometric ledger (both from
    :func:`das.privacy.accounting.summarize`).
    """
    accountant = PrivacyAccountant(measurements[0].definition, math.inf)
    for measurement in measurements:
        accountant.charge(measurement)
    if deltas is None:
        deltas = DELTAS if accountant.definition == "zcdp" else PURE_DP_DELTAS
    summaries = [summarize(accountant, delta) for delta in deltas]
    out: dict[str, Any] = {"delta": list(deltas)}
    if accountant.definition == "zcdp":
        out["epsilon_analytic"] = [_number(s.epsilon_analytic) for s in summaries]
        out["epsilon_optimal"] = [_number(s.epsilon_optimal) for s in summaries]
    else:
        out["epsilon_rdp"] = [_number(s.epsilon_rdp) for s in summaries]
        out["epsilon_pure"] = [_number(float(s.unbounded)) for s in summaries]
    return out


def budget_grid(low: float = 1e-4, high: float = 10.0, points: int = 121) -> np.ndarray:
    """Budgets on a log scale for MOE-against-budget curves."""
    return np.geomspace(low, high, points)
