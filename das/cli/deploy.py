"""`das deploy`: create the work pool and register every deployment of ``deploy/prefect.yaml``.

One command for the operator, built on the ``prefect`` command of the same virtualenv (the
engine never imports Prefect):

1. the Prefect variables the deployments read their paths from (``das_checkout``, ``das_root``,
   ``das_ledger_dir``) are set from ``--checkout``/``--root``/``--ledger`` when given, and must
   exist otherwise; the privacy ledger there must be initialized (``das ledger init``: a
   deployment never creates one), and its id becomes ``das_ledger_id``, which every run checks
   (``DAS_LEDGER_ID``: a ledger swapped at that path is refused);
2. ``--local`` is the profile that runs from this checkout: the checkout is this one, the root
   ``.das-local/`` inside it (``--root`` to change), the ledger ``<root>/ledger`` (created when
   absent), and small synthetic inputs are written in the root's layout when absent, with one
   approval in the ledger for the first release of each product (later ones pause for an
   approval in the UI, as in production);
3. the root (``--root``, the local profile's, or the server's ``das_root``) is checked against
   the files the deployments read (:mod:`das.cli.deploy_layout`): every missing file, and
   every input that is not a regular file, is named by path in one message (exit 2) and
   nothing is registered. ``--products safetab-p,phsafe-us,phsafe-pr,swap`` registers only
   those products' deployments (a release and its validate-only twin; ``swap-households``)
   and checks only their files; ``privacy-audit`` reads no input and is always registered;
4. the process work pool the deployments name (``das-enclave``) is created when missing;
5. ``prefect deploy --prefect-file deploy/prefect.yaml`` registers the deployments (``--all``,
   or ``--name`` for each deployment of the products chosen), their runs beating every
   ``DAS_HEARTBEAT_SECONDS`` (the variable ``das_heartbeat_seconds``);
6. the automation that marks a run Crashed when its heartbeats stop for
   ``DAS_CRASH_AFTER_SECONDS`` (a lost host) is created or made to match
   (:mod:`flows.crash_detection`);
7. what the server now holds is printed, with the ``das prefect ...`` commands that start a
   worker and trigger each deployment. Prefect's own output is kept back (shown when a Prefect
   command fails): its hints name the plain ``prefect`` command, which an authenticated
   server refuses.

Needs ``PREFECT_API_URL`` (the server the deployments go to) and, for a server with
authentication, its auth string (``DAS_PREFECT_AUTH_FILE``, a file only its owner can read; or
``PREFECT_API_AUTH_STRING``): the server is asked first, and an unreachable server or refused
credentials stop here; a server that answers anonymous calls gets a warning. Exit codes: 0
registered, 1 a Prefect command failed, 2 usage error (no API URL, server unreachable or
credentials refused, a missing variable, no checkout, a root missing files).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from das.cli.arguments import resolved_path
from das.cli.deploy_layout import (
    PREFECT_FILE,
    PRODUCT_NAMES,
    PRODUCTS,
    Product,
    checkout_root,
    deployment_names,
    layout_problems,
    select_products,
)
from das.cli.prefect_wrapper import das_command, prefect_command
from das.heartbeats import Liveness, liveness
from das.prefect_auth import CLIENT_AUTH, basic_authorization, server_accepts

if TYPE_CHECKING:
    from das.trust import LedgerStore
    from flows.crash_detection import Ensured

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
WORK_POOL = "das-enclave"  # the work pool every deployment of deploy/prefect.yaml names
LOCAL_ROOT = ".das-local"
LOCAL_PERSONS = 20_000
LOCAL_SEED = 2020
# Prefect variable → what it names (the deployments' paths; see deploy/prefect.yaml).
VARIABLES = {
    "das_checkout": "the checkout on the worker hosts (with its .venv)",
    "das_root": "the folder of inputs and outputs (layout in deploy/prefect.yaml)",
    "das_run_key": "the run key on the worker hosts (DAS_RUN_KEY: signs each release)",
    "das_heartbeat_seconds": "the flow runs' heartbeat interval (DAS_HEARTBEAT_SECONDS)",
}
# The privacy ledger the deployments use, set together from the ledger options: a folder, or a
# database URL (no password: the file named by das_ledger_password_file holds it), and the
# ledger's id, which every run checks (DAS_LEDGER_ID).
LEDGER_VARIABLES = ("das_ledger_dir", "das_ledger_url", "das_ledger_password_file", "das_ledger_id")
# The local profile's release deployments: product, config and input folder under the root.
LOCAL_RELEASES = (
    ("safetab-p", "safetab-p/params/config.json", "safetab-p/input"),
    ("phsafe", "phsafe/us/config.json", "phsafe/us/input"),
    ("phsafe", "phsafe/pr/config.json", "phsafe/pr/input"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    deploy = subparsers.add_parser(
        "deploy",
        help="create the work pool and register every Prefect deployment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deploy.add_argument(
        "--local",
        action="store_true",
        help=f"profile of this checkout: inputs and outputs under {LOCAL_ROOT}/ (demo data)",
    )
    deploy.add_argument("--checkout", type=resolved_path, default=None, help="sets das_checkout")
    deploy.add_argument("--root", type=resolved_path, default=None, help="sets das_root")
    deploy.add_argument(
        "--run-key",
        type=resolved_path,
        default=None,
        help="sets das_run_key: the service account's run key file on the worker hosts (an "
        "OpenSSH ed25519 key, 0600; the charter names its public half)",
    )
    ledger = deploy.add_mutually_exclusive_group()
    ledger.add_argument("--ledger", type=resolved_path, default=None, help="sets das_ledger_dir")
    ledger.add_argument(
        "--ledger-url",
        default=None,
        help="a PostgreSQL ledger every worker host reaches (sets das_ledger_url; its password "
        "from DAS_LEDGER_PASSWORD_FILE, a 0600 file, whose path sets das_ledger_password_file)",
    )
    deploy.add_argument(
        "--products",
        type=products_option,
        default=PRODUCTS,
        metavar="NAME[,NAME...]",
        help=f"register only these products' deployments ({','.join(PRODUCT_NAMES)}; "
        "default: all); only their files are checked under the root",
    )
    deploy.set_defaults(handler=deploy_command)


def products_option(value: str) -> tuple[Product, ...]:
    """``--products a,b``: the products named; an unknown name is a usage error."""
    try:
        return select_products(value.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def prefect(*args: str, cwd: Path | None = None, quiet: bool = False) -> int:
    """Run one ``prefect`` command without prompts; its exit code."""
    output = subprocess.DEVNULL if quiet else None
    command = [*prefect_command(), "--no-prompt", *args]
    return subprocess.run(command, cwd=cwd, stdout=output, stderr=output, check=False).returncode


def server_variable(name: str, timeout: float = 15) -> str | None:
    """The string value of Prefect variable ``name`` on the server, None when it is not set.

    Read through the REST API, not ``prefect variable get``: that prints through Rich, which
    wraps a long path at the terminal width and reads ``[...]`` in it as markup."""
    api = os.environ["PREFECT_API_URL"].rstrip("/")
    auth = os.environ.get(CLIENT_AUTH)
    headers = {"Authorization": basic_authorization(auth)} if auth else {}
    url = f"{api}/variables/name/{urllib.parse.quote(name, safe='')}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=timeout) as response:  # fmt: skip
            value = json.load(response).get("value")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return value if isinstance(value, str) and value else None


def layout_refusal(root: Path, problems: list[str], products: Sequence[Product]) -> str:
    """The one message of a root that lacks files: every problem on its own line."""
    chosen = ", ".join(product.name for product in products)
    lines = [
        f"das deploy: error: {root} does not hold what the deployments of {chosen} read "
        f"({len(problems)} problem(s)); nothing was registered:",
        *(f"  {problem}" for problem in problems),
        f"The layout: {PREFECT_FILE} (its first comment) and "
        "docs/tutorials/first-production-release.md. To register only some products: "
        f"--products {','.join(PRODUCT_NAMES)} (a subset).",
        f"To build it from your files (`das synth` folders, the Census files): das layout "
        f"--root {root} {' '.join(f'--{p.name} DIR' for p in products)} (das layout --help).",
    ]
    return "\n".join(lines)


def check_root(root: Path, products: Sequence[Product]) -> int | None:
    """Before anything is registered: None when ``root`` holds every file the ``products``'
    deployments read; else the refusal on stderr and exit 2."""
    problems = layout_problems(root, products)
    if not problems:
        return None
    print(layout_refusal(root, problems, products), file=sys.stderr)
    return EXIT_USAGE


def set_variables(values: dict[str, str | None]) -> dict[str, bool]:
    """Set each variable of ``values`` that has a value (a string, so that a path is never read
    as a number or a list); whether each is set on the server now. Through one API client, not
    a ``prefect variable set`` process each (1.7 CPU-s and 4 s apiece on 2 cores)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    with get_client(sync_client=True) as client:
        for name, value in values.items():
            if value is None:
                continue
            if client.read_variable_by_name(name) is None:
                client.create_variable(VariableCreate(name=name, value=value))
            else:
                client.update_variable(VariableUpdate(name=name, value=value))
        return {name: client.read_variable_by_name(name) is not None for name in values}


