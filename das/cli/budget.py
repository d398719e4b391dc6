"""`das budget ...`: the SafeTEx / PHExplore calculators and the budget report of a config.

A budget given on the command line (``--rho``), and the budget a target ``--moe`` asks for,
are held to the limits of :mod:`das.privacy.limits` like a config's: at most a pass's ceiling,
the measured stage's share at least the per-query floor, its noise within the exact samplers'
range. Anything refused or unreadable is one line on stderr and exit status 2.

Exit codes: 0 done, 2 refused or unreadable input (one line on stderr) or a usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.cli.arguments import resolved_path
from das.privacy.exact import to_fraction
from das.privacy.limits import (
    MAX_PASS_TOTAL,
    MIN_QUERY_BUDGET,
    BudgetLimitError,
    check_noise,
    check_query_budget,
    query_ceiling_problem,
    query_floor_problem,
    show,
)
from das.privacy.mechanisms import ZCDP
from das.specs.config import ConfigError

DEFAULT_DELTA = 1e-10
Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction) -> None:
    budget = subparsers.add_parser(
        "budget",
        help="privacy-budget calculators and reports",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = budget.add_subparsers(dest="budget_command", required=True)

    report = commands.add_parser(
        "report", help="every query of a SafeTab-P or PHSafe config, with totals"
    )
    report.add_argument(
        "--config", required=True, type=resolved_path, help="production config.json"
    )
    report.add_argument(
        "--specs",
        type=resolved_path,
        help="SafeTab-P parameters directory (default: the folder holding the config)",
    )
    report.add_argument("--delta", type=float, default=DEFAULT_DELTA, help="δ for (ε,δ)")
    report.add_argument("--json", action="store_true", help="one JSON object on stdout")
    report.set_defaults(handler=_report)

    convert = commands.add_parser("convert", help="ρ-zCDP to (ε,δ)-DP")
    convert.add_argument("--rho", required=True, help="the zCDP budget ρ to convert")
    convert.add_argument("--delta", type=float, default=DEFAULT_DELTA, help="δ for (ε,δ)")
    convert.add_argument("--json", action="store_true", help="one JSON object on stdout")
    convert.set_defaults(handler=_guarded(_convert))

    moe = commands.add_parser(
        "moe", help="budget for a target MOE (--moe), or the MOE of a budget (--rho)"
    )
    target = moe.add_mutually_exclusive_group(required=True)
    target.add_argument("--moe", type=float, help="target margin of error")
    target.add_argument("--rho", help="total ρ of the level (stage fraction applied)")
    moe.add_argument("--confidence", type=float, required=True, help="e.g. 0.95 or 0.90")
    moe.add_argument("--sensitivity", required=True, help="L2 sensitivity (3 for SafeTab-P)")
    moe.add_argument(
        "--stage-fraction", default="1", help="share of the total spent by the measured stage"
    )
    moe.add_argument("--json", action="store_true", help="one JSON object on stdout")
    moe.set_defaults(handler=_guarded(_moe))

    suppression = commands.add_parser("suppression", help="zero-suppression threshold T")
    suppression.add_argument("--rho", required=True, help="total ρ of the level")
    suppression.add_argument(
        "--stage1-fraction", required=True, help="share of the level's budget spent on stage 1"
    )
    suppression.add_argument(
        "--p", type=float, required=True, help="chance a true 0 is hidden (0: no suppression)"
    )
    suppression.add_argument(
        "--sensitivity", required=True, help="L2 sensitivity (3 for SafeTab-P)"
    )
    suppression.add_argument("--json", action="store_true", help="one JSON object on stdout")
    suppression.set_defaults(handler=_guarded(_suppression))

    swap = commands.add_parser("swap-epsilon", help="ε of permutation swapping (Theorem 5.6)")
    swap.add_argument("--b", type=int, required=True, help="largest stratum size")
    swap.add_argument("--rate", required=True, help="swap rate p in [0, 1]")
    swap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    swap.set_defaults(handler=_guarded(_swap_epsilon))


def _guarded(handler: Handler) -> Handler:
    """The calculator ``handler``, with bad or refused input as one line on stderr, exit 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ValueError, ArithmeticError, TypeError) as exc:
            print(f"das budget {args.budget_command}: error: {exc}", file=sys.stderr)
            return 2

    return run


def _level_rho(
    text: str, flag: str, share: Fraction = Fraction(1), sensitivity: Fraction | None = None
) -> Fraction:
    """The ρ of a level (or pass) from the command line, within :mod:`das.privacy.limits`:
    the total at most the ceiling, the measured stage (``share`` of it) at least the floor,
    and, given the sensitivity, its noise σ² = Δ²/(2·share·ρ) within the samplers' range."""
    rho = to_fraction(text, name=flag, positive=True)
    what = f"{flag} {text}"
    check_query_budget(ZCDP, rho, what)
    if share != 1:
        stage = f"{what} × stage fraction {show(share)}"
        problem = query_floor_problem(ZCDP, rho * share, stage)
        if problem is not None:
            raise BudgetLimitError(problem)
    if sensitivity is not None:
        check_noise(ZCDP, rho * share, sensitivity * sensitivity / (2 * rho * share), what)
    return rho


