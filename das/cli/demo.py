"""`das demo`: the whole job on shipped demo specs and a seeded synthetic population.

Runs the same commands a user would, in order, and stops at the first failure: synthesize the
SafeTab-P and PHSafe inputs, validate them, report the privacy budget of each config, create a
privacy ledger for the demo (`<output>/ledger`), approve each release's spend in it, and run
both releases (Prefect flows) into `<output>/release/safetab-p` and `<output>/release/phsafe`.

It also keeps what a user would otherwise only see scroll by: each budget report, as
`das budget report` prints it and with `--json`, in `<output>/budget/<product>.txt|.json`;
and a guide, `<output>/README.md`, written first: which folder is what, which would be
confidential in real use, and the command that made it.

Exit codes: 0 every step succeeded; otherwise the exit code of the first step that failed (the
demo prints its command and stops).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
from pathlib import Path

from das.cli.arguments import resolved_path
from das.runs.folder import state_root

DEMO_PERSONS = 20_000
DEMO_SEED = 2020
PRODUCTS = ("safetab-p", "phsafe")


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run the demo job on synthetic data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--output", type=resolved_path, default="demo", help="demo folder")
    demo.add_argument("--persons", type=int, default=DEMO_PERSONS, help="persons per product")
    demo.add_argument("--seed", type=int, default=DEMO_SEED, help="synthesis and noise seed")
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
                    "validate",
                    product,
                    "--config",
                    str(config),
                    "--data",
                    str(folder),
                    "--report",
                    str(output / "validation" / product),
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


def write_budget_report(config: Path, budget_dir: Path) -> tuple[Path, Path]:
    """``<budget_dir>/<product>.txt`` and ``.json``: `das budget report --config CONFIG`'s
    output and its ``--json`` line, as the commands print them (the product is the name of
    the config's folder, as the demo lays it out)."""
    from das.cli.budget import report_outputs

    text, json_line = report_outputs(config)
    budget_dir.mkdir(parents=True, exist_ok=True)
    paths = budget_dir / f"{config.parent.name}.txt", budget_dir / f"{config.parent.name}.json"
    for path, content in zip(paths, (text, json_line), strict=True):
        path.write_text(content + "\n", encoding="utf-8")
    return paths


def _command(argv: list[str]) -> str:
    return "das " + shlex.join(argv)


def demo_guide(output: Path, steps: list[tuple[str, list[str]]]) -> str:
    """``<output>/README.md``: the folders, what would be confidential in real use, and the
    commands (the demo's own steps) that made each."""

    def made_by(*prefix: str) -> str:
        numbers = [str(n) for n, (_, argv) in enumerate(steps, 1)
                   if tuple(argv[: len(prefix)]) == prefix]  # fmt: skip
        label = "step" if len(numbers) == 1 else "steps"
        return f"{label} {', '.join(numbers)} (`das {' '.join(prefix)}`)"

    ledger = shlex.quote(str(output / "ledger"))
    state = state_root()
    rows = [
        ("`safetab-p/`", "SafeTab-P inputs: `person-records.txt` and `GRF-C.txt` (synthetic "
         "records), `config.json` and the four race/ethnicity spec files (the shipped demo "
         "specs, `data_specs/safetab_p/demo`)", made_by("synth", "safetab-p"),
         "**confidential**: the person records (the GRF-C, config and specs are public)"),
        ("`phsafe/`", "PHSafe inputs: `persons.csv`, `units.csv`, `geo.csv` (synthetic "
         "records) and `config.json` (the shipped demo config, `data_specs/phsafe/demo`)",
         made_by("synth", "phsafe"),
         "**confidential**: persons, units and geo (the config is public)"),
        ("`validation/<product>/`", "the validation reports: `report.json`, `report.html`, "
         "Great Expectations Data Docs (`data_docs/index.html`), `validation.log`",
         made_by("validate"), "**confidential**: a failing check quotes sample values as "
         "written in the records"),
        ("`budget/<product>.txt`, `.json`", "the privacy-budget report of each config, as the "
         "command prints it and with `--json`: every query's budget, noise and margin of "
         "error, and the totals per pass", made_by("budget", "report") + ", and with `--json`",
         "public: from the config and specs only, no record"),
        ("`ledger/`", "the demo's privacy ledger (`ledger.sqlite`): its id and ceilings, the "
         "approvals, each run's spend and noise-file digests, as a hash chain; read it with "
         f"`das ledger show --ledger {ledger}`, check it with `das ledger verify --ledger "
         f"{ledger}`", made_by("ledger") + "; the runs record their spend in it",
         "the enclave's system of record (keyed ids and budgets, no record value): kept and "
         "backed up inside the enclave"),
        ("`release/<product>/`", "the releases: SafeTab-P `t1/`, `t2/`; PHSafe one folder per "
         "table; `audit.json`, `MANIFEST.json`, `CERTIFICATE.intoto.json` and a `SEEDED` "
         "marker (the demo seeds its noise, so these are not private releases)", made_by("run"),
         "published after review (a real release is never seeded)"),
        ("`release/<product>.das/`", "beside each release: the output's lock and the "
         "staging folder the release was built in (released values only)", made_by("run"),
         "kept beside the release; holds nothing confidential"),
        (f"`{state}/runs/<run-id>/` (outside this folder)", "each run's state, under the "
         "state root (`DAS_STATE_DIR`, else `${XDG_STATE_HOME:-~/.local/state}/das`): the "
         "sealed parameters, the drawn noise (`noise/`), the records spilled for the "
         "measurement (`work/`), the run's own validation report, `run.log`", made_by("run"),
         "**confidential**: noise plus a released count gives the true count, and the spill "
         "is a copy of the records; delete a run's folder once its release is accepted"),
    ]  # fmt: skip
    lines = [
        "# The DAS demo: what is in this folder",
        "",
        "`das demo` wrote this folder by running the commands below, in order, on a seeded "
        "synthetic population. **Everything here is synthetic**: no person's data is in "
        "it, and anyone may read it. In real use, the folders marked confidential would "
        "hold confidential census data (Title 13) and stay inside the enclave.",
        "",
        "| folder | what | made by | in real use |",
        "|---|---|---|---|",
        *(f"| {folder} | {what} | {made} | {use} |" for folder, what, made, use in rows),
        "",
        "## The steps: the commands, in order",
        "",
        "`das demo` stops at the first command that fails; the folders of the steps after it "
        "are then absent. Run again, it replaces this folder.",
        "",
        *(f"{n}. {title}: `{_command(argv)}`" for n, (title, argv) in enumerate(steps, 1)),
        "",
    ]
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    from das.cli import main

    if args.output.exists():
        shutil.rmtree(args.output)
    steps = demo_steps(args.output, args.persons, args.seed)
    args.output.mkdir(parents=True)
    (args.output / "README.md").write_text(demo_guide(args.output, steps), encoding="utf-8")
    for title, argv in steps:
        print(f"\n== {title}: {_command(argv)}", flush=True)  # as it would be typed
        code = main(argv)
        if code == 0 and argv[:2] == ["budget", "report"]:
            config = Path(argv[argv.index("--config") + 1])
            saved = write_budget_report(config, args.output / "budget")
            print(f"saved as {saved[0]} and {saved[1].name}", flush=True)
        if code != 0:
            print(f"demo stopped: '{title}' exited with {code}")
            return code
    print(f"\ndemo complete under {args.output}/ (its README.md says what is where): inputs, "
          "validation and budget reports, the ledger, releases")  # fmt: skip
    from das.cli import server as local_api

    used = local_api.in_use()
    if used is not None:  # what its runs reported to, still up for the next ones
        print(f"its flow runs are on the local Prefect API at http://127.0.0.1:{used.api.port}, "
              "which stays up for later runs (`das server status` says how to log in to its UI; "
              "`das server stop` stops it)")  # fmt: skip
    return 0