def prepare_local_inputs(root: Path) -> None:
    """Small synthetic inputs in the layout of ``deploy/prefect.yaml``, for each product that
    lacks them (a complete product is kept): `das synth` folders laid out by `das layout`'s
    builder (hard links), the Puerto Rico pass from its own config."""
    from das.cli import main
    from das.cli.layout import build_layout, plan_layout

    missing = [product for product in PRODUCTS if layout_problems(root, [product])]
    if not missing:
        return
    seed = ["--persons", str(LOCAL_PERSONS), "--seed", str(LOCAL_SEED)]
    synth = root / ".synth"  # removed below: the layout keeps its files by hard links
    shutil.rmtree(synth, ignore_errors=True)
    folders = {"safetab-p": "safetab-p", "phsafe-us": "phsafe-us", "phsafe-pr": "phsafe-pr",
               "swap": "phsafe-us"}  # fmt: skip
    needed = {folders[product.name] for product in missing}
    if "safetab-p" in needed:
        _checked(main(["synth", "safetab-p", "--output", str(synth / "safetab-p"), *seed]))
    for pass_name in ("us", "pr"):
        if f"phsafe-{pass_name}" not in needed:
            continue
        config = synth / f"phsafe-{pass_name}.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(local_phsafe_config(pass_name), indent=2))
        output = str(synth / f"phsafe-{pass_name}")
        _checked(main(["synth", "phsafe", "--config", str(config), "--output", output, *seed]))
    sources = {product: (synth / folders[product.name], None) for product in missing}
    placements, problems = plan_layout(root, sources, link=True, replace=True)
    try:
        if problems:
            raise LocalInputsFailed("laying out the local inputs: " + "; ".join(problems))
        build_layout(placements)
    except OSError as exc:
        raise LocalInputsFailed(f"laying out the local inputs: {exc}") from exc
    finally:
        shutil.rmtree(synth, ignore_errors=True)


