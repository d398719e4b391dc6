"""`das layout --root ROOT ...`: build the production layout `das deploy` reads, from the files
an operator has — `das synth` output folders, the Census Bureau's files — and check it.

Which files go where is :data:`das.cli.deploy_layout.PRODUCTS`, the table `das deploy` checks
against: one flag per product names its records folder (``--safetab-p DIR``, ``--phsafe-us
DIR``, ``--phsafe-pr DIR``, ``--swap DIR``), and one its parameters when they are not in that
folder (``--safetab-p-params DIR``: config.json and the four spec files; ``--phsafe-us-config
FILE``, ``--phsafe-pr-config FILE``). Records are found by name as the readers find them
(``<stem>.txt|.csv`` or ``<stem>.parquet``); a PHSafe config must be its pass's (Puerto Rico:
``state_filter ["72"]``). Nothing reads a record: only names, file types and sizes.

Everything is planned first, and any problem — an input missing, ambiguous or not a regular
file, a wrong config, a file already in the root, a hard link across file systems, too little
free space — is named, by path, in one message before anything is made (exit 2). Then each
file is made (copied whole under a temporary name and renamed, so no half-copied file ever
has its real name), listed, and the root is checked as `das deploy` checks it; the last line
is the `das deploy` command to run next.

``--link`` hard-links the records instead of copying them (one file, two names: no space, no
time; the source and the root must be on one file system). Not symbolic links: a link that
points back into the operator's folders dangles as soon as that folder moves or on a worker
host that mounts only the root, and `das deploy` refuses dangling links. The parameters
(config.json, spec files) are always copied: a later edit of the source must not change a
deployed parameter. Exit codes: 0 built and checked, 1 a file could not be made, 2 a usage
error or a problem named before anything was made.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as replace_field
from pathlib import Path

from das.cli.arguments import resolved_path
from das.cli.deploy_layout import PRODUCTS, Product, checkout_root, layout_problems
from das.io.tables import TableSpec, not_a_regular_file
from das.specs.race_specs import SPEC_FILES

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
RECORD_SUFFIXES = (".txt", ".csv", ".parquet")  # recognised; each reader takes one text suffix
SPACE_MARGIN = 1.05  # a copy leaves this much of what it needs free (metadata, other writers)


@dataclass(frozen=True)
class Placement:
    """One file of the layout: where it comes from, where it goes, and how."""

    source: Path
    target: Path
    link: bool  # a hard link (records under --link); else a copy
    others: tuple[Path, ...] = ()  # names the readers would take instead (its other format)
    replaces: tuple[Path, ...] = ()  # files removed (--replace): the target, its other format
    in_place: str | None = None  # why the target already is the source, when it is
    note: str = ""


def _config_option(product: Product) -> str | None:
    """The flag naming the product's parameters apart from its records, if it has any."""
    if product.config is None:
        return None
    return f"--{product.name}-params" if product.spec_files else f"--{product.name}-config"


