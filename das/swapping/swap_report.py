"""The swap run's report: a JSON record for machines and audits, and the same as Markdown.

It carries only aggregates the curator needs to judge the run (b, ε, invariant checks, the
MAPE, timings) and never record values. ε is ``null`` in JSON when no finite ε exists
(p ∈ {0, 1} with b > 0, Theorem 5.6); ``epsilon_note`` says why.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from das.swapping.definitions import PrivacyDefinition

if TYPE_CHECKING:
    from das.swapping.files import UnitData
    from das.swapping.outcome import SwapOutcome

ALGORITHM = (
    "Permutation Algorithm (Algorithm 5.1 of Bailie, Gong & Meng, "
    "'Can Swapping be Differentially Private?')"
)


def epsilon_note(b: int, rate: Fraction, epsilon: float) -> str:
    """Why ε has the value it has, in one sentence."""
    if b == 0:
        return (
            "epsilon = 0: no matching stratum holds two records with different swapping "
            "values, so the output equals the input up to row order (Theorem 5.6, b = 0)"
        )
    if math.isinf(epsilon):
        if rate == 0:
            return (
                "no finite epsilon: at swap rate 0 nothing is swapped and the output is the "
                "confidential data (Theorem 5.6, p = 0)"
            )
        return (
            "no finite epsilon: at swap rate 1 every record of a stratum is deranged, so "
            "unswapped configurations are impossible and neighbours become distinguishable "
            "(Theorem 5.6, p = 1)"
        )
    return (
        f"Theorem 5.6 with b = {b} and p = {float(rate):g}: pure epsilon-DP (MULT) conditional "
        "on the swapping invariants, households as privacy units"
    )


def _json_epsilon(epsilon: float) -> float | None:
    return None if math.isinf(epsilon) else float(epsilon)


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("das-pipeline", "numpy", "pandas", "pyarrow"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def build_report(
    *,
    data: UnitData,
    outcome: SwapOutcome,
    definitions: Sequence[PrivacyDefinition],
    delta: float,
    outputs: dict[str, dict[str, Any]],
    output_dir: Path,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The full report of one run (JSON-ready: plain numbers, strings, lists, dicts, null)."""
    if outcome.invariants is None or outcome.mape is None:
        raise ValueError("the invariants and MAPE must be computed before the report")
    inputs: dict[str, Any] = {
        name: {"path": str(file.path), "sha256": file.sha256, "rows": file.rows}
        for name, file in (("units", data.units), ("geo", data.geo))
    }
    if data.persons is not None:
        copied = outputs.get(data.persons.name, {})
        inputs["persons"] = {"path": str(data.persons), "sha256": copied.get("sha256")}
    draw = outcome.draw
    return {
        "product": "swapping",
        "algorithm": ALGORITHM,
        "privacy_unit": "household",
        "scheme": {
            "match": list(outcome.scheme.match),
            "swap": list(outcome.scheme.swap),
            "hold": list(outcome.scheme.hold),
            "geography_held_varying": list(outcome.geography_held_varying),
        },
        "rate": float(outcome.rate),
        "rate_exact": str(outcome.rate),
        "records": len(outcome.swapped),
        "strata": outcome.strata,
        "b": outcome.b,
        "epsilon": _json_epsilon(outcome.epsilon),
        "epsilon_note": epsilon_note(outcome.b, outcome.rate, outcome.epsilon),
        "selection": {
            "records_selected": draw.records_selected,
            "strata_permuted": draw.strata_permuted,
            "selection_rounds": draw.selection_rounds,
            "derangement_rounds": draw.derangement_rounds,
        },
        "invariants": outcome.invariants.as_dict(),
        "mape": outcome.mape.as_dict(),
        "delta": delta,
        "privacy_definitions": [row.as_dict() for row in definitions],
        "randomness": outcome.randomness,
        "inputs": inputs,
        "output_dir": str(output_dir),
        "outputs": outputs,
        "timings_seconds": {name: round(value, 4) for name, value in timings.items()},
        "versions": _versions(),
    }


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The few numbers the ``--json`` flag prints."""
    return {
        "output_dir": report["output_dir"],
        "records": report["records"],
        "strata": report["strata"],
        "rate": report["rate"],
        "b": report["b"],
        "epsilon": report["epsilon"],
        "epsilon_note": report["epsilon_note"],
        "invariants_exact": report["invariants"]["exact"],
        "mape": report["mape"]["mape"],
        "records_selected": report["selection"]["records_selected"],
        "randomness": report["randomness"]["description"],
    }


def _cell(value: Any) -> str:
    if value is None:
        return "inf"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "/")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """A readable version of the report (also the Prefect markdown artifact)."""
    scheme = report["scheme"]
    epsilon = report["epsilon"]
    lines = [
        "# Swapping run",
        "",
        f"{report['algorithm']}; privacy unit: {report['privacy_unit']}.",
        "",
        f"- Matching variables (swap key): {', '.join(scheme['match']) or '(none)'}",
        f"- Swapping variables: {', '.join(scheme['swap'])}",
        f"- Holding variables: {', '.join(scheme['hold'])}",
        f"- Swap rate p = {report['rate']:g} ({report['rate_exact']})",
        f"- Records: {report['records']}; matching strata: {report['strata']}",
        f"- Largest stratum with two different records: b = {report['b']}",
        f"- **epsilon = {'inf' if epsilon is None else f'{epsilon:.4f}'}**: "
        f"{report['epsilon_note']}",
        f"- Records selected for swapping: {report['selection']['records_selected']} "
        f"in {report['selection']['strata_permuted']} strata",
        "",
    ]
    if scheme["geography_held_varying"]:
        lines += [
            "Note: geography columns held with the household although they vary within a "
            f"stratum: {', '.join(scheme['geography_held_varying'])}. A swapped household "
            "keeps its old value there; list them in --swap to move them with the rest of "
            "its geography.",
            "",
        ]
    invariants = report["invariants"]
    lines += ["## Invariants", "", f"All exact: **{invariants['exact']}**", ""]
    lines += _table(
        ["margin", "variables", "cells", "cells differing"],
        [
            [m["name"], " x ".join(m["columns"]), m["cells"], m["cells_differing"]]
            for m in invariants["margins"]
        ],
    )
    lines += [
        "",
        f"Interior cells of H(Z) changed: {invariants['interior_cells_changed']} of "
        f"{invariants['interior_cells']} (these are not invariant).",
        "",
    ]
    mape = report["mape"]
    lines += [
        "## Accuracy",
        "",
        f"MAPE of {'+'.join(mape['rows'])} x {'+'.join(mape['cols'])}: "
        f"**{mape['mape']:.4%}** over {mape['cells']} cells with a non-zero true count "
        f"({mape['cells_zero_true']} cells empty in the input but not after swapping are "
        "left out).",
        "",
        f"## Privacy definitions side by side (delta = {report['delta']:g})",
        "",
    ]
    lines += _table(
        [
            "mechanism",
            "release",
            "d_T",
            "unit",
            "invariants",
            "budget",
            "epsilon (Bun-Steinke)",
            "epsilon (optimal)",
        ],
        [
            [
                row["mechanism"],
                row["release"],
                row["output_divergence"],
                row["privacy_unit"],
                row["invariants"],
                row["budget"],
                row["epsilon_at_delta"],
                row["epsilon_at_delta_optimal"],
            ]
            for row in report["privacy_definitions"]
        ],
    )
    lines += [
        "",
        "Budgets compare only within a definition: swapping conditions on far more invariants "
        "and protects households under MULT; the DP products protect persons under zCDP. "
        "Swapping's epsilon covers every product tabulated from the swapped file; the DP "
        "products' budgets add up across releases.",
        "",
        "## Run",
        "",
        f"- Randomness: {report['randomness']['description']}",
    ]
    lines += [
        f"- Input {name}: `{info['path']}` sha256 `{info['sha256']}`"
        for name, info in report["inputs"].items()
    ]
    lines += [
        f"- Output {name}: sha256 `{info['sha256']}`" for name, info in report["outputs"].items()
    ]
    lines += [
        "- Timings (s): "
        + ", ".join(f"{name} {value:.3f}" for name, value in report["timings_seconds"].items()),
        "",
    ]
    return "\n".join(lines)
