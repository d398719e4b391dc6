"""Markdown of an audit (the CLI's text output and the Prefect artifact).

Only synthetic inputs, public spec codes, budgets and error rates of simulated trials appear:
an audit never reads confidential data.
"""

from __future__ import annotations

import math

from das.privacy.mechanisms import ZCDP
from das.privacy_audit.audit import MEANING, AuditReport, AuditRow
from das.privacy_audit.broken import SelfTestReport


def _g(value: float | None, digits: int = 4) -> str:
    if value is None or math.isinf(float(value)):
        return "∞"
    return f"{float(value):.{digits}g}"


def _status(row: AuditRow) -> str:
    if row.exceeded:
        return "**EXCEEDS CLAIM**"
    return "ok" if row.cells_moved else "not moved"


def _tightness(lower: float, claimed: float) -> str:
    return "" if not claimed or math.isinf(claimed) else f"{lower / claimed:.0%}"


def _header(report: AuditReport) -> list[str]:
    verdict = (
        "every lower bound is within its claim" if report.ok else "a lower bound exceeds its claim"
    )
    return [
        f"# {report.title}",
        "",
        f"- Confidence: **{report.confidence:.0%}**, for all the bounds of this report together",
        f"- Trials: **{report.trials:,}** releases on D and as many on D′ "
        "(half to choose each test's threshold, half to bound its error rates)",
        f"- δ of the (ε, δ) statements (zCDP): {report.delta:g}",
        f"- Randomness: {report.randomness}",
        f"- Time: {report.seconds:.1f} s ({report.seconds_per_million_trials:.1f} s per 10⁶ "
        "trials)",
        f"- Verdict: **{verdict}**",
        "",
        MEANING,
        "",
    ]


def _neighbours(report: AuditReport) -> list[str]:
    lines = ["## The neighbour (D′ = D + one person)", ""]
    for item in report.neighbours:
        if report.subject == "safetab-p":
            groups = item["groups_per_level"]
            lines.append(
                f"- **{item['pass']} pass**: race codes {', '.join(item['race_codes'])} "
                f"({'; '.join(item['race_code_names'])}), QSPAN {item['qspan']} "
                f"({item['qspan_name']}), age {item['age']}, sex {item['sex']}, block "
                f"{item['block']} (place {item['place']}, AIANNH {item['aiannh']}). Groups per "
                f"level: {', '.join(f'{k} {v}' for k, v in groups.items())} (stability "
                f"{item['stability']}). Moves {item['cells_moved']} noisy answers of "
                f"{item['measurements_moved']} ledger measurements in {item['levels_moved']} "
                "population-group levels."
            )
        elif report.subject == "phsafe":
            added = item["added"]
            lines.append(
                f"- **{item['pass']} pass**: household {item['household']}; added: "
                f"{added['relationship']} (RELSHIP {added['RELSHIP']}, age {added['QAGE']}); "
                f"unit {item['unit_before']} → {item['unit_after']}. Moves "
                f"{item['cells_moved']} noisy answers in {item['measurements_moved']} queries."
            )
        else:
            lines.append(
                f"- One query's cells moved by {item['moves']} (realised sensitivity "
                f"{_g(item['realised_sensitivity'])}, claimed {_g(item['claimed_sensitivity'])})."
            )
    return [*lines, ""]


def _table(report: AuditReport) -> list[str]:
    zcdp = any(row.definition == ZCDP for row in report.rows)
    lines = ["## Claimed versus lower bound", ""]
    if zcdp:
        lines += [
            "| Family | Answers moved | ρ claimed | ρ of this neighbour | ρ lower bound "
            "| tight | ε claimed at δ | ε lower bound at δ | Status |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in report.rows:
            lines.append(
                f"| {row.name} | {row.cells_moved} | {_g(float(row.claimed))} "
                f"| {_g(row.realised)} | {_g(row.rho_lower_bound)} "
                f"| {_tightness(row.budget_lower_bound, float(row.claimed))} "
                f"| {_g(row.claimed_epsilon)} | {_g(row.epsilon_lower_bound)} | {_status(row)} |"
            )
    else:
        lines += [
            "| Family | Answers moved | ε claimed | ε of this neighbour | ε lower bound | tight "
            "| Status |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for row in report.rows:
            lines.append(
                f"| {row.name} | {row.cells_moved} | {_g(float(row.claimed))} "
                f"| {_g(row.realised)} | {_g(row.epsilon_lower_bound)} "
                f"| {_tightness(row.epsilon_lower_bound, float(row.claimed))} | {_status(row)} |"
            )
    lines += [
        "",
        "*of this neighbour*: the exact loss of the moves this D′ makes, as the mechanisms "
        "compute it — the most any attack on this pair could show. *tight*: lower bound / "
        "claim. ρ lower bounds: the Rényi divergences of the test's decision (no assumption on "
        "the noise); ε lower bounds: the (ε, δ)-DP inequality on the test's error rates.",
        "",
    ]
    return lines


def audit_markdown(report: AuditReport) -> str:
    """The whole report: header, neighbour, table, notes."""
    lines = _header(report) + _neighbours(report) + _table(report)
    if report.notes:
        lines += ["## Notes", "", *(f"- {note}" for note in report.notes), ""]
    return "\n".join(lines)


def self_test_markdown(report: SelfTestReport) -> str:
    """The self-test: every broken variant, its claim and the lower bound that exposes it."""
    lines = [
        "# Privacy audit self-test: deliberately broken mechanisms",
        "",
        f"Confidence {report.confidence:.0%} per variant; randomness: {report.randomness}; "
        f"{report.seconds:.1f} s. Verdict: **"
        + ("every broken variant detected" if report.ok else "a broken variant was NOT detected")
        + "**.",
        "",
        "| Variant | Unit | Claimed | True loss | Lower bound | Trials | Detected |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for variant in report.variants:
        unit = "ρ" if variant.definition == ZCDP else "ε"
        lines.append(
            f"| {variant.name} | {unit} | {_g(variant.claimed)} | {_g(variant.realised)} "
            f"| {_g(variant.lower_bound)} | {variant.trials:,} "
            f"| {'yes' if variant.detected else '**NO**'} |"
        )
    lines += ["", *(f"- **{v.name}**: {v.description}." for v in report.variants), ""]
    return "\n".join(lines)
