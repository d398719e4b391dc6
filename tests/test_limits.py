"""Absurd budgets are refused everywhere: the limits of das.privacy.limits, in every path."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from das.cli import main
from das.phsafe.plan import plan_phsafe
from das.privacy import noise
from das.privacy.accounting import Measurement, compose
from das.privacy.limits import (
    FLOOR_SENSITIVITY,
    MAX_PASS_TOTAL,
    MIN_QUERY_BUDGET,
    SAMPLER_MAX_SCALE,
    SAMPLER_MAX_SIGMA_SQUARED,
    BudgetLimitError,
    pass_total_problem,
    query_floor_problem,
    show,
)
from das.privacy.mechanisms import mechanism_for
from das.safetab_p.plan import plan_safetab_p_from_files
from das.specs.config import (
    ConfigError,
    load_phsafe_config,
    load_safetab_p_config,
    parse_phsafe_config,
    parse_safetab_p_config,
)

REPO = Path(__file__).resolve().parents[1]
SAFETAB_DEMO = REPO / "data_specs" / "safetab_p" / "demo" / "config.json"
PHSAFE_DEMO = REPO / "data_specs" / "phsafe" / "demo" / "config.json"


def _safetab() -> dict:
    return json.loads(SAFETAB_DEMO.read_text())


def _phsafe() -> dict:
    return json.loads(PHSAFE_DEMO.read_text())


def _problems(error: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    lines = str(error.value).splitlines()
    assert f"({len(lines) - 1} problem(s))" in lines[0]
    return lines[1:]


# ------------------------------------------------------------------------------ the limits
def test_the_ceilings_are_exact_read_only_and_about_twice_2020() -> None:
    assert {"zcdp": Fraction(10), "puredp": Fraction(30)} == MAX_PASS_TOTAL
    assert all(type(value) is Fraction for value in MAX_PASS_TOTAL.values())
    assert {"zcdp": Fraction(1, 10**9), "puredp": Fraction(1, 10**9)} == MIN_QUERY_BUDGET
    with pytest.raises(TypeError):
        MAX_PASS_TOTAL["zcdp"] = Fraction(100)  # type: ignore[index]
    largest_2020 = max(Fraction("4.944"), Fraction("2.643"), Fraction("1.257281"))
    assert 2 * largest_2020 <= MAX_PASS_TOTAL["zcdp"] <= 3 * largest_2020


def test_the_sampler_range_is_the_vectorized_exact_path() -> None:
    """The documented range is where das.privacy.noise stays in 64-bit vectorized arithmetic
    (and just beyond it, it does not): a change to the samplers must revisit the limits."""
    assert noise._gauss_plan(SAMPLER_MAX_SIGMA_SQUARED).vectorized
    assert noise._gauss_plan(SAMPLER_MAX_SIGMA_SQUARED - Fraction(1, 3)).vectorized
    assert not noise._gauss_plan(2 * SAMPLER_MAX_SIGMA_SQUARED).vectorized
    assert noise._geom_plan(SAMPLER_MAX_SCALE).vectorized
    assert noise._geom_plan(SAMPLER_MAX_SCALE - Fraction(1, 7)).vectorized
    assert not noise._geom_plan(2 * SAMPLER_MAX_SCALE).vectorized


def test_the_floor_keeps_sensitivities_up_to_1000_in_range() -> None:
    delta = FLOOR_SENSITIVITY
    rho, epsilon = MIN_QUERY_BUDGET["zcdp"], MIN_QUERY_BUDGET["puredp"]
    assert delta * delta / (2 * rho) <= SAMPLER_MAX_SIGMA_SQUARED
    assert delta / epsilon <= SAMPLER_MAX_SCALE
    for definition in ("zcdp", "puredp"):
        mechanism_for(definition, MIN_QUERY_BUDGET[definition], delta)  # accepted
        mechanism_for(definition, MAX_PASS_TOTAL[definition], 1)


def test_show_prints_any_magnitude() -> None:
    assert [show(x) for x in (Fraction(10), Fraction(1, 10**9), Fraction(10**400))] == [
        "10",
        "1e-9",
        "1e400",
    ]
    assert show(Fraction(9, 2) * 10**300) == "4.5e300" and show(math.inf) == "Infinity"


def test_a_refusal_shows_a_budget_just_past_a_limit_with_the_digits_that_differ() -> None:
    """ "ρ 10 is above ρ ≤ 10" would read as a bug: the value shows as many digits as it takes."""
    assert "ρ 10.0001 is above" in str(pass_total_problem("zcdp", Fraction("10.0001"), "q"))
    assert "ε 30.000000001 is above" in str(pass_total_problem("puredp", 30.000000001, "q"))
    assert "ρ 11 is above" in str(pass_total_problem("zcdp", 11, "q"))
    floor = MIN_QUERY_BUDGET["zcdp"]
    below = str(query_floor_problem("zcdp", floor * Fraction(99999, 100000), "q"))
    assert f"below the smallest per-query budget (ρ ≥ {show(floor)})" in below
    assert f"ρ {show(floor)} is below" not in below


# ------------------------------------------------------------------------------ mechanisms
@pytest.mark.parametrize(
    ("definition", "budget", "sensitivity", "message"),
    [
        ("zcdp", "1e300", 3, r"q: ρ 1e300 is above the largest total a pass may spend \(ρ ≤ 10"),
        ("puredp", "31", 9, r"ε 31 is above the largest total a pass may spend \(ε ≤ 30"),
        ("zcdp", "1e-300", 3, r"q: ρ 1e-300: noise σ² would be 4.5e300, beyond what the exact "),
        ("puredp", "1e-300", 9, r"noise scale would be 9e300, beyond what the exact sampler"),
        ("zcdp", "1e-9", 2000, r"σ² would be 2e15, beyond .*releases nothing useful"),
    ],
)
def test_a_mechanism_is_never_built_outside_the_limits(
    definition: str, budget: str, sensitivity: int, message: str
) -> None:
    with pytest.raises(BudgetLimitError, match=message):
        mechanism_for(definition, budget, sensitivity, what="q")


def test_a_measurement_names_its_query_in_the_refusal() -> None:
    with pytest.raises(ValueError, match=r"^US/PH3/state/A-G: ρ 1e-300"):
        Measurement.create("US/PH3/state/A-G", "zcdp", "1e-300", 22)
    assert Measurement.create("golden", "zcdp", math.inf, 22).mechanism.sigma_squared == 0


# ------------------------------------------------------------------------------ configs
def test_safetab_every_absurd_budget_on_its_own_line(tmp_path: Path) -> None:
    data = _safetab()
    positive = [k for k, v in data.items() if k.startswith("privacy_budget_p_level_") and v]
    for key in positive:
        data[key] = 1e300
    data["privacy_budget_p_level_2_usa"] = 1e-300
    data["privacy_budget_p_level_1_usa"] = -1  # an older problem, reported beside them
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as caught:
        load_safetab_p_config(path)
    problems = _problems(caught)
    assert len(problems) == len(positive)
    assert "privacy_budget_p_level_1_usa: must be >= 0" in problems[0]
    usa_2 = next(p for p in problems if "privacy_budget_p_level_2_usa" in p)
    assert "its stage-1 query (0.1 of it): ρ 1e-301 is below the smallest per-query budget" in (
        usa_2
    )
    assert "releases nothing useful" in usa_2
    county = next(p for p in problems if "level_2_county:" in p)
    assert "ρ 1e300 is above the largest total a pass may spend (ρ ≤ 10" in county


def test_safetab_floor_applies_to_the_smaller_stage_share() -> None:
    data = _safetab()
    data["privacy_budget_p_level_1_usa"] = 2e-8  # stage 1: 2e-9 ≥ 1e-9
    parse_safetab_p_config(data, "ok")
    data["privacy_budget_p_level_1_usa"] = 5e-9  # stage 1: 5e-10 < 1e-9
    with pytest.raises(ConfigError, match=r"level_1_usa \(5e-9\), its stage-1 query"):
        parse_safetab_p_config(data, "low")
    data["privacy_budget_p_stage_1_fraction"] = 0.95  # now stage 2 is the smaller share
    with pytest.raises(ConfigError, match=r"its stage-2 query \(0.05 of it\): ρ 2.5e-10"):
        parse_safetab_p_config(data, "low")
    data = _safetab()
    data["privacy_budget_p_stage_1_fraction"] = 1e-300  # every stage-1 query is absurd
    with pytest.raises(ConfigError) as caught:
        parse_safetab_p_config(data, "fraction")
    assert all("stage-1 query" in line for line in _problems(caught))


def test_safetab_pass_totals_against_the_ceiling() -> None:
    data = _safetab()  # US 4.944, PR 2.643
    data["privacy_budget_p_level_2_county"] = 7.5  # was 2.134... US: 10.31
    with pytest.raises(ConfigError) as caught:
        parse_safetab_p_config(data, "us")
    (problem,) = _problems(caught)
    assert "US pass (its tabulated levels' budgets summed): ρ" in problem
    assert "is above the largest total a pass may spend (ρ ≤ 10" in problem
    data["run_us"] = False  # a pass that is not run composes nothing
    assert "US" not in parse_safetab_p_config(data, "pr only").pass_totals()
    data = _safetab()
    data["privacy_budget_p_level_2_county"] = math.inf  # no noise: NOT-PRIVATE, not limited
    data["privacy_budget_p_level_1_county"] = 0  # not measured
    config = parse_safetab_p_config(data, "golden")
    assert math.isinf(config.pass_totals()["US"])


def test_safetab_pass_totals_are_what_the_planner_composes(tmp_path: Path) -> None:
    config, plan = plan_safetab_p_from_files(SAFETAB_DEMO)
    for pass_name, total in config.pass_totals().items():
        assert total == compose([m for m in plan if m.metadata["pass"] == pass_name])
    assert config.pass_totals() == {"US": Fraction("4.944"), "PR": Fraction("2.643")}


def test_phsafe_limits(tmp_path: Path) -> None:
    data = _phsafe()
    for levels in data["privacy_budget"].values():
        for key in levels:
            levels[key] = 1e300 if levels[key] else levels[key]
    with pytest.raises(ConfigError) as caught:
        parse_phsafe_config(data, "big")
    budgets = _phsafe()["privacy_budget"].values()
    measured = sum(1 for levels in budgets for value in levels.values() if value)
    problems = _problems(caught)
    assert len(problems) == measured  # one per query; the pass total adds nothing
    assert all("ρ 1e300 is above the largest total a pass may spend" in p for p in problems)

    data = _phsafe()
    data["privacy_budget"]["PH2"]["usa_*"] = 1e-300
    data["privacy_budget"]["PH3"]["state_A-G"] = 9.5
    with pytest.raises(ConfigError) as caught:
        parse_phsafe_config(data, "mixed")
    small, total = _problems(caught)
    assert "PH2.usa_*: ρ 1e-300 is below the smallest per-query budget (ρ ≥ 1e-9)" in small
    assert "the pass (its queries' budgets summed): ρ 10.09 is above" in total
    data["privacy_budget"]["PH9"] = {"usa_*": 1}  # other problems are reported beside them
    data["privacy_budget"]["PH4"]["usa_*"] = -1
    with pytest.raises(ConfigError) as caught:
        parse_phsafe_config(data, "mixed")
    problems = _problems(caught)
    assert len(problems) == 4
    assert any("unknown table 'PH9'" in line for line in problems)
    assert any("PH4.usa_*: must be >= 0" in line for line in problems)

    config = load_phsafe_config(PHSAFE_DEMO)
    assert config.pass_total() == compose(plan_phsafe(config)) == Fraction("1.257281")


def test_pure_dp_has_its_own_ceiling() -> None:
    data = _phsafe()
    data["privacy_defn"] = "puredp"
    for levels in data["privacy_budget"].values():
        for key in levels:
            levels[key] = 0.6 if levels[key] else 0  # 46 queries: ε 27.6 ≤ 30
    assert parse_phsafe_config(data, "ok").pass_total() == Fraction("27.6")
    data["privacy_budget"]["PH2"]["usa_*"] = 3  # ε 30 exactly: accepted
    parse_phsafe_config(data, "at the ceiling")
    data["privacy_budget"]["PH2"]["usa_*"] = 3.1
    with pytest.raises(ConfigError, match=r"ε 30.1 is above .*\(ε ≤ 30"):
        parse_phsafe_config(data, "over")


@pytest.mark.parametrize("number", ["1e400", "1e-400", "0.5E-330"])
def test_a_number_beyond_double_precision_is_not_read_as_infinity_or_zero(
    tmp_path: Path, number: str
) -> None:
    text = PHSAFE_DEMO.read_text().replace('"usa_*": 0.', f'"usa_*": {number}, "x": 0.', 1)
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"{number} is beyond double precision"):
        load_phsafe_config(path)
    path.write_text(text.replace(number, "0.0e-400"))  # a zero written small is zero
    with pytest.raises(ConfigError, match="unknown level 'x'") as refused:
        load_phsafe_config(path)  # (fails later, on the stray key: the number was read)
    assert "double precision" not in str(refused.value)


# ------------------------------------------------------------------------------ commands
def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


RHO_COMMANDS = {
    "convert": ["budget", "convert", "--rho"],
    "moe": ["budget", "moe", "--confidence", "0.95", "--sensitivity", "3", "--rho"],
    "suppression": [
        "budget", "suppression", "--stage1-fraction", "0.1", "--p", "0.9999",
        "--sensitivity", "3", "--rho",
    ],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(RHO_COMMANDS))
def test_budget_commands_refuse_absurd_rho(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = RHO_COMMANDS[command]
    big = _refused(capsys, [*argv, "1e300"])
    assert f"das budget {command}: error: --rho 1e300: ρ 1e300 is above" in big
    small = _refused(capsys, [*argv, "1e-300"])
    assert f"das budget {command}: error: --rho 1e-300: ρ 1e-300 is below" in small
    assert "abc" in _refused(capsys, [*argv, "abc"])
    assert main([*argv, "1"]) == 0  # within the limits
    capsys.readouterr()


def test_moe_refuses_the_budget_a_target_needs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["budget", "moe", "--confidence", "0.95", "--sensitivity", "3", "--moe"]
    assert "above the largest total a pass may spend" in _refused(capsys, [*argv, "1e-300"])
    assert "above the largest total a pass may spend" in _refused(capsys, [*argv, "0.001"])
    assert "below the smallest per-query budget" in _refused(capsys, [*argv, "1e300"])
    stage = ["budget", "moe", "--confidence", "0.95", "--sensitivity", "3"]
    refused = _refused(capsys, [*stage, "--stage-fraction", "0.5", "--rho", "1e-9"])
    assert "--rho 1e-9 × stage fraction 0.5: ρ 5e-10 is below" in refused
    refused = _refused(capsys, ["budget", "moe", "--confidence", "0.95", "--sensitivity",
                                "100000", "--rho", "1e-9"])  # fmt: skip
    assert "noise σ² would be 5e18, beyond what the exact sampler supports" in refused


def test_budget_report_refuses_an_absurd_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _phsafe()
    data["privacy_budget"]["PH3"]["state_A-G"] = 1e300
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    assert main(["budget", "report", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "PH3.state_A-G: ρ 1e300 is above the largest total" in err and "Traceback" not in err


@pytest.mark.parametrize(("budget", "fragment"), [("1e300", "above"), ("1e-300", "beyond")])
def test_audit_privacy_mechanism_refuses_absurd_budgets(
    budget: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["audit-privacy", "mechanism", "--mechanism", "discrete-gaussian", "--budget", budget]
    refused = _refused(capsys, [*argv, "--sensitivity", "3", "--trials", "1000"])
    assert fragment in refused
