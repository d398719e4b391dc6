"""Shipped files are found through das.resources (importlib.resources), never by checkout path.

The wheel itself is tested in test_wheel_install.py (slow); these check the helper and the
code version a wheel reports, quickly, in the development install.
"""

from __future__ import annotations

import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

import das.resources as resources
import das.runs.audit as audit
from das.cli.synth import DEFAULT_PHSAFE_CONFIG, DEFAULT_SAFETAB_P_SPECS
from das.validation.suites import EXPECTATIONS_DIR, load_suite

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


def test_readers_go_through_the_helper() -> None:
    assert resources.expectations_dir() == EXPECTATIONS_DIR
    assert load_suite("geo").name == "geo"
    assert resources.demo_specs("safetab_p") == DEFAULT_SAFETAB_P_SPECS
    assert resources.demo_specs("phsafe") / "config.json" == DEFAULT_PHSAFE_CONFIG


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
