"""Every environment variable the pipeline reads, in one place: name, default, meaning, and who
needs it.

The modules that read a variable keep their own constant (``PRODUCTION_ENV`` in
:mod:`das.production`, ``RUN_KEY_ENV`` in :mod:`das.trust.run_keys`...); this registry is where
a reader finds them all. The documentation's page *Environment variables* is generated from it,
and ``tests/test_environment.py`` fails when the code uses a ``DAS_*`` name this registry does
not list, or the registry lists one the code no longer uses.

Roles (:data:`ROLES`) say where a variable is set: the operator's terminal (``das run``), the
Prefect worker's environment, the environment the deployments give each flow run (set from
Prefect variables by ``deploy/prefect.yaml``: nobody types them), the Prefect server, a Dask
worker of an existing cluster, an approver's terminal, and the test suite.
"""

from __future__ import annotations

from dataclasses import dataclass

from das.heartbeats import DEFAULT_CRASH_AFTER_SECONDS, DEFAULT_HEARTBEAT_SECONDS

ROLES = {
    "terminal": "an operator's `das` commands (`das run`, `das ledger`, `das deploy`, ...)",
    "worker": "the Prefect worker (`das prefect worker start`) on each worker host; its flow "
    "runs inherit its environment",
    "flow run": "each deployment's flow run: set by `deploy/prefect.yaml` from Prefect variables",
    "server": "the Prefect server (`das prefect server start`)",
    "dask worker": "a Dask worker of an existing cluster (`dask worker ... --preload ...`)",
    "approver": "an approver's terminal (`das ledger approve`, `das ledger charter sign`)",
    "tests": "the test suite and the CI scripts only",
}


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, its value when unset, what it means, who sets it
    (keys of :data:`ROLES`), and whether its value is a secret's *path* (never the secret)."""

    name: str
    default: str
    meaning: str
    roles: tuple[str, ...]
    secret_file: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise ValueError(f"{self.name}: unknown roles {sorted(unknown)}")


_LEDGER_DEFAULT = (
    "outside production: the per-user ledger ${XDG_DATA_HOME:-~/.local/share}/das/ledger"
)

