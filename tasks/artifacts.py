"""The Prefect artifacts of a run: privacy spend per pass, the audit summary, the validation
verdict and the report links.

Artifacts carry stage names, timings, hashes, budgets, noise parameters and noisy row counts
only: never a record, a true count, a noise value or a count of input records (those go to the
curator's local log, :mod:`das.runs.curator_log`).
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from collections.abc import Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402

from das.privacy.accounting import PrivacyAccountant, summarize  # noqa: E402
from das.privacy.pass_totals import measurement_row  # noqa: E402
from das.runs.audit import audit_markdown, md_escape  # noqa: E402

REPORT_HTML = "report.html"
DATA_DOCS_INDEX = Path("data_docs") / "index.html"

# Every artifact a run posts, by key (``<product>``: safetab-p or phsafe; ``<pass>``: us or pr;
# ``<label>``: the validate-only deployment's label), with what it shows. The documentation's
# page of artifacts is generated from this; tests/test_docs.py holds it to the code's keys.
ARTIFACTS: dict[str, str] = {
    "<product>-progress": "The run's progress: a bar, the stage and its units done of the "
    "total, the time spent and left; it ends on where the release is.",
    "<product>-validation": "The run's validation verdict: VALID or NOT VALID, the counts of "
    "errors, warnings and checks, the failed checks by name, where the report is (no value).",
    "<product>-approval": "A deployment run waiting for approval (suspended, no process): the "
    "planned spend per pass (earlier, this run, cumulative, ceiling), the dataset and sealed "
    "parameters, the count of signatures in the ledger (a new version whenever it changes), "
    "the statement to sign, who may sign, and how (`das ledger approve --approval ID`, or "
    "`ssh-keygen -Y sign` and the Resume form).",
    "<product>-privacy-<pass>": "One table per pass: every measurement with its budget, "
    "sensitivity Δ, σ² (or scale), MOE and whether it was drawn.",
    "<product>-privacy-totals": "The privacy spend per pass: unbounded, bounded (change one "
    "person) and (ε, δ) by each conversion.",
    "<product>-audit": "The audit record of each attempt (titled with its number): sealed "
    "parameter hashes, the ledger's ids and totals, randomness, validation, output hashes, "
    "stage timings.",
    "<product>-release": "The verdict (a private release, or not and why), the release folder, "
    "its MANIFEST.json and audit.json, the ledger entry it carries, the verify commands.",
    "<product>-refused": "What was refused, why, that nothing was drawn, and the next step in "
    "the syntax of where the run was started.",
    "validation-<product>-<label>": "A validate-only deployment's verdict, failed checks and "
    "links to report.html and the Great Expectations Data Docs (and a link artifact "
    "`…-report`).",
    "privacy-ledger-<place>-<ledger id>": "The ledger's head (id, entry, hash) after a run "
    "authorized its spend and when it ended: the Prefect server's witness, which later runs "
    "and `das ledger verify` check the ledger against.",
    "privacy-audit": "The empirical privacy audit's report (audit-privacy flow).",
    "swap-report": "The swapping run's report: b, ε, the invariant checks, MAPE (swap flow).",
}

# The states a release run's page can end in, besides Prefect's own Running and Pending.
RUN_STATES: dict[str, str] = {
    "Completed": "Published; the state message says where the release is and whether it is "
    "private.",
    "Paused": "Waiting for approvers' signatures (tag `awaiting-approval`): resumes by itself "
    "once a quorum signed.",
    "Refused": "Nothing was drawn (Prefect's Cancelled type, grey): the `<product>-refused` "
    "artifact says why and the next step; retryable once the cause is fixed.",
    "Failed": "Invalid inputs, records changed under the run, or another error: the audit and "
    "run log are in the run's state folder; Retry resumes it.",
    "Crashed": "The flow process or its host died: Retry resumes it, reusing every recorded "
    "draw (wait for the worker's own report first).",
    "Cancelled": "Cancelled from its page (Cancel); like a crash, what it drew stays recorded.",
    "AwaitingRetry": "A Retry was asked for: the run resumes as attempt N+1 (tags `attempt-N`, "
    "`resumed`).",
}


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    text = "-".join(parts).lower()
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def _shown(value: Any, digits: int = 6) -> Any:
    """A table cell: ∞ for an infinite (null) number, floats rounded for reading."""
    if value is None:
        return "∞"
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    return value


def accountant_table(accountant: PrivacyAccountant) -> list[dict[str, Any]]:
    """One row per measurement of a pass's accountant, narrow enough for the Prefect UI: the query
    (geography / table / iteration level / stage), budget, Δ, σ² or scale, MOE, drawn."""
    rows = []
    for entry in accountant.entries:
        row = measurement_row(entry.measurement)
        parts = (row["geography"], row["table"], row["iteration_level"], row["stage"])
        parameter = row["noise_parameter"]
        rows.append(
            {
                "query": " / ".join(str(part) for part in parts if part is not None),
                "budget": _shown(row["budget"]),
                "Δ": _shown(row["sensitivity"]),
                "σ²" if parameter == "sigma_squared" else parameter: _shown(row[parameter]),
                f"MOE {row['confidence']:.0%}": _shown(row["moe"], 4),
                "drawn": "yes" if entry.drawn else "no",
            }
        )
    return rows


TOTAL_LABELS = {
    "rho": "ρ (zCDP, add/remove one person)",
    "bounded_rho": "ρ, bounded (change one person: 2ρ)",
    "rho_exact": "ρ, exact",
    "bounded_rho_exact": "bounded ρ, exact",
    "epsilon": "ε (pure DP, add/remove one person)",
    "bounded_epsilon": "ε, bounded (change one person: 2ε)",
    "epsilon_exact": "ε, exact",
    "bounded_epsilon_exact": "bounded ε, exact",
    "delta": "δ",
    "epsilon_analytic": "ε at δ: ρ + 2√(ρ ln 1/δ)",
    "epsilon_optimal": "ε at δ: optimal Rényi conversion",
    "epsilon_optimal_grid": "ε at δ: optimal, integer-order grid",
    "epsilon_rdp": "ε at δ: exact Rényi divergence",
}


def totals_markdown(title: str, accountants: Mapping[str, PrivacyAccountant], delta: float) -> str:
    """Markdown summary of each pass's totals: unbounded, bounded and (ε, δ), labelled for a
    reader (the audit and ``das budget report --json`` keep the keys)."""
    lines = [f"# {md_escape(title)}", "", f"(ε, δ) conversions at δ = {delta:g}.", ""]
    for name, accountant in accountants.items():
        summary = summarize(accountant, delta).to_dict()
        lines.append(f"## Pass {md_escape(name)} ({summary['privacy_defn']})")
        lines.append("")
        lines.append("| quantity | value |")
        lines.append("|---|---|")
        for key, value in summary.items():
            if key == "privacy_defn":
                continue
            shown = "∞" if value is None else _shown(value)
            lines.append(f"| {md_escape(TOTAL_LABELS.get(key, key))} | {md_escape(shown)} |")
        lines.append(f"| measurements | {len(accountant)} |")
        lines.append("")
    return "\n".join(lines)


def publish_privacy_artifacts(
    product: str,
    accountants: Mapping[str, PrivacyAccountant],
    delta: float,
    banner: str = "",
) -> list[str]:
    """A table artifact per pass (every query) and one Markdown summary of the totals;
    ``banner`` (e.g. "[SEEDED] ") heads every title of a release that is not private."""
    ids = []
    for name, accountant in accountants.items():
        artifact = create_table_artifact(
            table=accountant_table(accountant),
            key=artifact_key(product, "privacy", name),
            description=(
                f"{banner}{product} pass {name}: every measurement, its budget, noise and MOE"
            ),
        )
        ids.append(str(artifact))
    summary = create_markdown_artifact(
        markdown=totals_markdown(f"{banner}{product} privacy spend", accountants, delta),
        key=artifact_key(product, "privacy-totals"),
        description=f"{banner}{product}: privacy loss per pass (unbounded, bounded, (ε, δ))",
    )
    ids.append(str(summary))
    return ids


def publish_audit_artifact(product: str, audit: Mapping[str, Any], banner: str = "") -> str:
    """The audit record as a readable Markdown summary (:func:`das.runs.audit.audit_markdown`),
    titled with the attempt: a retried run's page shows each attempt's audit apart."""
    attempt = (audit.get("parameters") or {}).get("attempt") or 1
    artifact = create_markdown_artifact(
        markdown=audit_markdown(audit, banner),
        key=artifact_key(product, "audit"),
        description=(
            f"{banner}{product}: audit record of attempt {attempt} ({audit.get('status')}; "
            "audit.json in the release and the run folder)"
        ),
    )
    return str(artifact)


def report_links(report_dir: str | Path) -> dict[str, Path]:
    """The human-readable files of a validation report folder, by title (absolute paths)."""
    root = Path(report_dir).resolve()
    return {
        "Validation report": root / REPORT_HTML,
        "Great Expectations Data Docs": root / DATA_DOCS_INDEX,
        "report.json": root / "report.json",
    }


def code(text: Any) -> str:
    """``text`` as a Markdown code span: names such as ``block_in_grf_c`` keep their
    underscores and ``*`` stays a star instead of becoming emphasis or a bullet."""
    shown = str(text).replace("`", "'")
    return f"`{shown}`"


def validation_markdown(product: str, label: str, summary: Mapping[str, Any]) -> str:
    """The verdict, the counts of failed checks and links to the report (no data values)."""
    verdict = "VALID" if summary["ok"] else "NOT VALID"
    lines = [f"# {product} inputs ({label}): {verdict}", ""]
    lines += ["| result | value |", "|---|---|"]
    lines.append(f"| errors | {summary['errors']} |")
    lines.append(f"| warnings | {summary['warnings']} |")
    lines.append(f"| checks run | {summary['checks_run']} |")
    failed = ", ".join(code(check) for check in summary["failed_checks"]) or "none"
    lines.append(f"| failed checks | {failed} |")
    lines += ["", "## Report files (inside the enclave)", ""]
    lines += ["Browsers do not open `file://` links from a web page: paste the path into the "
              "address bar of a browser on an enclave host.", ""]  # fmt: skip
    for title, path in report_links(summary["report_dir"]).items():
        state = "" if path.is_file() else " (missing)"
        lines.append(f"- [{title}]({path.as_uri()}){state}: {code(path)}")
    return "\n".join(lines)


def publish_validation_verdict(product: str, summary: Mapping[str, Any]) -> None:
    """The verdict of a release run's validation on its page: VALID or NOT VALID, the counts
    of errors, warnings and checks, the failed checks by name, and where the report is (no
    data value, no count of records)."""
    create_markdown_artifact(
        markdown=validation_markdown(product, "this run", summary),
        key=artifact_key(product, "validation"),
        description=f"{product}: validation of this run's inputs — "
        + ("VALID" if summary.get("ok") else "NOT VALID"),
    )
