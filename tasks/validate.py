"""What the validate-only flow posts to Prefect: where the validation report and the Great
Expectations Data Docs are, and the verdict.

Only names and counts of checks go to Prefect (the summary of :func:`tasks.common.validate_inputs`):
the report files themselves quote the inputs' values and stay in the report folder, inside the
enclave. Links are ``file://`` URLs of that folder (the UI runs on the same enclave hosts); the
plain path is shown too, for browsers that refuse to open a local file from a web page.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from collections.abc import Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect.artifacts import create_link_artifact, create_markdown_artifact  # noqa: E402

from tasks.common import artifact_key  # noqa: E402

REPORT_HTML = "report.html"
DATA_DOCS_INDEX = Path("data_docs") / "index.html"


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


def publish_validation_artifacts(product: str, label: str, summary: Mapping[str, Any]) -> list[str]:
    """A Markdown artifact (verdict, failed checks, links) and a link artifact to the report."""
    key = artifact_key("validation", product, label)
    markdown = create_markdown_artifact(
        markdown=validation_markdown(product, label, summary),
        key=key,
        description=f"{product} input validation ({label}): verdict and report links",
    )
    report = report_links(summary["report_dir"])["Validation report"]
    link = create_link_artifact(
        link=report.as_uri(),
        link_text=f"{product} validation report ({label})",
        key=f"{key}-report",
        description=f"{product}: the validation report ({report})",
    )
    return [str(markdown), str(link)]
