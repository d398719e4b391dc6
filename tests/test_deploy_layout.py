"""`das deploy` checks the root against the files the deployments read, before any Prefect call.

The layout table (das.cli.deploy_layout) is held to deploy/prefect.yaml here; the check itself
runs on folders of empty files (it looks at names and file types, never at contents; the
local profile's real synthetic root is checked in test_deploy_cli.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from das.cli import deploy
from das.cli import main as das
from das.cli.deploy_layout import (
    INPUT_FREE_DEPLOYMENTS,
    PRODUCTS,
    deployment_names,
    layout_problems,
    select_products,
)
from das.specs.race_specs import SPEC_FILES

REPO = Path(__file__).resolve().parents[1]
ROOT_VARIABLE = "{{ prefect.variables.das_root }}/"

# Every file a complete root holds, relative to it (text formats; .parquet works as well).
COMPLETE = (
    "safetab-p/params/config.json",
    *(f"safetab-p/params/{name}" for name in SPEC_FILES),
    "safetab-p/input/person-records.txt",
    "safetab-p/input/GRF-C.txt",
    *(f"phsafe/{p}/{name}" for p in ("us", "pr") for name in (
        "config.json", "input/persons.csv", "input/units.csv", "input/geo.csv")),
    "swap/input/units.csv",
    "swap/input/geo.csv",
)  # fmt: skip


def complete_root(root: Path) -> Path:
    for relative in COMPLETE:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("x\n")
    return root


def test_an_empty_root_names_every_required_file(tmp_path: Path) -> None:
    problems = layout_problems(tmp_path, PRODUCTS)
    assert len(problems) == len(COMPLETE)
    for relative, problem in zip(COMPLETE, problems, strict=True):
        assert problem.startswith(str(tmp_path / relative)) and "missing" in problem


def test_a_complete_root_has_no_problem(tmp_path: Path) -> None:
    assert layout_problems(complete_root(tmp_path), PRODUCTS) == []
    for relative in ("safetab-p/input/person-records.txt", "phsafe/us/input/geo.csv"):
        path = tmp_path / relative
        path.rename(path.with_suffix(".parquet"))  # either format is an input
    assert layout_problems(tmp_path, PRODUCTS) == []


def test_one_missing_spec_file_is_named(tmp_path: Path) -> None:
    missing = complete_root(tmp_path) / "safetab-p" / "params" / SPEC_FILES[-1]
    missing.unlink()
    assert layout_problems(tmp_path, PRODUCTS) == [f"{missing} is missing"]


def test_a_fifo_in_place_of_an_input_is_named_without_blocking(tmp_path: Path) -> None:
    fifo = complete_root(tmp_path) / "phsafe" / "us" / "input" / "units.csv"
    fifo.unlink()
    os.mkfifo(fifo)  # opening it would block: the check only looks at its type
    (problem,) = layout_problems(tmp_path, PRODUCTS)
    assert problem == f"{fifo} is a named pipe (FIFO), not a regular file"


def test_ambiguous_dangling_and_optional_inputs(tmp_path: Path) -> None:
    complete_root(tmp_path)
    (tmp_path / "safetab-p/input/GRF-C.parquet").write_text("x")
    config = tmp_path / "phsafe/pr/config.json"
    config.unlink()
    config.symlink_to(tmp_path / "nowhere.json")
    persons = tmp_path / "swap/input/persons.csv"  # optional for the swap ...
    persons.mkdir()  # ... but read when present
    problems = layout_problems(tmp_path, PRODUCTS)
    assert problems == [
        f"{tmp_path}/safetab-p/input/GRF-C.txt and GRF-C.parquet both exist: keep only one",
        f"{config} is a symbolic link to a missing target ({tmp_path}/nowhere.json)",
        f"{persons} is a directory, not a file",
    ]


def test_a_records_folder_that_is_a_file(tmp_path: Path) -> None:
    complete_root(tmp_path)
    folder = tmp_path / "swap" / "input"
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    folder.write_text("x")
    assert layout_problems(tmp_path, PRODUCTS) == [f"{folder} is not a folder"]


def test_a_missing_root_is_one_line(tmp_path: Path) -> None:
    assert layout_problems(tmp_path / "nope", PRODUCTS) == [f"{tmp_path}/nope does not exist"]


def test_only_the_chosen_products_are_checked(tmp_path: Path) -> None:
    safetab = select_products(["safetab-p"])
    assert layout_problems(complete_root(tmp_path), safetab) == []
    for relative in COMPLETE:
        if not relative.startswith("safetab-p/"):
            (tmp_path / relative).unlink()
    assert layout_problems(tmp_path, safetab) == []
    assert layout_problems(tmp_path, PRODUCTS)
    assert deployment_names(safetab) == [
        "safetab-p-us-pr",
        "validate-safetab-p",
        "approval-sweep",
        "privacy-audit",
    ]
    assert select_products(None) == PRODUCTS
    for bad in (["safetab"], [""], ["safetab-p", "phsafe"]):
        with pytest.raises(ValueError, match="choose from safetab-p, phsafe-us"):
            select_products(bad)


def _yaml_deployments() -> dict[str, dict]:
    config = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    return {d["name"]: d.get("parameters", {}) for d in config["deployments"]}


def test_the_table_is_the_yaml() -> None:
    """Every deployment is in one product (or reads nothing), and reads that product's paths."""
    deployments = _yaml_deployments()
    assert sorted(deployment_names(PRODUCTS)) == sorted(deployments)
    for product in PRODUCTS:
        for name in product.deployments:
            parameters = deployments[name]
            data = parameters.get("data", parameters.get("data_dir"))
            assert data == ROOT_VARIABLE + product.data, name
            config = parameters.get("config")
            assert config == (None if product.config is None else ROOT_VARIABLE + product.config)
    for name in INPUT_FREE_DEPLOYMENTS:
        assert not any(str(v).startswith(ROOT_VARIABLE) for v in deployments[name].values())


