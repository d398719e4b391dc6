"""`das demo`: the whole job on shipped demo specs and a seeded synthetic population.

Runs the same commands a user would, in order, and stops at the first failure: synthesize the
SafeTab-P and PHSafe inputs, validate them, report the privacy budget of each config, create a
privacy ledger for the demo (`<output>/ledger`), approve each release's spend in it, and run
both releases (Prefect flows) into `<output>/release/safetab-p` and `<output>/release/phsafe`.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from das.cli.arguments import resolved_path

DEMO_PERSONS = 20_000
DEMO_SEED = 2020


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run the demo job on synthetic data")
    demo.add_argument("--output", type=resolved_path, default="demo", help="demo folder")
    demo.add_argument("--persons", type=int, default=DEMO_PERSONS)
    demo.add_argument("--seed", type=int, default=DEMO_SEED)
    demo.set_defaults(handler=_demo)


def demo_steps(output: Path, persons: int, seed: int) -> list[tuple[str, list[str]]]:
    """The commands of the demo, as (title, argv) pairs."""
    steps: list[tuple[str, list[str]]] = []
    for product in ("safetab-p", "phsafe"):
        folder = output / product
        config = folder / "config.json"
        common = ["--output", str(folder), "--persons", str(persons), "--seed", str(seed)]
        steps += [
            (f"synthesize {product} inputs", ["synth", product, *common]),
            (
                f"validate {product} inputs",
                [
                    "validate", product, "--config", str(config), "--data", str(folder),
                    "--report", str(output / "validation" / product),
                ],
            ),
            (f"{product} privacy budget", ["budget", "report", "--config", str(config)]),
        ]
    ledger = str(output / "ledger")
    steps.append(("create the demo's privacy ledger", ["ledger", "init", "--ledger", ledger]))
    for product, title in (("safetab-p", "SafeTab-P"), ("phsafe", "PHSafe")):
        folder = output / product
        steps.append(
            (
                f"approve the {title} spend on these records",
                [
                    "ledger", "approve", "--ledger", ledger, "--product", product,
                    "--config", str(folder / "config.json"), "--data", str(folder),
                    "--note", "das demo",
                ],
            )
        )  # fmt: skip
    for product, title in (("safetab-p", "SafeTab-P"), ("phsafe", "PHSafe")):
        folder = output / product
        steps.append(
            (
                f"{title} release (seeded: demo only)",
                [
                    "run", product, "--config", str(folder / "config.json"), "--data",
                    str(folder), "--output", str(output / "release" / product),
                    "--seed", str(seed), "--skip-validation", "--ledger", ledger,
                ],
            )
        )  # fmt: skip
    return steps


def _demo(args: argparse.Namespace) -> int:
    from das.cli import main

    if args.output.exists():
        shutil.rmtree(args.output)
    for title, argv in demo_steps(args.output, args.persons, args.seed):
        print(f"\n== {title}: das {' '.join(argv)}", flush=True)
        code = main(argv)
        if code != 0:
            print(f"demo stopped: '{title}' exited with {code}")
            return code
    print(f"\ndemo complete under {args.output}/: inputs, validation and budget reports, releases")
    return 0
