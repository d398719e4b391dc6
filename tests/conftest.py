"""Shared test setup: offline Prefect/GX, the path to the public Census spec files, and the
test tiers.

Tiers (issue 25), run in this order by ``.ci/test`` (the README's test command):

- **fast**: the pure engine. No server, no subprocess, no database server (a SQLite file is
  in-process and allowed), no browser. Unmarked tests are fast; ``pytest -m "not integration
  and not e2e"`` runs this tier alone. A fast test that starts a process (``subprocess``,
  ``multiprocessing``, ``os.fork``; ``git`` aside, which ``das.runs.audit.code_version`` asks,
  and ``file``, which ``platform.architecture()`` asks when Prefect's server is imported)
  FAILS and says to mark it: the rule holds by itself, not by review.
- **integration** (``-m integration``): marked here, from what a test uses --
  * the fixture ``prefect_server`` (the session's Prefect test harness: every flow test) or
    ``postgres_cluster`` (the private PostgreSQL), directly or by a ``postgresql`` parameter
    (``store`` in test_ledger.py asks for the cluster inside the fixture);
  * a whole module in ``INTEGRATION_MODULES`` below, each with its reason (they start
    processes: Dask clusters, ``das`` console scripts, PostgreSQL, Chromium);
  * any other test that crosses a process boundary on purpose carries
    ``@pytest.mark.integration`` itself (an exit code of the real console script, a lock or
    lease held by another process, a probe that must be killable).
- **e2e** (``-m e2e``): the real Prefect server, worker and UI (prefect_stack) and the install
  tests (a wheel in fresh virtualenvs, the README's first command in a fresh clone); marked in
  their modules.

Collection orders the tests fast, integration, e2e (stable within a tier), so a plain
``pytest`` also runs the cheap tests first. Every test has a timeout (pyproject's
``timeout``; larger ones are marked where a test needs them).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import shutil
import signal
import subprocess
import tempfile
import traceback
from pathlib import Path

import pytest

from das.offline import configure_offline

PREFECT_HOME = Path(tempfile.mkdtemp(prefix="das-test-prefect-"))
configure_offline(prefect_home=PREFECT_HOME)
# A `das run` of a test without a Prefect API starts a temporary one that ends with it, never
# the local API of `das server`, which would outlive the test (tests/test_local_api.py starts
# that one itself, in a temporary home, and stops it).
os.environ.setdefault("DAS_LOCAL_API", "temporary")
atexit.register(shutil.rmtree, PREFECT_HOME, ignore_errors=True)  # one per pytest process

# One plugin module, hence one session-wide temporary Prefect server (a fixture imported into
# several test modules would be a separate definition, and a separate server, in each).
# pg_cluster: the session fixture postgres_cluster (a private PostgreSQL; fails when it cannot
# start, unless DAS_TEST_POSTGRES_SKIP=1).
pytest_plugins = ("prefect_fixtures", "prefect_stack", "pg_cluster")  # prefect_stack: issue 11 e2e


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# A pytest stopped with SIGTERM (.ci/test stops the e2e scripts so when the fast tier fails, as
# a cancelled CI job is stopped) tears down what its fixtures started, as at ^C: the Prefect
# server (a process group of its own), the PostgreSQL cluster and its folder in /tmp. Killed
# outright, it left both. (Not SIGINT: a job started with & may have it ignored, for good.)
if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _interrupted)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CENSUS_SPECS = SHARED / "census_specs"


@pytest.fixture(autouse=True)
def private_default_ledger(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Path:
    """Each test gets its own per-user default privacy ledger, run key and approver journal
    (XDG_DATA_HOME) and its own state root (XDG_STATE_HOME): tests that release the same toy
    records must not meet each other's recorded spend or run state."""
    home = tmp_path_factory.mktemp("xdg-data")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
    for name in ("DAS_RUN_KEY", "DAS_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home / "das" / "ledger"


@pytest.fixture(scope="session")
def screenshots_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the browser tests put their screenshots: a temporary folder, so that a test run
    leaves the checkout as it was; ``DAS_REFRESH_SCREENSHOTS=1`` writes them into the
    checkout's ``docs/screenshots/`` instead (to refresh the committed ones, on purpose)."""
    if os.environ.get("DAS_REFRESH_SCREENSHOTS") == "1":
        return REPO / "docs" / "screenshots"
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def census_specs() -> Path:
    """The real public 2020 spec files and Census toy inputs; skip when ../shared is absent."""
    if not CENSUS_SPECS.is_dir():
        pytest.skip("../shared/census_specs is not available")
    return CENSUS_SPECS


@pytest.fixture
def count_samples(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every draw of a mechanism (by mechanism class name), one-shot (``sample``) or streamed
    to disk (``sample_blocks``, one call per measurement): proves draws or none."""
    from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism

    calls: list[str] = []
    for cls in (DiscreteGaussianMechanism, GeometricMechanism):
        for method in ("sample", "sample_blocks"):
            original = getattr(cls, method)

            def counting(self, size, rng=None, *args, _original=original, **kwargs):
                calls.append(type(self).__name__)
                return _original(self, size, rng, *args, **kwargs)

            monkeypatch.setattr(cls, method, counting)
    return calls


# -- CI: a missing prerequisite fails the build instead of skipping its tests --------------------
# `.ci/run` sets DAS_CI=1. A test that skips there because ../shared, Debian's chromium or mount
# namespaces (unshare -m) are missing would let a build pass that ran none of what they check.
# Only these skips are allowed in CI, each for a stated reason:
CI_ALLOWED_SKIPS = (
    # A fresh-clone test needs a git checkout; CI runs in one (the skip guards a tarball).
    "not a git checkout",
    # pg_cluster's own tests of an externally started cluster (DAS_TEST_POSTGRES_URL unset).
    "a cluster started outside this session",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """See CI_ALLOWED_SKIPS."""
    outcome = yield
    _fail_a_ci_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A whole module skipped while it is collected (a module-level ``pytest.importorskip`` or
    ``pytest.skip(allow_module_level=True)``) fails in CI too."""
    outcome = yield
    _fail_a_ci_skip(outcome.get_result())


def _fail_a_ci_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or os.environ.get("DAS_CI") != "1":
        return
    reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
    if not any(allowed in reason for allowed in CI_ALLOWED_SKIPS):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped in CI, which must run it: {reason} (install the prerequisite, or add the "
            "reason to CI_ALLOWED_SKIPS in tests/conftest.py with why)"
        )


# -- Tiers (see the module docstring) -------------------------------------------------------------
# Whole modules in the integration tier, and why.
INTEGRATION_MODULES = {
    # Operator Dask clusters: `dask scheduler` / `dask worker` processes.
    "test_dask_cluster.py",
    # `das run` as a process, to cause real faults (a full disk in a mount namespace, a Prefect
    # API that does not answer): the exit code and the one line of the real console script.
    "test_faults.py",
    # Starts PostgreSQL clusters itself (and pytest in a subprocess).
    "test_pg_cluster.py",
    # `das explore` as a server process, driven by Chromium.
    "test_explorer_browser.py",
}
# Fixtures that make a test integration: a Prefect test harness or PostgreSQL.
INTEGRATION_FIXTURES = {"prefect_server", "postgres_cluster"}
TIERS = ("fast", "integration", "e2e")


def tier(item: pytest.Item) -> str:
    if item.get_closest_marker("e2e"):
        return "e2e"
    if item.get_closest_marker("integration"):
        return "integration"
    return "fast"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the integration tests (module docstring), then order fast, integration, e2e."""
    for item in items:
        if tier(item) != "fast":
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (
            item.path.name in INTEGRATION_MODULES
            or INTEGRATION_FIXTURES & set(item.fixturenames)
            or "postgresql" in params.values()
        ):
            item.add_marker(pytest.mark.integration)
    _default_timeouts(items)
    items.sort(key=lambda item: TIERS.index(tier(item)))


class ProcessInFastTier(AssertionError):
    pass


def _refuse(what: str) -> None:
    raise ProcessInFastTier(
        f"a fast-tier test started {what}: mark it @pytest.mark.integration (tests/conftest.py)"
    )


# Commands a fast test may start, because the code under test asks them something: `git`
# (das.runs.audit.code_version) and `file` (platform.architecture(), which Prefect's vendored
# croniter calls when Prefect's server is imported: tests/test_stack.py).
QUERIED_COMMANDS = {"git", "file"}


@pytest.fixture(autouse=True)
def fast_tier_starts_no_process(request: pytest.FixtureRequest, monkeypatch) -> None:
    """The fast tier's rule, enforced: no subprocess, multiprocessing child or fork."""
    if tier(request.node) != "fast":
        return
    execute_child = subprocess.Popen._execute_child

    def guarded(self, args, *rest, **kwargs):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        if Path(str(argv[0])).name not in QUERIED_COMMANDS:
            _refuse(f"the process {argv[:3]}")
        return execute_child(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", guarded)
    monkeypatch.setattr(
        multiprocessing.util, "spawnv_passfds", lambda *a, **k: _refuse("a multiprocessing child")
    )
    monkeypatch.setattr(os, "fork", lambda: _refuse("a fork"))


# -- Timeouts: a hung test fails alone, and takes its processes with it ---------------------------
# pyproject sets pytest-timeout's method to "signal": the timeout raises in the test, which
# fails and is reported while the run goes on. Default timeouts per tier (a test marked
# @pytest.mark.timeout(N) keeps its own): they cover the test's fixtures too, the session's
# Prefect harness or PostgreSQL included when a test is the first to ask for them.
# Integration's covers the first test's start of the Prefect harness (prefect_fixtures.py).
TIER_TIMEOUTS = {"fast": 300, "integration": 900, "e2e": 1200}
# Processes started from these files are the session's shared resources, not a test's own.
SESSION_RESOURCES = {"pg_cluster.py", "prefect_fixtures.py", "prefect_stack.py"}


def _default_timeouts(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(TIER_TIMEOUTS[tier(item)]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Every process the test itself started (its module's code on the stack, a session
    resource's not) and left running when it failed (a timeout, say) is killed with its
    children: a hung subprocess must not outlive its test."""
    started: list[subprocess.Popen] = []
    original = subprocess.Popen.__init__
    module = str(item.path)

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        files = [frame.filename for frame in traceback.extract_stack()]
        if module in files and not any(Path(f).name in SESSION_RESOURCES for f in files):
            started.append(self)

    subprocess.Popen.__init__ = recording
    try:
        outcome = yield
    finally:
        subprocess.Popen.__init__ = original
    if outcome.excinfo is None:
        return
    for process in started:
        if process.poll() is None:
            _kill_tree(process.pid)


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        parent = psutil.Process(pid)
        family = [*parent.children(recursive=True), parent]
    except psutil.Error:
        return
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(family, timeout=10)