# --- the command: refused before any Prefect call, or registering the products chosen ---------


@pytest.fixture
def prefect_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """A server that accepts; every Prefect command recorded (and succeeding)."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.delenv("DAS_PREFECT_AUTH_FILE", raising=False)
    monkeypatch.setattr(deploy, "server_accepts", lambda prog: 0)  # 0: the server may be used

    def prefect(*args: str, cwd: Path | None = None, quiet: bool = False) -> int:
        calls.append(args)
        return 0

    def prefect_captured(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    def set_variables(values: dict[str, str | None]) -> dict[str, bool]:
        calls.extend(("variable", "set", name, value) for name, value in values.items() if value)
        return dict.fromkeys(values, True)

    from flows.crash_detection import Ensured

    monkeypatch.setattr(deploy, "prefect", prefect)
    monkeypatch.setattr(deploy, "prefect_captured", prefect_captured)
    monkeypatch.setattr(deploy, "set_variables", set_variables)
    monkeypatch.setattr(deploy, "watch_for_crashes", lambda settings: Ensured("created", "", 90))
    monkeypatch.setattr(deploy, "registered_deployments",
                        lambda names: [(f"flow/{name}", False) for name in names])  # fmt: skip
    return calls


def test_an_empty_root_is_refused_and_nothing_registered(
    tmp_path: Path, prefect_calls: list, capsys: pytest.CaptureFixture
) -> None:
    assert das(["deploy", "--root", str(tmp_path)]) == deploy.EXIT_USAGE
    err = capsys.readouterr().err
    assert "nothing was registered" in err
    for relative in COMPLETE:
        assert f"  {tmp_path / relative}" in err
    assert f"das layout --root {tmp_path} --safetab-p DIR --phsafe-us DIR" in err  # the way out
    assert prefect_calls == []


def test_the_servers_root_is_checked_when_no_root_is_given(
    tmp_path: Path, prefect_calls: list, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(deploy, "server_variable", lambda name: str(tmp_path))
    assert das(["deploy"]) == deploy.EXIT_USAGE
    assert f"{tmp_path}/safetab-p/params/config.json is missing" in capsys.readouterr().err
    monkeypatch.setattr(deploy, "server_variable", lambda name: None)
    assert das(["deploy"]) == deploy.EXIT_USAGE
    assert "das_root is not set: pass --root DIR" in capsys.readouterr().err
    assert prefect_calls == []


def test_a_complete_root_registers_the_products_chosen(
    tmp_path: Path, prefect_calls: list, capsys: pytest.CaptureFixture
) -> None:
    complete_root(tmp_path)
    (tmp_path / "phsafe" / "us" / "config.json").unlink()  # not chosen: not checked
    argv = ["deploy", "--root", str(tmp_path), "--products", "safetab-p,swap"]
    assert das(argv) == deploy.EXIT_OK
    (register,) = [call for call in prefect_calls if call[0] == "deploy"]
    names = [register[i + 1] for i, arg in enumerate(register) if arg == "--name"]
    assert names == [
        "safetab-p-us-pr",
        "validate-safetab-p",
        "swap-households",
        "approval-sweep",
        "privacy-audit",
    ]
    assert "--all" not in register
    assert "not these (--products): phsafe-us, validate-phsafe-us" in capsys.readouterr().out
    assert ("variable", "set", "das_root", str(tmp_path)) in prefect_calls


def test_variables_the_server_refuses_stop_the_deploy_in_one_line(
    tmp_path: Path, prefect_calls: list, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def refused(values: dict[str, str | None]) -> dict[str, bool]:
        raise ConnectionError("[Errno 111] Connection refused")

    monkeypatch.setattr(deploy, "set_variables", refused)
    assert das(["deploy", "--root", str(complete_root(tmp_path))]) == deploy.EXIT_FAILED
    assert capsys.readouterr().err.splitlines() == [
        "das deploy: error: could not set the Prefect variables: [Errno 111] Connection refused"
    ]
    assert not [call for call in prefect_calls if call[0] in ("deploy", "work-pool")]


def test_all_products_register_with_all(tmp_path: Path, prefect_calls: list) -> None:
    assert das(["deploy", "--root", str(complete_root(tmp_path))]) == deploy.EXIT_OK
    (register,) = [call for call in prefect_calls if call[0] == "deploy"]
    assert register[-1] == "--all" and "--name" not in register


def test_an_unknown_product_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        das(["deploy", "--products", "safetab-p,phsafe"])
    assert exit_info.value.code == 2
    assert "unknown product phsafe" in capsys.readouterr().err


@pytest.mark.usefixtures("prefect_server")
def test_set_variables_creates_overwrites_and_says_which_are_set() -> None:
    """On the session's Prefect server: a variable is created, then overwritten, its value the
    text given (a path with brackets, an empty string: no ledger folder); one given no value is
    left as it is and reported unset until something sets it."""
    from prefect.client.orchestration import get_client

    path = "/secure/[bold]root 2"
    first = {"das_test_root": "/old", "das_test_dir": "", "das_test_unset": None}
    assert deploy.set_variables(first) == {
        "das_test_root": True, "das_test_dir": True, "das_test_unset": False,
    }  # fmt: skip
    assert deploy.set_variables({"das_test_root": path, "das_test_unset": None}) == {
        "das_test_root": True, "das_test_unset": False,
    }  # fmt: skip
    with get_client(sync_client=True) as client:
        assert client.read_variable_by_name("das_test_root").value == path
        assert client.read_variable_by_name("das_test_dir").value == ""
        assert client.read_variable_by_name("das_test_unset") is None
        for name in ("das_test_root", "das_test_dir"):
            client.delete_variable_by_name(name)


def test_server_variable_reads_the_rest_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variable's value exactly (a long path, brackets), the auth header sent, None when
    unset."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    value = "/secure/" + "d" * 150 + "/[bold]root"
    seen: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            found = self.path == "/api/variables/name/das_root"
            body = json.dumps({"name": "das_root", "value": value}).encode()
            self.send_response(200 if found else 404)
            self.end_headers()
            self.wfile.write(body if found else b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{server.server_port}/api/")
        monkeypatch.setenv("PREFECT_API_AUTH_STRING", "das:pw")
        assert deploy.server_variable("das_root") == value
        assert deploy.server_variable("das_checkout") is None
    finally:
        server.shutdown()
        server.server_close()
    assert seen[0] == ("/api/variables/name/das_root", "Basic ZGFzOnB3")


def test_the_documentation_lists_the_deployments_das_deploy_registers() -> None:
    """The documentation's deployments page (the reference page of deployments, generated by
    docs/_hooks/reference.py) tables every deployment as flow/name, with the `--products` name
    that registers it: the same list as deploy/prefect.yaml, with the flows' own names."""
    import importlib
    import importlib.util

    config = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    product_of = {name: p.name for p in PRODUCTS for name in p.deployments}
    expected = []
    for deployment in config["deployments"]:
        path, attribute = deployment["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        flow_name = getattr(module, attribute).name
        product = product_of.get(deployment["name"], "(always)")
        expected.append((f"{flow_name}/{deployment['name']}", product))
    spec = importlib.util.spec_from_file_location("hook", REPO / "docs" / "_hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    lines = hook.deployments_page().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| deployment | what |"))
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [re.sub(r"</?code>", "", cell).strip() for cell in line.strip("|").split(" | ")]
        rows.append((cells[0], cells[3]))
    assert len(rows) == len(config["deployments"]) == 9
    assert sorted(rows) == sorted(expected)
