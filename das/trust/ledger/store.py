"""Where the privacy ledger keeps its entries: one append-only, hash-chained table in SQLite or
PostgreSQL, through SQLAlchemy Core (one implementation of the ledger's logic over both).

Every change to the ledger is a new :class:`Entry`; nothing is ever updated or deleted. Each
entry carries the SHA-256 of its own fields and of the entry before it, so the entries form a
chain: an edited, deleted or reordered entry breaks it (:func:`chain_problems`). The first entry
(``init``) names the ledger (a random id) and commits to its secret key.

Appends are serialized: one exclusive transaction reads the head and inserts the next entry
(SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``LOCK TABLE ... IN EXCLUSIVE MODE``), so a decision
read from the ledger (e.g. "this dataset has no spend yet") and the entry recording it are
atomic — of two runs reserving at once, on one host or two, exactly one sees the other.

A chain alone cannot show that its last entries were cut off, or that the whole file was
replaced by an older copy: the releases carry the head they were published at (their
MANIFEST), and :mod:`das.trust.ledger.anchors` checks them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    inspect,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError
from sqlalchemy.pool import NullPool

from das.trust.ledger.errors import LedgerRefused, LedgerUnavailable
from das.trust.signing.canonical import StrictJSONError, strict_loads

LEDGER_FILE = "ledger.sqlite"
# PostgreSQL advisory lock held while a ledger's tables and first entries are created.
CREATE_LOCK_KEY = 0x0DA5_1ED6
GENESIS_PREV = "0" * 64

metadata = MetaData()
entries_table = Table(
    "das_ledger_entries",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("at", String(40), nullable=False),
    Column("kind", String(40), nullable=False),
    Column("run_id", String(160), index=True),
    Column("dataset", String(80), index=True),
    Column("payload", Text, nullable=False),
    Column("prev", String(64), nullable=False),
    Column("hash", String(64), nullable=False, unique=True),
)
# The secret that keys dataset ids (HMAC): outside the chain, committed to by the init entry.
key_table = Table(
    "das_ledger_key",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("key", String(64), nullable=False),
)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def canonical(payload: Mapping[str, Any]) -> str:
    """The one text of a payload that its hash covers (sorted keys, no spaces, no NaN)."""
    return json.dumps(
        dict(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def entry_hash(
    seq: int, at: str, kind: str, run_id: str | None, dataset: str | None, payload: str, prev: str
) -> str:
    fields = (str(seq), at, kind, run_id or "", dataset or "", payload, prev)
    return hashlib.sha256("\n".join(fields).encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One ledger entry, as stored."""

    seq: int
    at: str
    kind: str
    run_id: str | None
    dataset: str | None
    payload_text: str
    prev: str
    hash: str

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.payload_text)

    @property
    def strict_payload(self) -> dict[str, Any]:
        """The payload read as a signed document is (:func:`~das.trust.signing.canonical.
        strict_loads`: a repeated key refused): for the entries that carry statements and
        signatures, and for ``das ledger verify``, which names a payload no reader may read
        two ways. StrictJSONError otherwise (a row written around the pipeline)."""
        data = strict_loads(self.payload_text)
        if not isinstance(data, dict):
            raise StrictJSONError("the payload is not a JSON object")
        return data

    def expected_hash(self) -> str:
        return entry_hash(
            self.seq, self.at, self.kind, self.run_id, self.dataset, self.payload_text, self.prev
        )


def chain_problems(entries: Iterable[Entry]) -> list[str]:
    """Why these entries (all of them, by seq) are not one intact chain; empty when they are."""
    problems: list[str] = []
    prev, expected_seq = GENESIS_PREV, 1
    for entry in entries:
        if entry.seq != expected_seq:
            problems.append(f"entry {expected_seq} is missing (the next is {entry.seq})")
        if entry.prev != prev:
            problems.append(f"entry {entry.seq} does not follow the entry before it")
        if entry.expected_hash() != entry.hash:
            problems.append(f"entry {entry.seq} ({entry.kind}) was altered after it was written")
        if entry.seq == 1 and entry.kind != "init":
            problems.append("the first entry is not the ledger's init entry")
        prev, expected_seq = entry.hash, entry.seq + 1
        if len(problems) >= 20:
            problems.append("...")
            break
    return problems


