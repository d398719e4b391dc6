"""Release integrity, tried as a hostile or careless operator would: no path through the pipeline
releases unprotected counts or spends budget the ledger does not record.

Each test drives the real flows (CLI, direct flow calls, separate processes) on the Census
SafeTab-P toy inputs or a small synthetic PHSafe population, against the session's Prefect
server, on Prefect's thread pool.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from das.offline import configure_offline

configure_offline()

from prefect.client.orchestration import get_client  # noqa: E402
from prefect.client.schemas.filters import (  # noqa: E402
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect_fixtures import two_state_phsafe  # noqa: E402

from das.cli import main as das_main  # noqa: E402
from das.io.writers import file_sha256  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.runs.ledger import PrivacyLedger  # noqa: E402
from das.runs.policy import RunRefused  # noqa: E402
from flows.phsafe import phsafe_flow  # noqa: E402
from flows.safetab_p import safetab_p_flow  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOY = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy"

pytestmark = [
    pytest.mark.skipif(not TOY.is_dir(), reason="../shared toy inputs absent"),
    pytest.mark.slow,
    pytest.mark.usefixtures("prefect_server", "thread_runner"),
]


def _params(tmp_path: Path, infinite: bool = False) -> Path:
    folder = tmp_path / "params"
    if not folder.exists():
        shutil.copytree(TOY / "input_dir_zcdp", folder)
    config = folder / "config.json"
    if infinite:
        data = json.loads(config.read_text())
        for key, value in data.items():
            if key.startswith("privacy_budget_p_level_") and value > 0:
                data[key] = math.inf
        config.write_text(json.dumps(data))
    return config


def _data(tmp_path: Path) -> Path:
    """A private copy of the toy inputs (tests change it)."""
    data = tmp_path / "data"
    if not data.exists():
        data.mkdir()
        for name in ("person-records.txt", "GRF-C.txt"):
            shutil.copy(TOY / name, data)
    return data


def _run(config: Path, data: Path, output: Path, *extra: str) -> int:
    argv = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output"]
    return das_main([*argv, str(output), "--skip-validation", *extra])


def _tree(*roots: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``roots``: (mtime_ns, sha256): proves a refusal touched nothing."""
    state = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                state[str(path)] = (path.stat().st_mtime_ns, file_sha256(path))
    return state


def _audit(output: Path) -> dict:
    return json.loads((output / "audit.json").read_text())


# --- 1, 4: production mode holds whatever starts the flow -----------------------------------


def test_infinite_budget_is_refused_in_production_by_cli_and_by_direct_flow_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    monkeypatch.setenv("DAS_PRODUCTION", "1")
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "ledger"))
    config, data, out = _params(tmp_path, infinite=True), _data(tmp_path), tmp_path / "out"
    assert _run(config, data, out) == 2
    assert "infinite budget, i.e. no noise" in capfd.readouterr().err
    with pytest.raises(RunRefused, match="infinite budget"):
        safetab_p_flow(config=str(config), data=str(data), output=str(out))
    ph_config = tmp_path / "ph-config.json"
    ph = json.loads((REPO / "data_specs/phsafe/demo/config.json").read_text())
    ph["privacy_budget"]["PH2"]["usa_*"] = math.inf
    ph_config.write_text(json.dumps(ph))
    with pytest.raises(RunRefused, match="infinite budget"):
        phsafe_flow(config=str(ph_config), data=str(data), output=str(out))
    assert count_samples == [] and not out.exists() and not (tmp_path / "out.das").exists()


def test_a_seed_is_refused_in_production_by_a_direct_flow_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str]
) -> None:
    monkeypatch.setenv("DAS_PRODUCTION", "1")
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "ledger"))
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    with pytest.raises(RunRefused, match="a seed was given"):
        safetab_p_flow(config=str(config), data=str(data), output=str(out), seed=3)
    with pytest.raises(RunRefused, match="a seed was given"):
        phsafe_flow(config=str(config), data=str(data), output=str(out), seed=3)
    monkeypatch.delenv("DAS_LEDGER_DIR")
    with pytest.raises(RunRefused, match="DAS_LEDGER_DIR is not set"):
        safetab_p_flow(config=str(config), data=str(data), output=str(out))
    assert count_samples == [] and not out.exists()


# --- 2, 3, 10: a resumed run presents the identity its noise was drawn for ------------------


