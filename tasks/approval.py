"""A deployment run whose spend is not approved pauses for a person's decision in the Prefect UI.

Spending privacy budget is a decision a person makes, and the ledger records it. From the CLI
that decision is ``das ledger approve`` before the run; a deployment run started from the UI
(or by a schedule) instead pauses here with a typed input form that shows the planned spend per
pass, the dataset's cumulative spend and the ledger's ceiling. *Resume* with ``approve`` ticked
records the same approval in the ledger (who: the name typed, via the flow run) and the run goes
on; *Resume* without it, or no decision before the timeout, ends the run as refused — nothing
drawn. The form and its description carry budgets and the dataset's ledger id only.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import os  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.exceptions import FlowPauseTimeout  # noqa: E402
from prefect.flow_runs import pause_flow_run  # noqa: E402
from prefect.input import RunInput  # noqa: E402

from das.runs.audit import md_escape  # noqa: E402
from das.runs.ledger import ApprovalRequired, decimal_text  # noqa: E402
from das.runs.policy import RunRefused  # noqa: E402

if TYPE_CHECKING:
    from das.runs.lifecycle import ReleaseRun

APPROVAL_TIMEOUT_ENV = "DAS_APPROVAL_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT = 24 * 3600


class SpendApproval(RunInput):
    """The form shown on *Resume*: approve this spend, who decides, and why."""

    approve: bool = False
    approver: str = ""
    note: str = ""


def approval_markdown(run: ReleaseRun, refusal: ApprovalRequired) -> str:
    """What a person needs to decide: the planned spend per pass, the cumulative spend of the
    dataset, the ceiling; the config and the dataset by their hashes."""
    unit = {"zcdp": "ρ (zCDP)", "puredp": "ε (pure DP)"}
    lines = [
        f"## Approve the privacy spend of {md_escape(run.product)} run {md_escape(run.run_id)}?",
        "",
        f"Dataset `{refusal.dataset[:16]}` (privacy ledger {md_escape(run.info.location)}), "
        f"config sha256 `{run.sealed.sha256('config.json')[:16]}`.",
        "",
        "| pass | definition | earlier runs | this run | cumulative | ceiling |",
        "|---|---|---|---|---|---|",
    ]
    for item in refusal.passes:
        ceiling = refusal.ceilings.get(item.definition)
        lines.append(
            f"| {item.pass_name} | {unit.get(item.definition, item.definition)} | "
            f"{decimal_text(item.prior)} | {decimal_text(item.this_run)} | "
            f"{decimal_text(item.cumulative)} | "
            f"{'—' if ceiling is None else decimal_text(ceiling)} |"
        )
    lines += [
        "",
        "Tick **approve**, type your name and a note, then *Resume*: the approval is recorded "
        "in the privacy ledger and the run draws its noise. *Resume* without **approve** "
        "refuses the run (nothing is drawn).",
    ]
    return "\n".join(lines)


def approval_timeout() -> int:
    try:
        return int(os.environ.get(APPROVAL_TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


def wait_for_approval(run: ReleaseRun, refusal: ApprovalRequired) -> SpendApproval:
    """Pause the flow run for the decision; the approved input, or :class:`RunRefused`."""
    logger = get_run_logger()
    logger.warning(
        "privacy spend not approved yet: pausing for a decision in the Prefect UI "
        "(Resume → approve)"
    )
    timeout = approval_timeout()
    try:
        decision = pause_flow_run(
            wait_for_input=SpendApproval.with_initial_data(
                description=approval_markdown(run, refusal), approve=False
            ),
            timeout=timeout,
        )
    except FlowPauseTimeout:
        raise RunRefused(
            f"no decision on the privacy spend within {timeout} s; nothing was drawn",
            refusal.remedy,
        ) from None
    if not decision.approve:
        raise RunRefused(
            "the privacy spend was rejected in the Prefect UI"
            + (f" by {decision.approver}" if decision.approver else "")
            + "; nothing was drawn",
        )
    if not decision.approver.strip():
        raise RunRefused(
            "an approval must name who approves (the approver field was empty); nothing was "
            "drawn. Retry the run and fill in your name"
        )
    logger.info("privacy spend approved in the Prefect UI by %s", decision.approver)
    return decision
