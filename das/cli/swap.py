"""`das swap`: permutation swapping of a PHSafe-style unit file, with its ε and invariants.

A comparison tool (paper "Can Swapping be Differentially Private?", Algorithm 5.1): it writes
the swapped units in the input's own format, H(Z) as ``contingency.csv``, and ``report.json`` /
``report.md`` (b, ε, invariant check, MAPE, swapping beside the DP products, randomness,
hashes, timings). Messages never show record values.
"""

from __future__ import annotations

import argparse
import json
import sys

from das.cli.arguments import resolved_path, seed_int
from das.io.tables import InputFormatError
from das.swapping.run import (
    InvariantViolation,
    SwapRequest,
    parse_columns,
    parse_two_way,
    run_swap,
)
from das.swapping.swap_report import summary


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "swap",
        help="permutation swapping of unit records (comparison with the DP products)",
        description=(
            "Swap the --swap variables of randomly selected households within each stratum "
            "of the --match variables (Algorithm 5.1), and report the epsilon of Theorem 5.6. "
            "Exit codes: 0 written, 1 the inputs could not be read, the output exists or an "
            "invariant broke, 2 usage error."
        ),
    )
    parser.add_argument("--data", required=True, type=resolved_path, help="folder with units + geo")
    parser.add_argument(
        "--match", required=True, help="matching variables (swap key), comma-separated; may be ''"
    )
    parser.add_argument("--swap", required=True, help="swapping variables, comma-separated")
    parser.add_argument(
        "--hold",
        help="holding variables tabulated in H(Z) (default: every other unit/geo column "
        "except MAFID)",
    )
    parser.add_argument("--rate", required=True, help="swap rate p in [0, 1], e.g. 0.05")
    parser.add_argument("--output", required=True, type=resolved_path, help="folder to create")
    parser.add_argument(
        "--seed", type=seed_int, help="reproducible randomness: tests and demos only (recorded)"
    )
    parser.add_argument(
        "--two-way",
        help="MAPE table ROW,COL; join variables with + (default: geography x TEN)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing output folder"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=_swap)


def _swap(args: argparse.Namespace) -> int:
    try:
        request = SwapRequest(
            match=parse_columns(args.match),
            swap=parse_columns(args.swap),
            rate=args.rate,
            hold=parse_columns(args.hold) if args.hold is not None else None,
            two_way=parse_two_way(args.two_way) if args.two_way else None,
            seed=args.seed,
        )
        report = run_swap(args.data, args.output, request, overwrite=args.overwrite)
    except (
        InputFormatError,
        FileExistsError,
        FileNotFoundError,
        KeyError,
        ValueError,
        TypeError,
        InvariantViolation,
    ) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"das swap: error: {message}", file=sys.stderr)
        return 1
    result = summary(report)
    if args.json:
        print(json.dumps(result, allow_nan=False))
    else:
        epsilon = result["epsilon"]
        shown = "inf" if epsilon is None else f"{epsilon:.4f}"
        print(
            f"swapped {result['records_selected']} of {result['records']} units "
            f"(p = {result['rate']:g}); b = {result['b']}, epsilon = {shown}; invariants "
            f"{'exact' if result['invariants_exact'] else 'BROKEN'}; MAPE "
            f"{result['mape']:.2%}; wrote {result['output_dir']}"
        )
        if epsilon is None:
            print(f"note: {result['epsilon_note']}")
        if not report["randomness"]["secure"]:
            print("note: seeded randomness (tests/demos only; not for a release)")
    return 0
