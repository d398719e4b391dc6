"""A run waiting for its approvers holds no process (tasks/approval.py): what notices their
decision — `das ledger approve`/`reject` and the approvals sweep — and the *Resume* form the
server checks. Against a real chartered ledger (SQLite) and a fake Prefect client that keeps
flow runs, their inputs and artifacts as the server would; the real server, worker and UI are
tests/test_e2e_prefect.py's and tests/test_e2e_browser.py's."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from test_ledger import APPROVER, US, chartered, opening

from das.refusal import RunRefused
from das.trust import (
    APPROVAL_NAMESPACE,
    LedgerStore,
    PrivacyLedger,
    approval_statement,
    canonical_json,
    sign,
)
from tasks import approval as waiting

FILES = {"config.json": "c" * 64}
SEAL = hashlib.sha256("".join(f"{n}:{d}\n" for n, d in FILES.items()).encode()).hexdigest()


class NotFound(Exception):
    pass


@dataclass
class FakeRun:
    state: str = "Suspended"  # Suspended, Cancelled, Refused, Running
    tags: list[str] = field(default_factory=lambda: ["awaiting-approval"])
    pause_keys: set[str] = field(default_factory=set)

    @property
    def prefect_state(self) -> Any:
        kind = {"Suspended": "PAUSED", "Cancelled": "CANCELLED", "Refused": "CANCELLED"}
        return SimpleNamespace(
            name=self.state,
            is_paused=lambda: kind.get(self.state) == "PAUSED",
            is_cancelled=lambda: kind.get(self.state) == "CANCELLED",
            is_cancelling=lambda: False,
        )


class FakeClient:
    """What tasks.approval asks of Prefect's sync client, over in-memory flow runs."""

    def __init__(self) -> None:
        self.runs: dict[str, FakeRun] = {}
        self.inputs: dict[tuple[str, str], str] = {}
        self.artifacts: list[Any] = []
        self.resumed: list[str] = []

    def read_flow_run(self, flow_run_id: str) -> Any:
        from prefect.exceptions import ObjectNotFound

        run = self.runs.get(str(flow_run_id))
        if run is None:
            raise ObjectNotFound(NotFound(flow_run_id))
        policy = SimpleNamespace(pause_keys=set(run.pause_keys))
        return SimpleNamespace(state=run.prefect_state, tags=run.tags, empirical_policy=policy)

    def update_flow_run(self, flow_run_id: str, tags: list[str]) -> None:
        self.runs[str(flow_run_id)].tags = list(tags)

    def read_flow_run_input(self, flow_run_id: str, key: str) -> str:
        from prefect.exceptions import ObjectNotFound

        if (str(flow_run_id), key) not in self.inputs:
            raise ObjectNotFound(NotFound(key))
        return self.inputs[(str(flow_run_id), key)]

    def delete_flow_run_input(self, flow_run_id: str, key: str) -> None:
        self.inputs.pop((str(flow_run_id), key), None)

    def create_flow_run_input(self, flow_run_id: str, key: str, value: str) -> None:
        assert (str(flow_run_id), key) not in self.inputs, "the server refuses a second one"
        self.inputs[(str(flow_run_id), key)] = value

    def create_artifact(self, artifact: Any) -> None:
        self.artifacts.append(artifact)

    def read_artifacts(self, **_: Any) -> list[Any]:
        return []  # no ledger head witnessed on this server

    def set_flow_run_state(self, flow_run_id: str, state: Any) -> Any:
        run = self.runs[str(flow_run_id)]
        accepted = run.state == "Suspended" and state.name == "Resuming"
        if accepted:
            run.state = "Resuming"
            self.resumed.append(str(flow_run_id))
        return SimpleNamespace(status=SimpleNamespace(value="ACCEPT" if accepted else "REJECT"))

    def suspend(self, flow_run_id: str, approval_id: str, description: str) -> None:
        """What the run's suspension leaves on the server: its key and its form's text."""
        run = self.runs[flow_run_id]
        round_ = len([k for k in run.pause_keys if approval_id in k]) + 1
        run.pause_keys.add(waiting.pause_key(approval_id, round_))
        key = waiting.input_key(approval_id, round_, "description")
        self.inputs[(flow_run_id, key)] = json.dumps(description)

    def answer(self, flow_run_id: str, approval_id: str, value: dict[str, Any]) -> None:
        """*Resume* with the form's values, as the server stores them."""
        run = self.runs[flow_run_id]
        round_ = len([k for k in run.pause_keys if approval_id in k])
        key = waiting.input_key(approval_id, round_, "response")
        self.inputs[(flow_run_id, key)] = json.dumps(value)
        run.state = "Resuming"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    fake = FakeClient()

    class Context:
        def __enter__(self) -> FakeClient:
            return fake

        def __exit__(self, *exc: object) -> None:
            return None

    import prefect.client.orchestration

    import tasks.ledger_witness

    for module in (prefect.client.orchestration, tasks.ledger_witness):  # (imported at the top)
        monkeypatch.setattr(module, "get_client", lambda **_: Context())
    return fake