def test_resume_with_changed_inputs_or_config_is_refused_and_touches_nothing(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    assert _run(config, data, out, "--seed", "1", "--run-id", "K") == 0
    drawn = len(count_samples)
    before = _tree(out, tmp_path / "out.das")
    people = data / "person-records.txt"
    lines = people.read_text().splitlines(keepends=True)
    people.write_text("".join(lines + lines[1:201]))  # 200 more person rows
    capfd.readouterr()
    assert _run(config, data, out, "--seed", "1", "--run-id", "K") == 2
    err = capfd.readouterr().err
    assert "cannot resume" in err and "input file person-records.txt sha256" in err
    assert "Traceback" not in err  # one clear message
    shutil.copy(TOY / "person-records.txt", people)
    settings = json.loads(config.read_text())
    settings["privacy_budget_p_level_1_usa"] = 0.5
    config.write_text(json.dumps(settings))
    assert _run(config, data, out, "--seed", "1", "--run-id", "K") == 2
    assert "config.json sha256" in capfd.readouterr().err
    assert len(count_samples) == drawn  # nothing drawn
    assert _tree(out, tmp_path / "out.das") == before  # not a byte touched, audit included
    assert _audit(out)["status"] == "succeeded"


def test_a_seeded_run_cannot_be_resumed_as_secure(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    assert _run(config, data, out, "--seed", "7", "--run-id", "s1") == 0
    assert "[SEEDED: NOT A PRIVATE RELEASE]" in capfd.readouterr().out
    drawn = len(count_samples)
    assert _run(config, data, out, "--run-id", "s1") == 2
    assert "randomness seeded:7 → secure" in capfd.readouterr().err
    assert len(count_samples) == drawn
    audit = _audit(out)
    assert audit["randomness"]["secure"] is False and audit["markers"] == ["SEEDED"]
    assert (out / "SEEDED").is_file()


# --- 6: never overwritten; the ledger spans runs --------------------------------------------


def test_cumulative_spend_over_two_runs_on_the_same_data(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    first, second = tmp_path / "release-1", tmp_path / "release-2"
    assert _run(config, data, first, "--run-id", "one") == 0
    drawn = len(count_samples)
    capfd.readouterr()
    assert _run(config, data, second, "--run-id", "two") == 2
    err = capfd.readouterr().err
    assert "1 earlier run(s) spent 6.27 (zcdp)" in err
    assert "--cumulative-total US=12.54" in err
    assert _run(config, data, second, "--run-id", "two", "--cumulative-total", "US=12") == 2
    assert len(count_samples) == drawn and not second.exists()
    assert _run(config, data, second, "--run-id", "two", "--cumulative-total", "US=12.54") == 0
    ledger = _audit(second)["privacy_ledger"]["passes"][0]
    assert ledger == {
        "pass": "US",
        "definition": "zcdp",
        "prior": "6.27",
        "this_run": "6.27",
        "cumulative": "12.54",
        "prior_runs": ["one"],
    }
    capfd.readouterr()
    assert das_main(["ledger", "show", "--output", str(second), "--json"]) == 0
    shown = json.loads(capfd.readouterr().out)
    (dataset,) = shown["datasets"]
    assert dataset["cumulative"] == {"US": {"zcdp": "12.54"}}
    runs = [(r["run_id"], r["status"], r["cumulative"]) for r in dataset["runs"]]
    assert runs == [("one", "completed", "6.27"), ("two", "completed", "12.54")]
    refusals = [e for e in dataset["events"] if e["kind"] == "refused"]
    assert len(refusals) == 2


def test_an_existing_release_is_replaced_only_explicitly_and_kept_aside(
    tmp_path: Path, capfd
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    assert _run(config, data, out, "--run-id", "A") == 0
    original = (out / "t1" / "t1.txt").read_bytes()
    total = ("--cumulative-total", "12.54")  # a one-pass run may give the total alone
    capfd.readouterr()
    assert _run(config, data, out, "--run-id", "B", *total) == 2
    assert "holds the release of run A" in capfd.readouterr().err
    assert (out / "t1" / "t1.txt").read_bytes() == original
    assert _run(config, data, out, "--run-id", "B", *total, "--replace-release") == 0
    audit = _audit(out)
    assert audit["run_id"] == "B" and audit["release"]["replaces"] == "A"
    (aside,) = (tmp_path / "out.das" / "replaced").iterdir()
    assert aside.name.startswith("A-") and (aside / "t1" / "t1.txt").read_bytes() == original
    events = PrivacyLedger(tmp_path / ".das-ledger").events()
    assert [e["kind"] for e in events if e["kind"] == "release-replaced"] == ["release-replaced"]


def _das_process(*args: str, env_extra: dict[str, str] | None = None, patch: str = ""):
    """``das`` in a separate process against the session's Prefect server; ``patch`` is Python
    run first (to slow a stage down so that it can be raced or killed)."""
    import prefect.settings

    env = {
        **os.environ,
        "PREFECT_API_URL": str(prefect.settings.PREFECT_API_URL.value()),
        "DAS_TASK_RUNNER": "threads",
        **(env_extra or {}),
    }
    code = f"import sys\n{patch}\nfrom das.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


SLOW_MEASURE = """
import time, tasks.safetab_p as t
_measure = t.measure_level_streamed
def measure_level_streamed(*args, **kwargs):
    time.sleep(1.0)
    return _measure(*args, **kwargs)
t.measure_level_streamed = measure_level_streamed
"""

# The tables are in the staging folder, the release not yet published: the kill lands there.
SLOW_WRITE = """
import time, tasks.safetab_p as t
_write = t.write_release_tables
def write_release_tables(*args, **kwargs):
    rows = _write(*args, **kwargs)
    time.sleep(30)
    return rows
t.write_release_tables = write_release_tables
"""


def test_two_concurrent_runs_on_one_output_one_wins_and_one_spend_is_recorded(
    tmp_path: Path,
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    common = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output",
              str(out), "--skip-validation"]  # fmt: skip
    processes = [_das_process(*common, patch=SLOW_MEASURE) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in processes]
    codes = sorted(p.returncode for p in processes)
    assert codes == [0, 2], results
    refused = next(err for (_, err), p in zip(results, processes, strict=True) if p.returncode)
    assert "REFUSED" in refused
    spends = PrivacyLedger(tmp_path / ".das-ledger").spends()
    assert [s["status"] for s in spends] == ["completed"]
    assert json.loads((out / "MANIFEST.json").read_text())["run_id"] == spends[0]["run_id"]


# --- 7: a kill while writing never leaves a partial release ---------------------------------


class _ReleaseWatcher(threading.Thread):
    """Polls the output folder: at every look it is absent or a complete release."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out, self.looks, self.problems = out, 0, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.looks += 1
            if self.out.exists():
                try:
                    manifest = json.loads((self.out / "MANIFEST.json").read_text())
                    missing = [n for n in manifest["files"] if not (self.out / n).is_file()]
                    if missing:
                        self.problems.append(f"missing {missing}")
                except (OSError, ValueError) as exc:
                    self.problems.append(f"incomplete release: {exc!r}")
            time.sleep(0.005)


def test_kill_9_while_writing_then_resume_never_shows_a_partial_release(
    tmp_path: Path,
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    folder = RunFolder(out, "k1")
    watcher = _ReleaseWatcher(out)
    watcher.start()
    args = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output",
            str(out), "--skip-validation", "--seed", "4", "--run-id", "k1"]  # fmt: skip
    process = _das_process(*args, patch=SLOW_WRITE)
    deadline = time.monotonic() + 120
    while not (folder.staging_dir / "t1" / "t1.txt").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the write never started"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert not out.exists() and folder.staging_dir.is_dir()  # the half-built release is hidden
    assert _run(config, data, out, "--seed", "4", "--run-id", "k1") == 0
    watcher.stop.set()
    watcher.join()
    assert watcher.problems == [] and watcher.looks > 100
    audit = _audit(out)
    assert audit["draws"]["fresh"] == 0 and audit["parameters"]["rerun"] is True
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert {name for name in manifest["files"]} >= {"t1/t1.txt", "t2/t2.txt", "audit.json"}
    assert list((tmp_path / "out.das" / "staging").iterdir()) == []  # cleaned up
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


# --- 9: the Prefect server sees no non-private statistic of the records ---------------------


def test_the_prefect_server_sees_no_record_counts(tmp_path: Path) -> None:
    config, data = two_state_phsafe(tmp_path)
    counts = {
        name: sum(1 for line in (data / name).read_text().splitlines()[1:] if line)
        for name in ("persons.csv", "units.csv", "geo.csv")
    }
    out = tmp_path / "out"
    argv = ["run", "phsafe", "--config", str(config), "--data", str(data), "--output", str(out)]
    assert das_main([*argv, "--seed", "2"]) == 0
    flow_run_id = _audit(out)["run_id"]
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
        )
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    seen = "\n".join([log.message for log in logs] + [str(a.data) for a in found])
    assert len(logs) > 10 and len(found) >= 3
    for name, count in counts.items():
        assert not re.search(rf"(?<![\d.]){count}(?![\d.])", seen), (name, count)
    assert "read" not in " ".join(log.message for log in logs if "persons" in log.message)
    local = RunFolder(out, flow_run_id).log_path.read_text()
    assert f"read {counts['persons.csv']} persons" in local  # the curator's log has them


def test_an_output_template_gives_each_run_its_own_release_folder(
    tmp_path: Path, capfd
) -> None:
    """Deployments publish into releases/{run_id}: a new folder per run, the same on resume."""
    config, data = _params(tmp_path), _data(tmp_path)
    template = tmp_path / "releases" / "{run_id}"
    assert _run(config, data, template, "--seed", "1", "--run-id", "r1") == 0
    assert (tmp_path / "releases" / "r1" / "MANIFEST.json").is_file()
    assert "release in " + str(tmp_path / "releases" / "r1") in capfd.readouterr().out
    assert _run(config, data, template, "--seed", "1", "--run-id", "r1") == 0  # resumes r1
    # one release, its run state, and the ledger shared by every run of the template
    names = sorted(p.name for p in (tmp_path / "releases").iterdir())
    assert names == [".das-ledger", "r1", "r1.das"]
    assert _run(config, data, tmp_path / "releases" / "{runid}", "--seed", "1") == 2
    assert "the only placeholder allowed is {run_id}" in capfd.readouterr().err
