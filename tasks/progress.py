"""Prefect's view of a release run's progress: a progress artifact on the run's page, and the
progress lines in the flow run's logs (the model: :mod:`das.runs.progress`).

What Prefect 3.8.8's UI draws of a progress artifact (looked at in headless Chromium): its
number as a ring in the run graph and as the text "Progress: 63%" on the artifact's page; its
description, Markdown, on the run's *Artifacts* card and above the number. So the description
leads with an HTML ``<progress>`` bar (the default UI draws it; the optional "V2" UI drops the
tag and keeps the text) and stays one short line: percentage, stage, times; at the end, the
outcome.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.artifacts import create_progress_artifact, update_progress_artifact  # noqa: E402

from das.runs.audit import md_escape  # noqa: E402
from das.runs.progress import RunProgress, Snapshot  # noqa: E402
from tasks.artifacts import artifact_key  # noqa: E402

# A log record with this attribute set is a progress line: `das run` shows its own (one line
# per change), so its console leaves these out; the run log and the server keep them.
PROGRESS_RECORD = "das_progress"


def progress_description(snapshot: Snapshot) -> str:
    """The artifact's one line: a bar, the percentage, the stage or the outcome, the times."""
    percent = round(snapshot.percent)
    bar = f'<progress value="{percent}" max="100"></progress>'
    what = snapshot.outcome if snapshot.finished and snapshot.outcome else snapshot.where()
    return f"{bar} {percent}% · {md_escape(what)} · {snapshot.times()}"


def prefect_progress(product: str, run_id: str) -> RunProgress:
    """A run's progress, shown as a Prefect progress artifact and logged to the flow run."""
    artifact: dict[str, Any] = {}

    def show(snapshot: Snapshot) -> None:
        description = progress_description(snapshot)
        if "id" not in artifact:
            artifact["id"] = create_progress_artifact(
                progress=snapshot.percent,
                key=artifact_key(product, "progress"),
                description=description,
            )
        else:
            update_progress_artifact(artifact["id"], snapshot.percent, description)

    def log(line: str) -> None:
        get_run_logger().info("%s", line, extra={PROGRESS_RECORD: True})

    return RunProgress(product, run_id, log=log, show=show)