def local_phsafe_config(pass_name: str) -> dict:
    """The demo PHSafe config for a pass: the US as shipped; Puerto Rico its state only (no
    nation level, so the ``usa_*`` budgets are 0), as the 2020 production PR config."""
    from das.cli.synth import DEFAULT_PHSAFE_CONFIG

    config = json.loads(Path(DEFAULT_PHSAFE_CONFIG).read_text())
    if pass_name == "pr":
        config["state_filter"] = ["72"]
        for budgets in config["privacy_budget"].values():
            for key in budgets:
                if key.startswith("usa_"):
                    budgets[key] = 0.0
    return config


def local_keys(root: Path) -> tuple[Path, Path]:
    """The local profile's approver key and its run key, under ``<root>/keys`` (created once,
    0600): on one account, for trying the production path, never for production — where the
    approvers' keys are their own and the run key the service account's."""
    from das.trust import generate_key

    keys = root / "keys"
    keys.mkdir(parents=True, exist_ok=True, mode=0o700)
    approver, runner = keys / "local-approver", keys / "local-run-key"
    for path, comment in ((approver, "das deploy --local approver"),
                          (runner, "das deploy --local run key")):  # fmt: skip
        if not path.exists():
            generate_key(path, comment)
    return approver, runner


def ledger_id(store: LedgerStore, local: bool, root: Path | None = None) -> str:
    """The id of the initialized ledger in ``store``; the local profile creates it, chartered
    with its local approver key (quorum 1) and run key. :class:`LedgerNotReady` otherwise."""
    from das.refusal import RunRefused
    from das.trust import PrivacyLedger

    try:
        blank = store.file_state() == "absent" or (
            store.file_state() == "server" and not store.has_tables()
        )
        if local and blank and root is not None:
            info = create_local_ledger(store, root)
            approver = root / "keys" / "local-approver"
            where = f"--ledger {store.path.parent}" if store.path else '--url "$DAS_LEDGER_URL"'
            print(f"das deploy: created the local privacy ledger {info.ledger_id} at "
                  f"{info.location}, chartered with the local approver key (quorum 1): "
                  f"approvals are signed with --key {approver}; its trust root is pinned "
                  f"beside the run key ({root / 'keys' / 'trust-root.json'}), and releases are "
                  f"verified against it: das ledger trust-root {where} --output "
                  "trust-root.json", flush=True)  # fmt: skip
            return info.ledger_id
        return PrivacyLedger(store).require_intact().ledger_id
    except RunRefused as exc:
        where = f"--ledger {store.path.parent}" if store.path else "--url URL"
        raise LedgerNotReady(
            f"{exc}. Create it first: das ledger init {where} --approvers FILE --quorum K --key KEY"
        ) from None


