"""`das ledger show [--ledger-dir DIR | --output OUT] [--dataset KEY] [--json]`: the recorded
privacy spend of every dataset, run by run, with the cumulative totals per pass.

The ledger is ``DAS_LEDGER_DIR`` (production), else the default a non-production run used: the
``.das-ledger`` folder beside its output (give ``--output OUT``), or ``--ledger-dir``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from das.cli.arguments import resolved_path

UNITS = {"zcdp": "rho (zCDP)", "puredp": "epsilon (pure DP)"}


def register(subparsers: argparse._SubParsersAction) -> None:
    ledger = subparsers.add_parser(
        "ledger", help="the privacy ledger: recorded spend per dataset", description=__doc__
    )
    commands = ledger.add_subparsers(dest="ledger_command", required=True)
    show = commands.add_parser("show", help="print the spend history and cumulative totals")
    where = show.add_mutually_exclusive_group()
    where.add_argument(
        "--ledger-dir", type=resolved_path, help="the ledger folder (default: DAS_LEDGER_DIR)"
    )
    where.add_argument(
        "--output",
        type=resolved_path,
        help="a release folder: use the ledger its run used by default",
    )
    show.add_argument("--dataset", help="only this dataset (its key, or a prefix of it)")
    show.add_argument("--json", action="store_true", help="one JSON object on stdout")
    show.set_defaults(handler=_show)


def _directory(args: argparse.Namespace) -> Path:
    from das.runs.policy import LEDGER_ENV, ledger_directory

    if args.ledger_dir is not None:
        return args.ledger_dir
    if args.output is not None:
        return ledger_directory(args.output)
    import os

    configured = os.environ.get(LEDGER_ENV)
    if not configured:
        raise ValueError(f"give --ledger-dir or --output, or set {LEDGER_ENV}")
    return Path(configured).expanduser().resolve()


def ledger_summary(directory: Path, dataset: str | None = None) -> dict[str, Any]:
    """Every dataset of the ledger: its runs (oldest first), events and cumulative totals."""
    from das.privacy.mechanisms import parse_fraction_text
    from das.runs.ledger import PrivacyLedger, decimal_text

    ledger = PrivacyLedger(directory)
    spends = [
        {
            **spend,
            "budget": decimal_text(parse_fraction_text(spend["budget"])),
            "cumulative": decimal_text(parse_fraction_text(spend["cumulative"])),
        }
        for spend in ledger.spends()
    ]
    keys = sorted({s["dataset"] for s in spends})
    if dataset is not None:
        keys = [key for key in keys if key.startswith(dataset)]
    datasets = []
    for key in keys:
        runs = [s for s in spends if s["dataset"] == key]
        datasets.append(
            {
                "dataset": key,
                "inputs": runs[-1]["inputs"],
                "cumulative": ledger.totals(key),
                "not_private_runs": sorted({r["run_id"] for r in runs if r["not_private"]}),
                "runs": runs,
                "events": ledger.events(key),
            }
        )
    return {"ledger": str(ledger.path), "datasets": datasets}


def _render(summary: dict[str, Any]) -> str:

    lines = [f"privacy ledger {summary['ledger']}"]
    if not summary["datasets"]:
        lines.append("  no recorded spend")
    for item in summary["datasets"]:
        files = ", ".join(f"{name} {digest[:12]}" for name, digest in item["inputs"].items())
        lines.append(f"\ndataset {item['dataset'][:16]}  ({files})")
        for pass_name, totals in item["cumulative"].items():
            shown = ", ".join(f"{UNITS[d]} {value}" for d, value in totals.items())
            lines.append(f"  cumulative, pass {pass_name}: {shown}")
        if item["not_private_runs"]:
            lines.append(
                "  NOT PRIVATE runs (seeded or infinite budget): "
                + ", ".join(item["not_private_runs"])
            )
        lines.append(
            f"  {'started':<25} {'run id':<38} {'product':<10} {'pass':<5} "
            f"{'budget':>12} {'cumulative':>12} {'status':<10} seed"
        )
        for run in item["runs"]:
            lines.append(
                f"  {run['started']:<25} {run['run_id']:<38} {run['product']:<10} "
                f"{run['pass']:<5} {run['budget']:>12} {run['cumulative']:>12} "
                f"{run['status']:<10} {run['seed_mode']}"
            )
        for event in item["events"]:
            lines.append(f"  event {event['at']} {event['kind']} run {event['run_id']}: "
                         f"{event['detail'].get('reason', event['detail'])}")  # fmt: skip
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    try:
        directory = _directory(args)
    except ValueError as exc:
        print(f"das ledger show: error: {exc}", file=sys.stderr)
        return 2
    summary = ledger_summary(directory, args.dataset)
    if args.json:
        print(json.dumps(summary, allow_nan=False))
    else:
        print(_render(summary))
    return 0
