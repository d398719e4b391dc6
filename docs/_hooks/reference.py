"""MkDocs hook: the reference pages, generated from the code at every build.

Nothing here is written by hand about the code: every command and option comes from the parser
(``das.cli.build_parser``), every variable from ``das.environment``, the exit codes from
``das.runs.faults`` and each command's ``--help``, the config fields from the pydantic models of
``das.specs.config``, the ledger's entry kinds from ``das.trust.ledger.state.ENTRY_KINDS``, the
deployments from ``deploy/prefect.yaml``, the artifacts and states from ``tasks.artifacts``, the
input formats from the readers' table specs and the Great Expectations suites, the layers from
pyproject's import contracts. A change to the code changes the site at the next build.

Two mechanisms: whole pages (:data:`PAGES`, added to the build as generated files, each in the
place of a committed file that tells a reader of the Markdown where the page is:
:func:`reader_page`) and blocks inside hand-written pages (a line ``<!-- das:NAME -->`` is
replaced by :data:`BLOCKS` [NAME]). A tutorial's command block marked ``<!-- test: NAME -->``
(run by tests/test_tutorial.py) is shown with a title saying so.
``tests/test_docs.py`` imports this module to compare the pages with the code.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WIDTH = 88  # the width `--help` texts are formatted to on the pages

# -- Markdown helpers ----------------------------------------------------------------------------


def cell(text: Any) -> str:
    """Text for a table cell: HTML-escaped, pipes and newlines made harmless."""
    value = html.escape(str(text), quote=False)
    return value.replace("|", "&#124;").replace("\n", " ").strip()


def code(text: Any) -> str:
    """Inline code in a table cell (no pipe may break the row)."""
    value = html.escape(str(text), quote=False).replace("|", "&#124;")
    return f"<code>{value}</code>"


def fenced(text: str, language: str = "text") -> str:
    return f"```{language}\n{text.rstrip()}\n```"


def generated_note(source: str) -> str:
    return (
        f'!!! info "Generated from the code"\n    This page is written at every build from '
        f"{source}: it cannot drift from the code.\n"
    )


# -- the command line ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from das.cli import build_parser

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-command, in registration order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def commands() -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every command, depth first: (``das ledger approve``, its help line, its parser)."""

    def walk(prefix: str, parser: argparse.ArgumentParser) -> Iterator[Any]:
        for name, help_text, sub in _subcommands(parser):
            path = f"{prefix} {name}"
            yield path, help_text, sub
            yield from walk(path, sub)

    yield from walk("das", _parser())


