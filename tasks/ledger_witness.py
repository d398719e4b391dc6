"""The Prefect server as a witness of the privacy ledger's history.

The ledger's hash chain shows an entry edited, deleted or reordered, but a chain cut back to an
earlier entry — or rewritten from one on, consistently — is still a valid chain. Only a copy of
its head kept somewhere else shows that: every release's MANIFEST carries one (checked when a
release sits beside the output), and every run posts the head to the Prefect server as an
artifact, after it authorizes its spend and when it ends. The next run, and `das ledger
verify`, check that the ledger still holds every head the server recorded for it: a ledger
restored from an old backup, cut back, or rewritten is refused, whatever folder the releases
are in. Someone who can also delete the server's artifacts can hide it; the README says so.

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

from das.runs.ledger import LedgerInfo, LedgerRefused, PrivacyLedger, witness_problems

KEY_PREFIX = "privacy-ledger"
RECENT = 50  # heads read back per lookup: the newest ones hold the longest history


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
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=like)),
            sort=ArtifactSort.CREATED_DESC,
            limit=RECENT,
        )
    for artifact in found:
        data = artifact.data
        rows = json.loads(data) if isinstance(data, str) else data
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, Mapping) and {"ledger", "entry", "hash"} <= row.keys():
                yield dict(row)


def _head(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": row["ledger"], "seq": row["entry"], "hash": row["hash"]}


def witnessed_problems(ledger: PrivacyLedger, info: LedgerInfo) -> tuple[list[str], list[str]]:
    """(problems, replaced): heads the server recorded for this ledger that it no longer holds;
    and the other ledgers the server saw at this location before."""
    mine = [
        ("the Prefect server", _head(row))
        for row in _recorded(f"{KEY_PREFIX}-%-{info.ledger_id.lower()}")
    ]
    problems = witness_problems(ledger, info, mine)
    others = sorted({
        str(row["ledger"]) for row in _recorded(f"{KEY_PREFIX}-{_place(info.location)}-%")
        if row.get("ledger") != info.ledger_id and row.get("location") == info.location
    })  # fmt: skip
    return problems, others


def require_witnessed(
    ledger: PrivacyLedger, info: LedgerInfo, production: bool
) -> list[str]:
    """Refuse a ledger that lost a head the Prefect server recorded, or (production) one that
    replaced another at its location; outside production the latter is a warning, returned."""
    problems, others = witnessed_problems(ledger, info)
    replaced = (
        f"the Prefect server recorded another privacy ledger at {info.location} before "
        f"({', '.join(others)}); this is ledger {info.ledger_id}: the spend recorded in that "
        "one is not counted here"
    )
    if problems or (others and production):
        raise LedgerRefused(
            f"privacy ledger {info.location} is not the ledger the Prefect server saw: "
            + "; ".join([*problems, *([replaced] if others else [])])
            + ". It was cut back, restored from an old copy, rewritten or replaced; nothing "
            "can be spent against it until it is restored (`das ledger verify` reports)"
        )
    return [replaced] if others else []
