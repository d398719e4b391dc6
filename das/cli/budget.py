"""`das budget ...`: the SafeTEx / PHExplore calculators and the budget report of a config."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from das.budget.report import budget_report, render_budget_report
from das.cli.arguments import resolved_path
from das.privacy import calculators, conversions
from das.privacy.exact import to_fraction
from das.specs.config import ConfigError

DEFAULT_DELTA = 1e-10


def register(subparsers: argparse._SubParsersAction) -> None:
    budget = subparsers.add_parser("budget", help="privacy-budget calculators and reports")
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
    convert.add_argument("--rho", required=True)
    convert.add_argument("--delta", type=float, default=DEFAULT_DELTA)
    convert.add_argument("--json", action="store_true")
    convert.set_defaults(handler=_convert)

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
    moe.add_argument("--json", action="store_true")
    moe.set_defaults(handler=_moe)

    suppression = commands.add_parser("suppression", help="zero-suppression threshold T")
    suppression.add_argument("--rho", required=True, help="total ρ of the level")
    suppression.add_argument("--stage1-fraction", required=True)
    suppression.add_argument(
        "--p", type=float, required=True, help="chance a true 0 is hidden (0: no suppression)"
    )
    suppression.add_argument(
        "--sensitivity", required=True, help="L2 sensitivity (3 for SafeTab-P)"
    )
    suppression.add_argument("--json", action="store_true")
    suppression.set_defaults(handler=_suppression)

    swap = commands.add_parser("swap-epsilon", help="ε of permutation swapping (Theorem 5.6)")
    swap.add_argument("--b", type=int, required=True, help="largest stratum size")
    swap.add_argument("--rate", required=True, help="swap rate p in [0, 1]")
    swap.add_argument("--json", action="store_true")
    swap.set_defaults(handler=_swap_epsilon)


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


def _report(args: argparse.Namespace) -> int:
    try:
        report = budget_report(args.config, specs_dir=args.specs, delta=args.delta)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _emit(args, report, render_budget_report(report))


def _convert(args: argparse.Namespace) -> int:
    rho = to_fraction(args.rho)
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
    sensitivity = to_fraction(args.sensitivity)
    fraction = to_fraction(args.stage_fraction)
    if args.moe is not None:
        rho, rho_total = calculators.rho_for_moe(
            args.moe, args.confidence, sensitivity, stage_fraction=fraction
        )
        result = {"rho": float(rho), "rho_total": float(rho_total)}
        text = (
            f"MOE {args.moe:g} at {args.confidence:.0%} (L2 sensitivity {args.sensitivity}): "
            f"rho for the stage = {result['rho']:.6f}, total rho = {result['rho_total']:.6f}"
        )
    else:
        moe = calculators.moe_for_rho(
            to_fraction(args.rho), args.confidence, sensitivity, stage_fraction=fraction
        )
        result = {"moe": float(moe)}
        text = f"rho {args.rho} at {args.confidence:.0%}: MOE = {result['moe']:.2f}"
    return _emit(args, result, text)


def _suppression(args: argparse.Namespace) -> int:
    threshold = calculators.suppression_threshold(
        to_fraction(args.rho),
        to_fraction(args.stage1_fraction),
        args.p,
        to_fraction(args.sensitivity),
    )
    if threshold is None:  # p = 0: every row is published
        return _emit(args, {"threshold": None}, "p = 0: no zero suppression (every row kept)")
    return _emit(args, {"threshold": int(threshold)}, f"suppression threshold T = {threshold}")


def _swap_epsilon(args: argparse.Namespace) -> int:
    epsilon = float(calculators.swap_epsilon(args.b, to_fraction(args.rate)))
    finite = not math.isinf(epsilon)
    result = {"epsilon": epsilon, "finite": finite}
    text = f"b = {args.b}, p = {args.rate}: epsilon = " + (
        f"{epsilon:.4f}" if finite else "infinite (p in {0, 1} is not differentially private)"
    )
    return _emit(args, result, text)
