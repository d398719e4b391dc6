"""Prefect's view of a release run's progress: a progress artifact on the run's page, and the
progress lines in the flow run's logs (the model: :mod:`das.runs.progress`)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.artifacts import create_progress_artifact, update_progress_artifact  # noqa: E402

from das.runs.progress import RunProgress  # noqa: E402
from tasks.artifacts import artifact_key  # noqa: E402


def prefect_progress(product: str, run_id: str) -> RunProgress:
    """A run's progress, shown as a Prefect progress artifact and logged to the flow run."""
    artifact: dict[str, Any] = {}

    def show(percent: float, description: str) -> None:
        if "id" not in artifact:
            artifact["id"] = create_progress_artifact(
                progress=percent, key=artifact_key(product, "progress"), description=description
            )
        else:
            update_progress_artifact(artifact["id"], percent, description)

    def log(line: str) -> None:
        get_run_logger().info("%s", line)

    return RunProgress(product, run_id, log=log, show=show)
