"""`das coterminous derive --data DIR [--config FILE] --output FILE`.

Derives the SafeTab-P coterminous-geography spec file (entities of different summary levels made
of exactly the same GRF-C blocks) from ``<data>/GRF-C.txt`` or ``.parquet``. With ``--config``
the blocks of each pass are those the run tabulates (``state_filter_us``, enabled passes).

Output: pipe-delimited, header ``SET_ID|REGION_TYPE|REGION_ID``, members of a set listed in the
level order USA, STATE, COUNTY, TRACT, PLACE, AIANNH, PR-STATE, PR-COUNTY, PR-TRACT, PR-PLACE
(the first member present in the output donates its rows). The file is public geography.

Exit codes: 0 written, 1 the inputs could not be read or are malformed, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys

from das.cli.arguments import resolved_path

# das.safetab_p.coterminous.COTERMINOUS_FILE_NAME, kept literal so building the parser stays light.
COTERMINOUS_FILE_NAME = "coterminous-geographies.txt"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    coterminous = subparsers.add_parser(
        "coterminous",
        help="SafeTab-P coterminous-geography spec file (derive it from the GRF-C)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = coterminous.add_subparsers(dest="coterminous_action", required=True)
    derive = actions.add_parser(
        "derive",
        help=f"write {COTERMINOUS_FILE_NAME} from <data>/GRF-C (.txt or .parquet)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    derive.add_argument(
        "--data", required=True, type=resolved_path, help="folder holding the GRF-C"
    )
    derive.add_argument(
        "--config",
        type=resolved_path,
        default=None,
        help="SafeTab-P config.json (state filter, passes)",
    )
    derive.add_argument(
        "--output",
        required=True,
        type=resolved_path,
        help=f"file to write (e.g. {COTERMINOUS_FILE_NAME})",
    )
    derive.set_defaults(handler=_derive)


def _error(message: str) -> None:
    print(f"das coterminous derive: error: {message}", file=sys.stderr)


def _derive(args: argparse.Namespace) -> int:
    if not args.data.is_dir():
        _error(f"data folder not found: {args.data}")
        return EXIT_USAGE
    if args.config is not None and not args.config.is_file():
        _error(f"config file not found: {args.config}")
        return EXIT_USAGE
    if not args.output.parent.is_dir():
        _error(f"output folder not found: {args.output.parent}")
        return EXIT_USAGE
    if args.output.is_dir():
        _error(f"output is a folder, not a file: {args.output}")
        return EXIT_USAGE
    from das.io.safetab_p import grf_c_path, read_grf_c
    from das.safetab_p.coterminous import derive_coterminous, write_coterminous_file
    from das.specs.config import load_safetab_p_config

    try:
        config = None if args.config is None else load_safetab_p_config(args.config)
        grfc = read_grf_c(grf_c_path(args.data))
        sets = derive_coterminous(grfc, config)
        write_coterminous_file(sets, args.output)
    except (OSError, ValueError) as exc:
        # Messages from the readers name files, columns and lines (GRF-C is public geography).
        _error(str(exc))
        return EXIT_FAILED
    n_sets = int(sets["SET_ID"].nunique())
    print(f"das coterminous derive: {n_sets} sets, {len(sets)} entities -> {args.output}")
    return EXIT_OK