def _note_missing_pin(run_key: str | None, store: LedgerStore) -> None:
    """Say so when the run key's folder holds no trust root: every production run of these
    deployments is refused until the service account pins one (das.trust.root)."""
    from das.trust import PINNED_ROOT_FILE

    if not run_key or not Path(run_key).exists():
        return  # the key is on the worker hosts, not here: the run itself checks
    pin = Path(run_key).resolve().parent / PINNED_ROOT_FILE
    if not pin.exists():
        where = f"--ledger {store.path.parent}" if store.path else '--url "$DAS_LEDGER_URL"'
        print(f"das deploy: note: no trust root beside the run key ({pin}): every production "
              "run is refused until the service account pins its ledger's root there, once its "
              f"charter is in force: das ledger trust-root {where} --output "
              f"{shlex.quote(str(pin))}", flush=True)  # fmt: skip


def create_local_ledger(store: LedgerStore, root: Path) -> Any:
    """A chartered ledger for the local profile (see :func:`local_keys`)."""
    import uuid

    from das.io.atomic import atomic_write_bytes
    from das.trust import (
        CHARTER_NAMESPACE,
        PINNED_ROOT_FILE,
        PrivacyLedger,
        canonical_json,
        charter_statement,
        ledger_ceilings,
        public_key_of,
        root_document,
        sign,
    )

    approver, runner = local_keys(root)
    ledger_id = str(uuid.uuid4())
    limits = ledger_ceilings(None)
    statement = charter_statement(
        ledger_id=ledger_id, approvers=[public_key_of(approver)], quorum=1,
        runners=[public_key_of(runner)], ceilings=limits, previous=None,
    )  # fmt: skip
    signature = sign(canonical_json(statement), CHARTER_NAMESPACE, approver)
    ledger = PrivacyLedger.initialize(
        store, limits, ledger_id=ledger_id, charter=(statement, signature)
    )
    # Its trust root beside the run key, as a production run requires (the pin of this ledger:
    # a root left there by an earlier local ledger, now gone, is replaced).
    pin = root_document(ledger.charter_chain().chain)
    atomic_write_bytes(runner.parent / PINNED_ROOT_FILE, pin)
    return ledger.info()


