"""The README's first command, verbatim, in a fresh clone: a new user's first five minutes.

Slow (several minutes): marked ``e2e``, run by ``.ci/e2e-wheel`` (from ``.ci/test``, the
README's test command, after the other tiers). It clones this repository's committed HEAD into
a temporary folder, reads the first command of the README's first ``bash`` block from the
clone, and runs it there with bash, as a user would paste it (a new virtualenv, the
hash-checked install of ``requirements.lock``, the project's editable install, then ``das demo
--output demo``, a relative output folder). The demo must complete: inputs, validation reports
with Data Docs, budget reports, and both releases with their audits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 1800


def readme_commands(readme: Path) -> list[str]:
    """The lines of the first fenced ``bash`` block."""
    match = re.search(r"^```bash\n(.*?)^```", readme.read_text(encoding="utf-8"), re.M | re.S)
    assert match, "the README has no bash block"
    return match.group(1).splitlines()


def readme_first_command(readme: Path) -> str:
    """The first line of the first fenced ``bash`` block."""
    return readme_commands(readme)[0]


def test_readme_first_command_is_the_demo() -> None:
    assert readme_first_command(REPO / "README.md") == "make demo"


def test_readme_second_command_is_the_tests_and_ci_runs_it_verbatim() -> None:
    commands = readme_commands(REPO / "README.md")
    assert commands == ["make demo", "make test"], commands
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    body = re.search(r"^readme_test_command\(\) \{[^\n]*\n(.*?)\n\}$", ci, re.M | re.S)
    assert body, ".ci/run defines no readme_test_command()"
    assert body.group(1) == commands[1]


@pytest.mark.integration  # runs make
def test_the_makefile_installs_the_lock_hash_checked() -> None:
    """What both README commands install with: the lock, hash-checked, by uv (itself installed
    by pip from its hash-checked lines), then the project without fetching anything (its build
    backend is in the lock). `make -n` prints each step's recipe without running it."""
    done = subprocess.run(["make", "-n", "-B", "install", "VENV=/nonexistent/v"], cwd=REPO,
                          capture_output=True, text=True, check=True)  # fmt: skip
    commands = [" ".join(c.split()) for c in re.findall(r" && \( (.*?) \) \|\| ", done.stdout)]
    assert commands == [
        "python3 -m venv /nonexistent/v && /nonexistent/v/bin/python -c 'import sys; "
        "sys.exit(not (3, 11, 5) <= sys.version_info[:3] < (3, 12))'",
        "/nonexistent/v/bin/pip install -q --disable-pip-version-check --no-deps --require-hashes "
        "-r requirements-uv.lock",
        "/nonexistent/v/bin/uv pip install -q --python /nonexistent/v/bin/python --no-deps "
        "--require-hashes --compile-bytecode -r requirements.lock",
        "/nonexistent/v/bin/uv pip install -q --python /nonexistent/v/bin/python --no-deps "
        "--no-build-isolation -e .",
    ], done.stdout


@pytest.mark.slow
@pytest.mark.e2e  # .ci/e2e-wheel runs it, from .ci/test
@pytest.mark.timeout(TIMEOUT + 600)
def test_readme_first_command_from_a_fresh_clone(tmp_path: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "das-pipeline"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    command = readme_first_command(clone / "README.md")
    # A new user's shell: no project variables, no Prefect server of ours, Prefect's home in
    # the temporary folder (not the user's).
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PREFECT_API_URL")
        and not key.startswith("DAS_")
    }
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    # The local Prefect API that the demo's first `das run` starts (and leaves up for later
    # runs), in the test's folder, and stopped at the end.
    env["DAS_LOCAL_API_DIR"] = str(tmp_path / "local-api")
    try:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        if (clone / ".venv" / "bin" / "das").exists():
            subprocess.run([str(clone / ".venv" / "bin" / "das"), "server", "stop"], cwd=clone,
                           env=env, capture_output=True, timeout=120, check=False)  # fmt: skip
    log = tmp_path / "readme-command.log"
    log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
    assert done.returncode == 0, f"`{command}` exited {done.returncode} (log: {log}):\n{tail}"
    demo = clone / "demo"
    for product in ("safetab-p", "phsafe"):
        assert (demo / "validation" / product / "data_docs" / "index.html").is_file(), product
        audit = json.loads((demo / "release" / product / "audit.json").read_text())
        assert audit["status"] == "succeeded", product
    assert (demo / "release" / "safetab-p" / "t1" / "t1.txt").is_file()
    assert (demo / "release" / "phsafe" / "PH1_num" / "PH1_num.txt").is_file()
    assert "demo complete" in done.stdout
    # both runs on the local API the first one started, none on a temporary one
    output = done.stdout + done.stderr
    assert output.count("starting the local Prefect API at http://127.0.0.1:") == 1
    assert "Starting temporary server" not in output
