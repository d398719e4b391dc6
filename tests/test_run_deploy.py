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


def test_expected_deployments_exist() -> None:
    names = {d["name"] for d in _deployments()}
    assert {"safetab-p-us-pr", "phsafe-us", "phsafe-pr"} <= names
    if (REPO / "flows" / "swap.py").is_file():
        assert "swap-households" in names


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_entrypoint_and_parameters_match_the_flow(deployment: dict) -> None:
    path, name = deployment["entrypoint"].split(":")
    assert (REPO / path).is_file()
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    flow = getattr(module, name)
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
    """A worker runs the entrypoint as imported: its default task runner must be Dask."""
    from prefect_dask import DaskTaskRunner

    monkeypatch.delenv("DAS_TASK_RUNNER", raising=False)
    path, name = deployment["entrypoint"].split(":")
    module = importlib.reload(importlib.import_module(path.removesuffix(".py").replace("/", ".")))
    assert isinstance(getattr(module, name).task_runner, DaskTaskRunner)
