"""SafeTab-P on the page (what SafeTEx did): per level budget ↔ 95% MOE, noise, thresholds,
suppression, totals per pass, and the curves of the plots.

Every number comes from the engine: the plan (:func:`das.safetab_p.plan.plan_safetab_p`), the
report `das budget report` prints (:func:`das.budget.config_report.plan_report`), the calculators
(:mod:`das.privacy.calculators`) and the noise distributions of the planned measurements.

The MOE the user edits is the 95% margin of error of a stage-2 cell (paper Table 7): under
zCDP the papers' z·σ with σ² = Δ²/(2·(1−f)·ρ) (``moe_gaussian_bound`` of the report), solved
for ρ by :func:`~das.privacy.calculators.rho_for_moe`; under pure DP the exact integer margin
of the two-sided geometric, solved by :func:`~das.privacy.calculators.epsilon_for_moe`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from das.budget.config_report import plan_report
from das.privacy import calculators
from das.privacy.accounting import Measurement
from das.privacy.distributions import suppression_threshold
from das.safetab_p.measure import N_BINS
from das.safetab_p.plan import SAFETAB_CONFIDENCE, plan_safetab_p, query_sensitivity
from das.specs.config import (
    SAFETAB_ITERATION_LEVELS,
    PopulationGroupLevel,
    PrivacyDefinition,
    SafeTabGeography,
    SafeTabPConfig,
)
from explorer.params import ParameterError, safetab_p_config, to_transport
from explorer.totals import budget_grid, epsilon_against_delta

ALL_LEVELS = tuple(
    PopulationGroupLevel(geography, level)
    for geography in SafeTabGeography
    for level in SAFETAB_ITERATION_LEVELS
)
LEVEL_BY_KEY = {str(level): level for level in ALL_LEVELS}
# Cells of each workload's T2 breakdown: workload 0 is a total; 1/2/3 are sex × 4/9/23 ages.
WORKLOAD_CELLS = tuple(1 if w == 0 else 2 * int(N_BINS[w]) for w in range(4))


def budget_key(level: PopulationGroupLevel) -> str:
    """The production key of a level's budget, e.g. ``privacy_budget_p_level_2_county``."""
    return f"privacy_budget_p_level_{level.iteration_level}_{level.geography.config_suffix}"


def _level(key: str) -> PopulationGroupLevel:
    try:
        return LEVEL_BY_KEY[key]
    except KeyError:
        raise ParameterError(f"unknown population-group level {key!r}") from None


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isinf(number) or math.isnan(number) else number


def budget_for_moe(
    config: SafeTabPConfig, stability_value: int, moe: float, decimals: int | None
) -> float:
    """The level budget whose stage-2 cells have this 95% MOE (rounded to ``decimals``)."""
    sensitivity = query_sensitivity(config, stability_value)
    stage_2 = 1 - config.stage_1_fraction
    if config.privacy_defn is PrivacyDefinition.ZCDP:
        budget = calculators.rho_for_moe(
            moe, SAFETAB_CONFIDENCE, sensitivity, stage_fraction=stage_2
        ).rho_total
    else:
        budget = calculators.epsilon_for_moe(
            moe, SAFETAB_CONFIDENCE, sensitivity, stage_fraction=stage_2
        ).epsilon_total
    if decimals is not None:
        budget = round(budget, decimals)
        if budget <= 0:
            raise ParameterError(
                f"MOE {moe:g} needs a budget that rounds to 0 at {decimals} decimals"
            )
    return float(budget)


def apply_targets(
    state: dict[str, Any], targets: dict[str, float], decimals: int | None = 6
) -> dict[str, Any]:
    """A copy of the parameter set with each targeted level's budget solved from its MOE."""
    if not targets:
        return state
    config = safetab_p_config(state["config"])
    raw = dict(state["config"])
    for key, moe in targets.items():
        level = _level(key)
        if not (isinstance(moe, int | float) and moe > 0 and math.isfinite(moe)):
            raise ParameterError(f"{key}: MOE target must be a number > 0")
        raw[budget_key(level)] = budget_for_moe(config, state["stability"], float(moe), decimals)
    return {**state, "config": raw}


def _stages(measurements: list[Measurement]) -> dict[str, dict[str, Measurement]]:
    grouped: dict[str, dict[str, Measurement]] = {}
    for item in measurements:
        grouped.setdefault(str(item.partition), {})[str(item.metadata["stage"])] = item
    return grouped


def _size_grid(thresholds: tuple[int, ...], sigma: float) -> np.ndarray:
    """True sizes for the workload plot: log-spaced, dense (±5σ) around every threshold."""
    top = 1.5 * thresholds[-1]
    points = [np.unique(np.round(np.geomspace(1, top, 160)))]
    for t in thresholds:
        points.append(np.linspace(max(t - 5 * sigma, 1), t + 5 * sigma, 41).round())
    return np.unique(np.concatenate(points))


