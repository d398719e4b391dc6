"""What the validate-only flow posts to Prefect: where the validation report and the Great
Expectations Data Docs are, and the verdict.

Only names and counts of checks go to Prefect (the summary of
:func:`tasks.validation_gate.validate_inputs`): the report files themselves quote the inputs'
values and stay in the report folder, inside the enclave. Links are ``file://`` URLs of that
folder (the UI runs on the same enclave hosts); the plain path is shown too, for browsers that
refuse to open a local file from a web page.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from collections.abc import Mapping  # noqa: E402
from typing import Any  # noqa: E402

from prefect.artifacts import create_link_artifact, create_markdown_artifact  # noqa: E402

from tasks.artifacts import artifact_key, report_links, validation_markdown  # noqa: E402


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