def _needed_rho(rho: float, rho_total: float, what: str) -> None:
    """Refuse the budget a target MOE needs when it lies outside the limits."""
    total = to_fraction(rho_total, name=what, allow_infinite=True)
    if isinstance(total, float):  # beyond a double
        ceiling = show(MAX_PASS_TOTAL[ZCDP])
        raise BudgetLimitError(
            f"{what}: ρ would be beyond double precision, above the largest total a pass may "
            f"spend (ρ ≤ {ceiling})"
        )
    stage = to_fraction(rho, name=what)
    if stage <= 0:  # underflowed
        floor = show(MIN_QUERY_BUDGET[ZCDP])
        raise BudgetLimitError(
            f"{what}: ρ would underflow to 0, below the smallest per-query budget (ρ ≥ {floor})"
        )
    problem = query_ceiling_problem(ZCDP, total, what) or query_floor_problem(ZCDP, stage, what)
    if problem is not None:
        raise BudgetLimitError(problem)


def _json_safe(value: Any) -> Any:
    """JSON has no Infinity: an infinite number becomes null (and `finite: false` beside it)."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _emit(args: argparse.Namespace, result: dict[str, Any], text: str) -> int:
    if args.json:
        print(json.dumps(_json_safe(result), allow_nan=False))
    else:
        print(text)
    return 0


def report_outputs(
    config: Path, specs: Path | None = None, delta: float = DEFAULT_DELTA
) -> tuple[str, str]:
    """What `das budget report` prints for ``config``, and what it prints with ``--json``: one
    place for both, so that a saved report (`das demo`) is byte for byte the command's."""
    from das.budget.config_report import budget_report, render_budget_report

    report = budget_report(config, specs_dir=specs, delta=delta)
    return render_budget_report(report), json.dumps(_json_safe(report), allow_nan=False)


def _report(args: argparse.Namespace) -> int:
    try:
        text, json_line = report_outputs(args.config, args.specs, args.delta)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json_line if args.json else text)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from das.privacy import conversions

    rho = _level_rho(args.rho, "--rho")
    result = {
        "epsilon_analytic": conversions.zcdp_to_approx_dp_analytic(rho, args.delta),
        "epsilon_optimal": conversions.zcdp_to_approx_dp_optimal(rho, args.delta),
    }
    text = (
        f"rho = {float(rho):g}, delta = {args.delta:g}\n"
        f"  epsilon (analytic, rho + 2 sqrt(rho ln 1/delta)) = {result['epsilon_analytic']:.4f}\n"
        f"  epsilon (optimal Renyi conversion)                = {result['epsilon_optimal']:.4f}"
    )
    return _emit(args, result, text)


def _moe(args: argparse.Namespace) -> int:
    from das.privacy import calculators

    sensitivity = to_fraction(args.sensitivity, name="--sensitivity", positive=True)
    fraction = to_fraction(args.stage_fraction, name="--stage-fraction", positive=True)
    if args.moe is not None:
        try:
            rho, rho_total = calculators.rho_for_moe(
                args.moe, args.confidence, sensitivity, stage_fraction=fraction
            )
        except ZeroDivisionError:  # MOE² underflows: the budget would be beyond any limit
            rho, rho_total = math.inf, math.inf
        _needed_rho(rho, rho_total, f"the budget for --moe {args.moe:g}")
        result = {"rho": float(rho), "rho_total": float(rho_total)}
        text = (
            f"MOE {args.moe:g} at {args.confidence:.0%} (L2 sensitivity {args.sensitivity}): "
            f"rho for the stage = {result['rho']:.6f}, total rho = {result['rho_total']:.6f}"
        )
    else:
        rho = _level_rho(args.rho, "--rho", fraction, sensitivity)
        moe = calculators.moe_for_rho(rho, args.confidence, sensitivity, stage_fraction=fraction)
        result = {"moe": float(moe)}
        text = f"rho {args.rho} at {args.confidence:.0%}: MOE = {result['moe']:.2f}"
    return _emit(args, result, text)


def _suppression(args: argparse.Namespace) -> int:
    from das.privacy import calculators

    gamma = to_fraction(args.stage1_fraction, name="--stage1-fraction", nonnegative=True)
    sensitivity = to_fraction(args.sensitivity, name="--sensitivity", positive=True)
    if gamma >= 1:
        raise ValueError(f"Invalid --stage1-fraction: {args.stage1_fraction} (need 0 <= f < 1)")
    rho = _level_rho(args.rho, "--rho", 1 - gamma, sensitivity)  # the stage-2 noise
    threshold = calculators.suppression_threshold(rho, gamma, args.p, sensitivity)
    if threshold is None:  # p = 0: every row is published
        return _emit(args, {"threshold": None}, "p = 0: no zero suppression (every row kept)")
    return _emit(args, {"threshold": int(threshold)}, f"suppression threshold T = {threshold}")


def _swap_epsilon(args: argparse.Namespace) -> int:
    from das.privacy import calculators

    epsilon = float(calculators.swap_epsilon(args.b, to_fraction(args.rate)))
    finite = not math.isinf(epsilon)
    result = {"epsilon": epsilon, "finite": finite}
    text = f"b = {args.b}, p = {args.rate}: epsilon = " + (
        f"{epsilon:.4f}" if finite else "infinite (p in {0, 1} is not differentially private)"
    )
    return _emit(args, result, text)
