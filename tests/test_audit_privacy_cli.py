"""`das audit-privacy`: the JSON contract of the issue, exit codes, the Markdown report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from das.cli import main
from das.privacy import conversions

REPO = Path(__file__).resolve().parents[1]
DEMO_SAFETAB_P = REPO / "data_specs" / "safetab_p" / "demo" / "config.json"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict:
    assert main(argv) == code
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one object, one line
    return json.loads(out)


def test_mechanism_geometric_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit-privacy", "mechanism", "--mechanism", "geometric", "--budget", "1"]
    argv += ["--sensitivity", "1", "--trials", "1000000", "--seed", "3", "--json"]
    result = _json(capsys, argv)
    assert {"mechanism", "claimed", "lower_bound", "confidence", "trials"} <= set(result)
    assert result["mechanism"] == "geometric" and result["trials"] == 1_000_000
    assert result["claimed"] == 1.0 and 0.85 <= result["lower_bound"] <= 1.0
    assert result["confidence"] == 0.95 and result["unit"] == "epsilon"


def test_mechanism_discrete_gaussian_json_is_epsilon_at_delta(capsys) -> None:
    argv = ["audit-privacy", "mechanism", "--mechanism", "discrete-gaussian", "--budget"]
    argv += ["0.5", "--sensitivity", "1", "--trials", "200000", "--delta", "1e-6"]
    result = _json(capsys, [*argv, "--confidence", "0.9", "--seed", "4", "--json"])
    assert result["claimed"] == pytest.approx(conversions.zcdp_to_approx_dp_optimal(0.5, 1e-6))
    assert 0 < result["lower_bound"] <= result["claimed"]
    assert result["confidence"] == 0.9 and result["delta"] == 1e-6
    assert result["rho"] == 0.5 and 0 < result["rho_lower_bound"] <= 0.5


def test_mechanism_markdown_report(tmp_path: Path, capsys) -> None:
    report = tmp_path / "audit.md"
    argv = ["audit-privacy", "mechanism", "--mechanism", "geometric", "--budget", "2"]
    argv += ["--sensitivity", "9", "--trials", "20000", "--seed", "1", "--report", str(report)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "## Claimed versus lower bound" in printed and "20,000" in printed
    assert report.read_text(encoding="utf-8").strip() == printed.strip()


def test_product_json(capsys) -> None:
    argv = ["audit-privacy", "safetab-p", "--config", str(DEMO_SAFETAB_P), "--trials", "2000"]
    result = _json(capsys, [*argv, "--seed", "5", "--json"])
    assert result["subject"] == "safetab-p" and result["ok"] is True
    assert [n["pass"] for n in result["neighbours"]] == ["US", "PR"]
    assert result["rows"][-1]["family"] == "PR pass"
    for row in result["rows"]:
        assert row["lower_bound"] <= row["claimed"] and row["rho_lower_bound"] <= row["rho"]


def test_phsafe_production_config(census_specs: Path, capsys) -> None:
    config = census_specs / "phsafe" / "production_2020" / "pr" / "config.json"
    argv = ["audit-privacy", "phsafe", "--config", str(config), "--trials", "2000"]
    result = _json(capsys, [*argv, "--seed", "6", "--json"])
    assert result["ok"] is True and result["neighbours"][0]["pass"] == "PR"


@pytest.mark.slow
def test_self_test_json(capsys) -> None:
    result = _json(capsys, ["audit-privacy", "self-test", "--seed", "7", "--json"])
    assert len(result["variants"]) == 7
    for variant in result["variants"]:
        assert {"name", "claimed", "lower_bound", "detected"} <= set(variant)
        assert variant["detected"] is True and variant["lower_bound"] > variant["claimed"]


def test_bad_input_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["audit-privacy", "phsafe", "--config", str(tmp_path / "none.json")]) == 2
    assert "error" in capsys.readouterr().err
    argv = ["audit-privacy", "mechanism", "--mechanism", "geometric", "--budget", "1"]
    assert main([*argv, "--sensitivity", "1/2", "--trials", "1000"]) == 2
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--sensitivity", "1", "--trials", "10"])  # fewer than 100 trials
    assert exit_info.value.code == 2