def approve_local_releases(root: Path, store: LedgerStore) -> None:
    """One approval per release deployment of the local profile, signed by the local approver
    key, unless one is open: the first run of each spends without a pause; a second pauses for
    the approvers' signatures in the UI."""
    from das.spend_approval import propose, sealed_spend, sign_proposal
    from das.trust import PrivacyLedger

    ledger = PrivacyLedger(store)
    approver, _ = local_keys(root)
    for product, config, data in LOCAL_RELEASES:
        sealed, _plan = sealed_spend(product, root / config, root / data)
        if ledger.has_open_approval(product, sealed.digest):
            continue
        proposal = propose(
            ledger, product, root / config, root / data,
            note="das deploy --local: first release of the local inputs",
        )  # fmt: skip
        approval = sign_proposal(ledger, proposal, approver)
        print(
            f"das deploy: approved the first {product} release of {data} "
            f"({approval.approval_id}, signed by the local approver key)",
            flush=True,
        )


def ledger_values(args: argparse.Namespace, root: Path | None) -> tuple[LedgerStore, dict] | None:
    """The ledger the options (or, for the local profile, its default or the environment's
    DAS_LEDGER_URL) name, and the Prefect variables that tell the deployments; None when
    none is named (the variables on the server stay)."""
    from das.trust import LEDGER_PASSWORD_FILE_ENV, LedgerStore, configured_store

    secret = os.environ.get(LEDGER_PASSWORD_FILE_ENV, "")
    url = args.ledger_url or (os.environ.get("DAS_LEDGER_URL") if args.local else None)
    if args.ledger_url:
        from das.trust import url_without_password

        url_without_password(args.ledger_url, "--ledger-url")
    if url:
        store = configured_store({"DAS_LEDGER_URL": url, LEDGER_PASSWORD_FILE_ENV: secret})
        assert store is not None
        values = {
            "das_ledger_dir": "",
            "das_ledger_url": url,
            "das_ledger_password_file": str(Path(secret).resolve()) if secret else "",
        }
    elif args.ledger is not None or args.local:
        directory = (args.ledger or (root or Path()) / "ledger").resolve()
        store = LedgerStore.in_directory(directory)
        values = {
            "das_ledger_dir": str(directory),
            "das_ledger_url": "",
            "das_ledger_password_file": "",
        }
    else:
        return None
    return store, values


class LedgerNotReady(RuntimeError):
    """The deployments' privacy ledger is missing, uninitialized or broken."""


class LocalInputsFailed(RuntimeError):
    """A `das synth` step of the local profile failed (it printed why)."""


def _checked(code: int) -> None:
    if code != 0:
        raise LocalInputsFailed(f"preparing the local inputs failed (exit {code})")