VARIABLES: tuple[Variable, ...] = (
    # -- production and the privacy ledger -------------------------------------------------------
    Variable(
        "DAS_PRODUCTION",
        "unset (off)",
        "Production mode: on for `1`, `true`, `yes` (any case); off when unset, empty, `0`, "
        "`false`, `no`; any other value is refused. Production refuses seeds, `Infinity` "
        "budgets, `--cumulative-total` and `--skip-validation` without a recorded passing "
        "validation, and requires `DAS_LEDGER_DIR` or `DAS_LEDGER_URL`, `DAS_LEDGER_ID` and a "
        "chartered ledger. Every run against a chartered ledger is a production run whatever "
        "this says.",
        ("flow run", "terminal"),
    ),
    Variable(
        "DAS_LEDGER_DIR",
        _LEDGER_DEFAULT,
        "The privacy ledger: a folder holding `ledger.sqlite`. Setting it together with "
        "`DAS_LEDGER_URL` is refused. Every process that draws noise opens it (flow runs and "
        "Dask workers): on a cluster it must be on a shared file system; prefer "
        "`DAS_LEDGER_URL` there.",
        ("flow run", "terminal", "approver", "dask worker"),
    ),
    Variable(
        "DAS_LEDGER_URL",
        _LEDGER_DEFAULT,
        "The privacy ledger in a database: a SQLAlchemy URL without a password, e.g. "
        "`postgresql+psycopg://das_ledger@DB-HOST:5432/das_ledger`. Its password comes from "
        "`DAS_LEDGER_PASSWORD_FILE`; a URL that holds one is refused.",
        ("flow run", "terminal", "approver", "dask worker"),
    ),
    Variable(
        "DAS_LEDGER_PASSWORD_FILE",
        "unset (no password)",
        "Path of a file (mode 0600, refused otherwise) holding the password of "
        "`DAS_LEDGER_URL`. Every process that opens the ledger reads it: give each host the "
        "same path.",
        ("flow run", "terminal", "approver", "dask worker"),
        secret_file=True,
    ),
    Variable(
        "DAS_LEDGER_ID",
        "unset (required in production)",
        "The id of the ledger a production run expects (printed by `das ledger init`; "
        "`das deploy` pins it in the deployments): a run that finds another ledger at "
        "`DAS_LEDGER_DIR`/`DAS_LEDGER_URL` is refused.",
        ("flow run", "terminal"),
    ),
    Variable(
        "DAS_RUN_KEY",
        "the per-user key ${XDG_DATA_HOME:-~/.local/share}/das/run-key, created on first use "
        "outside production",
        "Path of the run's signing key (an OpenSSH ed25519 private key, mode 0600). It signs "
        "the ledger entries the run writes that a resume or a certificate trusts (its "
        "`spend-authorized` and each `draw-recorded` entry, its validation verdict) and every "
        "release's certificate; in a chartered ledger only entries a run key of the charter "
        "signed are trusted. In production it is the service account's key, one of the "
        "runners the ledger's charter names; operators cannot read it. On a Dask cluster the "
        "workers record draws and must see the key at the same path.",
        ("flow run", "terminal"),
        secret_file=True,
    ),
    Variable(
        "DAS_TRUST_ROOT",
        "unset (no pin but `trust-root.json` beside the run key)",
        "Path of the trust root the approvers published (`das ledger trust-root`): a run "
        "refuses, before reading any record, a ledger whose charter chain in force does not "
        "extend it (another ledger, one chartered by one approver, one cut back). A production "
        "run (a chartered ledger) with no root pinned at all — neither this nor "
        "`trust-root.json` beside the run key — is refused the same way. The service "
        "account pins it for good by putting the root as `trust-root.json` beside its run key "
        "(`DAS_RUN_KEY`, resolved), which whoever edits a deployment's environment cannot "
        "change; set this in the worker's own environment, not as a deployment variable.",
        ("worker", "terminal"),
    ),
    Variable(
        "DAS_STATE_DIR",
        "${XDG_STATE_HOME:-~/.local/state}/das (deployments: <das_root>/state)",
        "The state root: each run's confidential state (sealed parameters, noise, spilled "
        "records, validation report, run log) under `<state root>/runs/<run-id>/`. Never "
        "inside an output; an output inside it is refused. On a Dask cluster it must be on a "
        "shared file system, at the same path on every host.",
        ("flow run", "terminal"),
    ),
    Variable(
        "DAS_APPROVAL_TIMEOUT_SECONDS",
        "604800 (7 days)",
        "How long the approval request a deployment run writes when it finds no approval stays "
        "open (its expiry, at least 10 s, at most 90 days). The run waits without a process "
        "(suspended); past the expiry with no quorum of signatures, the approvals sweep "
        "resumes it and it ends Refused (nothing drawn). Set it in the worker's environment "
        "(its flow runs inherit it) or a run's job variables.",
        ("worker",),
    ),
    # -- Prefect ---------------------------------------------------------------------------------
    Variable(
        "DAS_HEARTBEAT_SECONDS",
        str(DEFAULT_HEARTBEAT_SECONDS),
        "Seconds between a flow run's heartbeats (Prefect's `PREFECT_FLOWS_HEARTBEAT_FREQUENCY`, "
        "which every `das` process sets from it; at least 30, Prefect's floor). `das deploy` "
        "writes it into every deployment (the Prefect variable `das_heartbeat_seconds`): set it "
        "where `das deploy` runs, and for `das run`. Change it together with "
        "`DAS_CRASH_AFTER_SECONDS` and register again.",
        ("terminal",),
    ),
    Variable(
        "DAS_CRASH_AFTER_SECONDS",
        str(DEFAULT_CRASH_AFTER_SECONDS),
        'Silence after which the automation "das: crash runs that stop beating" marks a run of '
        "the DAS flows Crashed (its process or host is gone; Retry resumes it). At least twice "
        "`DAS_HEARTBEAT_SECONDS` (one late beat never crashes a live run), refused otherwise. "
        "Read where `das deploy` runs (it creates or updates the automation); `das run` uses it "
        "only to create a missing automation, and warns when the server's window is too short "
        "for its heartbeat.",
        ("terminal",),
    ),
    Variable(
        "DAS_PREFECT_AUTH_FILE",
        "unset (Prefect's own PREFECT_API_AUTH_STRING, if any)",
        "Path of a file (mode 0600, refused otherwise) holding the Prefect server's basic-auth "
        "string `user:password`. Every `das` command reads it at start and passes it on to "
        "what it starts (flow runs, their Dask workers); `das prefect server start` makes it "
        "the server's secret. A Dask worker reads it with `--preload das.prefect_auth`.",
        ("terminal", "worker", "server", "dask worker", "approver"),
        secret_file=True,
    ),
    Variable(
        "DAS_PREFECT_DATABASE_PASSWORD_FILE",
        "unset (no password)",
        "Path of a file (mode 0600) holding the password of the Prefect server's PostgreSQL "
        "database; its connection URL names it as `${PREFECT_SERVER_DATABASE_PASSWORD}`.",
        ("server",),
        secret_file=True,
    ),
    # -- Dask ------------------------------------------------------------------------------------
    Variable(
        "DAS_DASK_ADDRESS",
        "unset (each run starts its own cluster)",
        "The scheduler of an existing Dask cluster, e.g. `tcp://SCHEDULER:8786`: the run's "
        "tasks go there (after a start check of every worker) instead of a cluster of its own.",
        ("worker", "terminal"),
    ),
    Variable(
        "DAS_DASK_HOST",
        "127.0.0.1",
        "Where the scheduler and workers of a run's own local cluster listen.",
        ("worker", "terminal"),
    ),
    Variable(
        "DAS_DASK_DASHBOARD",
        "127.0.0.1:0 (loopback, a free port)",
        "The dashboard of a run's own local cluster (no login): `HOST:PORT`, or empty for none.",
        ("worker", "terminal"),
    ),
    Variable(
        "DAS_DASK_WORKERS",
        "2",
        "Worker processes of a run's own local cluster (one thread each): a whole number of at "
        "least 1, refused otherwise. More on a larger host; 1 where the run shares two cores "
        "with other work (the end-to-end tests).",
        ("worker", "terminal"),
    ),
    Variable(
        "DAS_LOCAL_API",
        "unset (the local API of `das server`)",
        "Where `das run` and `das demo` send their flow runs when no Prefect server is "
        "configured (no `PREFECT_API_URL` in the environment or the Prefect profile): unset, "
        "the local API that the first run starts in the background and later runs reuse "
        "(`das server status`, `das server stop`); `temporary`, a temporary API per run, "
        "stopped when it ends (20-40 s more per run).",
        ("terminal", "tests"),
    ),
    Variable(
        "DAS_LOCAL_API_DIR",
        "${XDG_STATE_HOME:-~/.local/state}/das/local-api",
        "The folder of the local Prefect API (`das server`): its record `server.json`, its "
        "auth string `auth` (mode 0600), its log and its Prefect home with the SQLite "
        "database. Only its owner can open it.",
        ("terminal",),
    ),
    Variable(
        "DAS_TASK_RUNNER",
        "unset (by the inputs' size)",
        "`threads` runs a flow's tasks on Prefect's thread pool whatever the inputs' size, "
        "`dask` on a local Dask cluster whatever their size (tests). Unset, a run whose "
        "inputs are under 64 MiB (`das run`, or a deployment run by its `data` parameter), "
        "or that has no Prefect API, uses the thread pool, and a larger one Dask worker "
        "processes; `DAS_DASK_ADDRESS` wins over all. Any other value is refused. Never in "
        "production.",
        ("tests",),
    ),
    # -- tests and CI ----------------------------------------------------------------------------
    Variable(
        "DAS_CI",
        "unset",
        "`1` in CI (`.ci/run`): a test that skips for a missing prerequisite fails instead.",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_WORKERS",
        "1",
        "pytest-xdist workers of the fast tier in `.ci/test` (one: the e2e scripts that run "
        "alongside keep the other core busy).",
        ("tests",),
    ),
    Variable(
        "DAS_INTEGRATION_WORKERS",
        "3",
        "pytest-xdist workers of the integration tier in `.ci/test`: more than the 2 cores, "
        "since its tests wait on servers and processes much of the time.",
        ("tests",),
    ),
    Variable(
        "DAS_E2E_DATABASE",
        "sqlite",
        "The Prefect server's database in the end-to-end tests: `.ci/e2e-prefect` sets "
        "`postgresql` (a private PostgreSQL cluster, the ledger on it too); `sqlite` runs them "
        "on a SQLite file.",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_POSTGRES_URL",
        "unset (the fixture starts a throwaway cluster)",
        "An existing test cluster's asyncpg URL (set by `python tests/pg_cluster.py -- CMD`).",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_POSTGRES_SYNC_URL",
        "unset",
        "The same cluster's psycopg URL.",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_POSTGRES_SKIP",
        "unset (a test that needs PostgreSQL fails without it)",
        "`1`: tests that need PostgreSQL skip when it cannot be started.",
        ("tests",),
    ),
    Variable(
        "DAS_PG_BINDIR",
        "Debian's newest /usr/lib/postgresql/*/bin",
        "Another PostgreSQL's `bin/` for the tests' throwaway cluster.",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_DRAW_LOG",
        "(set by the test)",
        "The Dask cluster test's log of every draw, per worker process.",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_DRAW_CONTROL",
        "(set by the test)",
        "The Dask cluster test's control file (pause a worker after a draw).",
        ("tests",),
    ),
    Variable(
        "DAS_TEST_GATE",
        "(set by the test)",
        "The concurrency tests' gate folder: each run stops at its first measurement until "
        "the test opens the gate.",
        ("tests",),
    ),
    Variable(
        "DAS_REFRESH_SCREENSHOTS",
        "unset (screenshots go to a temporary folder)",
        "`1`: the browser tests write their screenshots into `docs/screenshots/` (to refresh "
        "the committed ones, on purpose); otherwise no test writes into the checkout.",
        ("tests",),
    ),
    Variable(
        "DAS_SCREENSHOTS",
        "a temporary folder (docs/screenshots/prefect with DAS_REFRESH_SCREENSHOTS=1)",
        "Where the end-to-end browser test saves the Prefect UI's screenshots.",
        ("tests",),
    ),
    Variable(
        "DAS_EXPLORER_SCREENSHOTS",
        "a temporary folder (docs/screenshots/explorer with DAS_REFRESH_SCREENSHOTS=1)",
        "Where the explorer's browser test saves its screenshots.",
        ("tests",),
    ),
)

