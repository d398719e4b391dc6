"""`das ledger init|approve|show|verify`: the privacy ledger, the system of record of every spend.

  das ledger init    [--ledger DIR | --url URL] [--max-rho X] [--max-epsilon Y]
  das ledger approve --product P --config CONFIG --data DIR [--note TEXT] [--ledger DIR | --url URL]
  das ledger show    [--ledger DIR | --url URL | --output OUT] [--dataset ID] [--json]
  das ledger verify  [--ledger DIR | --url URL] [--release OUT ...] [--no-prefect] [--json]

The ledger is ``--ledger DIR`` (a folder holding ``ledger.sqlite``), ``--url`` (a SQLAlchemy
URL, e.g. PostgreSQL), else ``DAS_LEDGER_URL`` / ``DAS_LEDGER_DIR``, else (outside production)
the per-user default. ``init`` creates it once (production never creates one implicitly), with
ceilings per pass at most ρ 10 (zCDP) and ε 30 (pure DP). ``approve`` records a person's
decision to spend a config's per-pass totals on one dataset (its records are read once to
fingerprint them); in production no run draws without one. ``verify`` checks the hash chain,
that the ledger holds every head the Prefect server recorded for it (the server of
PREFECT_API_URL, else the local one `das run` uses; ``--no-prefect`` skips this and says so),
and, for each ``--release``, that the release is what the ledger recorded. Exit codes: 0 done /
intact, 1 verification found problems, 2 refused or usage error, 3 the Prefect server could not
be asked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.cli.arguments import resolved_path

UNITS = {"zcdp": "rho (zCDP)", "puredp": "epsilon (pure DP)"}
EXIT_OK, EXIT_PROBLEMS, EXIT_REFUSED = 0, 1, 2
APPROVAL_FIELDS = ("approval_id", "product", "config_sha256", "by", "note", "via", "at", "used_by")


def register(subparsers: argparse._SubParsersAction) -> None:
    ledger = subparsers.add_parser(
        "ledger",
        help="the privacy ledger: init, approve spend, show, verify",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = ledger.add_subparsers(dest="ledger_command", required=True)

    init = commands.add_parser("init", help="create a ledger (once)")
    _where(init)
    init.add_argument("--max-rho", help="ceiling per pass under zCDP (default and maximum 10)")
    init.add_argument(
        "--max-epsilon", help="ceiling per pass under pure DP (default and maximum 30)"
    )
    init.set_defaults(handler=_reporting_faults(_init))

    approve = commands.add_parser(
        "approve", help="approve a config's per-pass spend on one dataset"
    )
    _where(approve)
    approve.add_argument("--product", required=True, choices=("safetab-p", "phsafe"))
    approve.add_argument("--config", required=True, type=resolved_path, help="config.json")
    approve.add_argument(
        "--data", required=True, type=resolved_path, help="the folder of the records to spend on"
    )
    approve.add_argument("--note", default="", help="why (recorded with the approval)")
    approve.add_argument("--json", action="store_true", help="one JSON object on stdout")
    approve.set_defaults(handler=_reporting_faults(_approve))

    show = commands.add_parser("show", help="print runs, spend, approvals and totals")
    where = _where(show)
    where.add_argument(
        "--output", type=resolved_path, help="a release folder: the ledger its run used"
    )
    show.add_argument("--dataset", help="only this dataset (its id, or a prefix of it)")
    show.add_argument("--json", action="store_true", help="one JSON object on stdout")
    show.set_defaults(handler=_reporting_faults(_show))

    verify = commands.add_parser("verify", help="check the chain and releases against it")
    _where(verify)
    verify.add_argument(
        "--release", type=resolved_path, action="append", default=[], help="a release folder"
    )
    verify.add_argument(
        "--no-prefect",
        action="store_true",
        help="do not check the ledger against the heads the Prefect server recorded",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object on stdout")
    verify.set_defaults(handler=_reporting_faults(_verify))


def _reporting_faults(handler: Any) -> Any:
    """``handler`` with a ledger it cannot reach said in one line (exit 3), and a ledger
    setting it refuses (both DAS_LEDGER_URL and DAS_LEDGER_DIR, a malformed URL) exit 2."""

    def run(args: argparse.Namespace) -> int:
        from das.runs.faults import EXIT_INFRASTRUCTURE
        from das.runs.ledger import LedgerUnavailable
        from das.runs.policy import RunRefused

        try:
            return int(handler(args))
        except LedgerUnavailable as exc:
            return _fail(args.ledger_command, str(exc), EXIT_INFRASTRUCTURE)
        except RunRefused as exc:
            return _fail(args.ledger_command, str(exc))

    return run


def _where(parser: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--ledger", type=resolved_path, help="ledger folder (default: DAS_LEDGER_DIR)"
    )
    group.add_argument("--url", help="ledger database URL (default: DAS_LEDGER_URL)")
    return group


def _store(args: argparse.Namespace) -> Any:
    from das.runs.ledger import LedgerStore, ledger_store

    if getattr(args, "ledger", None) is not None:
        return LedgerStore.in_directory(args.ledger)
    if getattr(args, "url", None):
        from das.runs.ledger import configured_store
        from das.runs.ledger.location import LEDGER_PASSWORD_FILE_ENV, url_without_password

        # The password, if any, from DAS_LEDGER_PASSWORD_FILE: never on the command line.
        url = url_without_password(args.url, "--url")
        secret = os.environ.get(LEDGER_PASSWORD_FILE_ENV, "")
        return configured_store({"DAS_LEDGER_URL": url, LEDGER_PASSWORD_FILE_ENV: secret})
    output = getattr(args, "output", None)
    if output is not None:
        return _store_of_release(output)
    return ledger_store()


def _store_of_release(output: Path) -> Any:
    """The ledger a release's run used, from its audit (release folder or run folders)."""
    from das.runs.folder import work_dir_of
    from das.runs.ledger import LedgerStore

    audits = [output / "audit.json", *sorted(work_dir_of(output).glob("runs/*/audit.json"))]
    for path in audits:
        try:
            location = json.loads(path.read_text())["privacy_ledger"]["ledger"]
        except (OSError, KeyError, TypeError, json.JSONDecodeError):
            continue
        if location.endswith(".sqlite"):
            return LedgerStore.in_directory(Path(location).parent)
        raise ValueError(f"{output} used the ledger {location}: pass it with --url")
    raise ValueError(f"{output}: no audit names the ledger its run used")


