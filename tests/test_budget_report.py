"""`das budget ...` from the command line: the plans, totals and calculators of
docs/explanation/architecture.md#inputs-and-commands."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from das.cli import main
from das.phsafe.plan import plan_phsafe
from das.privacy.conversions import safetab_geometric_approx_dp
from das.safetab_p.plan import plan_safetab_p_from_files
from das.specs.config import load_phsafe_config, load_safetab_p_config


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_safetab_2020_report_totals(census_specs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = census_specs / "safetab_p/production_2020/config.json"
    report = _json(capsys, ["budget", "report", "--config", str(config), "--json"])
    assert report["privacy_defn"] == "zcdp"
    us, pr = report["passes"]["US"], report["passes"]["PR"]
    assert us["rho"] == pytest.approx(4.944, abs=1e-12)
    assert us["bounded_rho"] == pytest.approx(9.888, abs=1e-12)
    assert pr["rho"] == pytest.approx(2.643, abs=1e-12)
    assert us["rho_exact"] == "618/125"
    assert us["epsilon_optimal"] < us["epsilon_analytic"]
    rows = {row["name"]: row for row in us["queries"]}
    # σ² = 9 / (2 ρ · share): stage 2 of (COUNTY, 2) spends 0.9 × 0.159.
    stage2 = rows["US/COUNTY/2/stage-2"]
    assert stage2["sigma_squared"] == pytest.approx(9 / (2 * 0.159 * 0.9))
    assert stage2["sensitivity"] == 3.0
    # Table 7: detailed county level, MOE 11 at 95%.
    assert stage2["moe_gaussian_bound"] == pytest.approx(11, abs=0.2)
    # Detailed-only iterations at USA get a total with the whole level budget.
    assert rows["US/USA/2/total-only"]["budget"] == pytest.approx(2.134)
    # (AIANNH, 1) has budget 0: not measured at all.
    assert not any(name.startswith("US/AIANNH/1/") for name in rows)


def test_safetab_plan_uses_stability_from_specs(census_specs: Path) -> None:
    _, measurements = plan_safetab_p_from_files(
        census_specs / "safetab_p/production_2020/config.json"
    )
    assert {m.sensitivity for m in measurements} == {Fraction(3)}
    stage1 = next(m for m in measurements if m.name == "PR/PR-TRACT/1/stage-1")
    assert stage1.budget == Fraction("0.008") * Fraction(1, 10)
    assert stage1.mechanism.sigma_squared == Fraction(9, 2) / stage1.budget


def test_safetab_puredp_report(census_specs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = census_specs / "safetab_p/toy/input_dir_puredp/config.json"
    report = _json(capsys, ["budget", "report", "--config", str(config), "--json"])
    us = report["passes"]["US"]
    assert report["privacy_defn"] == "puredp"
    assert us["bounded_epsilon"] == pytest.approx(2 * us["epsilon"])
    # GvG eq. 39-40 charges every level max(two-stage, total-only); the ledger knows that
    # sub-state levels have no total-only groups, so its Rényi bound must be strictly tighter.
    levels = load_safetab_p_config(config)
    budgets = [
        levels.budgets[lv] for lv in levels.tabulated_levels() if lv.geography.pass_name == "US"
    ]
    expected = safetab_geometric_approx_dp(budgets, 1e-10, stability=9, stage1_fraction=0.1)
    assert 0.5 * expected < us["epsilon_rdp"] < expected
    scale_row = next(r for r in us["queries"] if r["stage"] == "stage-2")
    assert scale_row["scale"] == pytest.approx(9 / scale_row["budget"])


@pytest.mark.parametrize(("folder", "rho"), [("us", 1.257281), ("pr", 1.226649)])
def test_phsafe_2020_report(
    census_specs: Path, capsys: pytest.CaptureFixture[str], folder: str, rho: float
) -> None:
    config = census_specs / "phsafe/production_2020" / folder / "config.json"
    report = _json(capsys, ["budget", "report", "--config", str(config), "--json"])
    ((pass_name, summary),) = report["passes"].items()
    assert pass_name == folder.upper()
    assert summary["rho"] == pytest.approx(rho, abs=1e-12)
    assert summary["bounded_rho"] == pytest.approx(2 * rho, abs=1e-12)
    rows = {row["name"]: row for row in summary["queries"]}
    if folder == "us":
        ph1 = rows["US/PH1_num/usa/*"]
        assert ph1["sensitivity"] == 22.0  # 2τ + 2, τ = 10
        assert ph1["sigma_squared"] ** 0.5 == pytest.approx(304, abs=0.5)
        assert ph1["moe_gaussian_bound"] == pytest.approx(500, abs=0.5)
        assert rows["US/PH1_denom/usa/*"]["sensitivity"] == 2.0
    else:
        assert all(row["geography"] == "state" for row in summary["queries"])


def test_phsafe_plan_skips_zero_budgets(census_specs: Path) -> None:
    config = load_phsafe_config(census_specs / "phsafe/production_2020/pr/config.json")
    assert len(plan_phsafe(config)) == 23


def test_readable_report(census_specs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = census_specs / "safetab_p/production_2020/config.json"
    assert main(["budget", "report", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "Pass US" in text and "Pass PR" in text
    assert "total rho = 4.944" in text


def test_report_without_specs_fails_clearly(
    tmp_path: Path, census_specs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text((census_specs / "safetab_p/production_2020/config.json").read_text())
    assert main(["budget", "report", "--config", str(config)]) == 2
    assert "spec files missing" in capsys.readouterr().err


def test_convert(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["budget", "convert", "--rho", "1", "--delta", "1e-10", "--json"])
    assert out["epsilon_analytic"] == pytest.approx(1 + 2 * (23.025850929940457) ** 0.5)
    assert out["epsilon_optimal"] < out["epsilon_analytic"]


def test_moe_both_directions(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--confidence", "0.95", "--sensitivity", "3", "--stage-fraction", "0.9", "--json"]
    out = _json(capsys, ["budget", "moe", "--moe", "50", *args])
    assert out["rho"] == pytest.approx(0.00691, abs=1e-5)  # Table 7: 0.007 for stage 2
    assert out["rho_total"] == pytest.approx(0.00768, abs=1e-5)  # 0.008 total
    back = _json(capsys, ["budget", "moe", "--rho", str(out["rho_total"]), *args])
    assert back["moe"] == pytest.approx(50)


@pytest.mark.parametrize(("rho", "threshold"), [("0.008", 93), ("0.159", 21), ("0.543", 11)])
def test_suppression_table_6(capsys: pytest.CaptureFixture[str], rho: str, threshold: int) -> None:
    argv = ["budget", "suppression", "--rho", rho, "--stage1-fraction", "0.1", "--p", "0.9999"]
    out = _json(capsys, [*argv, "--sensitivity", "3", "--json"])
    assert out == {"threshold": threshold}


def test_suppression_p_zero_means_no_suppression(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["budget", "suppression", "--rho", "0.159", "--stage1-fraction", "0.1", "--p", "0"]
    assert _json(capsys, [*argv, "--sensitivity", "3", "--json"]) == {"threshold": None}


def test_swap_epsilon(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["budget", "swap-epsilon", "--b", "10", "--rate", "0.5", "--json"])
    assert out["epsilon"] == pytest.approx(2.397895, abs=1e-6)  # ln 11 at o = 1
    never = _json(capsys, ["budget", "swap-epsilon", "--b", "10", "--rate", "0", "--json"])
    assert never["epsilon"] is None and never["finite"] is False