def _records_help(product: Product) -> str:
    def names(specs: tuple[TableSpec, ...]) -> str:
        return ", ".join(spec.stem for spec in specs)

    suffix = product.records[0].text_suffix
    optional = f" (and {names(product.optional)} when present)" if product.optional else ""
    parameters = ""
    if product.spec_files:
        parameters = "; also config.json and the four spec files unless --safetab-p-params"
    elif product.config is not None:
        parameters = f"; also config.json unless {_config_option(product)}"
    return (
        f"folder with {names(product.records)}{optional} ({suffix} or .parquet) for "
        f"{product.data}/{parameters}"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    layout = subparsers.add_parser(
        "layout",
        help="build the production layout `das deploy --root` reads, from your files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    layout.add_argument(
        "--root", required=True, type=resolved_path, help="the folder to build (das_root)"
    )
    for product in PRODUCTS:
        layout.add_argument(
            f"--{product.name}",
            dest=_dest(product),
            type=resolved_path,
            default=None,
            metavar="DIR",
            help=_records_help(product),
        )
        option = _config_option(product)
        if option is not None:
            what = (
                "folder with config.json and the four spec files"
                if product.spec_files
                else "config.json of the pass"
                + (' (Puerto Rico: state_filter ["72"])' if product.pass_name == "PR" else "")
            )
            layout.add_argument(
                option,
                dest=_dest(product, "params"),
                type=resolved_path,
                default=None,
                metavar="DIR" if product.spec_files else "FILE",
                help=f"{what} (default: in --{product.name} DIR)",
            )
    how = layout.add_mutually_exclusive_group()
    how.add_argument(
        "--copy",
        dest="link",
        action="store_false",
        help="copy the records (default)",
    )
    how.add_argument(
        "--link",
        dest="link",
        action="store_true",
        help="hard-link the records (same file system; parameters are copied anyway)",
    )
    layout.add_argument(
        "--replace",
        action="store_true",
        help="replace files already in the root (default: refuse, naming them)",
    )
    layout.add_argument(
        "--dry-run", action="store_true", help="say what would be made; make nothing"
    )
    layout.set_defaults(handler=layout_command, link=False)


def _dest(product: Product, what: str = "records") -> str:
    """The argparse name of the product's records flag, or of its parameters flag."""
    flag = _config_option(product) if what == "params" else f"--{product.name}"
    return str(flag)[2:].replace("-", "_")


# -- planning: every file and every problem, before anything is made -----------------------------


def _find_records(folder: Path, spec: TableSpec, required: bool) -> tuple[Path | None, list[str]]:
    """``spec``'s file in ``folder`` as the readers find it (``das.io.tables.resolve_input``),
    or the problems that stop it, each naming a path."""
    accepted = [folder / f"{spec.stem}{spec.text_suffix}", folder / f"{spec.stem}.parquet"]
    others = [folder / f"{spec.stem}{suffix}" for suffix in RECORD_SUFFIXES]
    others = [path for path in others if path not in accepted and os.path.lexists(path)]
    problems = [p for path in accepted if (p := not_a_regular_file(path)) is not None]
    present = [path for path in accepted if path.is_file()]
    if len(present) > 1:
        problems.append(f"{present[0]} and {present[1].name} both exist: say which by removing one")
    for path in others:
        problems.append(
            f"{path}: the {spec.name} records are read as {accepted[0].name} or "
            f"{accepted[1].name} ({'|' if spec.delimiter == '|' else ','}-delimited text or "
            "Parquet): rename it if that is what it is"
        )
    if not present and not problems and required:
        near = _same_name_other_case(folder, accepted)
        problems.append(f"{accepted[0]} (or {accepted[1].name}) is missing{near}")
    return (present[0] if len(present) == 1 and not problems else None), problems


def _same_name_other_case(folder: Path, wanted: list[Path]) -> str:
    """``: found grf-c.txt; the name must be exactly GRF-C.txt`` (names are read, not files)."""
    try:
        names = {path.name.lower(): path.name for path in folder.iterdir()}
    except OSError:
        return ""
    for path in wanted:
        found = names.get(path.name.lower())
        if found is not None and found != path.name:
            return f" (found {found}: the name must be exactly {path.name})"
    return ""


def _regular(path: Path) -> str | None:
    if (problem := not_a_regular_file(path)) is not None:
        return problem
    return None if path.is_file() else f"{path} is missing"


def _config_problem(product: Product, config: Path) -> tuple[str, str | None]:
    """A config that cannot serve the product: (note for the listing, problem or None)."""
    from das.specs.config import ConfigError, load_phsafe_config, load_safetab_p_config

    try:
        if product.pass_name is None:
            load_safetab_p_config(config)
            return "", None
        pass_name = load_phsafe_config(config).pass_name
    except (ConfigError, ValueError, OSError) as exc:
        return "", f"{config}: not a usable {product.name} config: {exc}"
    if pass_name != product.pass_name:
        wanted = 'Puerto Rico\'s, state_filter ["72"]' if product.pass_name == "PR" else "the US's"
        option = _config_option(product)
        return "", (
            f"{config} is the {pass_name} pass's config; {product.name} needs {wanted} "
            f"(give it with {option} FILE)"
        )
    return ('Puerto Rico: state_filter ["72"]' if pass_name == "PR" else "US pass"), None


def _parameters(
    product: Product, root: Path, records: Path, params: Path | None
) -> tuple[list[Placement], list[str]]:
    """The product's config (and spec files) and their problems."""
    if product.config is None:
        return [], []
    option = _config_option(product)
    target = root / product.config
    if product.spec_files:
        folder = params or records
        sources = [folder / "config.json", *(folder / name for name in SPEC_FILES)]
        targets = [target, *(target.parent / name for name in SPEC_FILES)]
    else:
        sources, targets = [params or records / "config.json"], [target]
    problems = [p for source in sources if (p := _regular(source)) is not None]
    if problems:
        if params is None:
            problems.append(f"(the parameters can be given apart: {option} ...)")
        return [], problems
    note, problem = _config_problem(product, sources[0])
    if problem is not None:
        return [], [problem]
    notes = [note] + [""] * (len(sources) - 1)
    return [
        Placement(source, target_path, link=False, note=text)
        for source, target_path, text in zip(sources, targets, notes, strict=True)
    ], []


def plan_product(
    root: Path, product: Product, records: Path, params: Path | None, link: bool
) -> tuple[list[Placement], list[str]]:
    """Every file of ``product`` from ``records`` (and ``params``), and every problem."""
    if not records.is_dir():
        return [], [f"--{product.name} {records}: not a folder"]
    placements, problems = _parameters(product, root, records, params)
    found = [(spec, True) for spec in product.records] + [(s, False) for s in product.optional]
    for spec, required in found:
        path, trouble = _find_records(records, spec, required)
        problems += trouble
        if path is not None:
            folder = root / product.data
            names = (f"{spec.stem}{spec.text_suffix}", f"{spec.stem}.parquet")
            others = tuple(folder / name for name in names if name != path.name)
            placements.append(Placement(path, folder / path.name, link, others))
    return placements, problems


def _already(item: Placement) -> str | None:
    """Why the target already holds the source, or None: the same file (a hard link), the
    same bytes (parameters: small, public), or for a copied record file the same size and
    modification time (a copy keeps both; a record file is not read to compare it)."""
    source, target = item.source, item.target
    if target.is_symlink() or not target.is_file():
        return None
    if os.path.samefile(source, target):
        return "the same file"
    if item.link:
        return None
    if not item.others:  # a parameter file
        return "the same bytes" if filecmp.cmp(source, target, shallow=False) else None
    a, b = source.stat(), target.stat()
    if (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns):
        return "the same size and modification time"
    return None


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _against_the_root(
    placements: list[Placement], replace: bool
) -> tuple[list[Placement], list[str]]:
    """Placements checked against what the root holds: a file in place of a target (or of
    its other format) is a problem unless ``replace``; a folder there always is."""
    checked: list[Placement] = []
    problems: list[str] = []
    for item in placements:
        target = item.target
        present = [path for path in (target, *item.others) if os.path.lexists(path)]
        same = _already(item) if present == [target] else None
        if same is not None:
            checked.append(replace_field(item, in_place=same))
            continue
        folders = [path for path in present if path.is_dir() and not path.is_symlink()]
        problems += [f"{path} is a folder: move it away" for path in folders]
        if present and not folders and not replace:
            names = " and ".join(str(path) for path in present)
            problems.append(f"{names} already in the root (--replace to replace)")
        checked.append(replace_field(item, replaces=tuple(present)))
    return checked, problems


def _device(path: Path) -> int:
    return path.stat().st_dev


def _resource_problems(root: Path, placements: list[Placement]) -> list[str]:
    """Hard links that would cross file systems; copies that would not fit."""
    anchor = _nearest_existing(root)
    device = _device(anchor)
    problems = [
        f"{item.source} is on another file system than {root}: a hard link cannot cross it "
        "(use --copy, or a root on that file system)"
        for item in placements
        if item.link and item.in_place is None and _device(item.source) != device
    ]
    needed = sum(
        item.source.stat().st_size for item in placements if not item.link and item.in_place is None
    )
    free = shutil.disk_usage(anchor).free
    if needed * SPACE_MARGIN > free:
        problems.append(
            f"copying {_size(needed)} into {root} needs that much free space; "
            f"{_size(free)} is free there (--link makes no copy)"
        )
    return problems


# -- making it ----------------------------------------------------------------------------------


def _make(item: Placement) -> None:
    """One file, never half-made under its real name; what it replaces goes only once the new
    file is complete."""
    target = item.target
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.das-layout-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    try:
        if item.link:
            os.link(item.source.resolve(), temporary)
        else:
            shutil.copyfile(item.source, temporary)
            shutil.copystat(item.source, temporary)  # its mode and times: a re-run knows it
        for old in item.replaces:
            if old != target:
                old.unlink()
        if target in item.replaces:
            os.replace(temporary, target)
        else:
            os.link(temporary, target)  # fails, rather than overwrite, if one appeared meanwhile
    finally:
        temporary.unlink(missing_ok=True)


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _listing(root: Path, item: Placement, dry_run: bool, width: int) -> str:
    if item.in_place:
        how = f"already in place ({item.in_place})"
    else:
        verb = (
            ("hard link to" if item.link else "copy of")
            if not dry_run
            else ("would hard-link" if item.link else "would copy")
        )
        how = f"{verb} {item.source} ({_size(item.source.stat().st_size)})"
        replaced = [path.name for path in item.replaces if path != item.target]
        if item.target in item.replaces:
            how += ", replacing the file there"
        if replaced:
            how += f", removing {', '.join(replaced)}"
    note = f" [{item.note}]" if item.note else ""
    return f"  {item.target.relative_to(root)!s:<{width}}  {how}{note}"


def _das_command() -> str:
    """How this `das` was started, as the operator would type it again."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("das")
    if program.name != "das":
        return "das"
    absolute = Path(os.path.abspath(program))
    try:
        return shlex.quote(str(absolute.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(absolute))


# Where the production tutorial has the service account keep its run key (`das deploy
# --run-key`): the next command names it when it is there and DAS_RUN_KEY is not set.
SERVICE_RUN_KEY = Path("~/.das/run-key")


def next_command(root: Path, ready: Sequence[Product]) -> tuple[str, list[str]]:
    """The `das deploy` line for ``root``, and what it needs (its placeholders, settings)."""
    from das.trust import LEDGER_ENV, LEDGER_URL_ENV, RUN_KEY_ENV

    parts = [_das_command(), "deploy", "--root", shlex.quote(str(root))]
    checkout = checkout_root()
    if checkout is not None:
        parts += ["--checkout", shlex.quote(str(checkout))]
    notes = []
    run_key = os.environ.get(RUN_KEY_ENV) or (
        str(SERVICE_RUN_KEY.expanduser()) if SERVICE_RUN_KEY.expanduser().is_file() else None
    )
    if run_key:
        parts += ["--run-key", shlex.quote(run_key)]
    else:
        parts += ["--run-key", "RUN_KEY"]
        notes.append(
            "RUN_KEY: the service account's run key on the worker hosts, e.g. "
            f"{SERVICE_RUN_KEY} (ssh-keygen -t ed25519 -N '' -f {SERVICE_RUN_KEY}); the ledger's "
            "charter names its public half"
        )
    if os.environ.get(LEDGER_URL_ENV):
        parts += ["--ledger-url", shlex.quote(os.environ[LEDGER_URL_ENV])]
    elif os.environ.get(LEDGER_ENV):
        parts += ["--ledger", shlex.quote(os.environ[LEDGER_ENV])]
    elif (root / "ledger").is_dir():  # where the production tutorial's `das ledger init` puts it
        parts += ["--ledger", shlex.quote(str(root / "ledger"))]
    else:
        parts += ["--ledger", "LEDGER_DIR"]
        notes.append(
            "LEDGER_DIR: the privacy ledger's folder, made once by `das ledger init --ledger "
            "LEDGER_DIR` (or --ledger-url URL: PostgreSQL)"
        )
    if tuple(ready) != PRODUCTS:
        parts += ["--products", ",".join(product.name for product in ready)]
    if not os.environ.get("PREFECT_API_URL"):
        notes.append(
            "with PREFECT_API_URL and DAS_PREFECT_AUTH_FILE set (das docs: Tutorials, Your first "
            "production release)"
        )
    return " ".join(parts), notes


def plan_layout(
    root: Path,
    sources: Mapping[Product, tuple[Path, Path | None]],
    link: bool,
    replace: bool,
) -> tuple[list[Placement], list[str]]:
    """Every file of the products in ``sources`` (their records folder, their parameters when
    apart) under ``root``, and every problem that stops it; nothing is made."""
    placements: list[Placement] = []
    problems: list[str] = []
    for product, (records, params) in sources.items():
        made, trouble = plan_product(root, product, records, params, link)
        placements += made
        problems += [f"{product.name}: {problem}" for problem in trouble]
    placements, trouble = _against_the_root(placements, replace)
    problems += trouble
    if not problems:
        problems += _resource_problems(root, placements)
    return placements, problems


def build_layout(placements: Sequence[Placement]) -> None:
    """Make every planned file (:func:`plan_layout`); OSError names the one that failed."""
    for item in placements:
        if item.in_place is None:
            try:
                _make(item)
            except OSError as exc:
                raise OSError(f"{item.target}: {exc}") from exc


def layout_command(args: argparse.Namespace) -> int:
    root: Path = args.root
    chosen = [p for p in PRODUCTS if getattr(args, _dest(p)) is not None]
    for product in PRODUCTS:
        option = _config_option(product)
        if option and getattr(args, _dest(product, "params")) and product not in chosen:
            return _usage(f"{option} needs --{product.name} DIR (its records)")
    if not chosen:
        flags = ", ".join(f"--{product.name} DIR" for product in PRODUCTS)
        return _usage(f"name at least one product's records folder: {flags}")
    if os.path.lexists(root) and not root.is_dir():
        return _usage(f"--root {root}: exists and is not a folder")
    sources = {
        product: (getattr(args, _dest(product)), getattr(args, _dest(product, "params"), None))
        for product in chosen
    }
    placements, problems = plan_layout(root, sources, args.link, args.replace)
    names = ", ".join(product.name for product in chosen)
    if problems:
        print(
            f"das layout: error: {root} cannot be laid out for {names} "
            f"({len(problems)} problem(s)); nothing was made:",
            *(f"  {problem}" for problem in problems),
            sep="\n",
            file=sys.stderr,
        )
        return EXIT_USAGE
    width = max(len(str(item.target.relative_to(root))) for item in placements)
    if args.dry_run:
        print(f"das layout: {root} for {names} (dry run: nothing is made)")
        print(*(_listing(root, item, True, width) for item in placements), sep="\n")
        return EXIT_OK
    print(f"das layout: {root} for {names}", flush=True)
    for item in placements:  # one at a time, listed as made: a national copy takes minutes
        try:
            build_layout([item])
        except OSError as exc:
            print(f"das layout: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(_listing(root, item, False, width), flush=True)
    left = layout_problems(root, chosen)  # the check `das deploy` runs
    if left:
        print("das layout: error: the root still fails the check of `das deploy`:",
              *(f"  {p}" for p in left), sep="\n", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    ready = [product for product in PRODUCTS if not layout_problems(root, [product])]
    print(
        f"das layout: checked as `das deploy` checks it: {root} holds every file the "
        f"deployments of {', '.join(product.name for product in ready)} read."
    )
    command, needs = next_command(root, ready)
    print(f"Next ({'; '.join(needs)}):" if needs else "Next:", f"  {command}", sep="\n")
    return EXIT_OK


def _usage(message: str) -> int:
    print(f"das layout: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """`das layout ...` alone (the full `das` parser registers this module the same way)."""
    parser = argparse.ArgumentParser(prog="das")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)
