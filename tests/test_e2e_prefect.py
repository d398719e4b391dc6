"""End to end, as an operator runs it: a real ``prefect server``, ``das deploy --local``, a
process worker, runs triggered and retried through the API exactly as the UI does.

Run with ``pytest -m e2e`` (``.ci/e2e-prefect``); the default suite leaves these out.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from prefect_stack import VENV_BIN, PrefectStack, epoch, run_folders

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SAFETAB = "safetab-p/safetab-p-us-pr"


def outside_production(ledger: Path) -> dict:
    """Job variables of the kill/retry test's runs. Seeds are refused in production and the
    test compares the bytes of two seeded releases, so these runs leave production mode (as an
    operator's Custom Run can), each with its own privacy ledger: the production release of
    the same inputs is already recorded in the deployment's ledger."""
    return {"env": {"DAS_PRODUCTION": "0", "DAS_LEDGER_DIR": str(ledger)}}


def artifact_keys(stack: PrefectStack, flow_run_id: str) -> dict[str, dict]:
    return {a["key"]: a for a in stack.artifacts(flow_run_id) if a.get("key")}


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


def _noise_files(output: Path) -> dict[Path, tuple[str, int, int]]:
    """Every persisted noise vector: path → (SHA-256, inode, mtime): a replaced file shows."""
    files = {}
    for folder in run_folders(output):
        for path in sorted((folder / "noise").glob("*.npy")):
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


def _flow_process(stack: PrefectStack, flow_run_id: str) -> psutil.Process:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = stack.flow_run(flow_run_id).get("infrastructure_pid")
        if pid:
            return psutil.Process(int(str(pid).rsplit(":", 1)[-1]))
        time.sleep(0.2)
    raise TimeoutError("the worker never recorded the flow run's process id")


def test_killed_run_retried_from_the_ui_resumes_without_redraw(
    prefect_stack: PrefectStack, first_runs: dict[str, str]
) -> None:
    stack = prefect_stack
    killed_out, clean_out = stack.base / "killed" / "output", stack.base / "clean" / "output"
    seeded = {"seed": 11}
    killed_env = outside_production(stack.base / "killed" / "ledger")
    run = stack.trigger(SAFETAB, {"output": str(killed_out), **seeded}, killed_env)
    process = _flow_process(stack, run)
    deadline = time.monotonic() + 600
    while not _noise_files(killed_out):  # the first draw is persisted: the run is mid-measure
        assert stack.state(run) not in {"COMPLETED", "FAILED", "CRASHED"}, stack.state(run)
        assert time.monotonic() < deadline, "no noise drawn within 10 minutes"
        time.sleep(0.05)
    workers = process.children(recursive=True)
    killed_at = time.time()
    os.kill(process.pid, signal.SIGKILL)
    assert stack.wait(run, timeout=300) == "CRASHED"
    stack.wait_for_worker_release(run, killed_at)  # as an operator sees the crash in the logs

    _, alive = psutil.wait_procs(workers, timeout=60)
    for orphan in alive:  # started by our worker: stop them before failing
        orphan.kill()
    assert not alive, f"{len(alive)} Dask process(es) of the killed flow process outlived it"
    drawn = _noise_files(killed_out)
    assert drawn

    stack.retry_as_the_ui_does(run)
    clean_env = outside_production(stack.base / "clean" / "ledger")
    clean = stack.trigger(SAFETAB, {"output": str(clean_out), **seeded}, clean_env)
    assert stack.wait(run) == "COMPLETED", stack.log_tail("worker")
    assert stack.wait(clean) == "COMPLETED", stack.log_tail("worker")

    released, reference = _release(killed_out), _release(clean_out)
    assert "t1/t1.txt" in reference and "t2/t2.txt" in reference
    assert released == reference  # byte for byte
    after = _noise_files(killed_out)
    assert {path: after.get(path) for path in drawn} == drawn  # no persisted draw replaced

    audit = json.loads((killed_out / "audit.json").read_text())
    clean_audit = json.loads((clean_out / "audit.json").read_text())
    total = clean_audit["draws"]["fresh"]
    assert audit["run_id"] == run  # the Retry resumed the flow run's own run folder
    assert audit["draws"]["reused"] == len(drawn)
    assert audit["draws"]["fresh"] == total - len(drawn)  # only what was never drawn


def test_activated_schedule_makes_the_scheduler_create_runs(prefect_stack: PrefectStack) -> None:
    """The README's activation command, then the server's scheduler must create the runs (it
    does not with SQLAlchemy 2.1 under Prefect 3.8.8)."""
    stack = prefect_stack
    name = "phsafe/phsafe-pr"
    deployment = stack.deployment(name)
    (schedule,) = deployment["schedules"]
    assert schedule["active"] is False
    assert stack.flow_runs_of(deployment["id"], "SCHEDULED") == []
    result = stack.run([str(VENV_BIN / "prefect"), "--no-prompt", "deployment", "schedule",
                        "resume", name, schedule["id"]])  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    deadline = time.monotonic() + 120
    scheduled: list[dict] = []
    while not scheduled and time.monotonic() < deadline:
        time.sleep(2)
        scheduled = [r for r in stack.flow_runs_of(deployment["id"], "SCHEDULED")
                     if r["auto_scheduled"]]  # fmt: skip
    assert scheduled, f"the scheduler created no run in 120 s:\n{stack.log_tail('server')}"
    result = stack.run([str(VENV_BIN / "prefect"), "--no-prompt", "deployment", "schedule",
                        "pause", name, schedule["id"]])  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
