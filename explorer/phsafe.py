"""PHSafe on the page (what PHExplore did): per table and level τ, Δ, budget ↔ 90% MOE, noise,
totals per pass, MOE curves; and, on a synthetic population only, what τ truncates.

The numbers come from the plan (:func:`das.phsafe.plan.plan_phsafe`, Δ = 2τ+2 for joined
tables, 2 for unit tables), the report of `das budget report`
(:func:`das.budget.config_report.plan_report`) and the calculators. The MOE the user edits is
the 90% margin of error of a cell: under zCDP z·σ with σ² = Δ²/(2ρ) (the papers' figure, PHSafe
Table 10), solved by :func:`~das.privacy.calculators.rho_for_moe`; under pure DP the exact
integer margin of the geometric, solved by :func:`~das.privacy.calculators.epsilon_for_moe`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from das.budget.config_report import plan_report
from das.io.phsafe import input_paths, read_geo, read_persons, read_units
from das.phsafe.engine import prepare_records
from das.phsafe.plan import PHSAFE_CONFIDENCE, plan_phsafe, table_sensitivity
from das.phsafe.tables import person_filter, unit_filter
from das.phsafe.truncate import truncation_profile
from das.privacy import calculators
from das.specs.config import PHSAFE_JOINED_TABLES, PHSafeConfig, PrivacyDefinition
from explorer.params import PHSAFE_PASSES, ParameterError, phsafe_config, to_transport
from explorer.totals import budget_grid, epsilon_against_delta

TRUNCATION_TAUS = tuple(range(1, 21))


def query_key(table: str, level_key: str) -> str:
    """The page's name of a query: ``PH1_num/state_A-G``."""
    return f"{table}/{level_key}"


def budget_for_moe(config: PHSafeConfig, table: str, moe: float, decimals: int | None) -> float:
    """The budget giving this table's cells a 90% MOE (rounded to ``decimals``)."""
    sensitivity = table_sensitivity(config, table)
    if config.privacy_defn is PrivacyDefinition.ZCDP:
        budget = calculators.rho_for_moe(moe, PHSAFE_CONFIDENCE, sensitivity).rho
    else:
        budget = calculators.epsilon_for_moe(moe, PHSAFE_CONFIDENCE, sensitivity).epsilon
    if decimals is not None:
        budget = round(budget, decimals)
        if budget <= 0:
            raise ParameterError(
                f"{table}: MOE {moe:g} needs a budget that rounds to 0 at {decimals} decimals"
            )
    return float(budget)


def apply_targets(
    raw: dict[str, Any], targets: dict[str, float], decimals: int | None, source: str
) -> dict[str, Any]:
    """A copy of one pass's config with each targeted query's budget solved from its MOE."""
    if not targets:
        return raw
    config = phsafe_config(raw, source)
    budgets = {table: dict(levels) for table, levels in raw["privacy_budget"].items()}
    for name, moe in targets.items():
        table, _, level_key = name.partition("/")
        if table not in budgets or level_key not in budgets[table]:
            raise ParameterError(f"{source}: unknown query {name!r}")
        if table in PHSAFE_JOINED_TABLES and table not in config.tau:
            raise ParameterError(f"{source}: {table} needs a τ before a MOE target")
        if not (isinstance(moe, int | float) and moe > 0 and math.isfinite(moe)):
            raise ParameterError(f"{name}: MOE target must be a number > 0")
        budgets[table][level_key] = budget_for_moe(config, table, float(moe), decimals)
    return {**raw, "privacy_budget": budgets}