def command_options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional of a parser (help excluded)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        found += list(action.option_strings) or [action.dest]
    return found


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = parser.formatter_class(prog=parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _description(parser: argparse.ArgumentParser) -> str:
    if not parser.description:
        return ""
    formatter = parser.formatter_class(prog=parser.prog, width=WIDTH)
    formatter.add_text(parser.description)
    return formatter.format_help().strip()


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    metavar = ""
    if action.nargs != 0:
        metavar = action.metavar or action.dest.upper()
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
    return " / ".join(f"{option} {metavar}".strip() for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "**required**"
    default = action.default
    if default in (None, False, [], "", argparse.SUPPRESS) or action.nargs == 0:
        return ""
    if isinstance(default, Path):
        with contextlib.suppress(ValueError):
            default = default.relative_to(REPO)
    if isinstance(default, tuple | list):
        default = ",".join(getattr(item, "name", str(item)) for item in default)
    return code(default)


def _options_table(parser: argparse.ArgumentParser) -> str:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        meaning = action.help or ""
        if action.choices:
            meaning += f" (one of: {', '.join(map(str, action.choices))})"
        if isinstance(action, argparse._AppendAction):
            meaning += " (repeatable)"
        rows.append(f"| {code(_flag(action))} | {_default(action)} | {cell(meaning)} |")
    if not rows:
        return ""
    return "\n".join(["| option | default | meaning |", "|---|---|---|", *rows])


def slug(path: str) -> str:
    return path.replace(" ", "-")


def cli_page() -> str:
    parser = _parser()
    lines = [
        "# Command line: `das`",
        "",
        generated_note("the `das` command's own parser (`das.cli.build_parser()`)"),
        "Every command and option of `das`, as `das COMMAND --help` shows it. Paths may be "
        "relative: each is made absolute against the folder the command was started in. "
        "What each exit code means: [Exit codes](exit-codes.md).",
        "",
        "| command | what |",
        "|---|---|",
    ]
    for path, help_text, _ in commands():
        if path.count(" ") == 1:
            lines.append(f"| [`{path}`](#{slug(path)}) | {cell(help_text)} |")
    lines += ["", fenced(_usage(parser))]
    for path, help_text, sub in commands():
        depth = path.count(" ")
        heading = "#" * min(depth + 1, 4)
        lines += ["", f'{heading} {path} {{ #{slug(path)} data-toc-label="{path}" }}', ""]
        if help_text:
            lines += [f"*{cell(help_text)}*", ""]
        lines += [fenced(_usage(sub)), ""]
        description = _description(sub)
        parent_description = _description(_parent(parser, path))
        if description and description != parent_description:
            lines += [fenced(description), ""]
        children = _subcommands(sub)
        if children:
            lines += ["| sub-command | what |", "|---|---|"]
            lines += [
                f"| [`{path} {name}`](#{slug(path + ' ' + name)}) | {cell(text)} |"
                for name, text, _ in children
            ]
            lines.append("")
        table = _options_table(sub)
        if table:
            lines += [table, ""]
        if path == "das prefect":
            lines += [
                "Everything after `das prefect` is passed to Prefect's own command (`das "
                "prefect --help` is `prefect --help`).",
                "",
            ]
    return "\n".join(lines) + "\n"


def _parent(root: argparse.ArgumentParser, path: str) -> argparse.ArgumentParser:
    parser = root
    for name in path.split()[1:-1]:
        parser = next(sub for n, _, sub in _subcommands(parser) if n == name)
    return parser


# -- exit codes ----------------------------------------------------------------------------------

_EXIT = re.compile(r"\bExit (?:codes|status)\b.*?(?=\n\s*\n|\Z)", re.S)


def exit_paragraphs() -> dict[str, str]:
    """``das X`` → the exit-code paragraph of its ``--help`` (the nearest command that has one)."""
    found = {}
    for path, _, sub in commands():
        match = _EXIT.search(sub.description or "")
        if match:
            found[path] = re.sub(r"``([^`]*)``", r"`\1`", match.group(0)).strip()
    return found


def exit_codes_page() -> str:
    from das.runs.faults import EXIT_MEANINGS

    lines = [
        "# Exit codes",
        "",
        generated_note(
            "`das.runs.faults.EXIT_MEANINGS` and the exit-code paragraph of each command's `--help`"
        ),
        "## A release run: `das run` { #das-run }",
        "",
        "The same codes whatever the product; the flows started by deployments end in the "
        "matching Prefect state ([Artifacts and states](artifacts.md)).",
        "",
        "| code | meaning | what to do |",
        "|---:|---|---|",
    ]
    for number, (meaning, step) in sorted(EXIT_MEANINGS.items()):
        lines.append(f"| **{number}** | {_inline(meaning)} | {_inline(step)} |")
    lines += [
        "",
        "A refusal (2) draws nothing. Most come in about a second, from the start checks that "
        "run before a Prefect API or a Dask cluster starts; those that need to know which "
        "dataset the records are (a ceiling, a cumulative total) come after the run has read "
        "them. Every refusal and its next step: "
        "[Respond to a refusal](../how-to/respond-to-a-refusal.md). An infrastructure fault "
        "(3) is resumable: [Retry and resume](../how-to/retry-and-resume.md).",
        "",
        "## Every command",
        "",
        "| command | exit codes (from its `--help`) |",
        "|---|---|",
    ]
    for path, text in exit_paragraphs().items():
        body = re.sub(r"^Exit (?:codes|status):?\s*", "", text)
        lines.append(f"| [`{path}`](cli.md#{slug(path)}) | {_inline(body)} |")
    lines += [
        "",
        "Every command also exits with **2** when its arguments are wrong (argparse), and "
        "when the Prefect auth file (`DAS_PREFECT_AUTH_FILE`) is refused at start.",
    ]
    return "\n".join(lines) + "\n"


_DOUBLE_BACKTICKS = re.compile(r"``([^`]*)``")
_ROLE = re.compile(r":(?:func|mod|class|meth|data|attr):(?=`)")


def _inline(text: str) -> str:
    """Text with `code` spans kept (reST's ``code`` and :role:`x` too), the rest escaped for a
    table cell."""
    text = _ROLE.sub("", _DOUBLE_BACKTICKS.sub(r"`\1`", text))
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    escaped = [
        code(part[1:-1])
        if part.startswith("`") and part.endswith("`")
        else html.escape(part, quote=False).replace("|", "&#124;")
        for part in parts
    ]
    return "".join(escaped).strip()


# -- environment variables -----------------------------------------------------------------------


def environment_page() -> str:
    from das.environment import RELATED, ROLES, VARIABLES, needed_by

    lines = [
        "# Environment variables",
        "",
        generated_note("the registry `das/environment.py`"),
        "Every `DAS_*` variable the code reads, and the variables of Prefect and the XDG base "
        "directories that matter here. A variable marked *secret file* names the **path** of a "
        "file (mode 0600, refused otherwise): the secret itself is never in the environment, "
        "on a command line or in a Prefect variable.",
        "",
        "## Who needs what",
        "",
        "| where | variables |",
        "|---|---|",
    ]
    for role, what in ROLES.items():
        names = ", ".join(f"[`{v.name}`](#{v.name.lower()})" for v in needed_by(role))
        lines.append(f"| **{cell(role)}**: {_inline(what)} | {names} |")
    lines += [
        "",
        '!!! tip "Which variables does a worker need?"',
        "    On each worker host, the worker's environment needs `PREFECT_API_URL` and "
        "`DAS_PREFECT_AUTH_FILE` (and `DAS_DASK_ADDRESS` to use an existing cluster). "
        "Everything a flow run needs for production (`DAS_PRODUCTION`, the ledger's "
        "variables, `DAS_RUN_KEY`, `DAS_STATE_DIR`) is set by the deployments from Prefect "
        "variables (row *flow run*): nobody types it on the worker. "
        "See [Deployments](deployments.md#prefect-variables).",
        "",
        "## The variables",
        "",
    ]
    for variable in (*VARIABLES, *RELATED):
        lines += [
            f"### `{variable.name}` {{ #{variable.name.lower()} }}",
            "",
            _inline(variable.meaning),
            "",
            f"- **when unset:** {_inline(variable.default)}",
            f"- **set for:** {', '.join(variable.roles)}"
            + (" — *secret file* (a path)" if variable.secret_file else ""),
            "",
        ]
    return "\n".join(lines) + "\n"


# -- config fields -------------------------------------------------------------------------------


def _annotation(field: Any) -> str:
    """The field's type as the JSON file writes it."""
    import enum
    import typing

    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "json" in extra:
        return str(extra["json"])
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f'"{member.value}"' for member in annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(f'"{value}"' for value in typing.get_args(annotation))
    origin = typing.get_origin(annotation)
    if origin is dict:
        return "object"
    if origin is tuple or origin is list:
        return "array of strings"
    names = {bool: "true / false", int: "integer", float: "number", str: "string"}
    return names.get(annotation, "number")


_COMPARISONS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


def _constraints(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{_COMPARISONS[name]} {value}")
    return ", ".join(parts)


def _fields_table(model: Any) -> str:
    rows = ["| key in `config.json` | JSON | required / default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra or {}
        key = extra.get("key", name) if isinstance(extra, dict) else name
        needed = "required" if field.is_required() else f"default {code(field.default)}"
        limits = _constraints(field)
        rows.append(
            f"| {code(key)} | {cell(_annotation(field))} | {needed} | "
            f"{_inline(field.description or '')}{' (' + cell(limits) + ')' if limits else ''} |"
        )
    return "\n".join(rows)


def config_page() -> str:
    from das.privacy.limits import MAX_PASS_TOTAL, MIN_QUERY_BUDGET
    from das.resources import demo_specs
    from das.specs.config import (
        PHSAFE_JOINED_TABLES,
        PHSAFE_MEASURED_TABLES,
        PHSAFE_TOTAL_ONLY_TABLES,
        SAFETAB_ITERATION_LEVELS,
        PHSafeConfig,
        PHSafeGeography,
        PHSafeIterationLevel,
        SafeTabGeography,
        SafeTabPConfig,
    )

    budget_keys = [
        f"privacy_budget_p_level_{level}_{geography.config_suffix}"
        for geography in SafeTabGeography
        for level in SAFETAB_ITERATION_LEVELS
    ]
    levels = [f"{g.value}_{i.value}" for g in PHSafeGeography for i in PHSafeIterationLevel]
    limits = ", ".join(
        f"{'ρ' if d == 'zcdp' else 'ε'} {float(v):g} ({d})" for d, v in MAX_PASS_TOTAL.items()
    )
    floors = ", ".join(
        f"{'ρ' if d == 'zcdp' else 'ε'} {float(v):g}" for d, v in MIN_QUERY_BUDGET.items()
    )
    safetab_demo = (demo_specs("safetab_p") / "config.json").read_text()
    phsafe_demo = (demo_specs("phsafe") / "config.json").read_text()
    lines = [
        "# Config files (`config.json`)",
        "",
        generated_note("the pydantic models of `das/specs/config.py` and `das/privacy/limits.py`"),
        "A config is the Census production `config.json` of a product: its keys, unchanged. "
        "Every problem in a file is reported at once, one line each (`das validate`, `das "
        "budget report`, `das run` and the explorer all parse it the same way). Budgets are "
        '**JSON numbers** (`"0.5"` is refused, not coerced), read as exact fractions; '
        "`Infinity` means *no noise* (golden tests only: refused in production, marked "
        "NOT-PRIVATE everywhere), 0 means *not measured*; a number beyond double precision "
        "(`1e400`) is refused.",
        "",
        f"**Limits** (`das.privacy.limits`): each pass's total at most {limits}; each measured "
        f"query's budget at least {floors}. The 2020 production passes are about half the "
        "ceiling. How totals compose: [Accounting](../explanation/accounting.md).",
        "",
        "## SafeTab-P",
        "",
        "`PARAMS/config.json`, with the four race/ethnicity spec files beside it "
        "([Input formats](input-formats.md#the-race-and-ethnicity-spec-files)).",
        "",
        _fields_table(SafeTabPConfig),
        "",
        f"The {len(budget_keys)} budget keys, all required (geographies in release order; "
        "level 1 regional, 2 detailed iterations): "
        + ", ".join(code(k) for k in budget_keys)
        + ". The thresholds' keys are written like "
        + code('"(COUNTY, 2)"')
        + ".",
        "",
        "A pass's total is the sum of the budgets of its tabulated levels (a level costs its "
        "budget once, whatever its stages).",
        "",
        '??? example "The shipped demo config (`data_specs/safetab_p/demo/config.json`: the '
        '2020 production budgets)"',
        "",
        "    " + fenced(safetab_demo, "json").replace("\n", "\n    "),
        "",
        "## PHSafe",
        "",
        "One config is one pass: `us/config.json` (nation and states) or `pr/config.json` "
        '(`state_filter` `["72"]`, state level only).',
        "",
        _fields_table(PHSafeConfig),
        "",
        "Measured tables: "
        + ", ".join(code(t) for t in PHSAFE_MEASURED_TABLES)
        + "; joined tables (they need `tau`): "
        + ", ".join(code(t) for t in PHSAFE_JOINED_TABLES)
        + "; tabulated on `*` only: "
        + ", ".join(code(t) for t in PHSAFE_TOTAL_ONLY_TABLES)
        + ". Levels: "
        + ", ".join(code(level) for level in levels)
        + ". PH5_num and PH8_num are derived from released tables (no budget).",
        "",
        "A pass's total is the sum of its queries' budgets.",
        "",
        '??? example "The shipped demo config (`data_specs/phsafe/demo/config.json`: the 2020 '
        'US pass)"',
        "",
        "    " + fenced(phsafe_demo, "json").replace("\n", "\n    "),
        "",
    ]
    return "\n".join(lines) + "\n"


# -- the ledger ----------------------------------------------------------------------------------


def ledger_entries_page() -> str:
    from das.trust import COUNTING, ENTRY_KINDS

    lines = [
        "# The ledger's entries",
        "",
        generated_note("`das.trust.ledger.state.ENTRY_KINDS`"),
        "The privacy ledger is an append-only hash chain: every change is a new entry holding "
        "the SHA-256 of its own fields and of the entry before it; nothing is updated or "
        "deleted. A run, a charter, an approval are *folds* of their entries. Read them with "
        "[`das ledger show`](cli.md#das-ledger-show) (`--json` for all fields); check them "
        "with [`das ledger verify`](cli.md#das-ledger-verify). Why it is built this way: "
        "[Release integrity](../explanation/release-integrity.md).",
        "",
        "| kind | meaning |",
        "|---|---|",
    ]
    lines += [f"| {code(kind)} | {_inline(text)} |" for kind, text in ENTRY_KINDS.items()]
    lines += [
        "",
        "## A run's entries, in order",
        "",
        "`run-opened` → `spend-authorized` → `drawing-started` → `draw-charged` / "
        "`draw-recorded` (per measurement) → `release-sealed` → `run-completed`; "
        "`run-resumed` per new attempt; `run-released` only before the first draw. An entry "
        "out of this order cannot come from the pipeline: where it would lower a spend it is "
        "ignored, `das ledger verify` names it, and runs refuse the ledger.",
        "",
        "A run's status: `reserved` (opened), `authorized`, `drawing`, `completed`, `released`. "
        f"The statuses {', '.join(code(s) for s in COUNTING)} count as spent in full: a run "
        "killed after its authorization may have drawn, and resuming it spends nothing more.",
    ]
    return "\n".join(lines) + "\n"


# -- deployments ---------------------------------------------------------------------------------


def deployments_page() -> str:
    import yaml

    from das.cli.deploy import LEDGER_VARIABLES, VARIABLES, WORK_POOL
    from das.cli.deploy_layout import INPUT_FREE_DEPLOYMENTS, PRODUCTS

    document = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    product_of = {d: p.name for p in PRODUCTS for d in p.deployments}
    product_of.update({d: "(always)" for d in INPUT_FREE_DEPLOYMENTS})
    flows = {
        "safetab_p_flow": "safetab-p",
        "phsafe_flow": "phsafe",
        "validate_flow": "validate",
        "swap_flow": "swap",
        "audit_privacy_flow": "audit-privacy",
        "approval_sweep_flow": "approval-sweep",
    }
    lines = [
        "# Prefect deployments",
        "",
        generated_note("`deploy/prefect.yaml` and `das/cli/deploy_layout.py`"),
        f"`das deploy` registers these in the work pool `{WORK_POOL}` (creating it when "
        "missing) after checking every file they read under `<das_root>`; `--products` "
        "registers a subset. How to: [Your first production release]"
        "(../tutorials/first-production-release.md).",
        "",
        "| deployment | what | reads under `<das_root>` | `--products` | schedule |",
        "|---|---|---|---|---|",
    ]
    by_name = {p.name: p for p in PRODUCTS}
    for item in document["deployments"]:
        flow = flows.get(item["entrypoint"].rsplit(":", 1)[1], item["entrypoint"])
        name = f"{flow}/{item['name']}"
        product = product_of.get(item["name"], "")
        reads = ""
        if product in by_name:
            spec = by_name[product]
            reads = ", ".join(code(p) for p in (spec.config, spec.data) if p)
        schedules = item.get("schedules") or []
        schedule = "; ".join(
            (
                f"{code(s['cron'])} {cell(s.get('timezone', ''))}"
                if "cron" in s
                else f"every {int(s['interval'])} s"
            )
            + (" (registered inactive)" if not s.get("active", True) else " (active)")
            for s in schedules
        )
        description = " ".join(str(item.get("description", "")).split())
        lines.append(
            f"| {code(name)} | {cell(description)} | {reads or 'nothing'} | "
            f"{code(product)} | {schedule or 'none'} |"
        )
    lines += ["", "## Parameters", ""]
    for item in document["deployments"]:
        flow = flows.get(item["entrypoint"].rsplit(":", 1)[1], item["entrypoint"])
        params = item.get("parameters") or {}
        shown = ", ".join(f"{code(k)} = {code(v)}" for k, v in params.items())
        lines.append(f"- `{flow}/{item['name']}`: {shown}")
    environment = document["definitions"]["production_env"]
    lines += [
        "",
        "## The flow runs' environment",
        "",
        "Every deployment that reads `<das_root>` runs its flow runs with this environment "
        "(the worker's own environment adds `PREFECT_API_URL` and `DAS_PREFECT_AUTH_FILE`):",
        "",
        "| variable | value |",
        "|---|---|",
        *(f"| [`{k}`](environment.md#{k.lower()}) | {code(v)} |" for k, v in environment.items()),
        "",
        "## Prefect variables { #prefect-variables }",
        "",
        "`das deploy` sets them on the server (the UI's *Variables* page shows them); the "
        "deployments read them when registered, the pull step (`das_checkout`) at every run.",
        "",
        "| Prefect variable | what |",
        "|---|---|",
        *(f"| {code(k)} | {cell(v)} |" for k, v in VARIABLES.items()),
        *(
            f"| {code(k)} | the privacy ledger the deployments use (set together by "
            "`--ledger` or `--ledger-url`; the id read from the ledger) |"
            for k in LEDGER_VARIABLES
        ),
        "",
        "## The layout of `<das_root>`",
        "",
        "| product | config | records folder | record files | optional |",
        "|---|---|---|---|---|",
    ]
    for product in PRODUCTS:
        config = product.config or "—"
        if product.spec_files:
            config += " + the four spec files beside it"
        records = ", ".join(f"{s.stem}{s.text_suffix} or .parquet" for s in product.records)
        optional = ", ".join(f"{s.stem}{s.text_suffix}" for s in product.optional) or ""
        lines.append(
            f"| {code(product.name)} | {cell(config)} | {code(product.data)} | {cell(records)} "
            f"| {cell(optional)} |"
        )
    lines += [
        "",
        "Releases go to `<das_root>/<product>/releases/<run id>/` (a new folder per run; a "
        "Retry resumes its own), run state to `<das_root>/state/runs/<run id>/`, the "
        "validate-only runs' reports to `<das_root>/validation/<name>/`.",
    ]
    return "\n".join(lines) + "\n"


# -- artifacts and states ------------------------------------------------------------------------


def artifacts_page() -> str:
    from tasks.artifacts import ARTIFACTS, RUN_STATES

    lines = [
        "# Artifacts and states of a run",
        "",
        generated_note("`tasks.artifacts.ARTIFACTS` and `RUN_STATES`"),
        "What a flow run posts to the Prefect server: stage names, timings, budgets, noise "
        "parameters, keyed ids, the ledger's head and noisy (released) row counts only — "
        "never a record, a true count, a noise value or a count of input records (those stay "
        "in the run's local `run.log`).",
        "",
        "## Artifacts",
        "",
        "| key | what it shows |",
        "|---|---|",
        *(f"| {code(key)} | {_inline(text)} |" for key, text in ARTIFACTS.items()),
        "",
        "A resumed run carries the tags `attempt-N` and `resumed`; a run waiting for its "
        "approvers the tag `awaiting-approval`.",
        "",
        "## Final states",
        "",
        "| state | meaning |",
        "|---|---|",
        *(f"| **{state}** | {_inline(text)} |" for state, text in RUN_STATES.items()),
        "",
        "![The run list: a refused run and a crashed run](../screenshots/prefect/"
        "10-refused-and-crashed.png)",
    ]
    return "\n".join(lines) + "\n"


# -- input formats -------------------------------------------------------------------------------


def _suite_rules(name: str) -> dict[str, list[str]]:
    """column → the rules of the Great Expectations suite ``name`` (``*`` the table's)."""
    from das.resources import expectations_dir

    path = Path(expectations_dir()) / f"{name}.json"
    if not path.is_file():
        return {}
    rules: dict[str, list[str]] = {}
    for item in json.loads(path.read_text())["expectations"]:
        rule = (item.get("meta") or {}).get("rule")
        if not rule or item["type"] == "expect_column_values_to_be_of_type":
            continue
        column = (item.get("kwargs") or {}).get("column", "*")
        rules.setdefault(column, [])
        if rule not in rules[column]:
            rules[column].append(rule)
    return rules


def _table_spec_section(spec: Any, title: str) -> list[str]:
    rules = _suite_rules(spec.name)
    delimiter = {"|": "pipe (`|`)", ",": "comma (`,`)"}.get(spec.delimiter, spec.delimiter)
    lines = [
        f"### `{spec.stem}{spec.text_suffix}` — {title}",
        "",
        f"{delimiter}-delimited with a header, UTF-8 (a BOM tolerated), CRLF or LF, blank "
        f"lines skipped; or `{spec.stem}.parquet` with the same columns."
        + (f" Whole file: {cell('; '.join(rules['*']))}." if rules.get("*") else ""),
        "",
        "| column | engine type | rules (validation) |",
        "|---|---|---|",
    ]
    for column in spec.columns:
        lines.append(
            f"| {code(column.name)} | {code(column.dtype)} | "
            f"{cell('; '.join(rules.get(column.name, [])))} |"
        )
    return [*lines, ""]


def input_formats_page() -> str:
    from das.io.phsafe import GEO, PERSONS, UNITS
    from das.io.safetab_p import GRF_C, PERSON_RECORDS
    from das.specs.race_specs import SPEC_FILES

    lines = [
        "# Input formats",
        "",
        generated_note(
            "the readers' table specs (`das/io/`) and the Great Expectations suites "
            "(`expectations/*.json`, each rule's `meta.rule`)"
        ),
        "The Census production formats, read into compact integer columns, or Parquet files "
        "with the same stem and columns. `das validate` checks every rule below on every row "
        "(and the cross-file rules of [Validation](validation.md)); a run validates first and "
        "draws nothing on invalid inputs. The project's own demo inputs: "
        "[`das synth`](cli.md#das-synth).",
        "",
        "## SafeTab-P (`--data INPUT`)",
        "",
        *_table_spec_section(PERSON_RECORDS, "confidential person records"),
        *_table_spec_section(GRF_C, "the geography reference file (public)"),
        "## PHSafe (`--data INPUT`)",
        "",
        *_table_spec_section(PERSONS, "confidential person records"),
        *_table_spec_section(UNITS, "confidential unit records"),
        *_table_spec_section(GEO, "confidential unit geography"),
        "## The race and ethnicity spec files",
        "",
        "SafeTab-P's parameters folder holds `config.json` and these four files, read **by "
        "name** (any other file beside them is ignored) and sealed at the run's start:",
        "",
    ]
    for name in SPEC_FILES:
        stem = name.rsplit(".", 1)[0]
        rules = _suite_rules(stem)
        flat = "; ".join(rule for column in rules.values() for rule in column)
        lines.append(f"- `{name}`: {cell(flat)}")
    lines += [
        "",
        "## The coterminous-geographies file",
        "",
        "`das coterminous derive` writes it, `das run safetab-p --coterminous FILE` reads a "
        "reviewed one (its hash goes into the audit and the approval's sealed parameters): "
        "pipe-delimited, header `SET_ID|REGION_TYPE|REGION_ID`, one row per member of a set "
        "of entities made of exactly the same blocks.",
    ]
    return "\n".join(lines) + "\n"


# -- blocks inside hand-written pages ------------------------------------------------------------


def layers_block() -> str:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = data["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    forbidden = next(c for c in contracts if c["id"] == "engine-without-prefect")
    face = next(c for c in contracts if c["id"] == "trust-face")
    alone = next(c for c in contracts if c["id"] == "trust-alone")
    rows = ["| layer (top to bottom) | packages (`\\|`: rooms that must not import each other) |",
            "|---:|---|"]  # fmt: skip
    for number, layer in enumerate(layers, 1):
        rooms = " · ".join(code(room.strip()) for room in layer.split("|"))
        rows.append(f"| {number} | {rooms} |")
    rows += [
        "",
        "The engine (every package from `das.spend_approval` down) never imports "
        + ", ".join(code(m) for m in forbidden["forbidden_modules"])
        + ". No import cycle anywhere (`acyclic_siblings` over `das`, `flows`, `tasks`, "
        "`explorer`).",
        "",
        "The trust core is one package: "
        + ", ".join(code(m) for m in face["protected_modules"])
        + " are imported by "
        + ", ".join(code(m) for m in face["allowed_importers"])
        + " alone (the rest of the code goes through its face), and "
        + ", ".join(code(m) for m in alone["source_modules"])
        + " imports none of "
        + ", ".join(code(m) for m in alone["forbidden_modules"])
        + ".",
    ]
    return "\n".join(rows)


def output_columns_block() -> str:
    from das.phsafe.measure import NOISE_DISTRIBUTION, output_columns
    from das.phsafe.tables import SHELLS
    from das.postprocess.counts import KEY_COLUMNS
    from das.safetab_p.postprocess import T1_COLUMNS, T2_COLUMNS
    from das.trust import AUDIT_FILE, CERTIFICATE, MANIFEST

    distributions = ", ".join(code(v) for v in NOISE_DISTRIBUTION.values())
    lines = [
        "| file | columns (pipe-delimited, with a header) |",
        "|---|---|",
        f"| SafeTab-P `t1/t1.txt` | {code('|'.join(T1_COLUMNS))} |",
        f"| SafeTab-P `t2/t2.txt` | {code('|'.join(T2_COLUMNS))} |",
    ]
    for name, shell in SHELLS.items():
        lines.append(f"| PHSafe `{name}/{name}.txt` | {code('|'.join(output_columns(shell)))} |")
    lines += [
        "| PHSafe `<T>_estimates/<T>_estimates.txt` (PH1–PH8) | "
        + code("|".join(KEY_COLUMNS))
        + ", the table's cell column, then `ESTIMATE`, `CI_LOWER_90`, `CI_UPPER_90` (averages "
        "also `NUMERATOR_ESTIMATE`, `DENOMINATOR_ESTIMATE`, `ESS`) |",
        f"| `{AUDIT_FILE}` | the audit record (JSON) |",
        f"| `{MANIFEST}` | every file with its bytes and SHA-256, the tables' row counts, the "
        "ledger entry the release was sealed at |",
        f"| `{CERTIFICATE}` | the in-toto statement in a DSSE envelope, signed by the run key |",
        "",
        f"PHSafe's `NOISE_DISTRIBUTION` is {distributions}; `VARIANCE` the noise's variance.",
    ]
    return "\n".join(lines)


def phsafe_tables_block() -> str:
    from das.phsafe.tables import SHELLS

    lines = ["| table | universe | Δ | iterates on | cells (code: label; * basis) |",
             "|---|---|---|---|---|"]  # fmt: skip
    for name, shell in SHELLS.items():
        delta = "2τ + 2 (joined)" if shell.joined else "2 (units)"
        cells = "; ".join(f"{c.code}: {c.label}{' *' if c.basis else ''}" for c in shell.cells)
        lines.append(
            f"| {code(name)} | {cell(shell.universe)} | {delta} | {shell.iterates_on} | "
            f"{cell(cells)} |"
        )
    return "\n".join(lines)


def run_state_block() -> str:
    import das.runs.folder as folder

    doc = folder.__doc__ or ""
    start = doc.index("    OUT/")
    end = doc.index("\n\n", start)
    return fenced("\n".join(line[4:] for line in doc[start:end].splitlines()))


def _rst_table(doc: str) -> list[tuple[str, str]]:
    """The rows (check, rule) of the first reST simple table of a docstring."""
    lines = doc.splitlines()
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"=+\s+=+", line.strip())]
    if len(borders) < 3:
        return []
    split = lines[borders[0]].index(" ")
    while lines[borders[0]][split] == " ":
        split += 1
    rows: list[tuple[str, str]] = []
    for line in lines[borders[1] + 1 : borders[2]]:
        name, rule = line[:split].strip(), line[split:].strip()
        if name:
            rows.append((name, rule))
        elif rows:
            rows[-1] = (rows[-1][0], f"{rows[-1][1]} {rule}")
    return rows


def validation_checks_block() -> str:
    import das.validation.phsafe as phsafe
    import das.validation.safetab_p as safetab_p
    import das.validation.specs as specs

    lines = []
    for title, module in (("SafeTab-P", safetab_p), ("PHSafe", phsafe)):
        lines += [f"**{title}** (`{module.__name__}`):", "", "| check | rule |", "|---|---|"]
        lines += [f"| {code(n)} | {_inline(r)} |" for n, r in _rst_table(module.__doc__ or "")]
        lines.append("")
    bullets = re.findall(r"^- ``([^`]+)``(?: / ``([^`]+)``)?: (.*?)(?=^- |^\S|\Z)",
                         specs.__doc__ or "", re.M | re.S)  # fmt: skip
    lines += ["**The spec files** (`das.validation.specs`):", "", "| check | rule |", "|---|---|"]
    for first, second, text in bullets:
        name = code(first) + (f" / {code(second)}" if second else "")
        lines.append(f"| {name} | {_inline(text)} |")
    return "\n".join(lines)


def readme_commands_block() -> str:
    """The README's two commands, verbatim (checks and CI run them)."""
    text = (REPO / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return fenced(block, "bash")


PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_page,
    "reference/exit-codes.md": exit_codes_page,
    "reference/environment.md": environment_page,
    "reference/config.md": config_page,
    "reference/input-formats.md": input_formats_page,
    "reference/ledger-entries.md": ledger_entries_page,
    "reference/deployments.md": deployments_page,
    "reference/artifacts.md": artifacts_page,
}
# What a reader of the Markdown files, outside the site, finds at each generated page's path (a
# committed file, replaced by the generated page at every build): the page's title and where
# its content is without a build. Links to these pages then work in the Markdown too.
READER_PAGES: dict[str, tuple[str, str]] = {
    "reference/cli.md": (
        "Command line: `das`",
        "`das --help`, then `--help` after any command (`das ledger approve --help`)",
    ),
    "reference/exit-codes.md": (
        "Exit codes",
        "the exit-code paragraph that ends each command's `--help` (`das run --help`), and "
        "`EXIT_MEANINGS` in "
        "[`das/runs/faults.py`](../../das/runs/faults.py)",
    ),
    "reference/environment.md": (
        "Environment variables",
        "the registry [`das/environment.py`](../../das/environment.py)",
    ),
    "reference/config.md": (
        "Config files (`config.json`)",
        "the pydantic models of [`das/specs/config.py`](../../das/specs/config.py)",
    ),
    "reference/input-formats.md": (
        "Input formats",
        "the readers' table specs in [`das/io/`](../../das/io/) and the Great Expectations "
        "suites in [`expectations/`](../../expectations/)",
    ),
    "reference/ledger-entries.md": (
        "The ledger's entries",
        "`ENTRY_KINDS` in [`das/trust/ledger/state.py`](../../das/trust/ledger/state.py)",
    ),
    "reference/deployments.md": (
        "Prefect deployments",
        "[`deploy/prefect.yaml`](../../deploy/prefect.yaml) (its comments) and "
        "[`das/cli/deploy_layout.py`](../../das/cli/deploy_layout.py)",
    ),
    "reference/artifacts.md": (
        "Artifacts and states of a run",
        "`ARTIFACTS` and `RUN_STATES` in [`tasks/artifacts.py`](../../tasks/artifacts.py)",
    ),
}


def reader_page(path: str) -> str:
    """The committed file at a generated page's path (tests/test_docs.py holds them equal)."""
    title, where = READER_PAGES[path]
    return (
        f"# {title}\n\n"
        "This page is generated from the code each time the site is built: read it on the site "
        "(`das docs`, or `das docs --no-serve` for its `file://` address). This file only "
        f"keeps its place for links read in the Markdown. Without the site: {where}.\n"
    )


BLOCKS: dict[str, Callable[[], str]] = {
    "layers": layers_block,
    "output-columns": output_columns_block,
    "phsafe-tables": phsafe_tables_block,
    "validation-checks": validation_checks_block,
    "run-state": run_state_block,
    "readme-commands": readme_commands_block,
}
_MARKER = re.compile(r"^<!-- das:([a-z-]+) -->$", re.M)
# A tutorial's block that tests/test_tutorial.py runs: shown with a title that says so.
_TESTED = re.compile(r'^<!-- test: [a-z-]+(?: expect="[^"]*")? -->\n```bash$', re.M)
_TESTED_TITLE = '```bash title="tested: run as typed by tests/test_tutorial.py"'


# -- the MkDocs events ---------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, page in PAGES.items():
        kept = files.get_file_from_path(path)  # the committed file for Markdown readers
        if kept is not None:
            files.remove(kept)
        files.append(File.generated(config, path, content=page()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in BLOCKS:
            raise ValueError(f"{page.file.src_uri}: unknown generated block {name!r}")
        return BLOCKS[name]()

    markdown = _TESTED.sub(_TESTED_TITLE, markdown)
    return _MARKER.sub(replace, markdown)
