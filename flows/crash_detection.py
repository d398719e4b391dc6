"""A run whose process is gone is marked Crashed: the server-side half of the flow-run heartbeats.

A flow process that dies with its host (or is killed with its worker) reports nothing: the run
would stay *Running* forever, with no Retry. Prefect's engine emits a
``prefect.flow-run.heartbeat`` event from a thread of every flow process (every
``DAS_HEARTBEAT_SECONDS``: :mod:`das.heartbeats`), whether a worker started it or ``das run``
called the flow; the automation built here (Prefect's "zombie flow" recipe) waits, after each
heartbeat of a DAS flow run, for the next one or for the run's end, and when neither comes
within ``DAS_CRASH_AFTER_SECONDS`` it proposes *Crashed* with a message that says why and what
to do. The proposal is not forced: the server refuses it for a run that has already ended, so a
heartbeat that races its run's end cannot crash a finished run.

``das deploy`` creates or updates it (:func:`ensure_crash_automation`); ``das run`` creates it
when its server (``PREFECT_API_URL`` or the temporary one) has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from das.heartbeats import Liveness
from das.offline import configure_offline

configure_offline()

from prefect.client.schemas.objects import StateType  # noqa: E402
from prefect.events.actions import ChangeFlowRunState  # noqa: E402
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture  # noqa: E402
from prefect.events.schemas.events import ResourceSpecification  # noqa: E402

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

AUTOMATION_NAME = "das: crash runs that stop beating"
# The flows whose runs the automation watches (their @flow names): other flows on the same
# server keep Prefect's own heartbeat interval, which this window would misread as silence.
DAS_FLOWS = ("safetab-p", "phsafe", "validate", "swap", "audit-privacy", "approval-sweep")
HEARTBEAT = "prefect.flow-run.heartbeat"
# The state names after which a run's process rightly stops beating (events are named after the
# state's name, not its type): Prefect's ends, the pipeline's Refused (a Cancelled state),
# Cancelling (a cancel the worker or Prefect's cancelling timeout completes; the server would
# refuse Crashed from it anyway), and Suspended: a run waiting for its approvers holds no
# process (tasks/approval.py); resumed, its new process beats again.
ENDING_STATES = (
    "Completed", "Failed", "TimedOut", "Crashed", "Cancelled", "Cancelling", "Refused",
    "Suspended",
)  # fmt: skip


def crash_message(settings: Liveness) -> str:
    """The Crashed state's message: the run page shows it beside the state."""
    return (
        f"no heartbeat for {settings.crash_after_seconds} s: the flow process or its host is "
        "gone. Retry resumes the run (reuses every draw the ledger recorded); a `das run` "
        "resumes with the same command and --run-id <its run id>"
    )


def crash_automation(settings: Liveness) -> AutomationCore:
    """The automation for ``settings``: after each heartbeat of a DAS flow run, another
    heartbeat or the run's end within the window, else the run is proposed Crashed."""
    window = settings.crash_after_seconds
    return AutomationCore(
        name=AUTOMATION_NAME,
        description=(
            f"Marks a run of the DAS flows Crashed when it stops beating: its flow process emits "
            f"a heartbeat every {settings.heartbeat_seconds} s (DAS_HEARTBEAT_SECONDS); after "
            f"{window} s without one (DAS_CRASH_AFTER_SECONDS) the process or its host is gone "
            "(a killed worker and flow process, a lost host, a killed `das run`), and Retry "
            "resumes the run. Created by `das deploy` (docs/how-to/crashed-or-stuck-run.md)."
        ),
        enabled=True,
        trigger=EventTrigger(
            after={HEARTBEAT},
            expect={HEARTBEAT, *(f"prefect.flow-run.{name}" for name in ENDING_STATES)},
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification(
                {"prefect.resource.role": "flow", "prefect.resource.name": list(DAS_FLOWS)}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=window),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED, name="Crashed", message=crash_message(settings)
            )
        ],
    )


def _essence(automation: AutomationCore) -> dict[str, Any]:
    """What makes two automations act alike (not their ids or timestamps)."""
    fields = {"description", "enabled", "trigger", "actions"}
    data = automation.model_dump(mode="json", include=fields)
    data["trigger"].pop("id", None)
    for key in ("after", "expect", "for_each"):
        data["trigger"][key] = sorted(data["trigger"][key])
    return data


@dataclass(frozen=True)
class Ensured:
    """What :func:`ensure_crash_automation` did: created, updated, unchanged, or kept (one that
    differs, left as it was: ``das run`` never reconfigures the server)."""

    outcome: str
    automation_id: str
    crash_after_seconds: float


def ensure_crash_automation(
    client: SyncPrefectClient, settings: Liveness, update: bool = True
) -> Ensured:
    """The automation on the server of ``client``: created when missing; with ``update``, made
    to match ``settings`` (duplicates of the same name removed), else left as found."""
    wanted = crash_automation(settings)
    found = [a for a in client.read_automations_by_name(AUTOMATION_NAME)
             if a.name == AUTOMATION_NAME]  # fmt: skip
    if not found:
        created = client.create_automation(wanted)
        return Ensured("created", str(created), settings.crash_after_seconds)
    first, *duplicates = found
    if _essence(first) == _essence(wanted):
        outcome = "unchanged"
    elif update:
        client.update_automation(first.id, wanted)
        outcome = "updated"
    else:
        window = getattr(first.trigger, "within", timedelta(0)).total_seconds()
        return Ensured("kept", str(first.id), window)
    if update:
        for duplicate in duplicates:
            client.delete_automation(duplicate.id)
    return Ensured(outcome, str(first.id), settings.crash_after_seconds)
