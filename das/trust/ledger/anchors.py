"""Anchors: copies of the ledger's head kept outside it, which show a ledger cut back or rewritten.

A chain cut back or rewritten consistently is still a valid chain; only a copy of its head
kept elsewhere shows it. A release carries the head at which the ledger sealed its content
(``release-sealed``: its MANIFEST names it), and the Prefect server keeps the heads runs posted
(:mod:`tasks.ledger_witness`). A run has one release: once its content is sealed, a resume may
publish only that very content again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from das.trust.ledger.errors import LedgerRefused, ReleaseDiffers
from das.trust.ledger.state import LedgerInfo, fold_run
from das.trust.ledger.store import Entry, LedgerTransaction


class EntryReader(Protocol):
    """What the anchor checks read of a ledger: an entry by its position."""

    def entry(self, seq: int) -> Entry | None: ...


def seal_release(
    db: LedgerTransaction, info: LedgerInfo, run_id: str, content_sha256: str
) -> dict[str, Any]:
    """Record the release's content before it is published; the entry is the head the
    release carries (its MANIFEST names it), so a later rewrite of the ledger shows.

    Other content than the content sealed (its work files edited since) is refused: the same
    noise on other counts would release the exact difference."""
    state = fold_run(db.entries(run_id=run_id))
    if state is None or state.status not in ("drawing", "completed"):
        raise LedgerRefused(f"run {run_id} has nothing to release (not drawing)")
    sealed = state.sealed_release
    if sealed is not None:
        if sealed["content_sha256"] != content_sha256:
            raise ReleaseDiffers(
                f"run {run_id} already sealed its release (ledger entry "
                f"{sealed['seq']}) and now built other content: its work files or "
                "step records changed since. A run publishes one release — the same "
                "noise on other counts would release their exact difference. Nothing "
                "was published; the ledger keeps the run's spend"
            )
        return {"id": info.ledger_id, "seq": sealed["seq"], "hash": sealed["hash"]}
    entry = db.append("release-sealed", {"content_sha256": content_sha256}, run_id=run_id)
    return {"id": info.ledger_id, "seq": entry.seq, "hash": entry.hash}


def witness_problems(
    ledger: EntryReader,
    info: LedgerInfo,
    heads: Iterable[tuple[str, Mapping[str, Any]]],
) -> list[str]:
    """Heads of this ledger that witnesses outside it recorded — ``(witness, {id, seq, hash})``
    — that it no longer holds as recorded. A head of
    another ledger means the witness knew another ledger here (swapped, or re-created after it
    was emptied)."""
    problems: list[str] = []
    for witness, head in heads:
        if head.get("id") != info.ledger_id:
            problems.append(
                f"{witness} was recorded in ledger {head.get('id')}, not in this one "
                f"({info.ledger_id} at {info.location})"
            )
        else:
            held = ledger.entry(int(head.get("seq", 0)))
            if held is None or held.hash != head.get("hash"):
                problems.append(
                    f"{witness} recorded ledger entry {head.get('seq')}, which this ledger does "
                    "not hold as recorded (its history was cut or rewritten)"
                )
        if len(problems) >= 5:
            break
    return problems


def release_anchor_problems(ledger: EntryReader, info: LedgerInfo, output: Path) -> list[str]:
    """Releases beside ``output`` carry the ledger head they were published at: each must be
    in this ledger (:func:`witness_problems`). A release recorded in another ledger means this
    is not the ledger of these releases (e.g. a mistyped ``DAS_LEDGER_DIR``)."""
    from das.trust.release_files import read_manifest

    parent = Path(output).parent
    if not parent.is_dir():
        return []
    heads = (
        (f"the release {sibling.name} beside this output", head)
        for sibling in sorted(parent.iterdir())
        if sibling != Path(output) and sibling.is_dir()
        for head in [(read_manifest(sibling) or {}).get("ledger")]
        if isinstance(head, dict)
    )
    return witness_problems(ledger, info, heads)
