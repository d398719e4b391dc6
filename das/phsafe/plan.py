"""The PHSafe measurement plan: one measurement per (table, geography level, iteration level).

Sensitivity (PHSafe paper §5): tables built by joining persons to their housing unit, truncated
to τ persons per unit, have Δ = 2τ + 2; unit-only tables (PH1/PH5/PH8 denominators) have Δ = 2.
A budget of 0 skips the query. PHSafe states its margins of error at 90%.
"""

from __future__ import annotations

from fractions import Fraction

from das.privacy.accounting import Measurement
from das.specs.config import PHSAFE_JOINED_TABLES, PHSafeConfig

PHSAFE_CONFIDENCE = 0.90


def table_sensitivity(config: PHSafeConfig, table: str) -> Fraction:
    """Δ = 2τ + 2 for joined tables, 2 for unit-only tables."""
    if table in PHSAFE_JOINED_TABLES:
        return Fraction(2 * config.tau[table] + 2)
    return Fraction(2)


def plan_phsafe(config: PHSafeConfig) -> list[Measurement]:
    """Every measurement of a PHSafe pass, in configuration order."""
    pass_name = config.pass_name
    return [
        Measurement.create(
            f"{pass_name}/{key.table}/{key.geography.value}/{key.iteration_level.value}",
            config.privacy_defn.value,
            config.privacy_budget[key],
            table_sensitivity(config, key.table),
            product="phsafe",
            **{"pass": pass_name},
            table=key.table,
            geography=key.geography.value,
            iteration_level=key.iteration_level.value,
            stage="single",
            confidence=PHSAFE_CONFIDENCE,
        )
        for key in config.measured_queries()
    ]