@pytest.fixture
def ledger(tmp_path: Path) -> PrivacyLedger:
    """A chartered ledger (one approver, quorum 1) in a SQLite file."""
    return chartered(LedgerStore.in_directory(tmp_path / "ledger"), tmp_path)


def request_of(
    ledger: PrivacyLedger, client: FakeClient, valid_for: dt.timedelta | None = None
) -> tuple[str, Any]:
    """A suspended deployment run and the request it wrote (unsigned)."""
    flow_run_id = str(uuid.uuid4())
    ledger.open_run(opening(flow_run_id))
    data = ledger.dataset_id("f" * 64)
    passes, ceiling, chain, _ = ledger.plan_spend("safetab-p", data, SEAL, "zcdp", US)
    statement = approval_statement(
        ledger_id=ledger.info().ledger_id, charter=chain.in_force, product="safetab-p",
        dataset=data, parameters={"digest": SEAL, "files": FILES},
        definition="zcdp", passes=passes, ceiling=ceiling, note="", run_id=flow_run_id,
        requested_by=f"flow run {flow_run_id}", valid_for=valid_for,
    )  # fmt: skip
    request = ledger.record_approval(statement)
    client.runs[flow_run_id] = FakeRun()
    standing = waiting.Standing.of(ledger, request.approval_id)
    client.suspend(flow_run_id, request.approval_id, waiting.form_markdown(standing))
    return flow_run_id, request


def signature(ledger: PrivacyLedger, request: Any) -> str:
    return sign(canonical_json(request.statement), APPROVAL_NAMESPACE, APPROVER[ledger.location])


def test_the_form_refuses_an_approval_without_a_signature_and_a_rejection_without_a_reason() -> (
    None
):
    """The server validates *Resume*'s values against this schema before it resumes the run
    (Prefect's schema_tools uses jsonschema): an "approve" with no signature block is refused,
    naming the field, and the run stays suspended; no field a decision needs is optional."""
    from prefect._internal.pydantic.v2_schema import create_v2_schema

    form = waiting.SpendDecision.with_initial_data(description="the statement")
    schema = create_v2_schema(form.__name__, model_base=form)
    validator = jsonschema.Draft202012Validator(schema)

    def errors(values: dict[str, Any]) -> list[str]:
        return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(values)]

    empty = {"reject": False, "signature": "", "reason": "", "name": ""}  # what the UI sends
    assert errors(empty) == ["signature: '' does not match '-----BEGIN SSH SIGNATURE-----'"]
    assert errors({**empty, "signature": "-----BEGIN SSH SIGNATURE-----\nU1NI\n"}) == []
    assert errors({**empty, "reject": True}) == ["reason: '' should be non-empty"]
    assert errors({**empty, "reject": True, "reason": "not this week"}) == []
    assert set(schema["required"]) == {"reject", "signature", "reason"}


def test_a_signature_completing_the_quorum_resumes_the_suspended_run(
    ledger: PrivacyLedger, client: FakeClient
) -> None:
    flow_run_id, request = request_of(ledger, client)
    assert waiting.settle(client, ledger, request.approval_id, by="test") is None  # 0 of 1
    ledger.sign_approval(request.approval_id, signature(ledger, request))
    done = waiting.settle(client, ledger, request.approval_id, by="test")
    assert done == f"flow run {flow_run_id} resumed (approval {request.approval_id})"
    assert client.resumed == [flow_run_id]
    assert waiting.settle(client, ledger, request.approval_id, by="test") is None  # once