def deploy_command(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        print(
            "das deploy: error: PREFECT_API_URL is not set (the server to register with, e.g. "
            "http://127.0.0.1:4200/api after `prefect server start`)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    refused = server_accepts("das deploy")
    if refused:
        return refused
    checkout = args.checkout.resolve() if args.checkout else checkout_root()
    if checkout is None or not (checkout / PREFECT_FILE).is_file():
        print(f"das deploy: error: no {PREFECT_FILE} here or in --checkout", file=sys.stderr)
        return EXIT_USAGE
    paths: dict[str, Path | None] = {
        "das_checkout": args.checkout, "das_root": args.root, "das_run_key": args.run_key,
    }  # fmt: skip
    root = None
    if args.local:
        root = (args.root or checkout / LOCAL_ROOT).resolve()
        paths = {
            "das_checkout": checkout, "das_root": root, "das_run_key": local_keys(root)[1],
        }  # fmt: skip
    from das.refusal import RunRefused

    try:
        ledger = ledger_values(args, root)
    except RunRefused as exc:
        print(f"das deploy: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.local and root is not None and ledger is not None:
        print(f"das deploy: local profile, inputs and outputs under {root}", flush=True)
        try:
            prepare_local_inputs(root)
            ledger_id(ledger[0], local=True, root=root)
            approve_local_releases(root, ledger[0])
        except (LocalInputsFailed, LedgerNotReady, RunRefused) as exc:
            print(f"das deploy: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
    layout_root = root if args.local else args.root
    if layout_root is None:
        try:
            named = server_variable("das_root")
        except (OSError, ValueError) as exc:
            print(f"das deploy: error: could not read variable das_root: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if named is None:
            print(
                "das deploy: error: Prefect variable das_root is not set: pass --root DIR "
                "(once), or --local",
                file=sys.stderr,
            )
            return EXIT_USAGE
        layout_root = Path(named)
    refused = check_root(layout_root.resolve(), args.products)
    if refused is not None:
        return refused
    values: dict[str, str | None] = {
        name: None if value is None else str(Path(value).resolve()) for name, value in paths.items()
    }
    settings = liveness()  # checked by `das` at start (das.cli.main)
    values["das_heartbeat_seconds"] = str(settings.heartbeat_seconds)
    if ledger is not None:
        try:
            identity = ledger_id(ledger[0], local=args.local, root=root)
        except LedgerNotReady as exc:
            print(f"das deploy: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        values.update(ledger[1], das_ledger_id=identity)
        _note_missing_pin(values.get("das_run_key"), ledger[0])
    else:
        values.update(dict.fromkeys(LEDGER_VARIABLES))
    try:
        is_set = set_variables(values)
    except Exception as exc:  # the server refused or did not answer: say so, do not trace
        print(f"das deploy: error: could not set the Prefect variables: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for name in values:
        if not is_set[name]:
            option = (
                "--ledger DIR or --ledger-url URL"
                if name in LEDGER_VARIABLES
                else (f"--{name.removeprefix('das_')} DIR")
            )
            print(
                f"das deploy: error: Prefect variable {name} is not set: pass {option} (once), "
                "or --local",
                file=sys.stderr,
            )
            return EXIT_USAGE
    if prefect("work-pool", "inspect", WORK_POOL, quiet=True) != 0:
        created = prefect_captured("work-pool", "create", WORK_POOL, "--type", "process")
        if created.returncode != 0:
            return prefect_failed("prefect work-pool create", created)
    selection = deploy_selection(args.products)
    registered = prefect_captured("deploy", "--prefect-file", str(PREFECT_FILE), *selection,
                                  cwd=checkout)  # fmt: skip
    if registered.returncode != 0:
        return prefect_failed("prefect deploy", registered)
    try:
        ensured = watch_for_crashes(settings)
        names = registered_deployments(deployment_names(args.products))
    except Exception as exc:  # the server answered the registration: report, do not trace
        print(f"das deploy: error: the deployments are registered, but {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(summary(names, ensured, settings, checkout))
    return EXIT_OK


def prefect_captured(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """One ``prefect`` command without prompts, its output kept: Prefect's own next-step hints
    (``prefect worker start ...``) fail against an authenticated server, which needs ``das
    prefect``; :func:`summary` prints the commands that work instead."""
    command = [*prefect_command(), "--no-prompt", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def prefect_failed(what: str, done: subprocess.CompletedProcess) -> int:
    """A failed Prefect command: its output (the reason), on stderr; exit 1."""
    print(f"das deploy: error: {what} failed (exit {done.returncode}); Prefect's output follows "
          "(any `prefect ...` command it suggests runs as `das prefect ...` here):",
          file=sys.stderr)  # fmt: skip
    for line in (done.stdout + done.stderr).splitlines():
        print(f"  {line}", file=sys.stderr)
    return EXIT_FAILED


def watch_for_crashes(settings: Liveness) -> Ensured:
    """The server's automation that marks a run Crashed when its heartbeats stop, made to
    match ``settings`` (:mod:`flows.crash_detection`)."""
    from prefect.client.orchestration import get_client

    from flows.crash_detection import ensure_crash_automation

    with get_client(sync_client=True) as client:
        return ensure_crash_automation(client, settings, update=True)


def registered_deployments(names: Sequence[str]) -> list[tuple[str, str]]:
    """``(flow/deployment, its schedules: "active", "inactive" or "")`` of the deployments
    ``names`` in the work pool, as the server now holds them, in the order of ``names``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import WorkPoolFilter, WorkPoolFilterName

    pool = WorkPoolFilter(name=WorkPoolFilterName(any_=[WORK_POOL]))
    with get_client(sync_client=True) as client:
        deployments = client.read_deployments(work_pool_filter=pool)
        flows = {flow.id: flow.name for flow in client.read_flows(work_pool_filter=pool)}
    found = {
        d.name: (
            f"{flows.get(d.flow_id, '?')}/{d.name}",
            "" if not d.schedules else
            "active" if any(s.active for s in d.schedules) else "inactive",
        )
        for d in deployments
    }  # fmt: skip
    return [found[name] for name in names if name in found]


def summary(
    names: Sequence[tuple[str, str]], ensured: Ensured, settings: Liveness, checkout: Path
) -> str:
    """What was registered and the next commands, each one that works as printed against the
    authenticated server (``das prefect``, which reads DAS_PREFECT_AUTH_FILE)."""
    from flows.crash_detection import AUTOMATION_NAME

    das = das_command(checkout)
    width = max((len(name) for name, _ in names), default=0)
    lines = [f"das deploy: registered {len(names)} deployment(s) in work pool {WORK_POOL}:"]
    lines += [f"  {name:<{width}}  {f'schedule registered {scheduled}' if scheduled else ''}"
              .rstrip() for name, scheduled in names]  # fmt: skip
    lines += [
        f'das deploy: crash detection: automation "{AUTOMATION_NAME}" {ensured.outcome}: a run '
        f"that sends no heartbeat for {settings.crash_after_seconds} s (one every "
        f"{settings.heartbeat_seconds} s) is marked Crashed, and Retry resumes it",
        f"Next, from {checkout}, with PREFECT_API_URL and DAS_PREFECT_AUTH_FILE set:",
        f"  {das} prefect worker start --pool {WORK_POOL}",
        *(f"  {das} prefect deployment run {name}" for name, _ in names),
        "and, when the releases should run on their schedules:",
        f"  {das} prefect deployment schedule resume --all",
    ]
    return "\n".join(lines)


def deploy_selection(products: Sequence[Product]) -> list[str]:
    """``prefect deploy``'s selection: ``--all``, or a ``--name`` per deployment of the
    products chosen (the others, registered earlier or not, are left as they are)."""
    if tuple(products) == PRODUCTS:
        return ["--all"]
    names = deployment_names(products)
    skipped = [name for p in PRODUCTS if p not in products for name in p.deployments]
    print(f"das deploy: registering {', '.join(names)}; not these (--products): "
          f"{', '.join(skipped)}", flush=True)  # fmt: skip
    return [option for name in names for option in ("--name", name)]


def main(argv: Sequence[str] | None = None) -> int:
    """`das deploy ...` alone (the full `das` parser registers this module the same way)."""
    parser = argparse.ArgumentParser(prog="das")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)
