"""Package layout beyond what pyproject.toml can say (the metadata and dependencies live there).

1. The data folders stay at the top of the repository (``expectations/``, ``data_specs/``:
   docs/explanation/architecture.md#layout) and ship inside the package as
   ``das.resources.expectations`` and ``das.resources.data_specs``: a package-dir mapping, which
   pyproject's ``packages.find`` cannot combine with discovery. Readers find them through
   :mod:`das.resources`.
2. A wheel records the commit it is built from (``das/resources/build-info.json``), so the
   audit's code version names it where no git checkout exists.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGES = ["das", "flows", "tasks", "explorer"]  # top-level import packages of the project
SHIPPED = {"das.resources.expectations": "expectations", "das.resources.data_specs": "data_specs"}
# Data files inside the packages themselves (das explore's page, when present).
PACKAGE_FILES = {"explorer": ["static/*"]}
# Kinds of data file shipped from those folders (a new kind must be added here; the wheel test
# checks that every tracked file of the folders is in the wheel).
DATA_FILES = ["*.json", "*.txt", "*.md", "*.csv", "**/*.json", "**/*.txt", "**/*.md", "**/*.csv"]


def _git_describe() -> str | None:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


class BuildPyWithCommit(build_py):
    """build_py, then ``das/resources/build-info.json`` with the commit (not for editable
    installs: they run from the checkout, where git answers directly)."""

    def run(self) -> None:
        super().run()
        describe = _git_describe()
        if describe is None or getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "das" / "resources" / "build-info.json"
        target.write_text(json.dumps({"git": describe}) + "\n", encoding="utf-8")


setup(
    packages=[
        *find_namespace_packages(include=[p for name in PACKAGES for p in (name, f"{name}.*")]),
        *SHIPPED,
    ],
    package_dir=SHIPPED,
    package_data={**{name: DATA_FILES for name in SHIPPED}, **PACKAGE_FILES},
    cmdclass={"build_py": BuildPyWithCommit},
)
