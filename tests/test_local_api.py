"""The local Prefect API of `das server` (das/cli/server.py): found, started, reused, replaced
when stale, stopped; loopback only and authenticated; a `das run` against it is a real flow run
with its artifacts. The integration tests start it in a temporary home and stop it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from das.cli import server as local_api
from das.cli import server_database

REPO = Path(__file__).resolve().parents[1]
DAS = [sys.executable, "-m", "das"]


def test_the_folder_follows_the_state_home(tmp_path: Path) -> None:
    assert local_api.api_dir({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "das/local-api"
    named = {"XDG_STATE_HOME": "/elsewhere", "DAS_LOCAL_API_DIR": str(tmp_path / "api")}
    assert local_api.api_dir(named) == tmp_path / "api"


def test_a_configured_api_or_temporary_is_not_the_local_api(tmp_path: Path) -> None:
    home = {"PREFECT_HOME": str(tmp_path)}
    assert local_api._profile_api_url(home) is None and local_api.wanted(home) is True
    assert local_api.wanted(home | {"DAS_LOCAL_API": "temporary"}) is False
    assert local_api.wanted(home | {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}) is False
    # the active profile of Prefect's profiles file names a server
    (tmp_path / "profiles.toml").write_text(
        'active = "work"\n[profiles.work]\nPREFECT_API_URL = "http://127.0.0.1:4200/api"\n'
        "[profiles.ephemeral]\n"
    )
    # (read from the file when Prefect is not imported yet; here it is, with its settings)
    assert local_api._profile_api_url(home) == "http://127.0.0.1:4200/api"
    assert local_api._profile_api_url(home | {"PREFECT_PROFILE": "ephemeral"}) is None


def test_a_record_of_another_process_is_not_the_server(tmp_path: Path) -> None:
    """A recycled process id (here: this pytest's) is not taken for the server."""
    ours = local_api.LocalApi(os.getpid(), 4321, local_api.prefect_version(), time.time())
    assert local_api._is_server(ours) is False
    gone = local_api.LocalApi(2**22 + 1, 4321, local_api.prefect_version(), time.time())
    assert local_api._is_server(gone) is False


class _FakeServers:
    """``_spawn``, ``_is_server`` and ``_stop_process`` of das.cli.server without processes:
    each spawn writes a record naming a new fake process id, which then counts as running."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        self.spawned: list[int] = []
        self.stopped: list[int] = []
        self.running: set[int] = set()
        monkeypatch.setenv("DAS_LOCAL_API_DIR", str(folder))
        monkeypatch.setattr(local_api, "_spawn", self.spawn)
        monkeypatch.setattr(local_api, "_is_server", lambda api: api.pid in self.running)
        monkeypatch.setattr(local_api, "_stop_process", self.stop)

    def spawn(self, folder: Path) -> local_api.LocalApi:
        time.sleep(0.2)  # a start takes a while: the other thread must wait on the lock
        pid = 10_000_000 + len(self.spawned)
        self.spawned.append(pid)
        self.running.add(pid)
        api = local_api.LocalApi(pid, 40_000 + len(self.spawned), local_api.prefect_version(),
                                 time.time())  # fmt: skip
        local_api._write_record(folder, api)
        return api

    def stop(self, api: local_api.LocalApi, seconds: float = 0) -> None:
        self.stopped.append(api.pid)
        self.running.discard(api.pid)


def test_two_runs_at_once_start_one_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    fake = _FakeServers(monkeypatch, tmp_path / "api")
    found: list[local_api.Found] = []
    threads = [threading.Thread(target=lambda: found.append(local_api.start())) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fake.spawned) == 1
    assert sorted(f.started for f in found) == [False, True]
    assert found[0].api == found[1].api and found[0].auth == found[1].auth


def test_a_server_of_another_prefect_version_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeServers(monkeypatch, tmp_path / "api")
    first = local_api.start()
    old = local_api.LocalApi(first.api.pid, first.api.port, "3.0.0", first.api.started)
    local_api._write_record(tmp_path / "api", old)
    again = local_api.start()
    assert fake.stopped == [old.pid] and again.started and again.api.pid != old.pid
    assert again.replaced == f"it ran Prefect 3.0.0, this is Prefect {local_api.prefect_version()}"
    fake.running.clear()  # and one whose process is gone
    gone = local_api.start()
    assert gone.started and gone.replaced.startswith("its record named process")


def test_a_process_finds_the_api_it_already_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`das demo` runs both products in one process: its second run goes to the local API its
    first run started (and runs inside Prefect settings that name it), not to a temporary API
    that Prefect would start for settings read before the environment named it."""
    _FakeServers(monkeypatch, tmp_path / "api")
    for name in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", local_api.CLIENT_TRUST_ENV):
        # use() sets them: restored
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(local_api, "_in_use", None)
    assert local_api.in_use() is None
    found = local_api.start()
    local_api.use(found)
    again = local_api.in_use()
    assert again is not None and again.api == found.api and again.auth == found.auth
    assert again.started is False
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # another server named
    assert local_api.in_use() is None


def test_its_clients_load_a_trust_store_of_one_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect's client builds a TLS context for each client it makes: pointed at the local
    API (plain HTTP), it loads one certificate that verifies nothing rather than certifi's
    roots (~20 ms CPU each, 28 clients a PHSafe run); a trust store the user set is kept."""
    _FakeServers(monkeypatch, tmp_path / "api")
    found = local_api.start()
    environ = {local_api.LOCAL_API_DIR_ENV: str(tmp_path / "api")}
    local_api.use(found, environ)
    trust = Path(environ[local_api.CLIENT_TRUST_ENV])
    assert trust.parent == tmp_path / "api"
    context = ssl.create_default_context(cafile=str(trust))
    assert context.cert_store_stats() == {"x509": 1, "crl": 0, "x509_ca": 0}
    again = {**environ}
    local_api.use(found, again)  # made once, then reused
    assert again[local_api.CLIENT_TRUST_ENV] == str(trust)
    mine = {local_api.LOCAL_API_DIR_ENV: str(tmp_path / "api"), local_api.CLIENT_TRUST_ENV: "/x"}
    local_api.use(found, mine)
    assert mine[local_api.CLIENT_TRUST_ENV] == "/x"


def _migrated_database(path: Path, revisions: tuple[str, ...] = ("a3b9c7d2e5f1",)) -> Path:
    """A SQLite database shaped like a migrated one: its ``alembic_version`` rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        connection.executemany("INSERT INTO alembic_version VALUES (?)", [(r,) for r in revisions])
        connection.execute("CREATE TABLE flow_run (id TEXT)")  # and its tables
        connection.commit()
    return path


@pytest.fixture
def templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Path], list[str]]:
    """Two template folders (the installation's, the user's) under ``tmp_path``, and the
    background builds asked for (recorded, not started)."""
    folders = [tmp_path / "prefix" / "share" / "das", tmp_path / "cache" / "das"]
    builds: list[str] = []
    monkeypatch.setattr(server_database, "template_dirs", lambda environ=None: folders)
    monkeypatch.setattr(server_database, "build_in_background", lambda e=None: builds.append("b"))
    return folders, builds


