"""The CI scripts themselves (issue 25): CI runs again and again on the same disk, so each script
removes its temporary folder however it ends, the processes it starts keep their temporary files
inside that folder (TMPDIR), and ``.ci/test`` refuses to start on a disk without room for them.
(One CI run failed after 15 minutes with "No space left on device": 22 earlier runs of
``.ci/e2e-wheel`` had left 3 GB each in /tmp.)

Each script runs from a copy of ``.ci`` beside a stand-in ``.venv/bin/python`` that fails the
way a crashed or failing pytest does, after leaving a file in TMPDIR as a killed process would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration  # runs the scripts with bash

# The stand-in interpreter: logs how it was called and with which TMPDIR; as pytest it leaves a
# file behind in TMPDIR and fails.
FAKE_PYTHON = """#!/bin/sh
echo "TMPDIR=$TMPDIR $*" >> "$FAKE_PYTHON_CALLS"
case "$*" in
  *"-m pytest"*)
    mkdir -p "$TMPDIR/left-by-a-killed-process" && : > "$TMPDIR/left-by-a-killed-process/f"
    exit 1 ;;
esac
exit 0
"""


def _checkout(tmp_path: Path) -> Path:
    """A folder with this repository's .ci scripts and the stand-in .venv/bin/python."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / ".ci", root / ".ci")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return root


