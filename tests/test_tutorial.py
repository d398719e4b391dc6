"""The tutorials' commands, run as typed: a page cannot drift from the code.

Each ```` ```bash ```` block of a tutorial preceded by ``<!-- test: NAME -->`` is run, in page
order, in one bash session (``set -euo pipefail``) in a fresh temporary folder, with the
repository's virtualenv first on the PATH (what ``source .venv/bin/activate`` does for the
reader), a private home, and no ``DAS_*`` or ``PREFECT_*`` variable from the caller's
environment but two, for time: ``PREFECT_API_URL`` names the session's Prefect test harness
(one server for every page, where each ``das run`` would otherwise start a temporary one: 10-35
s each on 2 cores), and ``DAS_TASK_RUNNER=threads`` keeps the flows' tasks on threads (with an
API URL set, each ``das run`` would start a Dask cluster of worker processes;
tests/test_dask_cluster.py tests those). The commands are the page's, as typed.
``<!-- test: NAME expect="TEXT" -->`` also requires TEXT in that block's output.

- ``tutorial``: docs/tutorials/first-release.md, every step of it.
- ``production``: docs/tutorials/first-production-release.md, the part that runs on one
  machine (approvers' and run keys made with ssh-keygen, the chartered ledger, the second
  approver's charter signature, the trust root published, a refused run, two signed approvals,
  the production run, `das release verify --trust-root`, `das ledger verify`). The server, `das
  deploy` and the worker are what the end-to-end tests run (`.ci/e2e-prefect`:
  tests/test_e2e_prefect.py, with `das deploy --local`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MARKER = re.compile(
    r'^<!-- test: ([a-z-]+)(?: expect="([^"]*)")? -->\n```bash\n(.*?)\n```', re.M | re.S
)
PAGES = {
    "tutorial": REPO / "docs" / "tutorials" / "first-release.md",
    "production": REPO / "docs" / "tutorials" / "first-production-release.md",
}

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass(frozen=True)
class Block:
    number: int
    commands: str
    expect: str | None


def blocks(page: Path, name: str) -> list[Block]:
    """The page's blocks marked for ``name``, in order."""
    found = [
        Block(number, match.group(3), match.group(2))
        for number, match in enumerate(MARKER.finditer(page.read_text()), 1)
        if match.group(1) == name
    ]
    assert found, f"{page}: no block is marked <!-- test: {name} -->"
    return found


def environment(home: Path, api_url: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DAS_", "PREFECT_", "XDG_"))}
    return {
        **keep,
        "PREFECT_API_URL": api_url,
        "DAS_TASK_RUNNER": "threads",
        "PATH": f"{VENV_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "NO_COLOR": "1",
    }


def api_url() -> str:
    """The session's Prefect test harness (fixture ``prefect_server``), for the pages' runs."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the prefect_server fixture sets PREFECT_API_URL"
    return str(url)


def run_page(name: str, folder: Path) -> dict[int, str]:
    """Run the page's blocks in one bash session; each block's output by block number."""
    home = folder / "home"
    home.mkdir()
    work = folder / "work"
    work.mkdir()
    script = ["set -euo pipefail"]
    marked = blocks(PAGES[name], name)
    for block in marked:
        script += [f"echo '::block {block.number}::'", block.commands]
    script.append("echo '::end::'")
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=environment(home, api_url()),
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "::end::" in done.stdout, (
        f"the {name} page's commands failed (exit {done.returncode}); the last block run and "
        f"its output:\n{output[-6000:]}"
    )
    parts = re.split(r"^::block (\d+)::$", done.stdout, flags=re.M)
    outputs = {int(number): text for number, text in zip(parts[1::2], parts[2::2], strict=True)}
    for block in marked:
        if block.expect is not None:
            assert block.expect in outputs[block.number], (
                f"block {block.number} of the {name} page should print {block.expect!r}:\n"
                f"{block.commands}\n---\n{outputs[block.number][-3000:]}"
            )
    return outputs


def test_the_marker_finds_the_blocks_it_should() -> None:
    """The pages mark what they say is tested (a page whose markers stopped matching would
    test nothing)."""
    assert len(blocks(PAGES["tutorial"], "tutorial")) >= 9
    assert len(blocks(PAGES["production"], "production")) >= 6


@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("prefect_server")
def test_first_release_tutorial_runs_as_typed(tmp_path: Path) -> None:
    run_page("tutorial", tmp_path)
    release = tmp_path / "work" / "tutorial" / "release"
    assert (release / "MANIFEST.json").is_file() and (release / "SEEDED").is_file()
    assert not (tmp_path / "work" / "tutorial" / "release-2").exists()


@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("prefect_server")
def test_first_production_release_runs_as_typed_on_one_machine(tmp_path: Path) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed")
    outputs = run_page("production", tmp_path)
    text = "\n".join(outputs.values())
    assert "PROVEN — a private safetab-p release" in text
