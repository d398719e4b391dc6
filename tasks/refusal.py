"""The final state of a release run: a refusal is a state of its own, told apart from a failure
at a glance and with no traceback; a release says where it is.

A refusal (:class:`das.refusal.RunRefused`: the production policy, the privacy ledger, an
approval missing, a run id bound elsewhere, a live run or a release in the output...) means
*nothing was drawn* and the operator has a next step. The product flows end such a run in the
state **Refused** — Prefect's *Cancelled* type, grey in the run list (red is a failure, orange
a crash), not counted among failed runs, and retryable from its page once the cause is fixed —
with a Markdown artifact that says what was refused, why, that nothing was drawn, and the next
step in the syntax of where the run was started (a ``das run`` flag, a deployment parameter, or
the ``das ledger approve`` command). The refusal is also kept in the privacy ledger's trail
when the ledger could be opened.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import logging  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.client.schemas.objects import State  # noqa: E402
from prefect.exceptions import CancelledRun  # noqa: E402
from prefect.states import Cancelled, Completed  # noqa: E402

from das.refusal import RunRefused  # noqa: E402
from das.runs.audit import md_escape  # noqa: E402
from das.trust import LedgerUnavailable, open_ledger  # noqa: E402
from tasks.artifacts import artifact_key  # noqa: E402
from tasks.run_tags import REFUSED as REFUSED_TAG  # noqa: E402
from tasks.run_tags import WAITING, retag  # noqa: E402

REFUSED = "Refused"
_REFUSALS: set[str] = set()  # the messages of this process's refusals


class _RefusalIsNotACrash(logging.Filter):
    """Prefect's engine reads a flow run's final state back when a worker runs it, and a
    Refused (Cancelled-type) state raises there: the engine then logs "Engine execution exited
    with unexpected exception" with a traceback, on the run's page. A refusal is not a crash:
    that record is dropped for this process's own refusals (the run's "Finished in state
    Refused(...)" line and its artifact say what happened)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, CancelledRun) and str(error) in _REFUSALS)


logging.getLogger("prefect.flow_runs").addFilter(_RefusalIsNotACrash())
# Where the run was started, and so in which terms its next step is put (Remedy.for_context).
WHERE = {
    "cli": "Started from `das run`: the next step is put as its command-line flags.",
    "deployment": "Started from a deployment: the next step is put as a parameter of a new "
    "custom run of it (its page: Run, then Custom run), or as a command that is the same "
    "wherever a run starts (`das ledger ...`).",
    "python": "Started from a Python call of the flow: the next step is put as its keyword "
    "arguments.",
}


def refusal_markdown(product: str, refusal: RunRefused, context: str, run_id: str | None) -> str:
    """What was refused, why, that nothing was drawn, and what to do, as paragraphs that read
    without scrolling (a table cell cut the reason off); no data values."""
    step = None if refusal.remedy is None else refusal.remedy.for_context(context)
    if step is None:
        step = (
            "start a new custom run with the parameters changed as the reason says (a Retry "
            "would run with the same parameters and be refused again)"
            if context == "deployment"
            else "run again with the cause named above removed"
        )
    return "\n".join([
        f"# {md_escape(product)} run {md_escape(run_id or '')}: REFUSED",
        "",
        "**Nothing was drawn**: no privacy budget was spent by this run, and no release was "
        "written.",
        "",
        "## Why",
        "",
        md_escape(refusal),
        "",
        "## Next step",
        "",
        md_escape(step),
        "",
        f"*{WHERE.get(context, f'Started from {context}.')}*",
        "",
    ])  # fmt: skip


def released(record: dict[str, Any]) -> State:
    """The flow run's final state for a published release: Completed, its message saying
    where the release is and whether it is private (the run page shows it beside the state)."""
    release = record.get("release") or {}
    markers = record.get("markers") or []
    verdict = "a private release" if not markers else f"NOT PRIVATE ({', '.join(markers)})"
    where = (record.get("parameters") or {}).get("output")
    return Completed(
        message=f"{release.get('state', 'published')}: {verdict} in {where}", data=record
    )


def refused(product: str, refusal: RunRefused, context: str, run_id: str | None) -> State:
    """The flow run's final state for ``refusal``, with its artifact and the ledger's trail."""
    text = refusal.explained(context)
    _REFUSALS.add(text)
    get_run_logger().warning("%s run refused: %s", product, text)
    create_markdown_artifact(
        markdown=refusal_markdown(product, refusal, context, run_id),
        key=artifact_key(product, "refused"),
        description=f"{product}: run refused; nothing was drawn",
    )
    try:
        ledger = open_ledger().ledger
        ledger.record_event("refused", {"product": product, "reason": str(refusal)}, None, run_id)
    except (RunRefused, LedgerUnavailable):
        pass  # the ledger itself is what was refused: nothing to record it in
    # Prefect's UI colours a state by its type (Refused is Cancelled-type, grey): the tag
    # tells a refusal apart from a cancellation in the run list.
    from prefect.runtime import flow_run

    retag(str(flow_run.id) if flow_run.id else None, add=[REFUSED_TAG], remove=[WAITING])
    return Cancelled(name=REFUSED, message=text)
