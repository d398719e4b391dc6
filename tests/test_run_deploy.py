"""deploy/prefect.yaml: every deployment points at an importable flow with valid parameters."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "deploy" / "prefect.yaml"


def _deployments() -> list[dict]:
    return yaml.safe_load(PREFECT_YAML.read_text())["deployments"]


RELEASES = ("safetab-p-us-pr", "phsafe-us", "phsafe-pr")
VALIDATIONS = ("validate-safetab-p", "validate-phsafe-us", "validate-phsafe-pr")


def test_expected_deployments_exist() -> None:
    names = {d["name"] for d in _deployments()}
    assert {*RELEASES, *VALIDATIONS, "swap-households"} <= names


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_pull_step_runs_from_the_checkout_named_by_a_variable() -> None:
    """No site path in the file: the worker's checkout comes from the das_checkout variable."""
    config = yaml.safe_load(PREFECT_YAML.read_text())
    assert not [s for s in _strings(config) if "/opt/" in s or "/secure/" in s]
    (step,) = config["pull"]
    directory = step["prefect.deployments.steps.set_working_directory"]["directory"]
    assert directory == "{{ prefect.variables.das_checkout }}"


PATH_PARAMETERS = ("config", "data", "output", "data_dir", "report")


def _reads_data(deployment: dict) -> bool:
    return any(key in deployment.get("parameters", {}) for key in PATH_PARAMETERS)


def test_the_product_deployments_read_data() -> None:
    names = {d["name"] for d in _deployments() if _reads_data(d)}
    assert {*RELEASES, *VALIDATIONS, "swap-households"} <= names


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_paths_come_from_prefect_variables(deployment: dict) -> None:
    parameters = deployment.get("parameters", {})
    for key in PATH_PARAMETERS:
        if key in parameters:
            assert parameters[key].startswith("{{ prefect.variables.das_root }}/"), key


@pytest.mark.parametrize(
    "deployment", [d for d in _deployments() if _reads_data(d)], ids=lambda d: d["name"]
)
def test_production_environment_and_ledger(deployment: dict) -> None:
    """Every deployment that reads the confidential inputs runs in production mode."""
    env = deployment["work_pool"]["job_variables"]["env"]
    assert env["DAS_PRODUCTION"] == "1"
    assert env["DAS_LEDGER_DIR"] == "{{ prefect.variables.das_ledger_dir }}"
    assert env["DAS_LEDGER_ID"] == "{{ prefect.variables.das_ledger_id }}"
    assert "DAS_TASK_RUNNER" not in env


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_every_run_beats_as_the_crash_automation_expects(deployment: dict) -> None:
    """Prefect's default heartbeat (180 s) is slower than the automation's window: every
    deployment's runs take the interval `das deploy` sets from DAS_HEARTBEAT_SECONDS."""
    env = deployment["work_pool"]["job_variables"]["env"]
    expected = "{{ prefect.variables.das_heartbeat_seconds }}"
    assert env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == expected


@pytest.mark.parametrize("name", RELEASES)
def test_every_release_has_an_inactive_production_schedule(name: str) -> None:
    (deployment,) = [d for d in _deployments() if d["name"] == name]
    (schedule,) = deployment["schedules"]
    assert schedule["active"] is False and schedule["slug"] == "production"
    assert schedule["cron"] and schedule["timezone"]


def test_every_deployment_uses_the_pool_das_deploy_creates() -> None:
    from das.cli.deploy import WORK_POOL

    assert {d["work_pool"]["name"] for d in _deployments()} == {WORK_POOL}


def test_every_placeholder_is_a_known_variable() -> None:
    """A misspelt variable would be registered as an empty string: only the documented
    variables (and the ledger id `das deploy` sets from the ledger) may appear."""
    from prefect.utilities.templating import find_placeholders

    from das.cli.deploy import LEDGER_VARIABLES, VARIABLES

    names = {p.name for s in _strings(yaml.safe_load(PREFECT_YAML.read_text()))
             for p in find_placeholders(s)}  # fmt: skip
    assert names == {f"prefect.variables.{name}" for name in (*VARIABLES, *LEDGER_VARIABLES)}


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_entrypoint_and_parameters_match_the_flow(deployment: dict) -> None:
    path, name = deployment["entrypoint"].split(":")
    assert (REPO / path).is_file()
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    flow = getattr(module, name)
    # Loaded from its package module, never from the entrypoint file as a module of its own
    # (a name that the processes of an existing Dask cluster cannot import).
    assert flow.fn.__module__.startswith("flows."), flow.fn.__module__
    signature = inspect.signature(flow.fn)
    given = set(deployment.get("parameters", {}))
    required = {
        p.name for p in signature.parameters.values() if p.default is inspect.Parameter.empty
    }
    assert given <= set(signature.parameters), given - set(signature.parameters)
    assert required <= given, required - given
    assert "seed" not in given  # production deployments never fix the noise
    assert deployment["work_pool"]["name"]


@pytest.mark.parametrize(
    "deployment",
    [d for d in _deployments() if "production" in d.get("tags", [])],
    ids=lambda d: d["name"],
)
def test_production_flows_run_their_tasks_on_dask(
    deployment: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker runs the entrypoint as imported, with its server's address in the run's
    environment: the task runner its run starts with must be Dask worker processes."""
    from prefect_dask import DaskTaskRunner

    for variable in ("DAS_TASK_RUNNER", "DAS_DASK_ADDRESS", "DAS_DASK_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # as a worker sets it
    path, name = deployment["entrypoint"].split(":")
    entrypoints = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    runner = getattr(entrypoints, name).task_runner.duplicate()  # as the flow engine does
    assert isinstance(runner, DaskTaskRunner) and runner.cluster_kwargs["processes"] is True
