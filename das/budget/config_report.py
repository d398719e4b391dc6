"""The budget report of a production config: every planned query and the totals of each pass.

It plans a config with its product's planner (:mod:`das.safetab_p.plan`,
:mod:`das.phsafe.plan`) and composes each pass with the product-neutral
:func:`das.privacy.pass_totals.pass_summary`. It lives above the products so that the privacy
foundation never imports them. `das budget report` and the tuning explorer both call it: one
home for every total the two show.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from das.phsafe.plan import plan_phsafe
from das.privacy.accounting import Measurement
from das.privacy.pass_totals import pass_summary
from das.safetab_p.plan import plan_safetab_p, plan_safetab_p_from_files
from das.specs.config import PHSafeConfig, SafeTabPConfig, detect_product, load_phsafe_config

PASS_NAMES = ("US", "PR")


def plan_report(
    product: str,
    definition: str,
    measurements: list[Measurement],
    delta: float,
    source: str,
) -> dict[str, Any]:
    """The report of a planned config: per pass its rows and totals (passes compose in parallel)."""
    passes: dict[str, Any] = {}
    for pass_name in PASS_NAMES:
        in_pass = [m for m in measurements if m.metadata["pass"] == pass_name]
        if in_pass:
            passes[pass_name] = pass_summary(in_pass, delta)
    return {
        "product": product,
        "config": source,
        "privacy_defn": definition,
        "delta": delta,
        "passes": passes,
    }


def safetab_p_report(
    config: SafeTabPConfig,
    stability_value: int,
    detailed_only_iteration_levels: Collection[int],
    delta: float = 1e-10,
    source: str = "",
) -> dict[str, Any]:
    """The report of a SafeTab-P config whose spec files gave this stability and these levels."""
    measurements = plan_safetab_p(config, stability_value, detailed_only_iteration_levels)
    return plan_report("safetab-p", config.privacy_defn.value, measurements, delta, source)


def phsafe_report(config: PHSafeConfig, delta: float = 1e-10, source: str = "") -> dict[str, Any]:
    """The report of one PHSafe pass."""
    return plan_report("phsafe", config.privacy_defn.value, plan_phsafe(config), delta, source)


def budget_report(
    config_path: str | Path, specs_dir: str | Path | None = None, delta: float = 1e-10
) -> dict[str, Any]:
    """The report of a production config.json (SafeTab-P: spec files beside it or in specs_dir)."""
    config_path = Path(config_path)
    if detect_product(config_path) == "phsafe":
        return phsafe_report(load_phsafe_config(config_path), delta, str(config_path))
    config, measurements = plan_safetab_p_from_files(config_path, specs_dir)
    return plan_report(
        "safetab-p", config.privacy_defn.value, measurements, delta, str(config_path)
    )


def render_budget_report(report: dict[str, Any]) -> str:
    """A readable table of the report (the default output of `das budget report`)."""
    lines = [f"{report['product']} budget report ({report['privacy_defn']}): {report['config']}"]
    zcdp = report["privacy_defn"] == "zcdp"
    unit = "rho" if zcdp else "epsilon"
    for pass_name, summary in report["passes"].items():
        lines.append("")
        lines.append(f"Pass {pass_name}")
        header = (
            f"  {'table':<10} {'geography':<10} {'iter':<5} {'stage':<11} {unit:>10} "
            f"{'sens':>6} {'sigma^2' if zcdp else 'scale':>12} {'MOE':>9} {'conf':>5}"
        )
        lines.append(header)
        for row in summary["queries"]:
            budget = "inf" if row["budget"] is None else f"{row['budget']:.6f}"
            parameter = row[row["noise_parameter"]]
            moe = row.get("moe_gaussian_bound", row["moe"])
            note = "  (parallel to stages 1+2)" if row["branch"] == "total-only" else ""
            lines.append(
                f"  {row['table'] or '-':<10} {row['geography']:<10} {row['iteration_level']:<5} "
                f"{row['stage']:<11} {budget:>10} {row['sensitivity']:>6.3g} "
                f"{parameter:>12.2f} {moe:>9.2f} {row['confidence']:>5.0%}{note}"
            )
        total = summary[unit]
        bounded = summary[f"bounded_{unit}"]
        lines.append(
            f"  total {unit} = {total if total is not None else 'inf'}"
            f", bounded (change one record) = {bounded if bounded is not None else 'inf'}"
        )
        if zcdp and summary["epsilon_analytic"] is not None:
            lines.append(
                f"  (epsilon, delta={report['delta']:g}): "
                f"analytic {summary['epsilon_analytic']:.3f},"
                f" optimal {summary['epsilon_optimal']:.3f}"
            )
        elif not zcdp and summary.get("epsilon_rdp") is not None:
            lines.append(
                f"  (epsilon, delta={report['delta']:g}) via exact Renyi DP: "
                f"{summary['epsilon_rdp']:.3f}"
            )
    return "\n".join(lines)
