"""Shipped files are found through das.resources (importlib.resources), never by checkout path.

The wheel itself is tested in test_wheel_install.py (slow); these check the helper and the
code version a wheel reports, quickly, in the development install.
"""

from __future__ import annotations

import importlib.util
import shutil
import zipfile
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import pytest

import das.resources as resources
import das.runs.audit as audit
from das.cli.synth import DEFAULT_PHSAFE_CONFIG, DEFAULT_SAFETAB_P_SPECS
from das.validation.suites import EXPECTATIONS_DIR

REPO = Path(__file__).resolve().parents[1]
SPEC_FILES = {
    "config.json",
    "race-and-ethnicity-codes.txt",
    "race-characteristic-iterations.txt",
    "ethnicity-characteristic-iterations.txt",
    "race-and-ethnicity-code-to-iteration.txt",
}


def test_shipped_folders_hold_the_suites_and_demo_specs() -> None:
    suites = {path.stem for path in resources.expectations_dir().glob("*.json")}
    assert {"person-records", "GRF-C", "persons", "units", "geo"} <= suites
    assert {path.name for path in resources.demo_specs("safetab_p").iterdir()} >= SPEC_FILES
    assert (resources.demo_specs("phsafe") / "config.json").is_file()
    assert resources.demo_specs("phsafe").parent.parent == resources.data_specs_dir()


def _fresh(module: str) -> ModuleType:
    """``module`` executed anew from its file, as a separate module object (``sys.modules``
    keeps the real one): its import-time constants are computed again."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    return fresh


def test_readers_go_through_the_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The readers' folders come from das.resources: with the shipped packages found elsewhere
    (as a wheel's are), the suites and the demo specs are read from there, not from the
    checkout."""
    elsewhere = {"das.resources.expectations": tmp_path / "expectations",
                 "das.resources.data_specs": tmp_path / "data_specs"}  # fmt: skip
    shutil.copytree(EXPECTATIONS_DIR, elsewhere["das.resources.expectations"])
    shutil.copytree(resources.data_specs_dir(), elsewhere["das.resources.data_specs"])
    monkeypatch.setattr(resources, "files", lambda package: elsewhere[package])

    suites = _fresh("das.validation.suites")
    expectations = suites.EXPECTATIONS_DIR
    assert expectations == tmp_path / "expectations"
    assert suites.load_suite("geo").name == "geo"
    (tmp_path / "expectations" / "geo.json").unlink()
    with pytest.raises(suites.SuiteError, match=str(tmp_path / "expectations" / "geo.json")):
        suites.load_suite("geo")
    synth = _fresh("das.cli.synth")
    safetab_p, phsafe = synth.DEFAULT_SAFETAB_P_SPECS, synth.DEFAULT_PHSAFE_CONFIG
    assert safetab_p == tmp_path / "data_specs" / "safetab_p" / "demo"
    assert phsafe == tmp_path / "data_specs" / "phsafe" / "demo" / "config.json"
    # And in this editable install, the checkout's folders.
    assert EXPECTATIONS_DIR == REPO / "expectations"
    assert DEFAULT_SAFETAB_P_SPECS == REPO / "data_specs" / "safetab_p" / "demo"
    assert DEFAULT_PHSAFE_CONFIG == REPO / "data_specs" / "phsafe" / "demo" / "config.json"


def test_a_zipped_package_is_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "das.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("expectations/geo.json", "{}")
    monkeypatch.setattr(resources, "files", lambda _: zipfile.Path(archive, "expectations/"))
    with pytest.raises(RuntimeError, match="not a folder on the file system"):
        resources.expectations_dir()


def test_code_version_outside_a_checkout_names_the_wheel_and_its_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = version("das-pipeline")
    monkeypatch.setattr(audit, "_git_describe", lambda _: None)  # no git answer
    monkeypatch.setattr(audit, "build_info", lambda: {"git": "abc1234"})
    assert audit.code_version() == f"das-pipeline {installed} (git abc1234)"
    monkeypatch.setattr(audit, "build_info", dict)  # built without git
    assert audit.code_version() == f"das-pipeline {installed}"


def test_build_info_reads_what_the_wheel_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resources.build_info() == {}  # a checkout carries none
    (tmp_path / resources.BUILD_INFO).write_text('{"git": "v1-3-gabc1234"}\n')
    monkeypatch.setattr(resources, "files", lambda _: tmp_path)
    assert resources.build_info() == {"git": "v1-3-gabc1234"}
