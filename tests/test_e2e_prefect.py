"""End to end, as an operator runs it: a real ``prefect server`` with basic authentication
and CSRF protection, ``das deploy --local``, a process worker, runs triggered and retried
through the API exactly as the UI does, ``das run`` against the same server; anonymous calls
refused. The server's database is SQLite, or PostgreSQL with ``DAS_E2E_DATABASE=postgresql``.

Run with ``pytest -m e2e`` (``.ci/e2e-prefect``, on PostgreSQL); the default suite leaves these
out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from prefect_stack import (
    AUTH_USER,
    REPO,
    TERMINAL_STATES,
    VENV_BIN,
    PrefectStack,
    epoch,
    flow_process,
    paused,
    run_folder,
    start_worker,
    sweep,
    write_secret,
)

from das.prefect_auth import basic_authorization
from das.trust import LedgerStore, PrivacyLedger, root_document

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SAFETAB = "safetab-p/safetab-p-us-pr"
# An HTTP 401 as Prefect's client reports it ("401 Unauthorized", "status 401"); a bare
# substring also matched the digits of a flow-run id in a printed URL.
UNAUTHORIZED = re.compile(r"(?<![0-9a-f-])401(?![0-9a-f-])|Unauthorized", re.I)


# The runs of the kill, lost-host and retry tests skip validation (allowed outside production):
# what they prove is about draws and resumes, and each validation in a new flow process
# imports and warms up Great Expectations, about 12 CPU-s. The Quick Runs as registered
# (first_runs, the second release) validate, as production runs do.
UNVALIDATED = {"skip_validation": True}


def outside_production(ledger: Path) -> dict:
    """Job variables of the kill/retry test's runs. Seeds are refused in production and the
    test compares the bytes of two seeded releases, so these runs leave production mode (as an
    operator's Custom Run can), each with its own privacy ledger: the production release of
    the same inputs is already recorded in the deployment's ledger — and with the per-user
    run key (DAS_RUN_KEY empty): the service account's key has its ledger's trust root pinned
    beside it, which refuses every other ledger, whatever a run's environment says."""
    return {"env": {"DAS_PRODUCTION": "0", "DAS_LEDGER_DIR": str(ledger), "DAS_LEDGER_URL": "",
                     "DAS_LEDGER_ID": "", "DAS_RUN_KEY": ""}}  # fmt: skip


def artifact_keys(stack: PrefectStack, flow_run_id: str) -> dict[str, dict]:
    return {a["key"]: a for a in stack.artifacts(flow_run_id) if a.get("key")}


@dataclass
class LostHost:
    """The runs of a host lost mid-measure (see :func:`lost_host`)."""

    deployment_run: str  # a SafeTab-P deployment run: its worker and flow process killed
    drawn: set[str]  # the noise files its ledger had recorded at the kill
    ledger: PrivacyLedger  # its own (the run is outside production)
    output: Path
    killed_at: float  # epoch seconds
    das_run: str  # a `das run phsafe` against the server, killed with SIGKILL
    das_killed_at: float


def _recorded_draws(ledger: PrivacyLedger, run: str) -> set[str]:
    """The noise files the run's ledger records as drawn; none before the run created it (a
    ledger opened here first would be an empty file, which the run refuses as truncated)."""
    path = ledger.store.path
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return set()
    try:
        return {record.file for record in ledger.draws(run).values()}
    except Exception:  # the run not in it yet
        return set()


@pytest.fixture(scope="module")
def lost_host(prefect_stack: PrefectStack) -> LostHost:
    """A host lost mid-measure, both ways a run starts: a deployment run whose worker and then
    flow process (with whatever it started) are killed with SIGKILL once its ledger recorded a
    draw, and a `das run` against the server killed with SIGKILL (its whole process group)
    once it drew. Nothing is left to report either run's end; the worker is started again, as
    an operator would, and knows nothing of the lost run. The tests that follow wait for the
    server to notice."""
    stack = prefect_stack
    folder = stack.base / "lost-host"
    folder.mkdir()
    output = folder / "releases" / "output"  # in a folder of releases of its own: the das
    # run's state root (below) may not sit beside it (another run's state beside a release)
    ledger = PrivacyLedger(LedgerStore.in_directory(folder / "ledger"))
    # On Prefect's threads, as the killed run's reference: that a killed flow process's Dask
    # workers end with it is the killed run's test; two clusters fewer (this run and its Retry).
    lost_env = outside_production(folder / "ledger")
    lost_env["env"]["DAS_TASK_RUNNER"] = "threads"
    run = stack.trigger(SAFETAB, {"output": str(output), **UNVALIDATED}, lost_env)
    config = stack.root / "phsafe" / "pr"
    das_output = folder / "das-releases" / "das-run"  # its releases, in a folder of their own
    das_state = folder / "das-run-state"  # its run folders (DAS_STATE_DIR), beside that folder
    das_run = subprocess.Popen(
        [str(VENV_BIN / "das"), "run", "phsafe", "--config", str(config / "config.json"),
         "--data", str(config / "input"), "--output", str(das_output), "--seed", "5",
         "--skip-validation",  # (UNVALIDATED)
         "--ledger", str(folder / "das-run-ledger")],  # its own: the spend it holds stays there
        cwd=stack.base, env={**stack.env, "DAS_STATE_DIR": str(das_state)},
        stdout=(folder / "das-run.log").open("ab"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        flow = flow_process(stack, run)
        worker = psutil.Process(stack.processes["worker"].pid)
        deadline = time.monotonic() + 600
        drawn: set[str] = set()
        das_run_id: str | None = None
        killed_at = das_killed_at = 0.0
        while not drawn:
            assert time.monotonic() < deadline, "no draw within 10 minutes"
            assert stack.state(run) not in TERMINAL_STATES, stack.log_tail("worker")
            if das_run_id is None:  # the `das run` first, then the host, the last thing here
                folders = sorted(p for p in (das_state / "runs").glob("*") if p.is_dir())
                if folders and list((folders[0] / "noise").glob("*.npy")):
                    os.killpg(das_run.pid, signal.SIGKILL)
                    das_run_id, das_killed_at = folders[0].name, time.time()
                log = (folder / "das-run.log").read_text()[-3000:]
                assert das_run_id or das_run.poll() is None, log
            elif drawn := _recorded_draws(ledger, run):
                family = flow.children(recursive=True)
                worker.kill()  # the host goes: its worker first, then the flow process
                flow.kill()
                for process in family:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        process.kill()
                killed_at = time.time()
                # what the ledger holds once they are gone (a draw may land between the read
                # above and the kill): what the Retry must reuse
                psutil.wait_procs([worker, flow, *family], timeout=60)
                drawn = _recorded_draws(ledger, run)
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(das_run.pid, signal.SIGKILL)  # on failure too: nothing left running
        das_run.wait(timeout=60)
        if stack.processes["worker"].poll() is not None:
            start_worker(stack)  # as an operator would; it knows nothing of the lost run
    assert das_run_id is not None
    return LostHost(run, drawn, ledger, output, killed_at, das_run_id, das_killed_at)


def test_a_lost_host_leaves_its_runs_running(
    prefect_stack: PrefectStack, lost_host: LostHost
) -> None:
    """First, while nothing else runs: a host is lost (the fixture). Nothing reports the end
    of its deployment run, and the restarted worker knows nothing of it: it still shows
    Running. The server notices only from the heartbeats' silence, checked at the end of this
    module (test_a_lost_hosts_run_is_crashed...), so the other tests run meanwhile."""
    assert time.time() - lost_host.killed_at < 30  # within the automation's window
    assert prefect_stack.state(lost_host.deployment_run) == "RUNNING"


def test_first_runs_complete(prefect_stack: PrefectStack, first_runs: dict[str, str]) -> None:
    states = {name: prefect_stack.state(run) for name, run in first_runs.items()}
    assert set(states.values()) == {"COMPLETED"}, (states, prefect_stack.log_tail("worker"))


def test_validate_only_run_links_the_report(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    artifacts = artifact_keys(prefect_stack, first_runs["validate/validate-safetab-p"])
    summary = artifacts["validation-safetab-p-us-pr"]
    link = artifacts["validation-safetab-p-us-pr-report"]
    assert summary["type"] == "markdown" and ": VALID" in summary["data"]
    report = prefect_stack.root / "validation" / "safetab-p" / "report.html"
    assert f"({report.as_uri()})" in link["data"]  # a link artifact is stored as Markdown
    assert f"({report.as_uri()})" in summary["data"]
    assert report.is_file() and (report.parent / "data_docs" / "index.html").is_file()


@pytest.mark.parametrize(
    ("deployment", "product", "output"),
    [
        (SAFETAB, "safetab-p", "safetab-p/releases"),
        ("phsafe/phsafe-us", "phsafe", "phsafe/us/releases"),
    ],
)
def test_release_runs_post_their_artifacts(
    prefect_stack: PrefectStack,
    first_runs: dict[str, str],
    deployment: str,
    product: str,
    output: str,
) -> None:
    artifacts = artifact_keys(prefect_stack, first_runs[deployment])
    assert f"{product}-privacy-us" in artifacts and f"{product}-privacy-totals" in artifacts
    assert artifacts[f"{product}-privacy-us"]["type"] == "table"
    assert artifacts[f"{product}-audit"]["type"] == "markdown"
    # Each deployment run publishes into releases/<run id>: the Prefect flow-run id.
    release = prefect_stack.root / output / first_runs[deployment]
    audit = json.loads((release / "audit.json").read_text())
    assert audit["status"] == "succeeded" and audit["parameters"]["seed"] is None
    assert audit["run_id"] == first_runs[deployment] and (release / "MANIFEST.json").is_file()


def test_trigger_to_first_measure_task(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    """Records (not bounds: timings live in benchmarks/) how long a deployment run takes from
    its creation to its first measure task; the figure goes to the e2e folder."""
    run = prefect_stack.flow_run(first_runs[SAFETAB])
    measures = [t for t in prefect_stack.task_runs(run["id"]) if t["name"].startswith("measure")]
    assert measures
    first = min(t["start_time"] for t in measures if t["start_time"])
    seconds = epoch(first) - epoch(run["created"])
    (prefect_stack.base / "trigger-to-measure.json").write_text(json.dumps({SAFETAB: seconds}))
    assert seconds > 0


def _noise_files(stack: PrefectStack, run_id: str) -> dict[Path, tuple[str, int, int]]:
    """Every persisted noise vector of a run: path → (SHA-256, inode, mtime): a replaced file
    shows."""
    files = {}
    for path in sorted((run_folder(stack.root, run_id) / "noise").glob("*.npy")):
        stat = path.stat()
        files[path] = (hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_ino,
                       stat.st_mtime_ns)  # fmt: skip
    return files


def _release(output: Path) -> dict[str, bytes]:
    """The released tables (files in the release's folders), without audit and manifest."""
    return {
        str(path.relative_to(output)): path.read_bytes()
        for path in sorted(output.rglob("*"))
        if path.is_file()
        and len(path.relative_to(output).parts) > 1
        and not path.relative_to(output).parts[0].startswith(".")
    }


def test_killed_run_retried_from_the_ui_resumes_without_redraw(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    stack = prefect_stack
    killed_out, clean_out = stack.base / "killed" / "output", stack.base / "clean" / "output"
    seeded = {"seed": 11, **UNVALIDATED}
    killed_env = outside_production(stack.base / "killed" / "ledger")
    # On a Dask cluster though its inputs are small (they would run on threads): what a
    # killed flow process leaves behind is its cluster's worker processes.
    killed_env["env"]["DAS_TASK_RUNNER"] = "dask"
    run = stack.trigger(SAFETAB, {"output": str(killed_out), **seeded}, killed_env)
    process = flow_process(stack, run)
    deadline = time.monotonic() + 600
    while not _noise_files(stack, run):  # the first draw is persisted: the run is mid-measure
        assert stack.state(run) not in {"COMPLETED", "FAILED", "CRASHED"}, stack.state(run)
        assert time.monotonic() < deadline, "no noise drawn within 10 minutes"
        time.sleep(0.05)
    workers = process.children(recursive=True)
    assert workers, "the killed run's flow process started no Dask worker process"
    killed_at = time.time()
    os.kill(process.pid, signal.SIGKILL)
    assert stack.wait(run, timeout=300) == "CRASHED"
    stack.wait_for_worker_release(run, killed_at)  # as an operator sees the crash in the logs

    _, alive = psutil.wait_procs(workers, timeout=60)
    for orphan in alive:  # started by our worker: stop them before failing
        orphan.kill()
    assert not alive, f"{len(alive)} Dask process(es) of the killed flow process outlived it"
    drawn = _noise_files(stack, run)
    assert drawn
    # What the ledger recorded at the kill is what a resume may reuse. A file written in the
    # instant before its record (the kill came as the first files appeared) is not: it is
    # drawn again under a new name, and the unrecorded file is left untouched, never used.
    killed_ledger = PrivacyLedger(LedgerStore.in_directory(stack.base / "killed" / "ledger"))
    recorded = {record.file for record in killed_ledger.draws(run).values()}
    assert recorded <= {path.name for path in drawn}

    stack.retry_as_the_ui_does(run)
    clean_env = outside_production(stack.base / "clean" / "ledger")
    # The reference on Prefect's threads, not a Dask cluster: the same seeded bytes either way
    # (tests/test_flow_phsafe.py, test_dask_cluster.py), one cluster fewer on the 2 cores.
    clean_env["env"]["DAS_TASK_RUNNER"] = "threads"
    clean = stack.trigger(SAFETAB, {"output": str(clean_out), **seeded}, clean_env)
    assert stack.wait(run) == "COMPLETED", stack.log_tail("worker")
    assert stack.wait(clean) == "COMPLETED", stack.log_tail("worker")

    released, reference = _release(killed_out), _release(clean_out)
    assert "t1/t1.txt" in reference and "t2/t2.txt" in reference
    assert released == reference  # byte for byte
    after = _noise_files(stack, run)
    assert {path: after.get(path) for path in drawn} == drawn  # no persisted draw replaced

    assert "attempt-2" in stack.flow_run(run)["tags"]  # the run list shows the resume
    # The killed attempt wrote no audit (it was killed); the resumed one says it is attempt 2.
    audits = [a for a in stack.artifacts(run) if a.get("key") == "safetab-p-audit"]
    assert any("attempt 2" in a["description"] for a in audits)
    audit = json.loads((killed_out / "audit.json").read_text())
    clean_audit = json.loads((clean_out / "audit.json").read_text())
    total = clean_audit["draws"]["fresh"]
    assert audit["run_id"] == run  # the Retry resumed the flow run's own run folder
    assert audit["draws"]["reused"] == len(recorded)
    assert audit["draws"]["fresh"] == total - len(recorded)  # only what was never recorded
    final = {record.file for record in killed_ledger.draws(run).values()}
    assert recorded <= final and not ({path.name for path in drawn} - recorded) & final


def test_a_second_release_waits_for_signatures_and_the_ledger_records_every_decision(
    prefect_stack: PrefectStack, first_runs: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """The first release of each product spent the approval `das deploy --local` signed. A
    second one asks for an approval and suspends: its flow process ends (nothing held while
    people decide); the run's form shows the planned spend, and its artifact the statement to
    sign, who may sign and how. *Resume* without a signature is refused by the server (the
    run stays suspended); a signature made with plain `ssh-keygen -Y sign` and pasted into
    the form resumes it: the worker runs it again, it reuses its steps and draws; *Resume*
    with reject ends a run Refused, recorded with who (as typed) and why (``refused_run``).
    The ledger then holds one completed run per release and nothing spent by the refusal."""
    import base64

    stack = prefect_stack
    # On a Dask cluster though its inputs are small: that a suspended run's cluster ends with
    # its flow process is shown here (the other waiting runs run on threads).
    approved = stack.trigger(SAFETAB, None, {"env": {"DAS_TASK_RUNNER": "dask"}})
    process = flow_process(stack, approved)
    assert processes_of(approved)  # (validating: what the helper finds while the run runs)
    # The refused run (the session's: made now, while this one starts, unless an earlier
    # test made it already).
    rejected = request.getfixturevalue("refused_run")
    run = paused(stack, approved)
    assert run["state"]["name"] == "Suspended"
    assert "awaiting-approval" in run["tags"]  # the run list says who waits for an approver
    # No process holds the run while it waits: the worker's slot is free.
    with contextlib.suppress(psutil.NoSuchProcess):
        process.wait(timeout=60)
    deadline = time.monotonic() + 60
    while processes_of(approved) and time.monotonic() < deadline:  # its Dask cluster's
        time.sleep(1)
    assert not processes_of(approved), [p.cmdline() for p in processes_of(approved)]
    keyset = run["state"]["state_details"]["run_input_keyset"]
    description = stack.request("GET", f"/flow_runs/{approved}/input/{keyset['description']}")
    assert "**0 of 1** signatures" in description and "| US |" in description
    waiting = artifact_keys(stack, approved)["safetab-p-approval"]
    assert "0 of 1" in waiting["description"]
    page = waiting["data"]
    assert "ssh-keygen -Y sign -n das-approval" in page and "Who may sign" in page
    # Its commands name the local profile's approver key (the one this ledger's charter names),
    # so that they work as printed on the one-machine path.
    local_key = str(stack.root / "keys" / "local-approver")
    assert f"--key {local_key}`" in page and f"-f {local_key} statement.json" in page
    # A typed decision is no approval: the server refuses it, naming the missing signature,
    # and the run stays suspended, nothing drawn.
    refused = stack.resume_as_the_ui_does(
        approved, {"reject": False, "signature": "", "reason": "", "name": "CPO"}, "REJECT"
    )
    assert "-----BEGIN SSH SIGNATURE-----" in refused["details"]["reason"]
    assert stack.flow_run(approved)["state"]["name"] == "Suspended"
    # The approver signs the statement with OpenSSH alone and pastes the signature.
    encoded = re.search(r"echo (\S+) \| base64 -d", page).group(1)
    statement = stack.root / "statement.json"
    statement.write_bytes(base64.b64decode(encoded))
    approver = stack.root / "keys" / "local-approver"
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-n", "das-approval", "-f", str(approver),
                    str(statement)], check=True, capture_output=True)  # fmt: skip
    signature = Path(str(statement) + ".sig").read_text()
    stack.resume_as_the_ui_does(
        approved, {"reject": False, "signature": signature, "reason": "", "name": ""}
    )
    assert stack.wait(approved) == "COMPLETED", stack.log_tail("worker")
    tags = stack.flow_run(approved)["tags"]
    assert "awaiting-approval" not in tags and "resumed" not in tags  # it did not crash

    assert stack.state(rejected) == "CANCELLED"
    final = stack.flow_run(rejected)["state"]
    assert final["name"] == "Refused" and "rejected" in final["message"]
    refusal = artifact_keys(stack, rejected)["phsafe-refused"]
    assert "Nothing was drawn" in refusal["data"] or "nothing was drawn" in refusal["data"]

    ledger = stack.ledger()
    assert ledger.verify() == []
    # On PostgreSQL (.ci/e2e-prefect) the deployments' ledger is the database's, not a file.
    assert (ledger.store.path is None) == (stack.database == "postgresql")
    assert not (stack.root / "ledger").exists() or stack.database == "sqlite"
    runs = {run.run_id: run for run in ledger.runs()}
    releases = [first_runs[SAFETAB], first_runs["phsafe/phsafe-us"], approved]
    assert all(runs[r].status == "completed" for r in releases)
    assert not runs[rejected].counting and not runs[rejected].draws
    approvals = {a["approval_id"]: a for a in ledger.approvals()}
    used = [a for a in approvals.values() if a["used_by"] == approved]
    assert len(used) == 1 and used[0]["agreed"] and len(used[0]["signed_by"]) == 1
    assert used[0]["statement"]["run_id"] == approved  # the run's own request
    rejections = [a["rejection"] for a in approvals.values() if a["rejection"]]
    assert rejections and rejections[0]["by"] == "release manager"
    assert rejections[0]["reason"] == "not this week"
    release = stack.root / "safetab-p" / "releases" / approved
    audit = json.loads((release / "audit.json").read_text())
    assert [p["prior"] for p in audit["privacy_ledger"]["passes"]] == [
        p["this_run"] for p in audit["privacy_ledger"]["passes"]
    ]  # the second release's earlier spend is the first one's
    # Proven outside the enclave with the trust root the approvers publish, and nothing else.
    root = stack.root / "trust-root.json"
    root.write_bytes(root_document(ledger.charter_chain().chain))
    done = subprocess.run([str(VENV_BIN / "das"), "release", "verify",
                           str(release), "--trust-root", str(root)],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "PROVEN" in done.stdout, done.stdout + done.stderr


def processes_of(flow_run_id: str) -> list[psutil.Process]:
    """The live processes of a flow run on this host (the worker gives each its run's id in
    PREFECT__FLOW_RUN_ID; a Dask worker it starts inherits it)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            ours = process.environ().get("PREFECT__FLOW_RUN_ID") == flow_run_id
            if ours and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def test_a_waiting_run_holds_no_process_and_ends_refused_past_its_expiry(
    prefect_stack: PrefectStack, waiting_runs: dict[str, str]
) -> None:
    """Two runs wait for their approvers and no flow process of either is left on the worker
    host. One's request expired (10 s): the approvals sweep resumes it, and it ends Refused
    with its reason, its audit record written; the other, still open, is left waiting."""
    stack = prefect_stack
    for run in waiting_runs.values():
        assert stack.flow_run(run)["state"]["name"] == "Suspended"
        assert stack.flow_run(run)["infrastructure_pid"]  # a process ran it until it waited
        # Its flow process ends (the Dask cluster's end: the second release's test; these
        # run on threads).
        deadline = time.monotonic() + 60
        while processes_of(run) and time.monotonic() < deadline:
            time.sleep(1)
        assert not processes_of(run), [p.cmdline() for p in processes_of(run)]
    expiring = waiting_runs["expiring"]
    # A sweep settles a request once it has expired, not before: one that ran earlier (the
    # runs pause within seconds of their requests) left the run to the schedule's next sweep,
    # up to 5 minutes later.
    (request,) = [a for a in stack.ledger().approvals()
                  if a["statement"]["run_id"] == expiring]  # fmt: skip
    expires = dt.datetime.fromisoformat(str(request["statement"]["expires"]))
    time.sleep(max(0.0, (expires - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)
    sweep(stack)  # (or the sweep its schedule ran meanwhile)
    assert stack.wait(expiring, timeout=300) == "CANCELLED", stack.log_tail("worker")
    final = stack.flow_run(expiring)["state"]
    assert final["name"] == "Refused" and "expired at" in final["message"], final
    audit = json.loads((run_folder(stack.root, expiring) / "audit.json").read_text())
    assert audit["status"] == "refused"
    assert stack.flow_run(waiting_runs["waiting"])["state"]["name"] == "Suspended"


def test_a_crashed_run_is_told_apart_from_a_refused_one(
    prefect_stack: PrefectStack, refused_run: str, lost_host: LostHost
) -> None:
    """A run whose process died (the lost host's `das run`) ends Crashed; a refusal ends
    Refused (``refused_run``, Cancelled type): the run list tells them apart at a glance (the
    browser test takes its picture)."""
    stack = prefect_stack
    assert stack.wait(lost_host.das_run, timeout=300) == "CRASHED"
    assert stack.flow_run(refused_run)["state"]["type"] == "CANCELLED"
    body = {"flow_runs": {"state": {"name": {"any_": ["Crashed", "Refused"]}}}}
    found = {
        run["id"]: run["state"]["name"] for run in stack.request("POST", "/flow_runs/filter", body)
    }
    assert found[lost_host.das_run] == "Crashed" and found[refused_run] == "Refused"


def test_a_resumed_run_says_so_and_its_page_says_where_the_release_is(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    """The release run's page: a progress artifact ending on where the release is, a release
    artifact (folder, MANIFEST, audit, ledger entry, the verify command), the validation
    verdict, and an audit artifact per attempt."""
    stack = prefect_stack
    run = first_runs[SAFETAB]
    artifacts = {a["key"]: a for a in stack.artifacts(run) if a.get("key")}
    release = stack.root / "safetab-p" / "releases" / run
    assert artifacts["safetab-p-progress"]["type"] == "progress"
    assert artifacts["safetab-p-progress"]["data"] == 100.0
    assert str(release) in artifacts["safetab-p-progress"]["description"]
    assert artifacts["safetab-p-progress"]["description"].startswith(
        '<progress value="100" max="100"></progress> 100% · published'
    )
    page = artifacts["safetab-p-release"]["data"]
    assert str(release / "MANIFEST.json") in page and "das ledger verify" in page
    assert "a private release" in page
    verdict = artifacts["safetab-p-validation"]
    assert "VALID" in verdict["description"] and "| errors | 0 |" in verdict["data"]
    assert "attempt 1" in artifacts["safetab-p-audit"]["description"]


def test_activated_schedule_makes_the_scheduler_create_runs(prefect_stack: PrefectStack) -> None:
    """The README's activation command, then the server's scheduler must create the runs (it
    does not with SQLAlchemy 2.1 under Prefect 3.8.8)."""
    stack = prefect_stack
    name = "phsafe/phsafe-pr"
    deployment = stack.deployment(name)
    (schedule,) = deployment["schedules"]
    assert schedule["active"] is False
    assert stack.flow_runs_of(deployment["id"], "SCHEDULED") == []
    result = stack.prefect("deployment", "schedule", "resume", name, schedule["id"])
    assert result.returncode == 0, result.stdout + result.stderr
    deadline = time.monotonic() + 120
    scheduled: list[dict] = []
    while not scheduled and time.monotonic() < deadline:
        time.sleep(2)
        scheduled = [r for r in stack.flow_runs_of(deployment["id"], "SCHEDULED")
                     if r["auto_scheduled"]]  # fmt: skip
    assert scheduled, f"the scheduler created no run in 120 s:\n{stack.log_tail('server')}"
    result = stack.prefect("deployment", "schedule", "pause", name, schedule["id"])
    assert result.returncode == 0, result.stdout + result.stderr


# -- the server's database and its authentication ------------------------------------------------
def test_the_server_keeps_its_records_in_its_database(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    """SQLite in PREFECT_HOME by default; with DAS_E2E_DATABASE=postgresql every record is in
    the PostgreSQL database (read here through the psycopg URL) and no SQLite file exists."""
    stack = prefect_stack
    sqlite_files = sorted(path.name for path in (stack.base / "home").glob("*.db"))
    if stack.database == "sqlite":
        assert sqlite_files == ["prefect.db"]
        return
    assert sqlite_files == []
    import sqlalchemy as sa

    engine = sa.create_engine(stack.postgres.sync_url)
    try:
        with engine.connect() as connection:
            tables = set(sa.inspect(connection).get_table_names())
            query = sa.text(
                "SELECT id::text, state_type::text FROM flow_run WHERE id::text = ANY(:ids)"
            )
            rows = dict(connection.execute(query, {"ids": list(first_runs.values())}).all())
    finally:
        engine.dispose()
    assert {"flow_run", "task_run", "deployment", "artifact", "alembic_version"} <= tables
    assert rows == dict.fromkeys(first_runs.values(), "COMPLETED")


def test_anonymous_calls_are_refused(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    """Without the auth string nothing is read, triggered, changed or deleted; with it, a
    change still needs a CSRF token the server issued. Only the health probe answers."""
    stack = prefect_stack
    release = first_runs[SAFETAB]
    deployment_id = stack.deployment(SAFETAB)["id"]
    before = {run["id"] for run in stack.flow_runs_of(deployment_id)}
    csrf = stack.csrf_headers()  # a valid CSRF token does not stand in for the credentials
    wrong = {"Authorization": basic_authorization(f"{AUTH_USER}:not-the-password")}
    with stack.anonymous as anonymous:
        assert anonymous.get(f"/flow_runs/{release}").status_code == 401
        assert anonymous.get("/csrf-token", params={"client": "x"}).status_code == 401
        # A change is checked for its CSRF token first (403), then for the credentials (401).
        no_token = anonymous.post("/flow_runs/filter", json={})
        assert no_token.status_code == 403 and "CSRF" in no_token.text
        assert anonymous.post("/flow_runs/filter", json={}, headers=csrf).status_code == 401
        with_wrong = anonymous.post("/flow_runs/filter", json={}, headers={**csrf, **wrong})
        assert with_wrong.status_code == 401
        trigger = f"/deployments/{deployment_id}/create_flow_run"
        assert anonymous.post(trigger, json={}, headers=csrf).status_code == 401
        parameters = {"parameters": {"output": "/tmp/elsewhere/{run_id}"}}
        patched = anonymous.patch(f"/deployments/{deployment_id}", json=parameters, headers=csrf)
        assert patched.status_code == 401
        assert anonymous.delete(f"/flow_runs/{release}", headers=csrf).status_code == 401
        assert anonymous.get("/health").status_code == 200
    with stack.api as api:
        missing = api.post("/flow_runs/filter", json={})
        assert missing.status_code == 403 and "Missing CSRF token" in missing.text
        forged = {"Prefect-Csrf-Token": "forged", "Prefect-Csrf-Client": stack.csrf_client}
        assert api.post("/flow_runs/filter", json={}, headers=forged).status_code == 403
    assert {run["id"] for run in stack.flow_runs_of(deployment_id)} == before
    assert stack.state(release) == "COMPLETED"
    assert "{run_id}" in stack.deployment(SAFETAB)["parameters"]["output"]
    assert not stack.deployment(SAFETAB)["parameters"]["output"].startswith("/tmp/elsewhere")
    ui = httpx.get(f"{stack.ui_url}/ui-settings", timeout=30).json()
    assert ui["auth"] == "BASIC" and ui["csrf_enabled"] is True


def test_secrets_are_on_no_command_line(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    """The auth string and the database password live in 0600 files and in the environment
    of the processes that need them, never in an argument list (``ps`` shows those)."""
    stack = prefect_stack
    secrets = [stack.auth_string]
    if stack.postgres is not None:
        from sqlalchemy.engine import make_url

        secrets.append(make_url(stack.postgres.async_url).password)
    for name, process in stack.processes.items():
        parent = psutil.Process(process.pid)
        for proc in [parent, *parent.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                command = " ".join(proc.cmdline())
                assert not [s for s in secrets if s in command], f"{name}: {command}"
    secret_files = sorted((stack.base / "secrets").iterdir())
    assert secret_files and all(path.stat().st_mode & 0o777 == 0o600 for path in secret_files)
    assert "PREFECT_API_AUTH_STRING" not in stack.env  # the processes read the file


def test_das_commands_need_the_servers_credentials(
    prefect_stack: PrefectStack, tmp_path: Path
) -> None:
    """`das deploy` asks the server first: no auth string, a wrong one, or an auth file that
    others can read are refused with the fix in one line; nothing is registered."""
    stack = prefect_stack
    das = str(VENV_BIN / "das")
    anonymous_env = {k: v for k, v in stack.env.items() if k != "DAS_PREFECT_AUTH_FILE"}
    refused = stack.run([das, "deploy"], env=anonymous_env, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "HTTP 401" in refused.stderr and "DAS_PREFECT_AUTH_FILE" in refused.stderr

    wrong = write_secret(tmp_path / "wrong-auth", f"{AUTH_USER}:not-the-password")
    refused = stack.run([das, "deploy"], env={**anonymous_env, "DAS_PREFECT_AUTH_FILE": str(wrong)})
    assert refused.returncode == 2 and "refused the auth string" in refused.stderr

    loose = tmp_path / "loose-auth"
    loose.write_text(stack.auth_string + "\n")
    loose.chmod(0o640)
    for argv in ([das, "deploy"], [das, "prefect", "worker", "start", "--pool", "das-enclave"]):
        refused = stack.run(argv, env={**anonymous_env, "DAS_PREFECT_AUTH_FILE": str(loose)})
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.strip().splitlines()[-1].endswith(f"chmod 600 {loose}")
        assert stack.auth_string not in refused.stdout + refused.stderr


def test_das_run_reports_to_the_authenticated_server(prefect_stack: PrefectStack) -> None:
    """`das run` with PREFECT_API_URL set runs its flow against the server, authenticated by
    the auth file, and its tasks report to it (on in-process threads: these inputs are under
    flows.sizing's 64 MiB; the Dask worker processes of the deployment runs made to use a
    cluster authenticate too)."""
    stack = prefect_stack
    folder = stack.root / "phsafe" / "pr"
    output = stack.base / "das-run" / "output"
    argv = [str(VENV_BIN / "das"), "run", "phsafe", "--config", str(folder / "config.json"),
            "--data", str(folder / "input"), "--output", str(output), "--seed", "3",
            # a seeded run outside production: a ledger of its own, not the chartered one
            "--ledger", str(stack.base / "das-run" / "ledger")]  # fmt: skip
    done = stack.run(argv, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    body = {"flows": {"name": {"any_": ["phsafe"]}}, "sort": "START_TIME_DESC", "limit": 20}
    runs = [run for run in stack.request("POST", "/flow_runs/filter", body)
            if str(output) in json.dumps(run["parameters"])]  # fmt: skip
    assert [run["state_type"] for run in runs] == ["COMPLETED"]
    tasks = stack.task_runs(runs[0]["id"])
    assert tasks and {task["state_type"] for task in tasks} == {"COMPLETED"}
    assert json.loads((output / "audit.json").read_text())["status"] == "succeeded"


def test_a_lost_hosts_run_is_crashed_and_retry_resumes_it(
    prefect_stack: PrefectStack, lost_host: LostHost
) -> None:
    """Nothing reports the end of a run whose host is gone: the server's automation marks it
    Crashed once its heartbeats stop (within 3 minutes, saying why); the UI's Retry then
    resumes it on the new worker and reuses every draw the ledger recorded."""
    stack, run = prefect_stack, lost_host.deployment_run
    assert stack.wait(run, timeout=300) == "CRASHED", stack.log_tail("worker")
    state = stack.flow_run(run)["state"]
    assert epoch(state["timestamp"]) - lost_host.killed_at < 180
    assert state["message"].startswith("no heartbeat for 90 s: the flow process or its host")
    assert "Retry resumes the run" in state["message"]

    stack.retry_as_the_ui_does(run)
    assert stack.wait(run) == "COMPLETED", stack.log_tail("worker")
    audit = json.loads((lost_host.output / "audit.json").read_text())
    assert audit["run_id"] == run and "resumed" in stack.flow_run(run)["tags"]
    assert audit["draws"]["reused"] == len(lost_host.drawn) > 0  # nothing recorded is redrawn
    assert lost_host.drawn <= _recorded_draws(lost_host.ledger, run)


def test_a_killed_das_run_is_crashed(prefect_stack: PrefectStack, lost_host: LostHost) -> None:
    """A `das run` whose process is killed (its terminal or machine gone) reports nothing
    either: its run on the server ends Crashed the same way (resumed with --run-id)."""
    stack, run = prefect_stack, lost_host.das_run
    assert stack.wait(run, timeout=300) == "CRASHED"
    state = stack.flow_run(run)["state"]
    assert epoch(state["timestamp"]) - lost_host.das_killed_at < 180
    assert "--run-id" in state["message"]


def test_every_command_das_deploy_prints_works_as_printed(prefect_stack: PrefectStack) -> None:
    """`das deploy` prints no command that fails: each one of its summary, run exactly as
    printed from the checkout in the operator's environment, talks to the authenticated server
    without a 401 (Prefect's own hints, plain `prefect ...`, are not printed). The work pool is
    paused meanwhile, so that the runs they create never start; they are deleted afterwards
    and the schedules paused again."""
    import shlex

    stack = prefect_stack
    printed = (stack.base / "deploy.log").read_text()
    assert "prefect worker start --pool 'das-enclave'" not in printed  # Prefect's own hint
    lines = [line for line in printed.splitlines() if line.startswith("  ") and " prefect " in line]
    commands = [shlex.split(line) for line in lines]
    assert commands and all(argv[1] == "prefect" for argv in commands), lines
    assert Path(commands[0][0]).name == "das" and commands[0][2:4] == ["worker", "start"]
    das_script = REPO / commands[0][0]
    assert das_script.is_file()
    before = {run["id"] for run in stack.request("POST", "/flow_runs/filter", {})}
    assert stack.prefect("work-pool", "pause", "das-enclave").returncode == 0
    worker, *others = commands
    log = stack.base / "printed-worker.log"
    started = subprocess.Popen(worker, cwd=REPO, env=stack.env, stdout=log.open("ab"),
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        running = [subprocess.Popen(argv, cwd=REPO, env=stack.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
                   for argv in others]  # fmt: skip
        for argv, process in zip(others, running, strict=True):
            output, _ = process.communicate(timeout=300)
            assert process.returncode == 0, (argv, output)
            assert not UNAUTHORIZED.search(output) and "Traceback" not in output, (argv, output)
        deadline = time.monotonic() + 120
        while "started" not in log.read_text():
            assert started.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert not UNAUTHORIZED.search(log.read_text()) and "Traceback" not in log.read_text()
    finally:
        os.killpg(started.pid, signal.SIGTERM)  # as a service manager stops it
        try:
            started.wait(timeout=60)
        except subprocess.TimeoutExpired:  # Prefect: a second SIGTERM kills (a loaded machine)
            os.killpg(started.pid, signal.SIGTERM)
            started.wait(timeout=60)
        stack.prefect("deployment", "schedule", "pause", "--all")
        with stack.api as api:
            for run in stack.request("POST", "/flow_runs/filter", {}):
                if run["id"] not in before:
                    api.delete(f"/flow_runs/{run['id']}", headers=stack.csrf_headers())
        assert stack.prefect("work-pool", "resume", "das-enclave").returncode == 0
