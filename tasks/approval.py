"""A deployment run whose spend is not approved waits for its approvers in the Prefect UI.

Spending privacy budget is a decision that a quorum of the charter's approvers makes with their
keys, and the ledger records their signatures. A deployment run (a schedule, *Quick run*, a
Retry) that finds no approval writes the statement its approvers must sign into the ledger,
then pauses: the run's page shows the planned spend, the statement, who may sign, and how —
`das ledger approve --approval ID --key ...` at an approver's terminal, or `ssh-keygen -Y sign`
and the signature pasted into the *Resume* form. The run resumes by itself once a quorum of
valid signatures is in the ledger (a watcher thread asks the ledger every few seconds and
resumes the flow run through the API); *Resume* with a pasted signature records it; *Resume*
with **reject** records who (as typed) and why and ends the run Refused; so does no quorum
within ``DAS_APPROVAL_TIMEOUT_SECONDS``. A typed name approves nothing: only signatures do.
The form and its description carry budgets, digests and the dataset's ledger id only.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import base64  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Literal  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.exceptions import FlowPauseTimeout  # noqa: E402
from prefect.flow_runs import pause_flow_run, resume_flow_run  # noqa: E402
from prefect.input import RunInput  # noqa: E402
from pydantic import Field  # noqa: E402

from das.privacy.mechanisms import parse_fraction_text  # noqa: E402
from das.refusal import Remedy, RunRefused  # noqa: E402
from das.runs.audit import md_escape  # noqa: E402
from das.runs.progress import paused  # noqa: E402
from das.trust import (  # noqa: E402
    APPROVAL_NAMESPACE,
    Approval,
    LedgerRefused,
    decimal_text,
    shown,
)
from tasks.artifacts import artifact_key  # noqa: E402
from tasks.run_tags import WAITING, retag  # noqa: E402

if TYPE_CHECKING:
    from das.runs.lifecycle import ReleaseRun

APPROVAL_TIMEOUT_ENV = "DAS_APPROVAL_TIMEOUT_SECONDS"
APPROVAL_POLL_ENV = "DAS_APPROVAL_POLL_SECONDS"
DEFAULT_TIMEOUT = 24 * 3600
DEFAULT_POLL = 5


class SpendDecision(RunInput):
    """The form on *Resume*. Only signatures approve; a rejection needs none."""

    decision: Literal["approve", "reject"] = Field(
        title="Decision",
        description="approve: go on once a quorum of approvers signed (paste a signature "
        "below, or sign with `das ledger approve` and the run resumes by itself); reject: "
        "end this run, nothing drawn",
    )
    signature: str = Field(
        default="",
        title="An approver's signature (approve)",
        description="the whole -----BEGIN SSH SIGNATURE----- block that ssh-keygen -Y sign "
        "wrote for the statement above",
    )
    reason: str = Field(default="", title="Why (reject)")
    name: str = Field(default="", title="Who rejects (recorded as typed)")


def _env_seconds(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def statement_b64(request: Approval) -> str:
    return base64.b64encode(request.message).decode("ascii")


def approver_key_hint(ledger_file: Path | None) -> str:
    """The key to name in the approval's commands: the local profile's approver key when this
    is `das deploy --local`'s root (``<root>/keys`` beside its ledger folder or its state root
    ``<root>/state``), else a placeholder an approver replaces with their own key file (no
    guessed path that fails as printed)."""
    from das.runs.folder import state_root

    roots = [state_root().parent] + ([ledger_file.parent.parent] if ledger_file else [])
    for root in roots:
        local = root / "keys" / "local-approver"
        if local.is_file():
            return str(local)
    return "<your approver key file>"


def approval_markdown(
    run: ReleaseRun, request: Approval, signed: list[str], needed: int, note: str = ""
) -> str:
    """What an approver needs: the planned spend, the statement, who may sign, and how."""
    statement = request.statement
    unit = {"zcdp": "ρ (zCDP)", "puredp": "ε (pure DP)"}.get(statement["definition"], "")
    chain = run.ledger.charter_chain()
    approvers = chain.in_force.approvers if chain.in_force is not None else ()
    where = (
        f"--ledger {run.ledger.store.path.parent}"
        if run.ledger.store.path is not None
        else '--url "$DAS_LEDGER_URL"'
    )
    key = approver_key_hint(run.ledger.store.path)
    lines = [
        f"## Approve the privacy spend of {md_escape(run.product)} run {md_escape(run.run_id)}?",
        "",
        f"**{len(signed)} of {needed}** approvers' signatures are in the ledger"
        + (f" ({', '.join(md_escape(s) for s in signed)})" if signed else "")
        + ". The run resumes by itself when a quorum signed.",
        "",
        f"Dataset `{str(statement['dataset'])[:16]}`, sealed parameters "
        f"`{statement['parameters']['digest'][:16]}` (config and spec files), privacy ledger "
        f"`{md_escape(statement['ledger_id'])}`, approval `{request.approval_id}`, valid until "
        f"{md_escape(statement['expires'])}.",
        "",
        "| pass | earlier | this run | cumulative | ceiling |",
        "|---|---|---|---|---|",
    ]
    for name, item in sorted(statement["passes"].items()):
        lines.append(
            f"| {md_escape(name)} | {decimal_text(parse_fraction_text(item['prior']))} | "
            f"{decimal_text(parse_fraction_text(item['this_run']))} | "
            f"{decimal_text(parse_fraction_text(item['cumulative']))} | "
            f"{decimal_text(parse_fraction_text(statement['ceiling']))} {unit} |"
        )
    lines += [
        "",
        "**Who may sign**: the approvers of the charter in force"
        + (f" ({needed} of {len(approvers)} needed):" if approvers else ":"),
        *(f"- `{key.fingerprint}` {md_escape(shown(key.label))}" for key in approvers),
        "",
        "**How** (each approver, with their own key):",
        "",
        f"1. at a terminal with the pipeline: `das ledger approve --approval "
        f"{request.approval_id} {where} --key {key}` (shows the statement, then "
        "signs it; the run resumes by itself), or",
        "2. with OpenSSH alone: write the statement, sign it, paste the signature below and "
        "*Resume* (decision: approve):",
        "",
        "```",
        f"echo {statement_b64(request)} | base64 -d > statement.json",
        f"ssh-keygen -Y sign -n {APPROVAL_NAMESPACE} -f {key} statement.json",
        "cat statement.json.sig",
        "```",
        "",
        "To refuse: *Resume* with decision **reject** and why — nothing is drawn.",
    ]
    if note:
        lines += ["", f"> {md_escape(note)}"]
    return "\n".join(lines)


@contextlib.contextmanager
def _resume_when_agreed(run: ReleaseRun, request: Approval, flow_run_id: str) -> Iterator[None]:
    """While the run is paused, ask the ledger every few seconds whether a quorum signed;
    when one did, resume the flow run (the form's answer is then only "approve": the ledger's
    signatures decide, the run checks them again)."""
    stop = threading.Event()
    poll = _env_seconds(APPROVAL_POLL_ENV, DEFAULT_POLL)

    def watch() -> None:
        while not stop.wait(poll):
            with contextlib.suppress(Exception):
                agreed, _, _ = run.ledger.approval_agreed(request.approval_id)
                if agreed:
                    resume_flow_run(flow_run_id, run_input={"decision": "approve"})
                    return

    thread = threading.Thread(target=watch, name="das-approval-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=poll + 5)


def await_approval(run: ReleaseRun, request: Approval, flow_run_id: str | None) -> None:
    """Pause until a quorum of approvers signed ``request`` in the ledger; return then, or
    raise :class:`RunRefused` on a rejection or when the time is up (nothing drawn)."""
    if flow_run_id is None:
        raise RunRefused("a run outside a flow run cannot wait for its approvers")
    logger = get_run_logger()
    timeout = _env_seconds(APPROVAL_TIMEOUT_ENV, DEFAULT_TIMEOUT)
    deadline = time.monotonic() + timeout
    retry_later = Remedy(
        deployment="once the approvers can sign, Retry this flow run (it asks for the same "
        "approval again), or start a new run",
        cli="once the approvers signed (das ledger approve), run again",
    )
    note = ""
    while True:
        agreed, signers, needed = run.ledger.approval_agreed(request.approval_id)
        if agreed:
            logger.info(
                "privacy spend approved: %d of %d approvers signed approval %s",
                len(signers), needed, request.approval_id,
            )  # fmt: skip
            retag(flow_run_id, remove=[WAITING])
            return
        current = run.ledger.approval(request.approval_id)
        if current is not None and current.rejection is not None:
            raise RunRefused(
                f"approval {request.approval_id} was rejected by "
                f"{shown(current.rejection.get('by', ''))} (as typed): "
                f"{shown(current.rejection.get('reason', ''))}; nothing was drawn"
            )
        left = int(deadline - time.monotonic())
        if left <= 0:
            raise RunRefused(
                f"no quorum of approvers signed approval {request.approval_id} within {timeout} "
                f"s ({len(signers)} of {needed}); nothing was drawn",
                retry_later,
            )
        signed = [f"{k.fingerprint[:20]}… {shown(k.label, 40)}" for k in signers]
        markdown = approval_markdown(run, request, signed, needed, note)
        with contextlib.suppress(Exception):  # the page is information, the wait is not
            create_markdown_artifact(
                markdown=markdown,
                key=artifact_key(run.product, "approval"),
                description=f"{run.product}: waiting for approval — {len(signed)} of {needed} "
                "signatures",
            )
        retag(flow_run_id, add=[WAITING])
        logger.info(
            "waiting for approval %s: %d of %d approvers' signatures in the ledger (the run's "
            "page shows the statement and how to sign)", request.approval_id, len(signers), needed,
        )  # fmt: skip
        try:  # the run's clock stops while it waits for a person
            with paused(run.progress, "approval"), _resume_when_agreed(run, request, flow_run_id):
                decision = pause_flow_run(
                    wait_for_input=SpendDecision.with_initial_data(
                        description=markdown, decision="approve"
                    ),
                    timeout=left,
                    poll_interval=_env_seconds(APPROVAL_POLL_ENV, DEFAULT_POLL),
                )
        except FlowPauseTimeout:
            raise RunRefused(
                f"no quorum of approvers signed approval {request.approval_id} within {timeout} "
                "s; nothing was drawn",
                retry_later,
            ) from None
        if decision.decision == "reject":
            who = decision.name.strip() or "someone who typed no name"
            run.ledger.reject_approval(
                request.approval_id, decision.reason, who, f"Prefect UI, flow run {flow_run_id}"
            )
            retag(flow_run_id, remove=[WAITING])
            raise RunRefused(
                f"the privacy spend was rejected in the Prefect UI by {shown(who)} (as typed)"
                + (f": {shown(decision.reason)}" if decision.reason.strip() else "")
                + "; nothing was drawn",
                Remedy(
                    deployment="to spend under other parameters, start a new custom run; a "
                    "Retry would ask for a new approval of the same spend",
                ),
            )
        note = ""
        if decision.signature.strip():
            try:
                run.ledger.sign_approval(request.approval_id, decision.signature.strip())
                logger.info("a signature pasted in the Prefect UI was recorded")
            except LedgerRefused as exc:
                note = f"The signature pasted was not recorded: {exc}"
                logger.warning("%s", note)
        elif not run.ledger.approval_agreed(request.approval_id)[0]:
            note = (
                "Resumed without a signature, and the ledger holds no quorum yet: a typed "
                "decision approves nothing. Paste an approver's signature, or have the "
                "approvers sign with das ledger approve."
            )
