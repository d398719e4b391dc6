"""`das runs clean`: remove the run state the privacy ledger no longer needs.

  das runs clean [--state DIR] [--ledger DIR | --url URL] [--older-than DAYS] [--dry-run] [--json]

Run folders live under the state root (``--state``, else DAS_STATE_DIR, else
``${XDG_STATE_HOME:-~/.local/state}/das``). For each, the ledger decides: a run that never drew
loses its copies of the records, noise and parameters; a published run loses its noise and work
files; a run that holds its spend but never published keeps everything (a resume reuses its
draws); a run the ledger does not know is left alone. Run logs, audits and validation reports
always stay. Exit codes: 0 done, 2 refused (no ledger), 3 the ledger could not be reached.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from das.cli.arguments import resolved_path


def register(subparsers: argparse._SubParsersAction) -> None:
    runs = subparsers.add_parser(
        "runs",
        help="run state: clean what the ledger no longer needs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = runs.add_subparsers(dest="runs_command", required=True)
    clean = commands.add_parser("clean", help="remove run state no resume needs")
    clean.add_argument("--state", type=resolved_path, help="the state root (DAS_STATE_DIR)")
    where = clean.add_mutually_exclusive_group()
    where.add_argument("--ledger", type=resolved_path, help="ledger folder (DAS_LEDGER_DIR)")
    where.add_argument("--url", help="ledger database URL (DAS_LEDGER_URL)")
    clean.add_argument(
        "--older-than", type=float, default=0, metavar="DAYS", help="only folders idle this long"
    )
    clean.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    clean.add_argument("--json", action="store_true", help="one JSON object on stdout")
    clean.set_defaults(handler=_clean, ledger_command="runs clean")


def _clean(args: argparse.Namespace) -> int:
    from das.cli.ledger import _reporting_faults, _store
    from das.runs.cleanup import clean_runs, summary
    from das.runs.folder import state_root
    from das.runs.ledger import PrivacyLedger

    def run(args: argparse.Namespace) -> int:
        ledger = PrivacyLedger(_store(args))
        ledger.require_intact()
        root = args.state or state_root()
        results = clean_runs(root, ledger, older_than_days=args.older_than, dry_run=args.dry_run)
        if args.json:
            print(json.dumps({"state": str(root), "dry_run": args.dry_run,
                              "runs": [asdict(r) for r in results]}))  # fmt: skip
            return 0
        verb = "would remove" if args.dry_run else "removed"
        for item in results:
            what = f"{verb} {', '.join(item.removed)}" if item.removed else item.action
            print(f"run {item.run_id} ({item.status}): {what} — {item.why}")
        print(("dry run: " if args.dry_run else "") + summary(results) + f" under {root}")
        return 0

    return int(_reporting_faults(run)(args))
