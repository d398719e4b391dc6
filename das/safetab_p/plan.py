"""The SafeTab-P measurement plan: the measurements of every tabulated population-group level.

Per level with budget B (SafeTab-P paper §3): stage 1 measures every adaptive group's total with
B·f; stage 2 measures each group's chosen workload with B·(1−f). At USA / STATE / PR-STATE the
DETAILED_ONLY iterations get a total only, with the full budget B and no stage 1. A person's
rows in one level fall partly in adaptive and partly in total-only groups, so the level is one
*partition* with two *branches* (adaptive: stage 1 + stage 2; total-only) and costs B once
(generalised parallel composition; see :mod:`das.privacy.accounting`).
"""

from __future__ import annotations

from collections.abc import Collection
from fractions import Fraction
from pathlib import Path

from das.privacy.accounting import Measurement
from das.safetab_p.stability import detailed_only_levels, l2_from_stability, stability
from das.specs.config import (
    PopulationGroupLevel,
    PrivacyDefinition,
    SafeTabPConfig,
    load_safetab_p_config,
)
from das.specs.race_specs import SPEC_FILES, load_race_specs

SAFETAB_CONFIDENCE = 0.95  # the paper's MOE confidence (Table 7)


def query_sensitivity(config: SafeTabPConfig, stability_value: int) -> Fraction:
    """L2 sensitivity √stability under zCDP, L1 sensitivity = stability under pure DP."""
    if config.privacy_defn is PrivacyDefinition.ZCDP:
        return l2_from_stability(stability_value)
    return Fraction(stability_value)


def plan_safetab_p(
    config: SafeTabPConfig,
    stability_value: int,
    detailed_only_iteration_levels: Collection[int] = (),
) -> list[Measurement]:
    """Every measurement of the enabled passes, levels in configuration order.

    ``detailed_only_iteration_levels`` lists the iteration levels whose spec has DETAILED_ONLY
    iterations (measured total-only at USA / STATE / PR-STATE).
    """
    sensitivity = query_sensitivity(config, stability_value)
    fraction = config.stage_1_fraction
    measurements: list[Measurement] = []
    for level in config.tabulated_levels():
        budget = config.budgets[level]
        stages = [
            ("stage-1", "adaptive", budget * fraction),
            ("stage-2", "adaptive", budget * (1 - fraction)),
        ]
        if (
            level.geography.is_state_or_above
            and level.iteration_level in detailed_only_iteration_levels
        ):
            stages.append(("total-only", "total-only", budget))
        measurements.extend(
            _measurement(config, level, stage, branch, stage_budget, sensitivity)
            for stage, branch, stage_budget in stages
        )
    return measurements


def _measurement(
    config: SafeTabPConfig,
    level: PopulationGroupLevel,
    stage: str,
    branch: str,
    budget: Fraction | float,
    sensitivity: Fraction,
) -> Measurement:
    pass_name = level.geography.pass_name
    level_name = f"{pass_name}/{level.geography.value}/{level.iteration_level}"
    return Measurement.create(
        f"{level_name}/{stage}",
        config.privacy_defn.value,
        budget,
        sensitivity,
        partition=level_name,
        branch=branch,
        max_cell_change=1,
        product="safetab-p",
        **{"pass": pass_name},
        geography=level.geography.value,
        iteration_level=str(level.iteration_level),
        stage=stage,
        confidence=SAFETAB_CONFIDENCE,
    )


def plan_safetab_p_from_files(
    config_path: str | Path, specs_dir: str | Path | None = None
) -> tuple[SafeTabPConfig, list[Measurement]]:
    """Load a config and its spec files (default: beside the config) and plan every query."""
    config = load_safetab_p_config(config_path)
    directory = Path(specs_dir) if specs_dir is not None else Path(config_path).parent
    missing = [name for name in SPEC_FILES if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{directory}: SafeTab-P spec files missing ({', '.join(missing)}); the stability "
            "is computed from them. Put them beside config.json or pass --specs DIR."
        )
    specs = load_race_specs(directory)
    measurements = plan_safetab_p(
        config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
    )
    return config, measurements
