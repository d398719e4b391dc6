"""Where the privacy ledger is, and opening it for a run.

``DAS_LEDGER_URL`` (a SQLAlchemy URL: ``postgresql+psycopg://...`` for a ledger every host
reaches, or ``sqlite:///...``) or ``DAS_LEDGER_DIR`` (a folder holding ``ledger.sqlite``) name
it. Production requires one of them, and an initialized, intact ledger: it never creates one.
Outside production the default is one ledger per user,
``${XDG_DATA_HOME:-~/.local/share}/das/ledger``, created on first use — and the run says so —
so that the same data released from different output folders meets the same history.
The URL names no password: ``DAS_LEDGER_PASSWORD_FILE`` names a 0600 file holding it
(:mod:`das.secret_files`), so the secret is never on a command line, in a deployment or in a
Prefect variable. ``DAS_LEDGER_ID`` pins the ledger a run expects (required in production;
``das deploy`` sets it for deployments): a run that finds another ledger at the configured place
is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from das.production import production_mode
from das.secret_files import SecretError, read_secret_file
from das.trust.ledger.charter import CharterChain
from das.trust.ledger.errors import LedgerRefused
from das.trust.ledger.ledger import PrivacyLedger
from das.trust.ledger.state import LedgerInfo
from das.trust.ledger.store import LedgerStore

LEDGER_ENV = "DAS_LEDGER_DIR"
LEDGER_URL_ENV = "DAS_LEDGER_URL"
LEDGER_ID_ENV = "DAS_LEDGER_ID"
LEDGER_PASSWORD_FILE_ENV = "DAS_LEDGER_PASSWORD_FILE"


def url_without_password(url: str, where: str) -> str:
    """Refuse a ledger URL that carries its password (``where``: a command-line option, which
    any process list shows): the password belongs in the 0600 file of
    ``DAS_LEDGER_PASSWORD_FILE``."""
    try:
        parsed = make_url(url)
    except Exception:
        raise LedgerRefused(f"{where}: not a database URL") from None
    if parsed.password:
        raise LedgerRefused(
            f"{where} holds a password: a command line is visible to every process list. "
            f"Give the URL without it and the password in a 0600 file named by "
            f"{LEDGER_PASSWORD_FILE_ENV}"
        )
    return url


def default_ledger_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user ledger folder used outside production when none is configured."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().absolute() / "das" / "ledger"


def configured_store(environ: Mapping[str, str] | None = None) -> LedgerStore | None:
    """The ledger ``DAS_LEDGER_URL`` (with the password of ``DAS_LEDGER_PASSWORD_FILE``) or
    ``DAS_LEDGER_DIR`` names, or None."""
    environ = os.environ if environ is None else environ
    url = (environ.get(LEDGER_URL_ENV) or "").strip()
    directory = (environ.get(LEDGER_ENV) or "").strip()
    if url and directory:
        raise LedgerRefused(
            f"both {LEDGER_URL_ENV} and {LEDGER_ENV} are set: which ledger records this spend "
            "is not a guess. Unset one of them"
        )
    if url:
        secret_file = (environ.get(LEDGER_PASSWORD_FILE_ENV) or "").strip()
        if secret_file:
            try:
                password = read_secret_file(secret_file, LEDGER_PASSWORD_FILE_ENV)
            except SecretError as exc:
                raise LedgerRefused(str(exc)) from None
            url = make_url(url).set(password=password).render_as_string(hide_password=False)
        return LedgerStore(url)
    if directory:
        return LedgerStore.in_directory(directory)
    return None


def ledger_store(environ: Mapping[str, str] | None = None) -> LedgerStore:
    """The configured ledger, else (outside production only) the per-user default."""
    store = configured_store(environ)
    if store is not None:
        return store
    if production_mode(environ):
        raise LedgerRefused(
            f"{LEDGER_ENV} or {LEDGER_URL_ENV} is required under DAS_PRODUCTION (the privacy "
            "ledger is never implicit in production)"
        )
    return LedgerStore.in_directory(default_ledger_dir(environ))


@dataclass(frozen=True)
class OpenedLedger:
    """The ledger a run uses, its identity, its charters, and whether this run created it."""

    ledger: PrivacyLedger
    info: LedgerInfo
    created: bool
    chain: CharterChain = field(default_factory=CharterChain)

    @property
    def production(self) -> bool:
        """Every run against a chartered ledger is a production run (approvals, no seed, no
        ``Infinity``), whatever ``DAS_PRODUCTION`` says."""
        return self.chain.chartered


def open_ledger(environ: Mapping[str, str] | None = None) -> OpenedLedger:
    """The run's ledger, initialized and intact, or a refusal naming what is wrong.

    Production: configured, initialized and intact, and the one ``DAS_LEDGER_ID`` pins. Outside
    production a ledger that does not exist yet is created (``created`` is then True: tell the
    operator); an existing file that is empty or broken is refused, never replaced.
    """
    environ = os.environ if environ is None else environ
    store = ledger_store(environ)
    ledger = PrivacyLedger(store)
    created = False
    state = store.file_state()
    blank = state == "absent" or (state == "server" and not store.has_tables())
    if not production_mode(environ) and blank:
        created = PrivacyLedger.create_if_absent(store)
    info = ledger.require_intact()
    chain = ledger.charter_chain()
    if production_mode(environ) and not chain.chartered:
        raise LedgerRefused(
            f"privacy ledger {info.location} has no charter, and DAS_PRODUCTION asks for a "
            "production run: production spends only under approvers' signatures, which a "
            "ledger without a charter cannot check. Create the production ledger with `das "
            "ledger init --approvers FILE --quorum K --key KEY` (or give this one a charter: "
            "`das ledger charter propose`)"
        )
    pinned = (environ.get(LEDGER_ID_ENV) or "").strip()
    if not pinned and production_mode(environ):
        raise LedgerRefused(
            f"{LEDGER_ID_ENV} is required under DAS_PRODUCTION: it pins the ledger runs spend "
            f"against, so that a ledger swapped or re-created at {info.location} is refused. "
            f"The ledger there now is {info.ledger_id}; check that against the id `das ledger "
            f"init` printed, then set {LEDGER_ID_ENV}={info.ledger_id}"
        )
    if pinned and pinned != info.ledger_id:
        raise LedgerRefused(
            f"the privacy ledger at {info.location} is ledger {info.ledger_id}, but "
            f"{LEDGER_ID_ENV} expects {pinned}: {LEDGER_ENV}/{LEDGER_URL_ENV} points at another "
            "ledger (mistyped, or the ledger was replaced)"
        )
    return OpenedLedger(ledger, info, created, chain)
