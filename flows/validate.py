"""The ``validate`` flow: check a product's inputs, draw nothing, and link the report in Prefect.

The validate-only deployments (``deploy/prefect.yaml``) run it before a release so that the
curator reads the verdict and opens the report (Great Expectations Data Docs, ``report.html``)
from the Prefect UI. The same task as the release flows' validation gate does the work
(:func:`tasks.validation_gate.validate_inputs`); an invalid input fails the flow run, after the
report and the artifacts are written.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow, get_run_logger  # noqa: E402

from das.products import release_product  # noqa: E402
from das.runs.verdicts import record_verdict  # noqa: E402
from das.validation import ValidationFailed, default_report_dir  # noqa: E402
from tasks.validate import publish_validation_artifacts  # noqa: E402
from tasks.validation_gate import validate_inputs  # noqa: E402

PRODUCTS = ("safetab-p", "phsafe")


@flow(name="validate", description="Validate a product's inputs: report, Data Docs, links")
def validate_flow(
    product: str, config: str, data: str, report: str | None = None, label: str = "inputs"
) -> dict[str, Any]:
    """Validate ``data`` against ``config`` for ``product`` (``safetab-p`` or ``phsafe``).

    ``report``: the report folder (default ``<data>/validation/``); ``label`` names the check
    in the artifacts (e.g. ``us``, ``pr``). Relative paths are taken from the working
    directory of the flow run (the checkout, for deployments). Returns the summary (counts and
    check names); raises :class:`ValidationFailed` when the inputs are not valid.
    """
    if product not in PRODUCTS:
        raise ValueError(f"product must be one of {', '.join(PRODUCTS)}, not {product!r}")
    config_path = Path(config).resolve()
    data_dir = Path(data).resolve()
    report_dir = Path(report).resolve() if report else default_report_dir(data_dir)
    outcome = validate_inputs(product, str(config_path), str(data_dir), str(report_dir))
    summary = outcome.summary
    publish_validation_artifacts(product, label, summary)
    recorded = record_verdict(product, release_product(product).confidential, config_path, outcome)
    if recorded:
        get_run_logger().info(recorded)
    get_run_logger().info("%s inputs (%s): report in %s", product, label, report_dir)
    if not summary["ok"]:
        raise ValidationFailed(
            f"{product} inputs are not valid: {summary['errors']} error(s) in checks "
            f"{', '.join(summary['failed_checks'])}; report in {report_dir}"
        )
    return summary
