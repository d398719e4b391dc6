"""`das run {safetab-p|phsafe} --config FILE --data DIR --output DIR [--seed N] [--run-id ID]
[--skip-validation]`: run the product's Prefect flow in process and leave its tables and
audit.json (SafeTab-P: t1/, t2/; PHSafe: one folder per noisy table and per estimates table).

Exit codes: 0 success; 1 the run failed — invalid inputs (nothing drawn, the validation report
is in ``<output>/.run/<run-id>/validation/``) or a later error (``audit.json`` says which
stage, ``run.log`` has the progress); 2 usage error (bad arguments, missing config or data,
``--seed`` under ``DAS_PRODUCTION=1``, an invalid run id).

A failed run is resumed by running again with the same ``--run-id``: every measurement already
drawn is reused from the run folder, none is drawn twice. Without ``PREFECT_API_URL`` the flow
runs against a temporary local Prefect API.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from das.postprocess.counts import INTERVALS

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PRODUCTION_ENV = "DAS_PRODUCTION"


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run",
        help="run a product end to end (exit 0 ok, 1 failed, 2 usage error)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    products = run.add_subparsers(dest="run_product", required=True)
    text = (
        "config.json with the four spec files beside it; --data holds person-records and "
        "GRF-C (.txt or .parquet)"
    )
    safetab = _product_parser(products, "safetab-p", text)
    safetab.add_argument(
        "--coterminous",
        type=Path,
        default=None,
        help="reviewed coterminous-geographies.txt (default: derived from the GRF-C)",
    )
    text = (
        "config.json of one pass (state_filter [\"72\"] = Puerto Rico, else the US); --data "
        "holds persons, units and geo (.csv or .parquet)"
    )
    phsafe = _product_parser(products, "phsafe", text)
    phsafe.add_argument(
        "--credible-interval",
        choices=INTERVALS,
        default="equal-tailed",
        help="90%% intervals of the count tables: equal-tailed (default) or highest posterior "
        "density (shortest; covers true zeros)",
    )


def _product_parser(
    products: argparse._SubParsersAction, product: str, text: str
) -> argparse.ArgumentParser:
    parser = products.add_parser(product, help=text, description=text)
    parser.add_argument("--config", required=True, type=Path, help="the run's config.json")
    parser.add_argument("--data", required=True, type=Path, help="folder of input files")
    parser.add_argument("--output", required=True, type=Path, help="output folder")
    parser.add_argument(
        "--seed", type=int, default=None, help="reproducible noise: tests and demos only"
    )
    parser.add_argument("--run-id", default=None, help="resume the run with this id")
    parser.add_argument(
        "--skip-validation",
        action="store_true",
        help="inputs already validated by `das validate` (recorded in the audit)",
    )
    parser.set_defaults(handler=run_command)
    return parser


def _usage_error(message: str) -> int:
    print(f"das run: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def run_command(args: argparse.Namespace) -> int:
    """Check the arguments, run the flow, print where the audit is; the exit code."""
    if not args.config.is_file():
        return _usage_error(f"--config {args.config}: no such file")
    if not args.data.is_dir():
        return _usage_error(f"--data {args.data}: no such folder")
    if args.output.exists() and not args.output.is_dir():
        return _usage_error(f"--output {args.output}: exists and is not a folder")
    if args.seed is not None:
        if os.environ.get(PRODUCTION_ENV) == "1":
            return _usage_error(f"--seed is refused for production runs ({PRODUCTION_ENV}=1)")
        if args.seed < 0:
            return _usage_error("--seed must be a non-negative integer")
    if args.run_id is not None:
        from das.runs.folder import RunFolder

        try:
            RunFolder(args.output, args.run_id)
        except ValueError:
            return _usage_error("--run-id: use letters, digits, '.', '_', '-' (at most 128)")

    from das.offline import configure_offline

    configure_offline()
    from das.validation.report import ValidationFailed
    from flows.runner import task_runner_from_env

    product = args.run_product
    parameters = {
        "config": str(args.config),
        "data": str(args.data),
        "output": str(args.output),
        "seed": args.seed,
        "run_id": args.run_id,
        "skip_validation": args.skip_validation,
    }
    if product == "safetab-p":
        from flows.safetab_p import safetab_p_flow as product_flow

        coterminous = args.coterminous
        parameters["coterminous"] = None if coterminous is None else str(coterminous)
    else:
        from flows.phsafe import phsafe_flow as product_flow

        parameters["credible_interval"] = args.credible_interval
    flow = product_flow.with_options(task_runner=task_runner_from_env())
    try:
        record = flow(**parameters)
    except ValidationFailed as exc:
        print(f"das run {product}: NOT RUN — {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        # The type only: engine messages are value-free, but the audit is the place to look.
        audit = args.output / "audit.json"
        print(
            f"das run {product}: FAILED ({type(exc).__name__}); see {audit} and the run log",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"das run {product}: run {record['run_id']} succeeded; outputs and audit.json in "
          f"{args.output}")  # fmt: skip
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """`das run ...` alone (the full `das` parser registers this module the same way)."""
    parser = argparse.ArgumentParser(prog="das")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
