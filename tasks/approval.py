"""A deployment run whose spend is not approved waits for its approvers, and holds nothing.

Spending privacy budget is a decision that a quorum of the charter's approvers makes with their
keys, and the ledger records their signatures. A deployment run (a schedule, *Quick run*, a
Retry) that finds no approval writes the statement its approvers must sign into the ledger,
then *suspends*: Prefect's Suspended state (a Paused type), its flow process exits and its
worker slot is free — approvals take days, and a schedule firing meanwhile must not pile up
processes. The run's page shows the planned spend, the statement, who may sign, and how —
`das ledger approve --approval ID --key ...` at an approver's terminal, or `ssh-keygen -Y sign`
and the signature pasted into the *Resume* form.

What resumes it (:func:`settle`; the worker then runs the flow again from its start):

- `das ledger approve` whose signature completes the quorum, and `das ledger reject`, when the
  Prefect server is reachable from where they run;
- *Resume* in the UI: a pasted signature is recorded (the run suspends again while the quorum
  is short); **reject** records who (as typed) and why and ends the run Refused;
- the approvals sweep (:mod:`flows.approval_sweep`, a scheduled deployment `das deploy`
  registers) for all the rest: signatures made where the server is not reachable, a server
  that was down, the request's expiry, and the request of a run cancelled while it waited,
  which it withdraws in the ledger (no later signature counts).

Run again, the flow reuses every step before the wait (its run folder and step markers, the same
run id and the request the ledger holds: :meth:`das.runs.lifecycle.ReleaseRun.request_approval`),
reads the form's answer of its last suspension, and checks the ledger: it draws only under a
quorum's signatures; past the request's expiry (``DAS_APPROVAL_TIMEOUT_SECONDS`` after it was
made) it ends Refused, with its log and audit record. A typed name approves nothing: only
signatures do. The form and the artifact carry budgets, digests and the dataset's ledger id
only, and the live count of signatures (refreshed by whatever records one).
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import base64  # noqa: E402
import contextlib  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, ClassVar  # noqa: E402

from prefect.input import RunInput  # noqa: E402
from pydantic import ConfigDict, Field  # noqa: E402

from das.privacy.mechanisms import parse_fraction_text  # noqa: E402
from das.refusal import Remedy, RunRefused  # noqa: E402
from das.runs.audit import md_escape  # noqa: E402
from das.trust import (  # noqa: E402
    APPROVAL_NAMESPACE,
    Approval,
    LedgerRefused,
    PrivacyLedger,
    decimal_text,
    shown,
)
from tasks.artifacts import artifact_key  # noqa: E402
from tasks.run_tags import WAITING, retag  # noqa: E402

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

    from das.runs.lifecycle import ReleaseRun

# Prefect fails a suspended run that nothing resumed this long after its request expired (the
# sweep ends it Refused at the expiry; this is the backstop when no sweep runs at all).
BACKSTOP_SECONDS = 24 * 3600
PAUSE_KEY_PREFIX = "das-approval"
SIGNATURE_BLOCK = "-----BEGIN SSH SIGNATURE-----"


class SpendDecision(RunInput):
    """The form on *Resume*. Only signatures approve; a rejection needs none but a reason.
    The server checks an answer against this schema before it resumes the run: an approval
    without a signature block, or a rejection without a reason, is refused there with the
    field's name (the UI shows it), and the run stays suspended. Every field a decision needs
    is required, so that the UI marks none of them "(Optional)"; the UI sends them all."""

    model_config: ClassVar[ConfigDict] = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "required": ["reject", "signature", "reason"],
            "if": {"properties": {"reject": {"const": True}}},
            "then": {"properties": {"reason": {"minLength": 1}}},
            "else": {"properties": {"signature": {"pattern": SIGNATURE_BLOCK}}},
        },
    )

    reject: bool = Field(
        default=False,
        title="Reject this spend",
        description="on: end this run now, nothing drawn (say why below); off: approve it "
        "with your signature below",
    )
    signature: str = Field(
        default="",
        title="Your signature (to approve)",
        description="the whole -----BEGIN SSH SIGNATURE----- block that `ssh-keygen -Y sign` "
        "wrote for this statement (the run's artifact says how)",
    )
    reason: str = Field(default="", title="Why (to reject)")
    name: str = Field(default="", title="Who rejects (recorded as typed)")


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


@dataclass(frozen=True)
class Standing:
    """Where an approval request stands in the ledger, as the run's page shows it."""

    approval: Approval
    agreed: bool
    signers: list[str]
    needed: int

    @classmethod
    def of(cls, ledger: PrivacyLedger, approval_id: str) -> Standing | None:
        approval = ledger.approval(approval_id)
        if approval is None:
            return None
        agreed, keys, needed = ledger.approval_agreed(approval_id)
        signed = [f"{k.fingerprint[:20]}… {shown(k.label, 40)}" for k in keys]
        return cls(approval, agreed, signed, needed)

    @property
    def count(self) -> str:
        return f"{len(self.signers)} of {self.needed}"


