"""The one session-wide temporary Prefect server of the test suite
(docs/explanation/architecture.md#prefect).

Registered once as a plugin by ``conftest.py``; a test module that runs flows asks for it with
``pytestmark = pytest.mark.usefixtures("prefect_server")``. Every module shares the same server.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from das.offline import configure_offline

configure_offline()

from prefect.client.orchestration import get_client  # noqa: E402
from prefect.client.schemas.filters import (  # noqa: E402
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.sorting import ArtifactSort  # noqa: E402

# The harness starts a server process that imports Prefect's server and migrates a new
# database: about 20 s on an idle 2-core machine, several minutes when the integration tier's
# two workers start theirs while the e2e servers start alongside (.ci/test) on a loaded one.
# 120 s was too short there (every test of the worker then errors); a hang is still caught.
SERVER_STARTUP_SECONDS = 480


# Services of the harness's server that no test here needs: storing every event (each state
# change, log and heartbeat is one) and evaluating automations against them. The real server
# of the e2e tests runs them all (tests/test_e2e_prefect.py); here they took a sixth of the
# server's CPU time (the two flow-test modules in one process: 54 -> 47 server CPU-s).
UNUSED_SERVICES = {
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
}


def _seeded_mkdtemp(*args: Any, **kwargs: Any) -> str:
    """The harness's database folder, its ``prefect-test.db`` a copy of this installation's
    migrated empty database (das.cli.server_database) when there is one, made here when none
    (or being made by another worker: then the server migrates its own, as before): the
    server then checks its migrations and has nothing to do (about 4 CPU-s a start)."""
    import shutil
    import tempfile
    from importlib.metadata import version

    from das.cli import server_database

    folder = tempfile.mkdtemp(*args, **kwargs)
    prefect = version("prefect")
    server_database.build(prefect)
    for templates in server_database.template_dirs():
        template = templates / server_database.template_name(prefect)
        if server_database.usable(template):
            shutil.copyfile(template, Path(folder) / "prefect-test.db")
            break
    return folder


@pytest.fixture(scope="session")
def prefect_server():
    """A temporary Prefect API and database for the whole session (one per xdist worker)."""
    # Imported here: it imports Prefect's server (1.7 CPU-s), which a pytest process that runs
    # no flow test (the fast tier's workers, the e2e scripts') has no use for.
    from prefect.testing.utilities import prefect_test_harness

    with contextlib.ExitStack() as harness:
        with pytest.MonkeyPatch.context() as patch:  # for the server process it starts only
            for name, value in UNUSED_SERVICES.items():
                patch.setenv(name, value)
            patch.setattr("prefect.testing.utilities.mkdtemp", _seeded_mkdtemp)
            harness.enter_context(
                prefect_test_harness(server_startup_timeout=SERVER_STARTUP_SECONDS)
            )
        yield


@pytest.fixture
def thread_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flows in this process on Prefect's thread pool (no Dask cluster, no DAS_DASK_ADDRESS),
    outside production mode with the default ledger beside the output: a test that wants
    Dask, production mode or a ledger folder sets it itself."""
    monkeypatch.delenv("DAS_DASK_ADDRESS", raising=False)
    monkeypatch.delenv("DAS_PRODUCTION", raising=False)
    monkeypatch.delenv("DAS_LEDGER_DIR", raising=False)
    monkeypatch.setenv("DAS_TASK_RUNNER", "threads")


def two_state_phsafe(folder: Path) -> tuple[Path, Path]:
    """The shipped PHSafe demo config cut to two states (DC, RI) and 3,137 seeded synthetic
    persons under ``folder``: a flow run of a few seconds. (config, data)."""
    from das.cli import main as das_main

    repo = Path(__file__).resolve().parents[1]
    config = folder / "ph-config.json"
    settings = json.loads((repo / "data_specs/phsafe/demo/config.json").read_text())
    settings["state_filter"] = ["11", "44"]
    config.write_text(json.dumps(settings))
    data = folder / "ph"
    assert das_main(["synth", "phsafe", "--output", str(data), "--persons", "3137",
                     "--seed", "5", "--config", str(config)]) == 0  # fmt: skip
    return config, data


def artifacts(key: str, flow_run_id: str) -> list:
    """The artifacts stored under ``key`` by one flow run on the session's Prefect server,
    newest first (the server is shared by the whole session: other tests' runs post under the
    same keys, so a test names its own run, never "the newest")."""
    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[key]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
            ),
            sort=ArtifactSort.CREATED_DESC,
        )


def server_logs(flow_run_id: str, settle_seconds: float = 30.0) -> list:
    """Every log the server holds of one flow run of this process. Logs reach the server in
    batches from a background worker: flush it, then read until two reads a second apart
    agree (a loaded machine delivers late), at most ``settle_seconds``."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)
    deadline = time.monotonic() + settle_seconds
    seen: list = []
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
            )
            if (seen and len(logs) == len(seen)) or time.monotonic() > deadline:
                return logs
            seen = logs
            time.sleep(1.0)


def assert_rejected_before_noise(output: Path, run_id: str, samples: list[str]) -> dict:
    """A run stopped by validation: no sampler call, no noise or ledger file, a failed audit
    naming ValidationFailed, and the validation report left for the curator. The audit."""
    from das.runs.folder import RunFolder

    assert samples == []
    folder = RunFolder(output, run_id)
    assert list(folder.noise_dir.glob("*")) == [] and list(folder.accountants_dir.glob("*")) == []
    # The ledger returned the run's reservation: nothing counts as spent.
    from das.trust import open_ledger

    state = open_ledger().ledger.run(run_id)
    assert state is not None and state.status == "released" and not state.draws
    audit = json.loads(folder.audit_path.read_text())
    assert not output.exists()  # nothing published, not even a partial release
    assert audit["status"] == "failed" and audit["error_type"] == "ValidationFailed"
    assert audit["validation"]["ok"] is False and audit["validation"]["errors"] > 0
    assert (folder.validation_dir / "report.json").is_file()
    return audit