# Variables of other projects that the pipeline reads or sets, with what they mean here.
RELATED: tuple[Variable, ...] = (
    Variable(
        "PREFECT_API_URL",
        "unset (`das run` uses the local Prefect API of `das server`, started on first use)",
        "The Prefect server's API, e.g. `http://127.0.0.1:4200/api`: `das run` reports to it "
        "and its tasks run on worker processes; `das deploy` registers there.",
        ("terminal", "worker", "dask worker", "approver"),
    ),
    Variable(
        "PREFECT_API_AUTH_STRING",
        "from DAS_PREFECT_AUTH_FILE",
        "Prefect's client credentials; every `das` command sets it from "
        "`DAS_PREFECT_AUTH_FILE`. Never put it on a command line.",
        ("terminal", "worker"),
    ),
    Variable(
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
        "180 (set by every `das` command when unset)",
        "How long the local Prefect API of a `das run` (`das server`, or the temporary one "
        "of `DAS_LOCAL_API=temporary`) may take to start.",
        ("terminal",),
    ),
    Variable(
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY",
        f"{DEFAULT_HEARTBEAT_SECONDS} (from DAS_HEARTBEAT_SECONDS; Prefect's own default is 180)",
        "How often a flow run emits its heartbeat. Every `das` process sets it from "
        "`DAS_HEARTBEAT_SECONDS` (over an inherited value); each deployment's flow run gets it "
        "from the Prefect variable `das_heartbeat_seconds` (`deploy/prefect.yaml`).",
        ("terminal", "flow run"),
    ),
    Variable(
        "XDG_DATA_HOME",
        "~/.local/share",
        "Base of the per-user ledger (`das/ledger`), run key (`das/run-key`) and approver "
        "journal (`das/approver/`).",
        ("terminal", "approver"),
    ),
    Variable(
        "XDG_STATE_HOME",
        "~/.local/state",
        "Base of the default state root (`das/`).",
        ("terminal",),
    ),
)


def by_name() -> dict[str, Variable]:
    """Every registered variable (``DAS_*`` and related) by name."""
    return {variable.name: variable for variable in (*VARIABLES, *RELATED)}


def needed_by(role: str) -> list[Variable]:
    """The variables ``role`` (a key of :data:`ROLES`) may need, registry order."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    return [v for v in (*VARIABLES, *RELATED) if role in v.roles]