def _fail(command: str, message: str, code: int = EXIT_REFUSED) -> int:
    print(f"das ledger {command}: {message}", file=sys.stderr)
    return code


def _init(args: argparse.Namespace) -> int:
    from das.runs.ledger import PrivacyLedger, decimal_text
    from das.runs.policy import RunRefused

    ceilings = {}
    try:
        for definition, text in (("zcdp", args.max_rho), ("puredp", args.max_epsilon)):
            if text is not None:
                ceilings[definition] = Fraction(text)
        store = _store(args)
        ledger = PrivacyLedger.initialize(store, ceilings)
        info = ledger.info()
    except (ValueError, ZeroDivisionError, RunRefused) as exc:
        return _fail("init", str(exc))
    shown = ", ".join(f"{UNITS[d]} {decimal_text(v)}" for d, v in sorted(info.ceilings.items()))
    print(f"created privacy ledger {info.ledger_id} at {info.location}")
    print(f"ceilings per pass of a dataset: {shown}")
    print(f"in production (das run, deployments): DAS_LEDGER_ID={info.ledger_id} pins this ledger")
    return EXIT_OK


def _records_fingerprint(product: str, data: Path) -> str:
    """The canonical fingerprint of the dataset's confidential records (one read of each)."""
    from das.io.fingerprint import combine_fingerprints, fingerprint_file

    if product == "safetab-p":
        from das.io.safetab_p import PERSON_RECORDS as spec
        from das.safetab_p.parameters import run_inputs

        specs = {spec.name: spec}
        inputs = run_inputs(Path("config.json"), data)
    else:
        from das.io.phsafe import PHSAFE_INPUTS
        from das.phsafe.parameters import run_inputs

        specs = {spec.name: spec for spec in PHSAFE_INPUTS}
        inputs = run_inputs(Path("config.json"), data)
    from das.runs.start import check_inputs_regular

    check_inputs_regular(inputs)  # a FIFO or device is refused by name, never opened
    missing = sorted(set(specs) - set(inputs.confidential))
    if missing:
        raise ValueError(f"{data}: no {', '.join(missing)} input (.txt/.csv or .parquet)")
    return combine_fingerprints(
        {name: fingerprint_file(inputs.confidential[name], spec) for name, spec in specs.items()}
    )