def test_the_page_shows_the_live_count(ledger: PrivacyLedger, client: FakeClient) -> None:
    """The form's text and the artifact show the count of signatures the ledger holds now,
    not the count when the run suspended."""
    flow_run_id, request = request_of(ledger, client)
    key = waiting.input_key(request.approval_id, 1, "description")
    assert "**0 of 1**" in json.loads(client.inputs[(flow_run_id, key)])
    assert waiting.page_count(client, flow_run_id, request.approval_id) == "0 of 1"
    # (a quorum of one: the count changes when the request is signed, and the run resumes)
    ledger.sign_approval(request.approval_id, signature(ledger, request))
    assert waiting.settle(client, ledger, request.approval_id, by="test").endswith(
        f"resumed (approval {request.approval_id})"
    )
    client.runs[flow_run_id].state = "Suspended"  # as if it were still short of the quorum
    standing = waiting.Standing.of(ledger, request.approval_id)
    waiting.refresh(client, ledger, standing, flow_run_id)
    assert "**1 of 1**" in json.loads(client.inputs[(flow_run_id, key)])
    assert client.artifacts[-1].description.endswith("1 of 1 signatures")
    assert "das ledger approve --approval" in client.artifacts[-1].data


def test_a_cancelled_or_deleted_waiting_run_has_its_request_withdrawn(
    ledger: PrivacyLedger, client: FakeClient
) -> None:
    """Prefect cancels a suspended run at once (it has no process to stop); the sweep then
    withdraws its request: a later signature is refused and authorizes nothing."""
    cancelled, request = request_of(ledger, client)
    client.runs[cancelled].state = "Cancelled"
    done = waiting.settle(client, ledger, request.approval_id, by="the approvals sweep")
    assert done == f"approval {request.approval_id} withdrawn: flow run {cancelled} was cancelled"
    assert "awaiting-approval" not in client.runs[cancelled].tags
    with pytest.raises(Exception, match="withdrawn"):
        ledger.sign_approval(request.approval_id, signature(ledger, request))
    deleted, other = request_of(ledger, client)
    del client.runs[deleted]
    assert waiting.settle(client, ledger, other.approval_id, by="sweep").endswith("was deleted")
    refused, third = request_of(ledger, client)
    client.runs[refused].state = "Refused"  # it ended itself: its request is not withdrawn
    assert waiting.settle(client, ledger, third.approval_id, by="sweep") is None
    assert waiting.open_requests(ledger, dt.timedelta(days=2)) == [third.approval_id]
    # Rejected at a terminal that could not reach the server: the sweep resumes the run, which
    # then ends Refused.
    rejected, fourth = request_of(ledger, client)
    ledger.reject_approval(fourth.approval_id, "not this week", "Ann", "das ledger reject")
    assert fourth.approval_id in waiting.open_requests(ledger, dt.timedelta(days=2))
    assert waiting.settle(client, ledger, fourth.approval_id, by="sweep") == (
        f"flow run {rejected} resumed (approval {fourth.approval_id})"
    )