def test_a_new_home_gets_a_copy_of_the_template_and_an_old_one_keeps_its_database(
    tmp_path: Path, templates: tuple[list[Path], list[str]]
) -> None:
    folders, builds = templates
    template = _migrated_database(folders[1] / server_database.template_name("3.9.9"))
    home = tmp_path / "api" / "prefect"
    assert server_database.seed(home, "3.9.9") == template  # the user's, when the first has none
    assert (home / "prefect.db").read_bytes() == template.read_bytes()
    assert [p.name for p in home.iterdir()] == ["prefect.db"]  # no partial copy left
    (home / "prefect.db").write_bytes(b"the home's own database")
    assert server_database.seed(home, "3.9.9") is None
    assert (home / "prefect.db").read_bytes() == b"the home's own database"
    assert not builds
    # another Prefect version has no template: none copied, one built for the next home
    assert server_database.seed(tmp_path / "other" / "prefect", "4.0.0") is None
    assert not (tmp_path / "other" / "prefect" / "prefect.db").exists() and builds == ["b"]


@pytest.mark.parametrize(
    "damage", ["not a database", "truncated", "no revision", "two revisions", "a run inside"]
)
def test_a_damaged_template_is_not_copied(
    tmp_path: Path, templates: tuple[list[Path], list[str]], damage: str
) -> None:
    folders, builds = templates
    template = folders[0] / server_database.template_name("3.9.9")
    if damage == "not a database":
        template.parent.mkdir(parents=True)
        template.write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)
    elif damage == "truncated":
        whole = _migrated_database(tmp_path / "whole.db").read_bytes()
        template.parent.mkdir(parents=True)
        template.write_bytes(whole[: len(whole) // 2])
    elif damage == "a run inside":  # a new home would show a run that was never its own
        _migrated_database(template)
        with contextlib.closing(sqlite3.connect(template)) as connection:
            connection.execute("INSERT INTO flow_run VALUES ('not-this-home')")
            connection.commit()
    else:
        _migrated_database(template, () if damage == "no revision" else ("a1", "b2"))
    home = tmp_path / "api" / "prefect"
    assert server_database.seed(home, "3.9.9") is None
    assert not (home / "prefect.db").exists() and builds == ["b"]


def test_templates_are_written_where_they_can_be(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    assert not server_database._writable(tmp_path / "a-file" / "share" / "das")
    assert server_database._writable(tmp_path / "new" / "share" / "das")
    dirs = server_database.template_dirs({"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert dirs == [Path(sys.prefix) / "share" / "das", tmp_path / "cache" / "das"]


def _environment(home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DAS_", "PREFECT_", "XDG_"))}
    return {**keep, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
            "XDG_DATA_HOME": str(home / "data"), "DAS_TASK_RUNNER": "threads"}  # fmt: skip


def _das(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DAS, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=400
    )


def _status(url: str, auth: str | None) -> int:
    headers = {"Authorization": local_api.basic_authorization(auth)} if auth else {}
    request = urllib.request.Request(url + "/admin/version", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _listening(port: int) -> list[str]:
    """The local addresses listening on ``port`` (/proc/net/tcp and tcp6, hex)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


@pytest.mark.integration  # `das run` twice and `das server` as processes, two servers
@pytest.mark.timeout(900)
def test_run_starts_it_the_next_reuses_it_a_stale_one_is_replaced_stop_stops_it(
    tmp_path: Path,
) -> None:
    """As a user types them, with no Prefect server configured: the first `das run` starts the
    local API and says so before anything else takes time, prints each progress line once and
    none of Prefect's per-task lines (piped: stderr is not a terminal), the second reuses it
    silently, each a flow run on that server with its artifacts; it listens on loopback only
    and refuses calls without its auth string; a server killed outright leaves a stale record
    that the next start replaces; `das server stop` stops it."""
    from prefect_fixtures import two_state_phsafe

    home = tmp_path / "home"
    env = _environment(home)
    folder = home / "state" / "das" / "local-api"
    config, data = two_state_phsafe(tmp_path)
    run = ["run", "phsafe", "--config", str(config), "--data", str(data), "--seed", "7"]
    # this installation's migrated empty database, made now unless an earlier start made it
    server_database.build(local_api.prefect_version(), env)
    template = server_database.template_dirs(env)[0] / server_database.template_name(
        local_api.prefect_version()
    )
    assert server_database.usable(template)
    try:
        assert _das(["server", "status"], env, tmp_path).returncode == 1
        first = _das([*run, "--output", str(tmp_path / "r1")], env, tmp_path)
        assert first.returncode == 0, first.stderr[-3000:]
        assert "starting the local Prefect API at http://127.0.0.1:" in first.stderr
        first_id = json.loads((tmp_path / "r1" / "audit.json").read_text())["run_id"]
        run_log = home / "state" / "das" / "runs" / first_id / "run.log"
        _assert_piped_progress(first.stderr, run_log.read_text())
        # its new database was the template's copy, and the run's flow run is on it
        log = (folder / "server.log").read_text()
        assert f"das: a new database, copied from {template}" in log, log[-2000:]
        api = local_api.LocalApi(**json.loads((folder / "server.json").read_text()))
        # its folder and auth string are its owner's alone; it listens on loopback only
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "auth").stat().st_mode) == 0o600
        assert _listening(api.port) == ["0100007F"]
        auth = (folder / "auth").read_text().strip()
        assert _status(api.url, None) == 401 and _status(api.url, "das:wrong") == 401
        assert _status(api.url, auth) == 200
        again = _das(["server", "start"], env, tmp_path)
        assert "already running" in again.stdout and f"process {api.pid}" in again.stdout
        # (its records validated by the first run: skipped here, which spares a Great
        # Expectations process and its validation, ~6 CPU-s; reuse is what is checked)
        second = _das(
            [*run, "--output", str(tmp_path / "r2"), "--cumulative-total", "2.514562",
             "--skip-validation"],
            env,
            tmp_path,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr[-3000:]
        assert "Prefect API" not in second.stderr  # found, not started
        run_ids = [json.loads((tmp_path / name / "audit.json").read_text())["run_id"]
                   for name in ("r1", "r2")]  # fmt: skip
        posted = _posted(api.url, auth, run_ids)
        for name, run_id, (keys, logs, state) in zip(("r1", "r2"), run_ids, posted, strict=True):
            assert "phsafe-release" in keys and state == "Completed", (name, keys, state)
            # its last log line too: the process drained its log worker before it ended
            assert any(f"run {run_id} succeeded" in line for line in logs), name
        status = _das(["server", "status"], env, tmp_path)
        assert status.returncode == 0 and f"process {api.pid}" in status.stdout
        # what reads the runs' posts reads them there: the ledger's witness, the runs
        verify = _das(["ledger", "verify"], env, tmp_path)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert f"Prefect server ({api.url}): the ledger holds all" in verify.stdout
        listed = _das(["runs", "list"], env, tmp_path)
        assert listed.returncode == 0 and listed.stdout.count("phsafe") >= 2, listed.stdout
        # killed outright: its record is stale, and the next start replaces it
        os.killpg(api.pid, signal.SIGKILL)
        _wait_gone(api.pid)
        assert _das(["server", "status"], env, tmp_path).returncode == 1
        restarted = _das(["server", "start"], env, tmp_path)
        assert restarted.returncode == 0 and "started" in restarted.stdout, restarted.stderr
        new = local_api.LocalApi(**json.loads((folder / "server.json").read_text()))
        assert new.pid != api.pid and (folder / "auth").read_text().strip() == auth
        stopped = _das(["server", "stop"], env, tmp_path)
        assert stopped.stdout.strip() == f"das server: stopped process {new.pid}"
        _wait_gone(new.pid)
        assert not (folder / "server.json").exists()
        assert _das(["server", "status"], env, tmp_path).returncode == 1
    finally:
        _das(["server", "stop"], env, tmp_path)


def _assert_piped_progress(stderr: str, run_log: str) -> None:
    """A piped `das run` (stderr not a terminal) that starts the local API says so before
    anything else takes time, prints each progress line once, and none of Prefect's per-task
    lines — which its run log keeps (issue 26: tests/test_progress.py models the progress)."""
    err = stderr.splitlines()
    starting = next(i for i, line in enumerate(err) if "starting the local Prefect API" in line)
    progress = [i for i, line in enumerate(err) if "progress " in line and "%: " in line]
    assert progress and starting < progress[0]
    assert all(err[i].startswith("das run phsafe: progress ") for i in progress)  # ours only
    assert len({err[i] for i in progress}) == len(progress)  # each line once
    assert err[progress[-1]].startswith("das run phsafe: progress 100%: done (elapsed ")
    assert "Finished in state" not in stderr and "Created task run" not in stderr
    assert "Finished in state Completed()" in run_log and "progress 100%: done" in run_log


def _wait_gone(pid: int, seconds: float = 30) -> None:
    """Until ``pid`` is gone (or a zombie: its command line is empty)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not Path(f"/proc/{pid}/cmdline").read_bytes():
                return
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} still runs after {seconds} s")


_POSTED = """
import json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId, LogFilter,
                                            LogFilterFlowRunId)
posted = []
with get_client(sync_client=True) as client:
    for run_id in sys.argv[1:]:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
        run = LogFilterFlowRunId(any_=[run_id])
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=run))
        state = client.read_flow_run(run_id).state.name
        posted.append([sorted({a.key for a in found if a.key}), [l.message for l in logs], state])
print(json.dumps(posted))
"""


def _posted(url: str, auth: str, flow_run_ids: list[str]) -> list[tuple[set[str], list[str], str]]:
    """Each flow run's artifact keys, log messages and state on the server, read with Prefect's
    client (CSRF and auth on), in one process (importing the client costs 1-2 CPU-s)."""
    env = {**os.environ, "PREFECT_API_URL": url, "PREFECT_API_AUTH_STRING": auth}
    out = subprocess.run(
        [sys.executable, "-c", _POSTED, *flow_run_ids],
        env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    posted = json.loads(out.stdout.strip().splitlines()[-1])
    return [(set(keys), logs, state) for keys, logs, state in posted]
