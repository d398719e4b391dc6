"""A non-editable install works: the wheel ships the GX suites and the demo specs as package
data, and the installed `das` finds them, from a working directory that is not the checkout.
And the air-gapped install of the README works: the wheelhouse of ``requirements.lock`` plus the
project's wheel, installed with no index and no network.

Slow (a minute or two): marked ``e2e``, run by ``.ci/e2e-wheel`` (from ``.ci/test``, the
README's test command). Builds the wheel of this working tree (from a copy of it: nothing is
written into the checkout), downloads the lock's files into a wheelhouse (PyPI, or pip's
cache), installs them and the wheel into one fresh virtualenv as install-offline.md does (``make
WHEELHOUSE=…``'s steps: pip installs uv, uv the rest, ``--offline --no-index``, a new uv
cache), pip's configuration
ignored and any network access sent to a closed port,
checks that the environment is exactly the lock, then runs `das --help`, `das synth`, `das
validate` (relative paths) and `das budget report` from directories that are not the checkout,
without network. (The production install is the lock's; an install of the wheel by
pyproject's ranges, without the lock, is not tested: it resolves whatever the index holds that
day.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from lock_file import LOCK, frozen_versions, locked_versions

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

# e2e: `.ci/e2e-wheel` runs it (from `.ci/test`, the README's test command), after the suite.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(2 * INSTALL_TIMEOUT)]


# No network for the offline install: pip's configuration (its indexes, find-links folders)
# ignored, and anything that still tries HTTP(S) sent to a port nothing listens on.
OFFLINE_ENV = {
    "PIP_CONFIG_FILE": os.devnull,
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
}


def _run(
    argv: list[str], cwd: Path, timeout: int = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run argv; with ``env``, those variables over a copy of this environment whose pip
    settings (PIP_*) are dropped."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if env is not None:
        base = {k: v for k, v in base.items() if not k.upper().startswith("PIP_")} | env
    env = base
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


def _source_copy(target: Path) -> Path:
    """This working tree as it is, outside the checkout: setuptools builds in the source's
    ``build/`` and ``*.egg-info/``, and a test must not write into the checkout (nor pack stale
    files an earlier build left there). In a git checkout: a clone of HEAD (so that the wheel
    records the commit, ``-dirty`` included) with the working tree's files laid over it (tracked
    and untracked, not ignored; deleted ones removed)."""
    if not (REPO / ".git").exists():
        shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(
            ".venv", "build", "*.egg-info", "__pycache__", ".*_cache"))  # fmt: skip
        return target
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(target)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip

    def listed(*options: str) -> list[str]:
        done = subprocess.run(["git", "ls-files", "-z", *options], cwd=REPO, check=True,
                              capture_output=True, text=True)  # fmt: skip
        return [name for name in done.stdout.split("\0") if name]

    for name in listed("--deleted"):
        (target / name).unlink(missing_ok=True)
    for name in listed("--cached", "--others", "--exclude-standard"):
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this tree, built by the lock's setuptools (this test environment's), from
    a copy of it (:func:`_source_copy`)."""
    root = tmp_path_factory.mktemp("dist")
    source = _source_copy(tmp_path_factory.mktemp("source") / "das-pipeline")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(root), str(source)],
        cwd=root,
        timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    (built,) = root.glob("das_pipeline-*.whl")
    return built


