"""`das runs`: the runs on the Prefect server by what happened to them, and run state clean-up.

  das runs list  [--limit N] [--all] [--json]
  das runs clean [--state DIR] [--ledger DIR | --url URL] [--older-than DAYS] [--dry-run] [--json]

``list`` shows the flow runs of the server PREFECT_API_URL names (the auth string from
DAS_PREFECT_AUTH_FILE) by their state's *name* — where Prefect's own `prefect flow-run ls`
prints the state's type (a refusal is a Cancelled-type state and would read CANCELLED) — what
needs a person first: runs waiting for their approvers (Suspended), Crashed runs, then the
week's Refused and Failed ones; then runs under way, runs that ended, and future scheduled runs
last. The approvals sweep's completed runs (every few minutes) are left out unless ``--all``.
Exit 3 when the server cannot be reached.

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
from typing import Any

from das.cli.arguments import resolved_path


def register(subparsers: argparse._SubParsersAction) -> None:
    runs = subparsers.add_parser(
        "runs",
        help="run state: clean what the ledger no longer needs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = runs.add_subparsers(dest="runs_command", required=True)
    listing = commands.add_parser("list", help="recent flow runs by state name (Refused...)")
    listing.add_argument("--limit", type=int, default=20, help="how many (newest first)")
    listing.add_argument("--json", action="store_true", help="one JSON object on stdout")
    listing.add_argument(
        "--all", action="store_true", help="the approvals sweep's completed runs too"
    )
    listing.set_defaults(handler=_list)
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
    from das.runs.cleanup import STATUS_WORDS, clean_runs, summary
    from das.runs.folder import state_root
    from das.trust import PrivacyLedger

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
            print(f"run {item.run_id} ({STATUS_WORDS.get(item.status, item.status)}): {what} "
                  f"— {item.why}")  # fmt: skip
        print(("dry run: " if args.dry_run else "") + summary(results) + f" under {root}")
        return 0

    return int(_reporting_faults(run)(args))


# What a person must look at first (`das runs list` orders by it): a run waiting for its
# approvers, a run whose process is gone (it holds its spend until resumed), a refusal, a
# failure; then runs under way, runs that ended, and future scheduled runs last.
NEEDS_A_PERSON = {"Paused": 0, "Suspended": 0, "Crashed": 1, "Refused": 2, "Failed": 3}
UNDER_WAY = {"RUNNING", "PENDING", "CANCELLING", "PAUSED"}
SWEEP = "approval-sweep"  # flows/approval_sweep.py


def listing_rank(row: dict[str, Any], now: str) -> tuple[int, float]:
    """Where ``row`` goes in `das runs list`: by what it needs, newest first within each kind,
    future scheduled runs last and soonest first (``now``: ISO time)."""
    start = row.get("start") or row.get("expected") or ""
    newest_first = -_epoch(start) if start else 0.0
    if row["type"] == "SCHEDULED" and (row.get("expected") or "") >= now:
        return 6, _epoch(row.get("expected") or now)
    if row["state"] in NEEDS_A_PERSON:
        return NEEDS_A_PERSON[row["state"]], newest_first
    if row["type"] in UNDER_WAY or row["type"] == "SCHEDULED":
        return 4, newest_first
    return 5, newest_first


def _epoch(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text).timestamp()


def state_label(row: dict[str, Any]) -> str:
    """The state as `das runs list` prints it: its name, what it waits for, and for a run
    that ended without a release, why (a Refused run is no Cancelled one: it says so)."""
    name = row["state"]
    if row["type"] == "PAUSED":
        waiting = "awaiting-approval" in row["tags"]
        return f"{name} (waiting for approvers)" if waiting else name
    if name == "Refused":
        return "Refused (nothing drawn)"
    if name == "Cancelled":
        return "Cancelled (by a person)"
    return name


def _list(args: argparse.Namespace) -> int:
    import datetime as dt
    import sys

    from das.offline import configure_offline
    from das.runs.faults import EXIT_INFRASTRUCTURE

    configure_offline()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterStartTime,
        FlowRunFilterState,
        FlowRunFilterStateName,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        print("das runs list: error: PREFECT_API_URL is not set (the server whose runs to list)",
              file=sys.stderr)  # fmt: skip
        return 2

    def of_state(**state: Any) -> FlowRunFilter:
        return FlowRunFilter(state=FlowRunFilterState(**state))

    now = dt.datetime.now(dt.UTC)
    week = FlowRunFilterStartTime(after_=now - dt.timedelta(days=7))
    try:
        with get_client(sync_client=True) as client:
            found = {}
            for query in (
                # what needs a person first, whatever came after it (a week of refusals)
                (of_state(type=FlowRunFilterStateType(any_=[StateType.PAUSED,
                                                             StateType.CRASHED])),
                 FlowRunSort.START_TIME_DESC),
                (FlowRunFilter(start_time=week, state=FlowRunFilterState(
                    name=FlowRunFilterStateName(any_=["Refused", "Failed"]))),
                 FlowRunSort.START_TIME_DESC),
                (of_state(type=FlowRunFilterStateType(not_any_=[StateType.SCHEDULED])),
                 FlowRunSort.START_TIME_DESC),
                (of_state(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                 FlowRunSort.EXPECTED_START_TIME_ASC),
            ):  # fmt: skip
                for run in client.read_flow_runs(
                    flow_run_filter=query[0], sort=query[1], limit=args.limit
                ):
                    found.setdefault(run.id, run)
            names = {f.id: f.name for f in client.read_flows()}
    except Exception as exc:  # the server is down or refuses us: one line
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"das runs list: the Prefect server could not be asked: {reason}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    rows = [
        {
            "id": str(run.id),
            "flow": names.get(run.flow_id, ""),
            "name": run.name,
            "state": run.state.name if run.state else "",
            "type": run.state.type.value if run.state else "",
            "tags": list(run.tags or []),
            "start": run.start_time.isoformat(timespec="seconds") if run.start_time else None,
            "expected": run.expected_start_time.isoformat(timespec="seconds")
            if run.expected_start_time
            else None,
            "message": (run.state.message or "")[:200] if run.state else "",
        }
        for run in found.values()
    ]
    if not args.all:  # every few minutes, and its log says what it did: not news
        rows = [r for r in rows if not (r["flow"] == SWEEP and r["type"] == "COMPLETED")]
    stamp = now.isoformat(timespec="seconds")
    rows = sorted(rows, key=lambda row: listing_rank(row, stamp))[: args.limit]
    if args.json:
        print(json.dumps({"runs": rows}))
        return 0
    for row in rows:
        when = row["start"] or (f"scheduled {row['expected']}" if row["expected"] else "")
        print(f"{row['id']}  {row['flow']:<14} {state_label(row):<38} "
              f"{when:<35} {row['name']}")  # fmt: skip
    return 0