def approve_spend(
    ledger: Any, product: str, config: Path, data: Path, note: str, by: str | None = None
) -> dict[str, Any]:
    """Record the approval of ``config``'s per-pass totals on the records in ``data`` (read
    once to fingerprint them); the approval. Refusals are :class:`RunRefused`."""
    if product == "safetab-p":
        from das.safetab_p.parameters import parse_parameters, run_inputs
    else:
        from das.phsafe.parameters import parse_parameters, run_inputs
    from das.runs.seal import seal_files

    sealed = seal_files(run_inputs(config, data).parameters)
    plan = parse_parameters(sealed).run_plan()
    ledger.require_intact()
    dataset = ledger.dataset_id(_records_fingerprint(product, data))
    return ledger.approve(
        product=product,
        dataset=dataset,
        config_sha256=sealed.sha256("config.json"),
        definition=plan.definition,
        budgets=plan.pass_totals(),
        note=note,
        by=by,
    )


def _approve(args: argparse.Namespace) -> int:
    from das.io.tables import InputFormatError
    from das.runs.ledger import PrivacyLedger, decimal_text
    from das.runs.policy import RunRefused

    try:
        ledger = PrivacyLedger(_store(args))
        approval = approve_spend(ledger, args.product, args.config, args.data, args.note)
    except (RunRefused, ValueError, InputFormatError, OSError) as exc:
        return _fail("approve", str(exc))
    if args.json:
        print(json.dumps(approval))
        return EXIT_OK
    unit = UNITS[approval["definition"]]
    print(
        f"approved {approval['approval_id']}: {args.product} config "
        f"{approval['config_sha256'][:12]} on dataset {approval['dataset'][:16]} by "
        f"{approval['by']}"
    )
    for name, item in approval["passes"].items():
        print(
            f"  pass {name}: earlier {decimal_text(Fraction(item['prior']))} + this run "
            f"{decimal_text(Fraction(item['this_run']))} = cumulative "
            f"{decimal_text(Fraction(item['cumulative']))} {unit} (ceiling "
            f"{decimal_text(Fraction(approval['ceiling']))})"
        )
    print("one run of this config on these records may now spend it")
    return EXIT_OK


def ledger_summary(ledger: Any, dataset: str | None = None) -> dict[str, Any]:
    """Every dataset of the ledger: its runs (oldest first), approvals and cumulative totals."""
    from das.runs.ledger import decimal_text

    info = ledger.info()
    runs = ledger.runs()
    approvals = ledger.approvals()
    keys = sorted({r.dataset for r in runs if r.dataset} | {a["dataset"] for a in approvals})
    if dataset is not None:
        keys = [key for key in keys if key.startswith(dataset)]
    datasets = []
    for key in keys:
        mine = [r for r in runs if r.dataset == key]
        datasets.append(
            {
                "dataset": key,
                "cumulative": ledger.totals(key),
                "not_private_runs": sorted({r.run_id for r in mine if r.not_private}),
                "runs": [
                    {
                        "run_id": r.run_id,
                        "product": r.product,
                        "status": r.status,
                        "opened": r.opened,
                        "attempts": r.attempt,
                        "seed_mode": r.binding["seed_mode"],
                        "markers": list(r.markers),
                        "approval": r.approval,
                        "output": r.output,
                        "draws": len(r.draws),
                        "passes": [p.to_dict() for p in r.passes],
                    }
                    for r in mine
                ],
                "approvals": [
                    {key_: a[key_] for key_ in APPROVAL_FIELDS}
                    | {
                        "passes": {
                            n: {k: decimal_text(Fraction(v)) for k, v in p.items()}
                            for n, p in a["passes"].items()
                        }
                    }
                    for a in approvals
                    if a["dataset"] == key
                ],
            }
        )
    unbound = [
        {"run_id": r.run_id, "product": r.product, "status": r.status, "output": r.output}
        for r in runs
        if r.dataset is None
    ]
    return {
        "ledger": info.location,
        "ledger_id": info.ledger_id,
        "head": info.head(),
        "ceilings": {d: decimal_text(v) for d, v in info.ceilings.items()},
        "datasets": datasets,
        "runs_without_dataset": unbound,
    }