@pytest.fixture(scope="module")
def offline(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's air-gapped install: the virtualenv made from the wheelhouse alone."""
    root = tmp_path_factory.mktemp("airgap")
    wheelhouse = root / "wheelhouse"
    # Outside the enclave (PyPI, or pip's cache of the same files).
    _run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
         "--require-hashes", "-r", str(LOCK), "-d", str(wheelhouse)],
        cwd=root,
        timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    shutil.copy2(wheel, wheelhouse)
    assert len(list(wheelhouse.glob("*.whl"))) == len(locked_versions()) + 1
    # Inside: no index, no network, nothing but the wheelhouse (install-offline.md): the
    # Makefile's install steps with WHEELHOUSE, up to the lock (pip installs the installer, uv,
    # which installs the lock), then uv installs the wheel where the checkout would go. uv's
    # cache is a new folder, as on a machine that never had one.
    for name in ("Makefile", "requirements.lock", "requirements-uv.lock"):
        shutil.copy2(REPO / name, root / name)
    venv = root / "venv"
    python = str(venv / "bin" / "python")
    offline = OFFLINE_ENV | {"UV_CACHE_DIR": str(root / "uv-cache")}
    # Without compiling the lock's bytecode (BYTECODE=): what this proves is where the files
    # come from, and the README's command in a fresh clone (test_readme_fresh_clone) runs the
    # same step with it. The few processes here compile what they import (about 25 CPU-s less).
    make = ["make", f"PYTHON={sys.executable}", "VENV=venv", "WHEELHOUSE=wheelhouse", "BYTECODE="]
    _run([*make, "venv/.das-lock"], cwd=root, timeout=INSTALL_TIMEOUT, env=offline)
    uv = [str(venv / "bin" / "uv"), "pip", "install", "-q", "--python", python, "--offline",
          "--no-index", "--no-deps"]  # fmt: skip
    _run([*uv, str(wheelhouse / wheel.name)], cwd=root, env=offline)
    return venv


def test_wheel_ships_every_data_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = _shipped_data_files()
    assert any(name.startswith("expectations/") for name in expected)
    assert any(name.startswith("data_specs/") for name in expected)
    for name in expected:
        folder, _, rest = name.partition("/")
        assert f"{DATA_FOLDERS[folder]}/{rest}" in names, name
    assert not any("__pycache__" in name for name in names)


def test_installed_das_runs_from_any_directory(offline: Path, tmp_path: Path) -> None:
    venv = offline
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
        env=OFFLINE_ENV,
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
              "--seed", "11"], cwd=work, env=OFFLINE_ENV)  # fmt: skip
        assert (work / f"in-{product}" / records).is_file()
        done = _run(
            [das, "validate", product, "--config", f"in-{product}/config.json",
             "--data", f"in-{product}", "--report", f"report-{product}"],
            cwd=work,
            env=OFFLINE_ENV,
        )  # fmt: skip
        assert "VALID" in done.stdout and "NOT VALID" not in done.stdout, done.stdout
        assert (work / f"report-{product}" / "data_docs" / "index.html").is_file()
        report = json.loads((work / f"report-{product}" / "report.json").read_text())
        assert report["ok"] and report["artifacts"]["data_docs"] == "data_docs/index.html"
        assert Path(report["report_dir"]) == work / f"report-{product}"

    done = _run(
        [das, "budget", "report", "--config", str(Path(located["demo"]) / "config.json"), "--json"],
        cwd=work,
        env=OFFLINE_ENV,
    )
    report = json.loads(done.stdout)
    assert report["privacy_defn"] == "zcdp"
    assert report["passes"]["US"]["queries"]


def test_offline_install_is_exactly_the_lock(offline: Path) -> None:
    pip = [str(offline / "bin" / "python"), "-m", "pip"]
    _run([*pip, "check"], cwd=offline, env=OFFLINE_ENV)
    frozen = _run([*pip, "freeze", "--all"], cwd=offline, env=OFFLINE_ENV).stdout
    assert frozen_versions(frozen) == locked_versions()
    # The project: its wheel (pip names the file it came from), not an editable checkout.
    (project,) = [line for line in frozen.splitlines() if re.match(r"-e |das-pipeline\b", line)]
    assert re.match(r"das-pipeline @ file://\S+/das_pipeline-0\.1\.0-\S+\.whl", project), project


def test_offline_das_runs(offline: Path, tmp_path: Path) -> None:
    das = str(offline / "bin" / "das")
    assert "budget" in _run([das, "--help"], cwd=tmp_path, env=OFFLINE_ENV).stdout
    # The README's `das budget report` on the demo config, from a copy of the checkout's
    # data_specs/ (relative path), the package and its dependencies from the wheelhouse.
    demo = Path("data_specs", "safetab_p", "demo")
    shutil.copytree(REPO / demo, tmp_path / demo)
    done = _run(
        [das, "budget", "report", "--config", str(demo / "config.json")],
        cwd=tmp_path,
        env=OFFLINE_ENV,
    )
    assert "safetab-p budget report (zcdp)" in done.stdout
    assert "Pass US" in done.stdout
