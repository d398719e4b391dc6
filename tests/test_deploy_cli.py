"""`das deploy`: refuses without a server; the local profile's inputs fit deploy/prefect.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from das.cli import deploy, prefect_wrapper
from das.cli import main as das
from das.cli.deploy_layout import PRODUCTS, layout_problems


def test_refuses_without_a_prefect_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert das(["deploy", "--local"]) == deploy.EXIT_USAGE
    assert "PREFECT_API_URL" in capsys.readouterr().err


def test_finds_the_checkout_from_a_subfolder(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo / "tests")
    assert deploy.checkout_root() == repo


def test_puerto_rico_config_is_its_state_only() -> None:
    from das.specs.config import PHSafeConfig

    us, pr = deploy.local_phsafe_config("us"), deploy.local_phsafe_config("pr")
    assert pr["state_filter"] == ["72"] and "72" not in us["state_filter"]
    for table, budgets in pr["privacy_budget"].items():
        assert all(v == 0 for k, v in budgets.items() if k.startswith("usa_")), table
        assert any(v > 0 for k, v in budgets.items() if k.startswith("state_")), table
    PHSafeConfig.model_validate(pr)


def test_local_inputs_are_laid_out_as_the_deployments_expect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from das.validation import validate_phsafe, validate_safetab_p

    monkeypatch.setattr(deploy, "LOCAL_PERSONS", 2_000)
    deploy.prepare_local_inputs(tmp_path)
    safetab = tmp_path / "safetab-p"
    inputs = sorted(p.name for p in (safetab / "input").iterdir())
    assert inputs == ["GRF-C.txt", "person-records.txt"]
    report = validate_safetab_p(safetab / "params" / "config.json", safetab / "input",
                                tmp_path / "reports" / "safetab-p", run_gx=False)  # fmt: skip
    assert report.ok
    for pass_name in ("us", "pr"):
        folder = tmp_path / "phsafe" / pass_name
        report = validate_phsafe(folder / "config.json", folder / "input",
                                 tmp_path / "reports" / pass_name, run_gx=False)  # fmt: skip
        assert report.ok, report.summary_lines()
    assert (tmp_path / "swap" / "input" / "units.csv").is_file()
    assert layout_problems(tmp_path, PRODUCTS) == []  # what `das deploy` checks next
    before = (safetab / "input" / "person-records.txt").stat().st_mtime_ns
    deploy.prepare_local_inputs(tmp_path)  # kept when present
    assert (safetab / "input" / "person-records.txt").stat().st_mtime_ns == before
    (tmp_path / "swap" / "input" / "units.csv").unlink()  # one product incomplete: it alone
    deploy.prepare_local_inputs(tmp_path)
    assert layout_problems(tmp_path, PRODUCTS) == [] and not (tmp_path / ".synth").exists()
    assert (safetab / "input" / "person-records.txt").stat().st_mtime_ns == before


def test_the_summary_prints_only_commands_that_authenticate(tmp_path: Path) -> None:
    """Prefect's own hints (`prefect worker start ...`) fail against the authenticated server:
    every command of the summary is `das prefect ...` (the e2e test runs each one)."""
    from das.heartbeats import Liveness
    from flows.crash_detection import Ensured

    names = [("safetab-p/safetab-p-us-pr", "inactive"), ("validate/validate-safetab-p", "")]
    ensured = Ensured("created", "id", 90)
    text = deploy.summary(names, ensured, Liveness(30, 90), tmp_path)
    commands = [line.strip() for line in text.splitlines() if line.startswith("  ") and
                " prefect " in line]  # fmt: skip
    das_script = prefect_wrapper.das_command(tmp_path)
    assert commands[0] == f"{das_script} prefect worker start --pool {deploy.WORK_POOL}"
    assert f"{das_script} prefect deployment run safetab-p/safetab-p-us-pr" in commands
    assert all(command.startswith(f"{das_script} prefect ") for command in commands)
    assert "safetab-p/safetab-p-us-pr    schedule registered inactive" in text
    assert "no heartbeat for 90 s" in text and "das: crash runs that stop beating" in text


def test_the_command_is_named_from_the_checkout() -> None:
    repo = Path(__file__).resolve().parents[1]
    script = prefect_wrapper.das_command(repo)
    assert script == ".venv/bin/das" or Path(script).is_absolute()
