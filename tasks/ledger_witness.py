"""The Prefect server as a witness of the privacy ledger's history.

The ledger's hash chain shows an entry edited, deleted or reordered, but a chain cut back to an
earlier entry — or rewritten from one on, consistently — is still a valid chain. Only a copy of
its head kept somewhere else shows that: every release's MANIFEST carries one (checked when a
release sits beside the output), and every run posts the head to the Prefect server as an
artifact, after it authorizes its spend and when it ends. The next run, and `das ledger
verify`, check that the ledger still holds every head the server recorded for it: a ledger
restored from an old backup, cut back, or rewritten is refused, whatever folder the releases
are in. Someone who can also delete the server's artifacts can hide it; the threat model says so
(docs/explanation/threat-model.md).

The artifact's key names the ledger's location and id (``privacy-ledger-<where>-<id>``):
looked up by id, it finds the heads of this ledger wherever it was; by location, it finds a
*different* ledger that was there before (a ledger deleted and re-created: refused in
production, a warning outside it, where a user may start over deliberately).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from prefect.artifacts import create_table_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.sorting import ArtifactSort

from das.trust import LedgerInfo, LedgerRefused, PrivacyLedger, witness_problems

KEY_PREFIX = "privacy-ledger"
PAGE = 200  # heads read back per request


def _place(location: str) -> str:
    return hashlib.sha256(location.encode()).hexdigest()[:16]


def witness_key(info: LedgerInfo) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes: a uuid fits as is."""
    return f"{KEY_PREFIX}-{_place(info.location)}-{info.ledger_id.lower()}"


def post_head(info: LedgerInfo, moment: str) -> None:
    """Record ``info``'s head on the Prefect server (``moment``: when, for the reader)."""
    row = {
        "ledger": info.ledger_id,
        "location": info.location,
        "entry": info.head_seq,
        "hash": info.head_hash,
        "moment": moment,
    }
    create_table_artifact(
        table=[row],
        key=witness_key(info),
        description=f"privacy ledger head {moment}: later runs check the ledger still holds it",
    )


def _recorded(like: str) -> Iterator[dict[str, Any]]:
    """Every head recorded under keys ``like``: all of them, page by page (reading only the
    newest would let fifty forged heads posted through the API hide the real ones)."""
    found = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=like)),
                sort=ArtifactSort.CREATED_DESC,
                limit=PAGE,
                offset=len(found),
            )
            found += page
            if len(page) < PAGE:
                break
    for artifact in found:
        data = artifact.data
        rows = json.loads(data) if isinstance(data, str) else data
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, Mapping) and {"ledger", "entry", "hash"} <= row.keys():
                yield dict(row)


SERVER_HEADS = ("head the Prefect server recorded", "heads the Prefect server recorded")


def _head(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": row["ledger"], "seq": row["entry"], "hash": row["hash"]}


def witnessed_problems(
    ledger: PrivacyLedger, info: LedgerInfo, run_id: str | None = None
) -> tuple[list[str], list[str], int]:
    """(problems, replaced, heads): heads the server recorded for this ledger that it no
    longer holds — or none at all although runs other than ``run_id`` spent against it (a
    server that never saw this ledger vouches for nothing); the other ledgers the server saw
    at this location before; how many heads were checked."""
    rows = list(_recorded(f"{KEY_PREFIX}-%-{info.ledger_id.lower()}"))
    problems = witness_problems(
        ledger, info, [(f"entry {r['entry']}", _head(r)) for r in rows], SERVER_HEADS
    )
    if not rows:
        spent = [r.run_id for r in ledger.runs() if r.dataset is not None and r.run_id != run_id]
        if spent:
            problems.append(
                f"this Prefect server holds no head of ledger {info.ledger_id}, yet "
                f"{len(spent)} run(s) spent against it: it is not the server their runs "
                "reported to (PREFECT_API_URL unset or another server), so it cannot show "
                "whether the ledger was cut back or restored from an old copy"
            )
    others = sorted({
        str(row["ledger"]) for row in _recorded(f"{KEY_PREFIX}-{_place(info.location)}-%")
        if row.get("ledger") != info.ledger_id and row.get("location") == info.location
    })  # fmt: skip
    return problems, others, len(rows)


def require_witnessed(
    ledger: PrivacyLedger, info: LedgerInfo, production: bool, run_id: str | None = None
) -> list[str]:
    """Refuse a ledger that lost a head the Prefect server recorded, or (production) one that
    replaced another at its location or that this server never witnessed; outside production
    the latter two are warnings, returned."""
    problems, others, heads = witnessed_problems(ledger, info, run_id)
    replaced = (
        f"the Prefect server recorded another privacy ledger at {info.location} before "
        f"({', '.join(others)}); this is ledger {info.ledger_id}: the spend recorded in that "
        "one is not counted here"
    )
    unwitnessed = [p for p in problems if not heads] if not production else []
    problems = [p for p in problems if p not in unwitnessed]
    if problems or (others and production):
        raise LedgerRefused(
            f"privacy ledger {info.location} is not the ledger the Prefect server saw: "
            + "; ".join([*problems, *([replaced] if others else [])])
            + ". It was cut back, restored from an old copy, rewritten or replaced, or this is "
            "not the Prefect server its runs reported to; nothing can be spent against it until "
            "that is put right (`das ledger verify` reports)"
        )
    return [*unwitnessed, *([replaced] if others else [])]