def _render(summary: dict[str, Any]) -> str:
    ceilings = ", ".join(f"{UNITS[d]} {v}" for d, v in sorted(summary["ceilings"].items()))
    lines = [
        f"privacy ledger {summary['ledger_id']} at {summary['ledger']} "
        f"(head entry {summary['head']['seq']}; ceilings per pass: {ceilings})"
    ]
    if not summary["datasets"]:
        lines.append("  no recorded spend")
    for item in summary["datasets"]:
        lines.append(f"\ndataset {item['dataset'][:16]}")
        for pass_name, totals in item["cumulative"].items():
            shown = ", ".join(f"{UNITS[d]} {value}" for d, value in totals.items())
            lines.append(f"  cumulative, pass {pass_name}: {shown}")
        if item["not_private_runs"]:
            lines.append(
                "  NOT PRIVATE runs (seeded or infinite budget): "
                + ", ".join(item["not_private_runs"])
            )
        for run in item["runs"]:
            spend = ", ".join(
                f"{p['pass']} {p['this_run']} (cumulative {p['cumulative']})" for p in run["passes"]
            )
            lines.append(
                f"  run {run['run_id']} {run['product']} {run['status']:<10} {spend}; "
                f"{run['draws']} draws; {run['seed_mode']}; opened {run['opened'][:19]}"
            )
        for approval in item["approvals"]:
            used = f"used by run {approval['used_by']}" if approval["used_by"] else "open"
            passes = ", ".join(
                f"{n} {p['this_run']} → {p['cumulative']}" for n, p in approval["passes"].items()
            )
            lines.append(
                f"  approval {approval['approval_id']} by {approval['by']} at "
                f"{approval['at'][:19]} ({approval['via']}): {passes}; {used}"
                + (f" — {approval['note']}" if approval["note"] else "")
            )
    if summary["runs_without_dataset"]:
        lines.append("\nruns stopped before their records were bound to a dataset:")
        for run in summary["runs_without_dataset"]:
            lines.append(f"  run {run['run_id']} {run['product']} {run['status']}")
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    from das.runs.ledger import PrivacyLedger
    from das.runs.policy import RunRefused

    try:
        ledger = PrivacyLedger(_store(args))
        summary = ledger_summary(ledger, args.dataset)
    except (ValueError, RunRefused) as exc:
        return _fail("show", str(exc))
    print(json.dumps(summary, allow_nan=False) if args.json else _render(summary))
    return EXIT_OK


def _witnessed(ledger: Any, info: Any) -> dict[str, Any]:
    """The Prefect server's heads of this ledger, checked (:mod:`tasks.ledger_witness`)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    try:
        from tasks.ledger_witness import witnessed_problems

        problems, others, heads = witnessed_problems(ledger, info)
    except Exception as exc:  # the server is unreachable or refuses us: say so, fail closed
        where = os.environ.get("PREFECT_API_URL") or "the local temporary Prefect server"
        reason = (str(exc).splitlines() or [""])[0]
        return {"checked": False, "reason": f"{where}: {type(exc).__name__}: {reason}"}
    return {"checked": True, "heads": heads, "problems": problems, "other_ledgers_here": others}


def _verify(args: argparse.Namespace) -> int:
    from das.runs.faults import EXIT_INFRASTRUCTURE
    from das.runs.ledger import PrivacyLedger
    from das.runs.ledger.verify import release_problems
    from das.runs.policy import RunRefused

    try:
        ledger = PrivacyLedger(_store(args))
        info = ledger.info()
    except (ValueError, RunRefused) as exc:
        return _fail("verify", str(exc))
    result: dict[str, Any] = {
        "ledger": info.location,
        "ledger_id": info.ledger_id,
        "head": info.head(),
        "chain": ledger.verify(),
        "prefect": None if args.no_prefect else _witnessed(ledger, info),
        "releases": {str(r): release_problems(ledger, info, r) for r in args.release},
    }
    witness = result["prefect"] or {}
    ok = (
        not result["chain"] and not witness.get("problems") and not any(result["releases"].values())
    )
    result["ok"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"privacy ledger {info.ledger_id} at {info.location}: {info.head_seq} entries, chain "
            + ("intact" if not result["chain"] else "BROKEN")
        )
        for problem in result["chain"]:
            print(f"  - {problem}")
        if result["prefect"] is None:
            print("Prefect server: not asked (--no-prefect): a ledger cut back or restored from "
                  "an old copy is not detected without it")  # fmt: skip
        elif not witness["checked"]:
            print(f"Prefect server: COULD NOT BE ASKED: {witness['reason']}")
        else:
            verdict = "not the ledger the Prefect server saw" if witness["problems"] else (
                f"the ledger holds all {witness['heads']} head(s) it recorded")  # fmt: skip
            where = os.environ.get("PREFECT_API_URL") or "the local temporary server"
            print(f"Prefect server ({where}): {verdict}")
            for problem in witness["problems"]:
                print(f"  - {problem}")
            if witness["other_ledgers_here"]:
                print("  note: the server saw other ledgers at this location before: "
                      + ", ".join(witness["other_ledgers_here"]))  # fmt: skip
        for release, problems in result["releases"].items():
            print(f"release {release}: " + ("as recorded" if not problems else "DOES NOT MATCH"))
            for problem in problems:
                print(f"  - {problem}")
    if ok and result["prefect"] is not None and not witness["checked"]:
        return EXIT_INFRASTRUCTURE
    return EXIT_OK if ok else EXIT_PROBLEMS