def approval_markdown(ledger: PrivacyLedger, standing: Standing, note: str = "") -> str:
    """What an approver needs, what is signed first: the planned spend, the dataset and the
    parameters, then who signed (the live count), who may sign, and how."""
    request = standing.approval
    statement = request.statement
    unit = {"zcdp": "ρ (zCDP)", "puredp": "ε (pure DP)"}.get(statement["definition"], "")
    chain = ledger.charter_chain()
    approvers = chain.in_force.approvers if chain.in_force is not None else ()
    where = (
        f"--ledger {ledger.store.path.parent}"
        if ledger.store.path is not None
        else '--url "$DAS_LEDGER_URL"'
    )
    key = approver_key_hint(ledger.store.path)
    lines = [
        f"## Approve the privacy spend of {md_escape(statement['product'])} run "
        f"{md_escape(statement.get('run_id') or '')}?",
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
        f"Dataset `{str(statement['dataset'])[:16]}` (its id in this ledger), sealed parameters "
        f"`{statement['parameters']['digest'][:16]}` ("
        + ", ".join(md_escape(n) for n in sorted(statement["parameters"]["files"]))
        + f"), privacy ledger `{md_escape(statement['ledger_id'])}`, approval "
        f"`{request.approval_id}`, valid until {md_escape(statement['expires'])}.",
        "",
        f"**{standing.count}** approvers' signatures are in the ledger"
        + (f" ({', '.join(md_escape(s) for s in standing.signers)})" if standing.signers else "")
        + ". The run holds no process while it waits; it goes on once a quorum signed.",
        "",
        "**Who may sign**: the approvers of the charter in force"
        + (f" ({standing.needed} of {len(approvers)} needed):" if approvers else ":"),
        *(f"- `{k.fingerprint}` {md_escape(shown(k.label))}" for k in approvers),
        "",
        "**How** (each approver, with their own key):",
        "",
        f"1. at a terminal with the pipeline: `das ledger approve --approval "
        f"{request.approval_id} {where} --key {key}` (shows the statement, then "
        "signs it; the run goes on by itself), or",
        "2. with OpenSSH alone: write the statement, sign it, paste the signature into the "
        "*Resume* form (decision: approve):",
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


def form_markdown(standing: Standing, note: str = "") -> str:
    """The text above the *Resume* form's fields: what is signed — the spend per pass, the
    dataset and the sealed parameters — and the live count, short enough to read whole in the
    form (the artifact has the rest: the statement, who may sign, how)."""
    statement = standing.approval.statement
    unit = {"zcdp": "ρ (zCDP)", "puredp": "ε (pure DP)"}.get(statement["definition"], "")
    lines = [
        f"**Privacy spend of {md_escape(statement['product'])}**, {unit}:",
        "",
        "| pass | earlier | this run | cumulative | ceiling |",
        "|---|---|---|---|---|",
        *(
            f"| {md_escape(name)} | {decimal_text(parse_fraction_text(item['prior']))} | "
            f"{decimal_text(parse_fraction_text(item['this_run']))} | "
            f"{decimal_text(parse_fraction_text(item['cumulative']))} | "
            f"{decimal_text(parse_fraction_text(statement['ceiling']))} |"
            for name, item in sorted(statement["passes"].items())
        ),
        "",
        f"Dataset `{str(statement['dataset'])[:16]}`, sealed parameters "
        f"`{statement['parameters']['digest'][:16]}` "
        f"({len(statement['parameters']['files'])} file"
        f"{'' if len(statement['parameters']['files']) == 1 else 's'}), until "
        f"{md_escape(str(statement['expires'])[:16])}. **{standing.count}** signatures so far; "
        f"how to sign: artifact `{artifact_key(str(statement['product']), 'approval')}`.",
    ]
    if note:
        lines += ["", f"> {md_escape(note)}"]
    return "\n".join(lines)


# -- the suspension's keys: one per wait, so that an answer is read once ---------------------


def pause_key(approval_id: str, round_: int) -> str:
    return f"{PAUSE_KEY_PREFIX}-{approval_id}-{round_}"


def rounds(client: SyncPrefectClient, flow_run_id: str, approval_id: str) -> list[int]:
    """The waits for ``approval_id`` this flow run suspended for, oldest first."""
    policy = client.read_flow_run(flow_run_id).empirical_policy
    pattern = re.compile(re.escape(f"{PAUSE_KEY_PREFIX}-{approval_id}-") + r"(\d+)")
    found = (pattern.fullmatch(key) for key in (policy.pause_keys or ()))
    return sorted(int(m.group(1)) for m in found if m)


def input_key(approval_id: str, round_: int, part: str) -> str:
    """The key of a suspension's ``description``, ``schema`` or ``response`` (Prefect's
    keyset of a Suspended state: ``suspended-<pause key>-<part>``)."""
    return f"suspended-{pause_key(approval_id, round_)}-{part}"


def read_input(client: SyncPrefectClient, flow_run_id: str, key: str) -> Any:
    """A flow run input's value; None when there is none (the client raises a 404 for it)."""
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    try:
        return json.loads(client.read_flow_run_input(flow_run_id, key))
    except ObjectNotFound:
        return None
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code == 404:
            return None
        raise


def last_answer(
    client: SyncPrefectClient, flow_run_id: str, approval_id: str
) -> SpendDecision | None:
    """The form's answer that resumed the run from its last wait for ``approval_id`` (None: it
    never waited for it, or something else resumed it)."""
    waits = rounds(client, flow_run_id, approval_id)
    if not waits:
        return None
    value = read_input(client, flow_run_id, input_key(approval_id, waits[-1], "response"))
    if not isinstance(value, dict):
        return None
    try:
        return SpendDecision(**value)
    except ValueError:
        return None


def apply_answer(
    ledger: PrivacyLedger, request: Approval, answer: SpendDecision, flow_run_id: str
) -> str:
    """Record what the form said: a signature (into the ledger, checked), or a rejection (then
    the run ends Refused). Returns a note for the page when the answer approved nothing."""
    if answer.reject:
        who = answer.name.strip() or "someone who typed no name"
        current = ledger.approval(request.approval_id)
        if current is not None and current.rejection is None:
            ledger.reject_approval(
                request.approval_id, answer.reason, who, f"Prefect UI, flow run {flow_run_id}"
            )
        retag(flow_run_id, remove=[WAITING])
        raise RunRefused(
            f"the privacy spend was rejected in the Prefect UI by {shown(who)} (as typed)"
            + (f": {shown(answer.reason)}" if answer.reason.strip() else "")
            + "; nothing was drawn",
            Remedy(
                deployment="to spend under other parameters, start a new custom run; a "
                "Retry of this run ends the same way (its approval was rejected)",
            ),
        )
    if not answer.signature.strip():
        return (
            "Resumed without a signature: a typed decision approves nothing. Paste an "
            "approver's signature, or have the approvers sign with das ledger approve."
        )
    try:
        ledger.sign_approval(request.approval_id, answer.signature.strip())
    except LedgerRefused as exc:
        if "signed it already" in str(exc):
            return ""  # the same answer read again (a run started again before it waited)
        return f"The signature pasted was not recorded: {exc}"
    return ""


def show_waiting(
    client: SyncPrefectClient,
    ledger: PrivacyLedger,
    standing: Standing,
    flow_run_id: str,
    note: str = "",
) -> str:
    """The run's approval artifact, with the live count (a new version of the same key)."""
    from prefect.client.schemas.actions import ArtifactCreate

    markdown = approval_markdown(ledger, standing, note)
    product = str(standing.approval.statement["product"])
    client.create_artifact(
        ArtifactCreate(
            key=artifact_key(product, "approval"),
            type="markdown",
            data=markdown,
            description=f"{product}: waiting for approval — {standing.count} signatures",
            flow_run_id=flow_run_id,
        )
    )
    return markdown


def refresh(
    client: SyncPrefectClient, ledger: PrivacyLedger, standing: Standing, flow_run_id: str
) -> None:
    """The live count on a suspended run's page: its artifact, and the text of the form of its
    current wait (which Prefect shows above the *Resume* form's fields)."""
    show_waiting(client, ledger, standing, flow_run_id)
    waits = rounds(client, flow_run_id, standing.approval.approval_id)
    if waits:
        key = input_key(standing.approval.approval_id, waits[-1], "description")
        with contextlib.suppress(Exception):
            client.delete_flow_run_input(flow_run_id, key)
        client.create_flow_run_input(flow_run_id, key, json.dumps(form_markdown(standing)))


def resume(client: SyncPrefectClient, flow_run_id: str) -> bool:
    """Resume a suspended run without a form answer (the ledger decides what it does next):
    what *Resume* does, as an orchestrated proposal (False when the run is not suspended)."""
    from prefect.states import Scheduled

    state = Scheduled(name="Resuming", scheduled_time=dt.datetime.now(dt.UTC))
    result = client.set_flow_run_state(flow_run_id, state)
    return result.status.value == "ACCEPT"


def expired_refusal(standing: Standing) -> RunRefused:
    request = standing.approval
    return RunRefused(
        f"approval {request.approval_id} expired at {request.statement['expires']} with "
        f"{standing.count} approvers' signatures: no quorum signed it in time; nothing was "
        "drawn",
        Remedy(
            deployment="once the approvers can sign, Retry this flow run (it asks for a new "
            "approval of the same spend), or start a new run",
            cli="once the approvers signed (das ledger approve), run again",
        ),
    )


def await_approval(run: ReleaseRun, request: Approval, flow_run_id: str | None) -> None:
    """Return once a quorum of approvers signed ``request`` in the ledger; raise
    :class:`RunRefused` on a rejection or past its expiry (nothing drawn); else suspend the
    flow run until something resumes it (Prefect's ``Pause``: the process exits)."""
    from prefect import get_run_logger
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import suspend_flow_run

    if flow_run_id is None:
        raise RunRefused("a run outside a flow run cannot wait for its approvers")
    logger = get_run_logger()
    ledger = run.ledger
    with get_client(sync_client=True) as client:
        answer = last_answer(client, flow_run_id, request.approval_id)
        waits = rounds(client, flow_run_id, request.approval_id)
    note = "" if answer is None else apply_answer(ledger, request, answer, flow_run_id)
    if note:
        logger.warning("%s", note)
    standing = Standing.of(ledger, request.approval_id)
    assert standing is not None
    current = standing.approval
    if standing.agreed:
        logger.info("privacy spend approved: %s approvers signed approval %s",
                    standing.count, request.approval_id)  # fmt: skip
        retag(flow_run_id, remove=[WAITING])
        return
    if current.rejection is not None:
        retag(flow_run_id, remove=[WAITING])
        verb = "withdrawn" if current.withdrawn else "rejected"
        raise RunRefused(
            f"approval {request.approval_id} was {verb} by "
            f"{shown(current.rejection.get('by', ''))}: "
            f"{shown(current.rejection.get('reason', ''))}; nothing was drawn"
        )
    if current.expired():
        retag(flow_run_id, remove=[WAITING])
        raise expired_refusal(standing)
    # the page is information, the wait is not
    with contextlib.suppress(Exception), get_client(sync_client=True) as client:
        show_waiting(client, ledger, standing, flow_run_id, note)
    retag(flow_run_id, add=[WAITING])
    left = (current.expires - dt.datetime.now(dt.UTC)).total_seconds()
    logger.info(
        "waiting for approval %s: %s approvers' signatures in the ledger; the run suspends "
        "(its process ends, nothing is held) until a quorum signed, a rejection, or its expiry "
        "at %s (the run's page shows the statement and how to sign)",
        request.approval_id, standing.count, current.statement["expires"],
    )  # fmt: skip
    if run.progress is not None:
        run.progress.pause("approval")
    suspend_flow_run(
        wait_for_input=SpendDecision.with_initial_data(description=form_markdown(standing, note)),
        key=pause_key(request.approval_id, (waits[-1] if waits else 0) + 1),
        timeout=int(max(left, 0)) + BACKSTOP_SECONDS,
    )
    raise RuntimeError("the run was not suspended")  # suspend_flow_run raised Pause


# -- from outside the run: a signature, a rejection, the sweep --------------------------------


def flow_run_of(approval: Approval) -> str | None:
    """The flow run that wrote the request (``requested_by: "flow run <id>"``)."""
    match = re.fullmatch(r"flow run ([0-9a-f-]{36})", str(approval.statement.get("requested_by")))
    return match.group(1) if match else None


def page_count(client: SyncPrefectClient, flow_run_id: str, approval_id: str) -> str | None:
    """The count of signatures the form of the run's current wait shows ("1 of 2")."""
    waits = rounds(client, flow_run_id, approval_id)
    if not waits:
        return None
    text = read_input(client, flow_run_id, input_key(approval_id, waits[-1], "description"))
    found = re.search(r"\*\*(\d+ of \d+)\*\*", str(text or ""))
    return found.group(1) if found else None


def settle(
    client: SyncPrefectClient,
    ledger: PrivacyLedger,
    approval_id: str,
    *,
    by: str,
    withdraw_only: bool = False,
) -> str | None:
    """Tell the run that asked for ``approval_id`` what the ledger now holds. Suspended: resume
    it when a quorum signed, the request was rejected or it expired (the run goes on, or ends
    Refused with its reason), else show the live count on its page. Cancelled or deleted while
    it waited: withdraw the request (``by`` says what did). What was done, in words; None when
    nothing was to do."""
    from prefect.exceptions import ObjectNotFound

    standing = Standing.of(ledger, approval_id)
    if standing is None:
        return None
    flow_run_id = flow_run_of(standing.approval)
    if flow_run_id is None:
        return None
    try:
        flow_run = client.read_flow_run(flow_run_id)
    except ObjectNotFound:
        flow_run = None
    state = None if flow_run is None else flow_run.state
    if flow_run is None or (
        state is not None
        and (state.is_cancelled() or state.is_cancelling())
        and state.name != "Refused"
    ):
        what = "deleted" if flow_run is None else "cancelled"
        if ledger.withdraw_approval(
            approval_id, f"flow run {flow_run_id} was {what} while it waited for its approvers", by
        ):
            if flow_run is not None:
                retag(flow_run_id, remove=[WAITING])
            return f"approval {approval_id} withdrawn: flow run {flow_run_id} was {what}"
        return None
    if state is None or not state.is_paused() or withdraw_only:
        return None
    closing = standing.approval.rejection is not None or standing.approval.expired()
    if standing.agreed or closing:
        if resume(client, flow_run_id):
            return f"flow run {flow_run_id} resumed (approval {approval_id})"
        return None
    if page_count(client, flow_run_id, approval_id) != standing.count:
        refresh(client, ledger, standing, flow_run_id)
        return f"flow run {flow_run_id} waits: its page now shows {standing.count} signatures"
    return None


def open_requests(ledger: PrivacyLedger, within: dt.timedelta) -> list[str]:
    """The requests flow runs wrote that no run spent and nothing withdrew — a rejected one
    too: its run may still wait, to end Refused —, the latest of each run (a Retry asks anew),
    expired no longer than ``within`` ago: the ones a sweep looks at."""
    now = dt.datetime.now(dt.UTC)
    latest: dict[str, dict[str, Any]] = {}
    for item in ledger.approvals():  # oldest first
        statement = item["statement"]
        if statement.get("run_id") and str(statement.get("requested_by", "")).startswith(
            "flow run "
        ):
            latest[str(statement["run_id"])] = item
    found = []
    for item in latest.values():
        expires = dt.datetime.fromisoformat(str(item["statement"]["expires"]))
        withdrawn = bool(item["rejection"] and item["rejection"].get("withdrawn"))
        if item["used_by"] or withdrawn or expires + within < now:
            continue
        found.append(str(item["approval_id"]))
    return found


def nudge_from_terminal(
    ledger: PrivacyLedger, approval_id: str, withdraw_only: bool = False
) -> str:
    """After `das ledger approve` or `reject`: settle the waiting run at once when the Prefect
    server is reachable; else say what will (the sweep). One line for the terminal."""
    from das.trust import who

    later = "the approvals sweep resumes a waiting run within minutes (das deploy registers it)"
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        return f"PREFECT_API_URL is not set: {later}"

    try:
        with get_client(sync_client=True) as client:
            done = settle(
                client, ledger, approval_id, by=f"das ledger, {who()}", withdraw_only=withdraw_only
            )
    except Exception as exc:  # the server is down or refuses us: the sweep does it
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        return f"the Prefect server could not be asked ({reason}): {later}"
    return done or "no run waits for it on the Prefect server"
