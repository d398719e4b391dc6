"""Rows and pass totals of a list of measurements: the product-neutral half of a budget report.

SafeTab-P and PHSafe plans are both lists of :class:`Measurement`. Totals are composed by the
accountant (the one home of composition), then converted to the bounded (change-one-record)
equivalent and to (ε, δ). The per-product report (which plans a config) lives above the
products, in :mod:`das.budget.config_report`: the privacy foundation does not know the products.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from das.privacy.accounting import Measurement, PrivacyAccountant, summarize
from das.privacy.calculators import z_score
from das.privacy.distributions import margin_of_error


def _number(value: Any) -> float | None:
    """Plain JSON number; None for an infinite value (JSON has no Infinity)."""
    as_float = float(value)
    return None if math.isinf(as_float) else as_float


def measurement_row(measurement: Measurement) -> dict[str, Any]:
    """One measurement as a JSON-ready row: identity, budget, sensitivity, noise and MOE.

    ``moe`` is the exact margin of error of the discrete noise at the product's confidence;
    under zCDP ``moe_gaussian_bound`` is the papers' z·σ (SafeTab-P Table 7, PHSafe Table 10).
    """
    meta = measurement.metadata
    confidence = float(meta["confidence"])
    mechanism = measurement.mechanism
    parameter_name, parameter = mechanism.noise_parameter
    row: dict[str, Any] = {
        "name": measurement.name,
        "pass": meta.get("pass"),
        "table": meta.get("table"),
        "geography": meta.get("geography"),
        "iteration_level": meta.get("iteration_level"),
        "stage": meta.get("stage"),
        "branch": measurement.branch,
        "budget": _number(measurement.budget),
        "sensitivity": float(measurement.sensitivity),
        "noise_parameter": parameter_name,
        parameter_name: float(parameter),
        "variance": float(mechanism.variance),
        "confidence": confidence,
        "moe": float(margin_of_error(mechanism.distribution, confidence)),
    }
    if measurement.definition == "zcdp":
        row["moe_gaussian_bound"] = z_score(confidence) * math.sqrt(float(parameter))
    return row


def pass_summary(measurements: Sequence[Measurement], delta: float) -> dict[str, Any]:
    """Totals of one pass (unbounded, bounded, (ε,δ)) composed by the accountant, and its rows."""
    accountant = PrivacyAccountant(measurements[0].definition, math.inf)
    for measurement in measurements:
        accountant.charge(measurement)
    summary = summarize(accountant, delta).to_dict()
    summary["queries"] = [measurement_row(m) for m in measurements]
    return summary
