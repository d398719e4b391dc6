"""`das synth {safetab-p|phsafe}`: write a synthetic input folder of any size.

Synthetic data are not private, but the command still prints one short summary line (counts,
seed, time). Without ``--seed`` a random seed is drawn and printed, so any run can be repeated
byte for byte.

Exit codes: 0 written, 1 the output exists (without ``--overwrite``) or the specs or config
could not be read, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from das.cli.arguments import positive_int, resolved_path, seed_int
from das.io.tables import InputFormatError
from das.resources import demo_specs
from das.specs.config import ConfigError
from das.specs.race_specs import SpecFileError
from das.synth import generate_phsafe, generate_safetab_p, random_seed

DEFAULT_SAFETAB_P_SPECS = demo_specs("safetab_p")
DEFAULT_PHSAFE_CONFIG = demo_specs("phsafe") / "config.json"
DEFAULT_PERSONS = 100_000


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, type=resolved_path, help="folder to create")
    parser.add_argument(
        "--persons", type=positive_int, default=DEFAULT_PERSONS, help="number of person records"
    )
    parser.add_argument("--seed", type=seed_int, help="makes the output byte-identical across runs")
    parser.add_argument(
        "--format",
        dest="file_format",
        choices=("text", "parquet"),
        default="text",
        help="record files as production text (default) or Parquet",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing output folder"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    synth = subparsers.add_parser(
        "synth",
        help="write a synthetic input folder of any size",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    products = synth.add_subparsers(dest="synth_product", required=True)

    safetab_p = products.add_parser(
        "safetab-p", help="person-records, GRF-C, the four spec files and config.json"
    )
    _common(safetab_p)
    safetab_p.add_argument(
        "--specs",
        type=resolved_path,
        default=DEFAULT_SAFETAB_P_SPECS,
        help="parameters directory to draw codes from and copy (default: the demo specs)",
    )
    safetab_p.set_defaults(handler=_safetab_p)

    phsafe = products.add_parser("phsafe", help="persons, units, geo and config.json")
    _common(phsafe)
    phsafe.add_argument(
        "--config",
        type=resolved_path,
        default=DEFAULT_PHSAFE_CONFIG,
        help="PHSafe config to copy; its state_filter picks the states (default: demo)",
    )
    phsafe.set_defaults(handler=_phsafe)


def _run(args: argparse.Namespace, generate, source: Path) -> int:
    seed = random_seed() if args.seed is None else args.seed
    try:
        summary = generate(
            args.output,
            args.persons,
            seed,
            source,
            file_format=args.file_format,
            overwrite=args.overwrite,
        )
    except (
        ConfigError,
        SpecFileError,
        InputFormatError,
        OSError,  # an existing output, a missing spec, a parent folder it cannot write in
        ValueError,
    ) as exc:
        print(f"das synth: error: {exc}", file=sys.stderr)
        return 1
    print(summary.line())
    return 0


def _safetab_p(args: argparse.Namespace) -> int:
    return _run(args, generate_safetab_p, args.specs)


def _phsafe(args: argparse.Namespace) -> int:
    return _run(args, generate_phsafe, args.config)
