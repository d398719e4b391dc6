"""The registry of environment variables (das.environment) is the code's list, both ways.

The documentation's *Environment variables* page is generated from the registry, so a variable
the code reads and the registry does not list would be undocumented, and one the registry lists
and nothing reads would be documented for nothing. The documentation's own pages may name only
registered variables.
"""

from __future__ import annotations

import re
from pathlib import Path

from das.environment import RELATED, ROLES, VARIABLES, by_name, needed_by

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bDAS_[A-Z0-9_]*[A-Z0-9]\b")
# Where the code lives: every file that can read, set or pass on a variable.
CODE = ("das", "flows", "tasks", "explorer", "deploy", "benchmarks", "tests", ".ci")
CODE_FILES = ("setup.py", "pyproject.toml")
SUFFIXES = {".py", ".yaml", ".yml", ".toml", ".sh", ".js", ".html", ""}
REGISTRY = REPO / "das" / "environment.py"
THIS = Path(__file__).resolve()
# Prefixes the code matches with startswith() to drop a family of variables from a child's
# environment; each must be the prefix of registered names.
PREFIXES = {"DAS_TEST_POSTGRES"}
# Python constants whose names match the pattern but are no environment variables.
CONSTANTS = {"DAS_FLOWS"}  # flows/crash_detection.py: the flows the crash automation watches


def _code_files() -> list[Path]:
    files = [REPO / name for name in CODE_FILES]
    for folder in CODE:
        files += [
            path
            for path in (REPO / folder).rglob("*")
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts
        ]
    return [path for path in files if path.resolve() not in (REGISTRY, THIS)]


def names_in(paths: list[Path]) -> dict[str, list[str]]:
    """``DAS_*`` name → the files (relative) that mention it."""
    found: dict[str, list[str]] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in set(NAME.findall(text)):
            found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


def test_every_variable_the_code_names_is_registered():
    registered = {v.name for v in VARIABLES}
    used = names_in(_code_files())
    missing = {
        name: files[:3]
        for name, files in used.items()
        if name not in registered and name not in PREFIXES and name not in CONSTANTS
    }
    assert not missing, f"DAS_* variables used in the code but not in das/environment.py: {missing}"


def test_every_registered_variable_is_used_by_the_code():
    used = set(names_in(_code_files()))
    unused = sorted(v.name for v in VARIABLES if v.name not in used)
    assert not unused, f"das/environment.py lists variables no code uses: {unused}"


def test_the_related_variables_are_read_by_the_code():
    text = "\n".join(p.read_text(errors="replace") for p in _code_files() if p.suffix == ".py")
    assert [v.name for v in RELATED if v.name not in text] == []


def test_prefixes_name_registered_families():
    for prefix in PREFIXES:
        assert any(v.name.startswith(prefix + "_") for v in VARIABLES), prefix


def test_registry_is_well_formed():
    names = [v.name for v in (*VARIABLES, *RELATED)]
    assert len(names) == len(set(names)), "a variable is registered twice"
    for variable in VARIABLES:
        assert variable.name.startswith("DAS_")
        assert variable.meaning.strip().endswith((".", ")")), variable.name
        assert variable.roles, variable.name
        assert set(variable.roles) <= set(ROLES), variable.name
    assert set(by_name()) == set(names)


def test_a_worker_needs_the_api_url_and_the_auth_file():
    worker = {v.name for v in needed_by("worker")}
    assert {"PREFECT_API_URL", "DAS_PREFECT_AUTH_FILE", "DAS_DASK_ADDRESS"} <= worker
    # what the deployments give each flow run, nobody types on the worker
    flow_run = {v.name for v in needed_by("flow run")}
    assert {"DAS_PRODUCTION", "DAS_LEDGER_ID", "DAS_RUN_KEY", "DAS_STATE_DIR"} <= flow_run


def test_the_deployments_set_exactly_the_flow_run_variables_they_name():
    """deploy/prefect.yaml's production environment is exactly the variables registered with
    the role "flow run" (the page tells a worker's operator they need not set them)."""
    text = (REPO / "deploy" / "prefect.yaml").read_text()
    block = text.split("production_env: &production_env", 1)[1].split("\n\n", 1)[0]
    registry = by_name()
    # DAS_* names, and the registered variables of other projects (the heartbeat's)
    set_there = set(NAME.findall(block)) | {
        name for name in registry if re.search(rf"\b{name}\b", block)
    }
    assert set_there, "no production environment in deploy/prefect.yaml"
    assert [n for n in sorted(set_there) if "flow run" not in registry[n].roles] == []
    assert sorted(v.name for v in needed_by("flow run") if v.name not in set_there) == []


def test_the_documentation_names_only_registered_variables():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    named = names_in(pages)
    unknown = {
        name: files[:3]
        for name, files in named.items()
        if name not in by_name() and name not in PREFIXES
    }
    assert not unknown, f"the documentation names variables the code does not know: {unknown}"


def test_the_test_scripts_defaults_are_the_registry_s() -> None:
    """A ``${NAME:-DEFAULT}`` of ``.ci/test`` is the default the registry (and so the generated
    page) gives: the page said 2 and "DAS_TEST_WORKERS + 1" where .ci/test used 1 and 3.
    (``.ci/e2e-prefect`` sets DAS_E2E_DATABASE to postgresql where pytest's default is sqlite,
    as the registry says.)"""
    script = (REPO / ".ci" / "test").read_text()
    defaults = dict(re.findall(r"\$\{(DAS_[A-Z0-9_]+):-([^}]*)\}", script))
    assert set(defaults) == {"DAS_TEST_WORKERS", "DAS_INTEGRATION_WORKERS"}
    assert {name: by_name()[name].default for name in defaults} == defaults