def _level_row(
    config: SafeTabPConfig,
    level: PopulationGroupLevel,
    stages: dict[str, Measurement] | None,
    rows: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    budget = config.budgets[level]
    row: dict[str, Any] = {
        "key": str(level),
        "pass": level.geography.pass_name,
        "geography": level.geography.value,
        "iteration_level": level.iteration_level,
        "budget_key": budget_key(level),
        "budget": to_transport(float(budget)),
        "thresholds": list(config.thresholds.get(level, ())) or None,
        "tabulated": stages is not None,
        "state_or_above": level.geography.is_state_or_above,
    }
    if stages is None:
        return row
    zcdp = config.privacy_defn is PrivacyDefinition.ZCDP
    for stage, measurement in stages.items():
        report_row = rows[measurement.name]
        parameter = report_row[report_row["noise_parameter"]]
        row[stage.replace("-", "_")] = {
            "budget": report_row["budget"],
            "noise_parameter": report_row["noise_parameter"],
            "value": parameter,
            "variance": report_row["variance"],
            "moe": report_row["moe"],
            "moe_gaussian_bound": report_row.get("moe_gaussian_bound"),
        }
    stage_2 = rows[stages["stage-2"].name]
    row["moe"] = stage_2["moe_gaussian_bound"] if zcdp else stage_2["moe"]
    row["moe_exact"] = stage_2["moe"]
    moe_sums = calculators.sum_moe(stage_2["variance"], WORKLOAD_CELLS, SAFETAB_CONFIDENCE)
    row["workload_total_moe"] = [_number(value) for value in moe_sums]
    if not level.geography.is_state_or_above:
        row["suppression_threshold"] = suppression_threshold(
            stages["stage-2"].mechanism.distribution, config.zero_suppression_chance
        )
    return row


def _curves(
    config: SafeTabPConfig,
    stages_by_level: dict[str, dict[str, Measurement]],
    levels: list[dict[str, Any]],
    sensitivity: Any,
) -> dict[str, Any]:
    workload: dict[str, Any] = {}
    suppression: dict[str, Any] = {}
    for row in levels:
        if not row["tabulated"] or not isinstance(row["budget"], float):
            continue
        stages = stages_by_level[f"{row['pass']}/{row['geography']}/{row['iteration_level']}"]
        stage_1 = stages["stage-1"].mechanism.distribution
        thresholds = tuple(row["thresholds"])
        sizes = _size_grid(thresholds, stage_1.std)
        classes = calculators.threshold_class_probabilities(stage_1, thresholds, sizes)
        workload[row["key"]] = {"n": sizes.tolist(), "p": classes.T.tolist()}
        if "suppression_threshold" in row:
            threshold = row["suppression_threshold"]
            stage_2 = stages["stage-2"].mechanism.distribution
            top = max(3 * threshold, threshold + 6 * stage_2.std, 10)
            sizes = np.unique(np.linspace(0, top, 241).round())
            given_total = calculators.suppression_probability(stage_2, threshold, sizes)
            level_0 = calculators.threshold_class_probabilities(stage_1, thresholds, sizes)[:, 0]
            suppression[row["key"]] = {
                "n": sizes.tolist(),
                "threshold": threshold,
                "p_given_total_only": given_total.tolist(),
                "p": (given_total * level_0).tolist(),
            }
    grid = budget_grid()
    stage_2_share = 1 - config.stage_1_fraction
    if config.privacy_defn is PrivacyDefinition.ZCDP:
        moe = [
            calculators.moe_for_rho(b, SAFETAB_CONFIDENCE, sensitivity, stage_2_share) for b in grid
        ]
    else:
        moe = [
            calculators.moe_for_epsilon(b, SAFETAB_CONFIDENCE, sensitivity, stage_2_share)
            for b in grid
        ]
    points = [
        {"key": row["key"], "budget": row["budget"], "moe": row["moe"]}
        for row in levels
        if row["tabulated"] and isinstance(row["budget"], float)
    ]
    return {
        "workload": workload,
        "suppression": suppression,
        "moe_vs_budget": {
            "budget": grid.tolist(),
            "moe": [float(m) for m in moe],
            "points": points,
        },
    }


def evaluate(
    state: dict[str, Any],
    delta: float = 1e-10,
    targets: dict[str, float] | None = None,
    decimals: int | None = 6,
    curves: bool = True,
) -> dict[str, Any]:
    """Everything the SafeTab-P panel shows for a parameter set (after solving MOE targets)."""
    if not 0 < delta < 1:
        raise ParameterError(f"δ must be strictly between 0 and 1, got {delta}")
    state = apply_targets(state, targets or {}, decimals)
    config = safetab_p_config(state["config"])
    stability_value = int(state["stability"])
    detailed_only = state["detailed_only_iteration_levels"]
    measurements = plan_safetab_p(config, stability_value, detailed_only)
    report = plan_report(
        "safetab-p", config.privacy_defn.value, measurements, delta, state.get("source", "")
    )
    report_rows = {
        row["name"]: row for summary in report["passes"].values() for row in summary["queries"]
    }
    stages_by_level = _stages(measurements)
    levels = [
        _level_row(
            config,
            level,
            stages_by_level.get(
                f"{level.geography.pass_name}/{level.geography.value}/{level.iteration_level}"
            ),
            report_rows,
        )
        for level in ALL_LEVELS
        if level in config.budgets
    ]
    sensitivity = query_sensitivity(config, stability_value)
    result: dict[str, Any] = {
        "state": state,
        "privacy_defn": config.privacy_defn.value,
        "unit": "rho" if config.privacy_defn is PrivacyDefinition.ZCDP else "epsilon",
        "stage_1_fraction": float(config.stage_1_fraction),
        "zero_suppression_chance": config.zero_suppression_chance,
        "stability": stability_value,
        "sensitivity": float(sensitivity),
        "confidence": SAFETAB_CONFIDENCE,
        "delta": delta,
        "levels": levels,
        "report": report,
    }
    if curves:
        result["curves"] = _curves(config, stages_by_level, levels, sensitivity)
        result["curves"]["epsilon_delta"] = {
            pass_name: epsilon_against_delta(
                [m for m in measurements if m.metadata["pass"] == pass_name]
            )
            for pass_name in report["passes"]
        }
    return result