def _script(root: Path, name: str, tmp: Path, calls: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp), "FAKE_PYTHON_CALLS": str(calls)}
    return subprocess.run(["bash", str(root / ".ci" / name)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def _prerequisites_of(name: str) -> None:
    """.ci/e2e-prefect installs chromium and postgresql when they are missing (as root): not
    from a test. (.ci/run installs both before the tests in CI.)"""
    missing = not Path("/usr/bin/chromium").exists() or not list(
        Path("/usr/lib/postgresql").glob("*/bin/initdb")
    )
    if name == "e2e-prefect" and missing:
        pytest.skip("Debian's chromium or postgresql is missing (.ci/run installs them)")


@pytest.mark.parametrize("name", ["test", "e2e-prefect", "e2e-wheel"])
def test_a_failing_script_leaves_nothing_in_the_temporary_folder(tmp_path: Path, name: str) -> None:
    _prerequisites_of(name)
    root, tmp, calls = _checkout(tmp_path), tmp_path / "tmp", tmp_path / "calls"
    tmp.mkdir()
    done = _script(root, name, tmp, calls)
    assert done.returncode == 1, done.stdout + done.stderr
    pytest_calls = [line for line in calls.read_text().splitlines() if "-m pytest" in line]
    assert pytest_calls, calls.read_text()
    # pytest ran with TMPDIR inside the script's own folder (.ci/test's e2e scripts, started
    # with its fast tier, inside theirs within it), and that folder is gone.
    inners = [Path(line.split()[0].removeprefix("TMPDIR=")) for line in pytest_calls]
    assert any(inner.parent.parent == tmp for inner in inners), pytest_calls
    for inner in inners:
        assert inner.is_relative_to(tmp), inner
        assert not (tmp / inner.relative_to(tmp).parts[0]).exists(), inner
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("name", ["test", "e2e-wheel"])
def test_an_interrupted_script_leaves_nothing_in_the_temporary_folder(
    tmp_path: Path, name: str
) -> None:
    """Stopped while its pytest runs, as a cancelled CI job or ^C stops it: a signal to its
    whole process group."""
    root, tmp, calls = _checkout(tmp_path), tmp_path / "tmp", tmp_path / "calls"
    tmp.mkdir()
    python = root / ".venv" / "bin" / "python"
    python.write_text(
        FAKE_PYTHON.replace("exit 1 ;;", ': > "$FAKE_PYTHON_CALLS.started"; sleep 60 ;;')
    )
    env = {**os.environ, "TMPDIR": str(tmp), "FAKE_PYTHON_CALLS": str(calls)}
    script = subprocess.Popen(["bash", str(root / ".ci" / name)], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    started = Path(f"{calls}.started")
    try:
        for _ in range(600):
            if started.exists():
                break
            assert script.poll() is None, "the script ended before its pytest started"
            subprocess.run(["sleep", "0.1"], check=True)
        assert started.exists()
        os.killpg(script.pid, signal.SIGTERM)
        assert script.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
    assert list(tmp.iterdir()) == []


def test_ci_test_stops_at_once_when_the_disk_has_no_room_for_the_tests(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("no mount namespaces here (unshare -m): cannot give the script a small disk")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode:
        pytest.skip("no mount namespaces here (unshare -m): cannot give the script a small disk")
    root, small, calls = _checkout(tmp_path), tmp_path / "small", tmp_path / "calls"
    small.mkdir()
    # TMPDIR on a 64 MiB tmpfs, in the command's own mount namespace.
    command = 'mount -t tmpfs -o size=64m none "$0" && exec bash "$1"'
    env = {**os.environ, "TMPDIR": str(small), "FAKE_PYTHON_CALLS": str(calls)}
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", command, str(small),
         str(root / ".ci" / "test")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MB free in" in done.stderr and "need about 5 GB" in done.stderr, done.stderr
    assert "set TMPDIR" in done.stderr
    assert not calls.exists()  # nothing ran: not even the bytecode compilation


def test_ci_test_stops_at_once_when_tmpdir_is_not_a_folder(tmp_path: Path) -> None:
    root, calls = _checkout(tmp_path), tmp_path / "calls"
    done = _script(root, "test", tmp_path / "missing", calls)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot tell the free space of" in done.stderr and "missing" in done.stderr
    assert not calls.exists()


def _failing_fast_tier(tmp_path: Path, cases: str) -> tuple[subprocess.CompletedProcess, Path]:
    """.ci/test with a stand-in pytest that takes ``cases`` (shell ``case`` branches) before
    its default; it must fail (the fast tier's cases fail it) without waiting for stand-ins
    that would sleep two minutes. Its result and its temporary folder."""
    _prerequisites_of("e2e-prefect")
    root, tmp, calls = _checkout(tmp_path), tmp_path / "tmp", tmp_path / "calls"
    tmp.mkdir()
    python = root / ".venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON.replace('  *"-m pytest"*)', cases + '  *"-m pytest"*)'))
    began = time.monotonic()
    done = _script(root, "test", tmp, calls)
    assert done.returncode == 1, done.stdout + done.stderr
    assert time.monotonic() - began < 90  # the stand-ins' sleep was not waited for
    return done, tmp


def test_a_failing_fast_tier_stops_the_e2e_scripts_and_all_they_started(tmp_path: Path) -> None:
    """The e2e scripts start with the fast tier: its failure stops them at once (their pytest,
    here a stand-in that would sleep two minutes, included), not after they end."""
    e2e = tmp_path / "e2e-pids"
    e2e.mkdir()
    done, tmp = _failing_fast_tier(
        tmp_path,
        f'  *"-m e2e"*)\n    : > "{e2e}/$$"; sleep 120; exit 0 ;;\n'
        # the fast tier fails once both e2e stand-ins run (at most 60 s later)
        f'  *"not integration"*)\n    for i in $(seq 600); do [ "$(ls "{e2e}" | wc -l)" -ge 2 ]'
        " && break; sleep 0.1; done; exit 1 ;;\n",
    )
    started = [int(path.name) for path in e2e.iterdir()]
    assert len(started) == 2, started
    assert all(_gone(pid) for pid in started), started
    assert "integration tier" not in done.stdout
    assert list(tmp.iterdir()) == []


def test_the_integration_tier_starts_once_the_install_tests_end_and_a_failing_fast_tier_stops_it(
    tmp_path: Path,
) -> None:
    """The integration tier starts as soon as .ci/e2e-wheel ends, while the fast tier still
    runs; the fast tier's failure then stops it at once (its pytest, a stand-in that would
    sleep two minutes, included) with the end-to-end chain."""
    started = tmp_path / "started"
    started.mkdir()
    done, tmp = _failing_fast_tier(
        tmp_path,
        # the install tests end at once, the end-to-end chain would run two minutes
        '  *"test_wheel_install"*)\n    exit 0 ;;\n'
        f'  *"-m e2e"*)\n    : > "{started}/e2e-$$"; sleep 120; exit 0 ;;\n'
        f'  *"-m integration"*)\n    : > "{started}/integration-$$"; sleep 120; exit 0 ;;\n'
        # the fast tier fails once the integration tier runs (at most 60 s later)
        f'  *"not integration"*)\n    for i in $(seq 600); do ls "{started}" | grep -q'
        " integration && break; sleep 0.1; done; exit 1 ;;\n",
    )
    names = sorted(path.name.split("-")[0] for path in started.iterdir())
    assert names == ["e2e", "integration"], names
    assert all(_gone(int(path.name.split("-")[1])) for path in started.iterdir())
    out = done.stdout
    assert out.index("== integration tier (") < out.index("== fast tier: exit 1"), out
    assert "stopping the integration tier and the e2e scripts" in out, out
    assert list(tmp.iterdir()) == []


# A stand-in `python3` for .ci/run: `python3 -m venv DIR` makes a virtualenv whose pip and uv
# succeed and whose ruff reports a finding (after a second: the README's command is underway).
FAKE_PYTHON3 = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/pip"
  printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/uv"
  printf '#!/bin/sh\\nsleep 1; echo "x.py:1:1: F401 unused import"; exit 1\\n' > "$3/bin/ruff"
  chmod +x "$3/bin/pip" "$3/bin/uv" "$3/bin/ruff"
fi
exit 0
"""


def _ci_run_checkout(tmp_path: Path, python3: str) -> tuple[Path, Path, dict[str, str]]:
    """A checkout for .ci/run with a stand-in ``python3`` first on the PATH and a stand-in
    .ci/test that writes its pid to ``tests-started`` and would run two minutes."""
    _prerequisites_of("e2e-prefect")  # .ci/run would install chromium and postgresql first
    if shutil.which("eatmydata") is None:
        pytest.skip("Debian's eatmydata is missing (.ci/run installs it)")
    root, tmp, bin_dir = _checkout(tmp_path), tmp_path / "tmp", tmp_path / "bin"
    tmp.mkdir()
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(python3)
    (bin_dir / "python3").chmod(0o755)
    (root / "requirements.lock").write_text("ruff==0.17.6 \\\n    --hash=sha256:00\n")
    (root / "requirements-uv.lock").write_text("")
    # The README's test command, `make test`: the Makefile's install steps (the stand-in venv's
    # pip and uv succeed), then .ci/test.
    shutil.copy2(REPO / "Makefile", root / "Makefile")
    for name in ("pyproject.toml", "setup.py"):
        (root / name).write_text("")
    for name in ("pip", "uv"):
        (root / ".venv" / "bin" / name).write_text("#!/bin/sh\nexit 0\n")
        (root / ".venv" / "bin" / name).chmod(0o755)
    started = tmp_path / "tests-started"
    (root / ".ci" / "test").write_text(f'echo $$ > "{started}"; sleep 120\n')
    env = {**os.environ, "TMPDIR": str(tmp), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return root, tmp, env


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(") ")[1].startswith("Z")


def test_a_lint_finding_stops_the_install_and_tests_started_alongside(tmp_path: Path) -> None:
    """.ci/run lints while the README's command installs and starts the tests: a ruff finding
    fails the run at once, with ruff's report, and stops that command with all it started
    (here a stand-in .ci/test that would run two minutes), leaving nothing in TMPDIR."""
    root, tmp, env = _ci_run_checkout(tmp_path, FAKE_PYTHON3)
    began = time.monotonic()
    done = subprocess.run(["bash", str(root / ".ci" / "run")], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert time.monotonic() - began < 60  # the stand-in's two minutes were not waited for
    assert "F401 unused import" in done.stdout
    assert "ruff check / ruff format --check failed" in done.stderr
    pid = int((tmp_path / "tests-started").read_text())  # the tests had started alongside
    assert _gone(pid), pid
    assert list(tmp.iterdir()) == []


def test_ci_run_stopped_while_it_lints_leaves_nothing_in_the_temporary_folder(
    tmp_path: Path,
) -> None:
    """SIGTERM to .ci/run alone while ruff's virtualenv is still being made: the lint and the
    README's command are stopped before the lint's folder is removed, so that nothing makes
    the virtualenv again afterwards."""
    slow_venv = FAKE_PYTHON3.replace(  # ruff's virtualenv takes 5 s, the project's none
        '  mkdir -p "$3/bin"', '  case "$3" in *das-lint-*) sleep 5 ;; esac; mkdir -p "$3/bin"'
    )
    root, tmp, env = _ci_run_checkout(tmp_path, slow_venv)
    script = subprocess.Popen(["bash", str(root / ".ci" / "run")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    started = tmp_path / "tests-started"
    try:
        for _ in range(300):
            if started.exists() and started.read_text().strip():
                break
            assert script.poll() is None, "the script ended before its tests started"
            time.sleep(0.1)
        pid = int(started.read_text())
        script.send_signal(signal.SIGTERM)
        assert script.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        with contextlib.suppress(ProcessLookupError):
            script.kill()
    time.sleep(6)  # longer than the stand-in virtualenv takes to be made
    assert _gone(pid), pid
    assert list(tmp.iterdir()) == []