def test_an_expired_request_resumes_the_run_which_ends_refused_with_its_reason(
    ledger: PrivacyLedger, client: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow_run_id, request = request_of(ledger, client, valid_for=dt.timedelta(seconds=1))
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    monkeypatch.setattr("das.trust.ledger.approvals.now", lambda: later)
    assert waiting.settle(client, ledger, request.approval_id, by="sweep").endswith("resumed " +
                          f"(approval {request.approval_id})")  # fmt: skip
    # Run again, the run finds its expired request (not a new one) and is refused.
    assert ledger.approval_request(flow_run_id).approval_id == request.approval_id
    standing = waiting.Standing.of(ledger, request.approval_id)
    refusal = waiting.expired_refusal(standing)
    assert isinstance(refusal, RunRefused)
    assert f"approval {request.approval_id} expired at" in str(refusal)
    assert "0 of 1 approvers' signatures" in str(refusal)
    # Once refused for it, a Retry asks anew.
    ledger.record_event("refused", {"product": "safetab-p", "reason": "expired"}, None,
                        flow_run_id)  # fmt: skip
    assert ledger.approval_request(flow_run_id) is None


def test_the_forms_answer_is_read_once_a_signature_recorded_a_rejection_ends_the_run(
    ledger: PrivacyLedger, client: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "retag", lambda *a, **k: None)  # tags: the fake's own
    flow_run_id, request = request_of(ledger, client)
    assert waiting.last_answer(client, flow_run_id, request.approval_id) is None
    client.answer(flow_run_id, request.approval_id, {"reject": False, "signature": "nonsense",
                                                      "reason": "", "name": ""})  # fmt: skip
    answer = waiting.last_answer(client, flow_run_id, request.approval_id)
    note = waiting.apply_answer(ledger, request, answer, flow_run_id)
    assert note.startswith("The signature pasted was not recorded")
    client.runs[flow_run_id].state = "Suspended"
    client.suspend(flow_run_id, request.approval_id, "again")  # round 2: its own answer
    assert waiting.last_answer(client, flow_run_id, request.approval_id) is None
    good = {"reject": False, "signature": signature(ledger, request), "reason": "", "name": ""}
    client.answer(flow_run_id, request.approval_id, good)
    answer = waiting.last_answer(client, flow_run_id, request.approval_id)
    assert waiting.apply_answer(ledger, request, answer, flow_run_id) == ""
    assert ledger.approval_agreed(request.approval_id)[0]
    assert waiting.apply_answer(ledger, request, answer, flow_run_id) == ""  # read again: no-op

    other_run, other = request_of(ledger, client)
    rejection = {"reject": True, "signature": "", "reason": "not this week", "name": "Ann"}
    client.answer(other_run, other.approval_id, rejection)
    answer = waiting.last_answer(client, other_run, other.approval_id)
    with pytest.raises(RunRefused, match="rejected in the Prefect UI by Ann"):
        waiting.apply_answer(ledger, other, answer, other_run)
    rejection = ledger.approval(other.approval_id).rejection
    assert rejection["by"] == "Ann" and rejection["reason"] == "not this week"
    with pytest.raises(RunRefused):  # read again (a run started twice): recorded once
        waiting.apply_answer(ledger, other, answer, other_run)
    kinds = [e.kind for e in ledger.entries() if e.kind == "approval-rejected"]
    assert kinds == ["approval-rejected"]


def test_das_ledger_approve_without_a_server_says_the_sweep_resumes_the_run(
    ledger: PrivacyLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: None}):
        line = waiting.nudge_from_terminal(ledger, "0123456789abcdef")
    assert line.startswith("PREFECT_API_URL is not set: the approvals sweep resumes")


def test_the_sweep_is_registered_with_its_schedule_active() -> None:
    import yaml

    repo = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((repo / "deploy" / "prefect.yaml").read_text())
    (sweep,) = [d for d in config["deployments"] if d["name"] == "approval-sweep"]
    assert sweep["entrypoint"] == "deploy/das_entrypoints.py:approval_sweep_flow"
    assert [s["active"] for s in sweep["schedules"]] == [True]
    assert sweep["work_pool"]["job_variables"]["env"]["DAS_LEDGER_URL"]  # the deployments' ledger


def test_das_ledger_approve_withdraws_a_cancelled_runs_request_instead_of_signing_it(
    ledger: PrivacyLedger,
    client: FakeClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An approver signs at a terminal that reaches the Prefect server: the run that asked was
    cancelled while it waited, so its request is withdrawn there and then, and not signed; a
    request whose run still waits is signed and the run resumed."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from das.cli import main as das_main

    cancelled, request = request_of(ledger, client)
    client.runs[cancelled].state = "Cancelled"
    folder = str(Path(str(ledger.store.path)).parent)
    key = str(APPROVER[ledger.location])
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        argv = ["ledger", "approve", "--approval", request.approval_id, "--ledger", folder,
                "--key", key, "--new-history"]  # fmt: skip
        assert das_main(argv) != 0
        assert "was withdrawn" in capsys.readouterr().err
        assert ledger.approval(request.approval_id).withdrawn
        waiting_run, other = request_of(ledger, client)
        argv[3] = other.approval_id
        assert das_main(argv) == 0
    assert f"flow run {waiting_run} resumed" in capsys.readouterr().out
    assert client.resumed == [waiting_run]