def _pass_rows(
    config: PHSafeConfig, raw: dict[str, Any], rows: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    zcdp = config.privacy_defn is PrivacyDefinition.ZCDP
    out = []
    for table, levels in raw["privacy_budget"].items():
        joined = table in PHSAFE_JOINED_TABLES
        for level_key in levels:
            name = f"{config.pass_name}/{table}/{level_key.replace('_', '/', 1)}"
            report_row = rows.get(name)
            row: dict[str, Any] = {
                "key": query_key(table, level_key),
                "table": table,
                "level": level_key,
                "budget": to_transport(float(levels[level_key])),
                "tau": config.tau.get(table) if joined else None,
                "sensitivity": (
                    float(table_sensitivity(config, table))
                    if not joined or table in config.tau
                    else None
                ),
                "measured": report_row is not None,
            }
            if report_row is not None:
                parameter = report_row[report_row["noise_parameter"]]
                row.update(
                    noise_parameter=report_row["noise_parameter"],
                    noise_value=parameter,
                    variance=report_row["variance"],
                    moe=report_row["moe_gaussian_bound"] if zcdp else report_row["moe"],
                    moe_exact=report_row["moe"],
                )
            out.append(row)
    return out


def _moe_curves(config: PHSafeConfig, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """MOE against budget for each distinct Δ of the pass, with the queries as points."""
    grid = budget_grid(1e-6, 10.0, 121)
    zcdp = config.privacy_defn is PrivacyDefinition.ZCDP
    curves: dict[str, Any] = {}
    for sensitivity in sorted({row["sensitivity"] for row in rows if row["measured"]}):
        if zcdp:
            moe = [calculators.moe_for_rho(b, PHSAFE_CONFIDENCE, sensitivity) for b in grid]
        else:
            moe = [
                float(calculators.moe_for_epsilon(b, PHSAFE_CONFIDENCE, sensitivity)) for b in grid
            ]
        tables = sorted(
            {row["table"] for row in rows if row["measured"] and row["sensitivity"] == sensitivity}
        )
        curves[f"{sensitivity:g}"] = {
            "sensitivity": sensitivity,
            "tables": tables,
            "budget": grid.tolist(),
            "moe": [float(m) for m in moe],
        }
    points = [
        {
            "key": row["key"],
            "budget": row["budget"],
            "moe": row["moe"],
            "sensitivity": row["sensitivity"],
        }
        for row in rows
        if row["measured"] and isinstance(row["budget"], float)
    ]
    return {"curves": curves, "points": points}


def evaluate(
    state: dict[str, Any],
    delta: float = 1e-10,
    targets: dict[str, dict[str, float]] | None = None,
    decimals: int | None = 6,
    curves: bool = True,
) -> dict[str, Any]:
    """Everything the PHSafe panel shows, per pass (after solving MOE targets)."""
    if not 0 < delta < 1:
        raise ParameterError(f"δ must be strictly between 0 and 1, got {delta}")
    targets = targets or {}
    passes_out: dict[str, Any] = {}
    new_passes: dict[str, Any] = {}
    for pass_name in PHSAFE_PASSES:
        raw = state["passes"].get(pass_name)
        if raw is None:
            continue
        source = f"PHSafe {pass_name}"
        raw = apply_targets(raw, targets.get(pass_name, {}), decimals, source)
        new_passes[pass_name] = raw
        config = phsafe_config(raw, source)
        if config.pass_name != pass_name:
            raise ParameterError(f"{source}: its state_filter makes it the {config.pass_name} pass")
        measurements = plan_phsafe(config)
        report = plan_report("phsafe", config.privacy_defn.value, measurements, delta, source)
        summary = report["passes"].get(pass_name)
        rows = {row["name"]: row for row in (summary or {"queries": []})["queries"]}
        table_rows = _pass_rows(config, raw, rows)
        entry: dict[str, Any] = {
            "privacy_defn": config.privacy_defn.value,
            "unit": "rho" if config.privacy_defn is PrivacyDefinition.ZCDP else "epsilon",
            "tau": dict(config.tau),
            "rows": table_rows,
            "totals": None
            if summary is None
            else {k: v for k, v in summary.items() if k != "queries"},
        }
        if curves:
            entry["moe_vs_budget"] = _moe_curves(config, table_rows)
            entry["epsilon_delta"] = epsilon_against_delta(measurements) if measurements else None
        passes_out[pass_name] = entry
    return {
        "state": {**state, "passes": new_passes},
        "confidence": PHSAFE_CONFIDENCE,
        "delta": delta,
        "passes": passes_out,
    }


def truncation(
    state: dict[str, Any], data_dir: str | Path, pass_name: str = "US"
) -> dict[str, Any]:
    """What τ truncates, per joined table, on the population in ``data_dir`` (synthetic only:
    the caller checks). Counts are aggregated over the whole pass; no record is returned."""
    raw = state["passes"].get(pass_name)
    if raw is None:
        raise ParameterError(f"no {pass_name} pass in the PHSafe parameters")
    config = phsafe_config(raw, f"PHSafe {pass_name}")
    paths = input_paths(data_dir)
    records = prepare_records(
        config, read_persons(paths["persons"]), read_units(paths["units"]), read_geo(paths["geo"])
    )
    tables = {}
    for table in PHSAFE_JOINED_TABLES:
        persons = records.persons.loc[person_filter(table, records.persons)]
        units = records.units.loc[unit_filter(table, records.units)]
        profile = truncation_profile(persons, units, TRUNCATION_TAUS)
        tables[table] = {**profile, "tau": config.tau.get(table)}
    return {"pass": pass_name, "taus": list(TRUNCATION_TAUS), "tables": tables}