def _row_entry(row: Any) -> Entry:
    return Entry(
        row.seq, row.at, row.kind, row.run_id, row.dataset, row.payload, row.prev, row.hash
    )


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _sqlite_engine(url: str) -> Engine:
    # NullPool: a connection per transaction, nothing shared across Dask worker forks.
    engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": 120})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's BEGIN below, not pysqlite's
        dbapi_connection.execute("PRAGMA synchronous = FULL")

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get("das_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def engine_for(url: str) -> Engine:
    """One engine per URL per process (connections are not pooled)."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(url)
        if engine is None:
            if make_url(url).get_backend_name() == "sqlite":
                engine = _sqlite_engine(url)
            else:
                engine = create_engine(url, poolclass=NullPool, pool_pre_ping=True)
            _ENGINES[url] = engine
        return engine


def _forget_engine(url: str) -> None:
    with _ENGINES_LOCK:
        engine = _ENGINES.pop(url, None)
    if engine is not None:
        engine.dispose()


def shown_url(url: str) -> str:
    """A URL fit for messages and artifacts: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


@dataclass(frozen=True)
class LedgerStore:
    """The database of one ledger: a SQLite file (``sqlite:///...``) or a PostgreSQL URL.

    Picklable (a URL), so a Dask worker process opens the same ledger as the flow.
    """

    url: str

    def __post_init__(self) -> None:
        try:
            make_url(self.url)
        except (ArgumentError, ValueError):
            raise LedgerRefused(
                "the privacy ledger's URL is not a database URL (expected sqlite:///PATH or "
                "postgresql+psycopg://USER@HOST/DB)"
            ) from None

    @classmethod
    def in_directory(cls, directory: str | Path) -> LedgerStore:
        path = Path(directory).expanduser().absolute() / LEDGER_FILE
        return cls(f"sqlite:///{path}")

    @property
    def is_sqlite(self) -> bool:
        return make_url(self.url).get_backend_name() == "sqlite"

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for a database server."""
        if not self.is_sqlite:
            return None
        return Path(str(make_url(self.url).database))

    @property
    def location(self) -> str:
        """What an operator reads: the file path, or the URL without its password."""
        return str(self.path) if self.path is not None else shown_url(self.url)

    def file_state(self) -> str:
        """``absent``, ``empty`` (0 bytes) or ``present`` (SQLite); ``server`` otherwise."""
        path = self.path
        if path is None:
            return "server"
        if not path.exists():
            return "absent"
        return "empty" if path.stat().st_size == 0 else "present"

    @property
    def engine(self) -> Engine:
        return engine_for(self.url)

    def create(self, first_entries: Callable[[LedgerTransaction], None]) -> bool:
        """Create the ledger whole, its tables and ``first_entries``, or not at all.

        False when another process created it first: two runs that find no ledger and create
        one at the same moment end up with one ledger, never a half-made one (a SQLite file is
        made under a private name and linked into place; PostgreSQL creates it in one
        transaction under an advisory lock).
        """
        path = self.path
        if path is None:
            return self._create_on_server(first_entries)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        draft = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
        os.close(os.open(draft, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        try:
            draft_store = LedgerStore(f"sqlite:///{draft}")
            with draft_store._errors():
                metadata.create_all(draft_store.engine)
            with draft_store.transaction(write=True) as db:
                first_entries(db)
            _forget_engine(draft_store.url)
            try:
                os.link(draft, path)  # fails if anything is at the ledger's name already
            except FileExistsError:
                return False
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            return True
        finally:
            draft.unlink(missing_ok=True)

    def _create_on_server(self, first_entries: Callable[[LedgerTransaction], None]) -> bool:
        with self._errors(), self.engine.begin() as connection:
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({CREATE_LOCK_KEY})")
            metadata.create_all(connection)
            db = LedgerTransaction(connection)
            if db.head() is not None or db.key() is not None:
                return False
            first_entries(db)
            return True

    def has_tables(self) -> bool:
        if self.file_state() in ("absent", "empty"):
            return False
        with self._errors():
            names = set(inspect(self.engine).get_table_names())
        return {entries_table.name, key_table.name} <= names

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (OperationalError, DatabaseError) as exc:
            reason = str(getattr(exc, "orig", exc)).splitlines()[0]
            raise LedgerUnavailable(
                f"privacy ledger {self.location} cannot be read: {reason}"
            ) from None

    @contextlib.contextmanager
    def transaction(self, write: bool = False) -> Iterator[LedgerTransaction]:
        """A transaction; ``write`` takes the ledger's exclusive append lock first."""
        with self._errors():
            connection = self.engine.connect().execution_options(das_write=write)
            try:
                with connection.begin():
                    if write and not self.is_sqlite:
                        connection.exec_driver_sql(
                            f"LOCK TABLE {entries_table.name} IN EXCLUSIVE MODE"
                        )
                    yield LedgerTransaction(connection)
            finally:
                connection.close()


class LedgerTransaction:
    """Reads and appends inside one transaction of :meth:`LedgerStore.transaction`."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def head(self) -> Entry | None:
        row = self.connection.execute(
            select(entries_table).order_by(entries_table.c.seq.desc()).limit(1)
        ).first()
        return None if row is None else _row_entry(row)

    def entries(
        self,
        *,
        run_id: str | None = None,
        dataset: str | None = None,
        kinds: Iterable[str] | None = None,
    ) -> list[Entry]:
        """Entries in chain order, optionally of one run, one dataset and some kinds."""
        query = select(entries_table).order_by(entries_table.c.seq)
        if run_id is not None:
            query = query.where(entries_table.c.run_id == run_id)
        if dataset is not None:
            query = query.where(entries_table.c.dataset == dataset)
        if kinds is not None:
            query = query.where(entries_table.c.kind.in_(list(kinds)))
        return [_row_entry(row) for row in self.connection.execute(query)]

    def entry(self, seq: int) -> Entry | None:
        row = self.connection.execute(
            select(entries_table).where(entries_table.c.seq == seq)
        ).first()
        return None if row is None else _row_entry(row)

    def append(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        run_id: str | None = None,
        dataset: str | None = None,
    ) -> Entry:
        """The next entry of the chain (call in a write transaction)."""
        head = self.head()
        seq = 1 if head is None else head.seq + 1
        prev = GENESIS_PREV if head is None else head.hash
        at, text = now(), canonical(payload)
        digest = entry_hash(seq, at, kind, run_id, dataset, text, prev)
        self.connection.execute(
            entries_table.insert().values(
                seq=seq,
                at=at,
                kind=kind,
                run_id=run_id,
                dataset=dataset,
                payload=text,
                prev=prev,
                hash=digest,
            )
        )
        return Entry(seq, at, kind, run_id, dataset, text, prev, digest)

    def key(self) -> str | None:
        row = self.connection.execute(select(key_table.c.key).where(key_table.c.id == 1)).first()
        return None if row is None else str(row.key)

    def set_key(self, key: str) -> None:
        self.connection.execute(key_table.insert().values(id=1, key=key))
