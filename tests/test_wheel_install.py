"""A non-editable install works: the wheel ships the GX suites and the demo specs as package
data, and the installed `das` finds them, from a working directory that is not the checkout.

Slow (two to five minutes, so run by ``.ci/e2e-wheel`` with ``DAS_E2E=1``, not by the plain
test command): builds the wheel of this working tree, installs it with its
dependencies into a fresh virtualenv (pip's cache and the configured indexes), then runs
`das synth`, `das validate` (relative paths) and `das budget report` on a shipped demo config.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where each top-level folder's files sit in the wheel: the data folders inside das.resources,
# the packages where they are (their non-Python files, e.g. das explore's page, must ship too).
DATA_FOLDERS = {
    "expectations": "das/resources/expectations",
    "data_specs": "das/resources/data_specs",
    "das": "das",
    "flows": "flows",
    "tasks": "tasks",
    "explorer": "explorer",
}
INSTALL_TIMEOUT = 900

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("DAS_E2E") != "1", reason="install end-to-end: .ci/e2e-wheel runs it"
    ),
]


def _run(argv: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PREFECT_HOME"] = str(cwd / ".prefect")
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done


def _shipped_data_files() -> list[str]:
    """The non-Python files of those folders, as the repository tracks them (the file system
    when the tests run outside a git checkout)."""
    listed = subprocess.run(
        ["git", "ls-files", "--", *DATA_FOLDERS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode == 0 and listed.stdout.strip():
        names = listed.stdout.splitlines()
    else:
        names = [
            str(path.relative_to(REPO))
            for folder in DATA_FOLDERS
            if (REPO / folder).is_dir()
            for path in (REPO / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        ]
    return sorted(name for name in names if not name.endswith(".py"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, virtualenv): the wheel of this tree, installed with its dependencies."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    # setuptools builds in the tree's build/ and would pack stale files left there by an
    # earlier build (a module since deleted): start from an empty one.
    shutil.rmtree(REPO / "build", ignore_errors=True)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        cwd=root,
        timeout=INSTALL_TIMEOUT,
    )
    (wheel,) = dist.glob("das_pipeline-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        cwd=root,
        timeout=INSTALL_TIMEOUT,
    )
    return wheel, venv


def test_wheel_ships_every_data_file(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = _shipped_data_files()
    assert any(name.startswith("expectations/") for name in expected)
    assert any(name.startswith("data_specs/") for name in expected)
    for name in expected:
        folder, _, rest = name.partition("/")
        assert f"{DATA_FOLDERS[folder]}/{rest}" in names, name
    assert not any("__pycache__" in name for name in names)


def test_installed_das_runs_from_any_directory(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, venv = installed
    das = str(venv / "bin" / "das")
    python = str(venv / "bin" / "python")
    work = tmp_path / "work"
    work.mkdir()

    # The data come from the installed package, not from this checkout.
    probe = _run(
        [
            python,
            "-c",
            "import json, das.resources as r, das.runs.audit as a; print(json.dumps("
            "{'expectations': str(r.expectations_dir()), 'demo': str(r.demo_specs('safetab_p')),"
            " 'code_version': a.code_version()}))",
        ],
        cwd=work,
    )
    located = json.loads(probe.stdout)
    for key in ("expectations", "demo"):
        assert Path(located[key]).is_relative_to(venv), located
        assert not Path(located[key]).is_relative_to(REPO), located
    assert located["code_version"].startswith("das-pipeline 0.1.0"), located
    if (REPO / ".git").exists():  # the wheel recorded the commit it was built from
        assert "(git " in located["code_version"], located

    for product, records in (("phsafe", "persons.csv"), ("safetab-p", "person-records.txt")):
        _run([das, "synth", product, "--output", f"in-{product}", "--persons", "800",
              "--seed", "11"], cwd=work)  # fmt: skip
        assert (work / f"in-{product}" / records).is_file()
        done = _run(
            [das, "validate", product, "--config", f"in-{product}/config.json",
             "--data", f"in-{product}", "--report", f"report-{product}"],
            cwd=work,
        )  # fmt: skip
        assert "VALID" in done.stdout and "NOT VALID" not in done.stdout, done.stdout
        assert (work / f"report-{product}" / "data_docs" / "index.html").is_file()
        report = json.loads((work / f"report-{product}" / "report.json").read_text())
        assert report["ok"] and report["artifacts"]["data_docs"] == "data_docs/index.html"
        assert Path(report["report_dir"]) == work / f"report-{product}"

    done = _run(
        [das, "budget", "report", "--config", str(Path(located["demo"]) / "config.json"), "--json"],
        cwd=work,
    )
    report = json.loads(done.stdout)
    assert report["privacy_defn"] == "zcdp"
    assert report["passes"]["US"]["queries"]
