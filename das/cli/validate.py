"""`das validate {safetab-p|phsafe} --config FILE --data DIR [--report DIR]`.

Exit codes: 0 valid, 1 not valid (or validation could not finish: it fails closed), 2 usage
error (bad arguments, missing config file or data folder; nothing is written then).

Whatever the verdict, the report folder (``--report``, default ``<data>/validation/``) receives
``report.json``, ``report.html``, Great Expectations Data Docs (``data_docs/index.html``) and
``validation.log``. The report files quote the inputs' own values (for the curator, kept with
the confidential data); stdout gets a short summary with file, column, check, counts and row
numbers only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from das.cli.arguments import positive_int, resolved_path
from das.products import release_product
from das.runs.verdicts import record_verdict
from das.validation.runner import DEFAULT_SAMPLE_ROWS, REPORT_SUBDIR

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    validate = subparsers.add_parser(
        "validate",
        help="check inputs before a run (exit 0 valid, 1 not valid, 2 usage error)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    products = validate.add_subparsers(dest="validate_product", required=True)
    helps = {
        "safetab-p": "config.json with the four spec files beside it; --data holds "
        "person-records and GRF-C (.txt or .parquet)",
        "phsafe": "PHSafe config.json; --data holds persons, units, geo (.csv or .parquet)",
    }
    for product, text in helps.items():
        parser = products.add_parser(product, help=text, description=text)
        parser.add_argument(
            "--config", required=True, type=resolved_path, help="the run's config.json"
        )
        parser.add_argument(
            "--data", required=True, type=resolved_path, help="folder of input files"
        )
        parser.add_argument(
            "--report",
            type=resolved_path,
            default=None,
            help=f"report folder (default: <data>/{REPORT_SUBDIR}/)",
        )
        parser.add_argument(
            "--gx-sample-rows",
            type=positive_int,
            default=DEFAULT_SAMPLE_ROWS,
            help="largest file Great Expectations validates whole; bigger files get a "
            "systematic sample (the engine always checks every row)",
        )
        parser.set_defaults(handler=_handler, product=product)


def _handler(args: argparse.Namespace) -> int:
    if not args.config.is_file():
        print(f"das validate: error: config file not found: {args.config}", file=sys.stderr)
        return EXIT_USAGE
    if not args.data.is_dir():
        print(f"das validate: error: data folder not found: {args.data}", file=sys.stderr)
        return EXIT_USAGE
    report_dir = args.report if args.report is not None else args.data / REPORT_SUBDIR
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"das validate: error: cannot create report folder: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from das.validation import validate_phsafe, validate_safetab_p

    validate = validate_safetab_p if args.product == "safetab-p" else validate_phsafe
    report = validate(args.config, args.data, report_dir, sample_rows=args.gx_sample_rows)
    print("\n".join(report.summary_lines()))
    warning = _not_private_warning(args.product, args.config, args.data)
    if warning:
        print(warning)
    recorded = record_verdict(
        args.product, release_product(args.product).confidential, args.config, report
    )
    if recorded:
        print(recorded)
    return EXIT_VALID if report.ok else EXIT_INVALID


def _not_private_warning(product: str, config: Path, data: Path) -> str | None:
    """A config may be valid and still unable to make a private release: an ``Infinity``
    budget means no noise (golden tests). Said next to the verdict, so nobody takes VALID for
    "fit for production"."""
    from das.listing import folded
    from das.refusal import RunRefused
    from das.runs.policy import infinite_queries
    from das.spend_approval import sealed_spend

    try:
        _sealed, plan = sealed_spend(product, config, data)
    except (RunRefused, ValueError, OSError):
        return None  # the report names what is wrong with the config
    infinite = infinite_queries(plan.measurements)
    if not infinite:
        return None
    return (
        f"NOT A PRIVATE CONFIG: {len(infinite)} query(ies) have an infinite budget, i.e. no "
        f"noise ({folded(infinite)}). A release with it would hold exact counts: a production "
        "run (a chartered ledger, or DAS_PRODUCTION=1) refuses it, and approvers cannot approve "
        "it"
    )
