"""The budget report of a configuration: every planned query and the totals of each pass.

Product-neutral: SafeTab-P and PHSafe plans are both lists of :class:`QuerySpec`. Totals are
composed by the accountant (the one home of composition), then converted to the bounded
(change-one-record) equivalent and to (ε, δ).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scipy.stats import norm

from das.privacy.accounting import Measurement, PrivacyAccountant, summarize
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
        z = float(norm.ppf((1 + confidence) / 2))
        row["moe_gaussian_bound"] = z * math.sqrt(float(parameter))
    return row


def pass_summary(measurements: Sequence[Measurement], delta: float) -> dict[str, Any]:
    """Totals of one pass (unbounded, bounded, (ε,δ)) composed by the accountant, and its rows."""
    accountant = PrivacyAccountant(measurements[0].definition, math.inf)
    for measurement in measurements:
        accountant.charge(measurement)
    summary = summarize(accountant, delta).to_dict()
    summary["queries"] = [measurement_row(m) for m in measurements]
    return summary


def budget_report(
    config_path: str | Path, specs_dir: str | Path | None = None, delta: float = 1e-10
) -> dict[str, Any]:
    """The report of a production config.json (SafeTab-P: spec files beside it or in specs_dir)."""
    from das.specs.config import detect_product

    config_path = Path(config_path)
    product = detect_product(config_path)
    if product == "phsafe":
        from das.phsafe.plan import plan_phsafe
        from das.specs.config import load_phsafe_config

        config = load_phsafe_config(config_path)
        measurements = plan_phsafe(config)
    else:
        from das.safetab_p.plan import plan_safetab_p_from_files

        config, measurements = plan_safetab_p_from_files(config_path, specs_dir)
    definition = config.privacy_defn.value
    passes: dict[str, Any] = {}
    for pass_name in ("US", "PR"):
        in_pass = [m for m in measurements if m.metadata["pass"] == pass_name]
        if in_pass:
            passes[pass_name] = pass_summary(in_pass, delta)
    return {
        "product": product,
        "config": str(config_path),
        "privacy_defn": definition,
        "delta": delta,
        "passes": passes,
    }


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
