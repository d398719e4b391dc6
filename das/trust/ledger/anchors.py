"""Anchors: copies of the ledger's head kept outside it, which show a ledger cut back or rewritten.

A chain cut back or rewritten consistently is still a valid chain; only a copy of its head
kept elsewhere shows it. A release carries the head at which the ledger sealed its content
(``release-sealed``: its MANIFEST names it), and the Prefect server keeps the heads runs posted
(:mod:`tasks.ledger_witness`). A run has one release: once its content is sealed, a resume may
publish only that very content again.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from das.listing import folded
from das.refusal import Remedy
from das.trust.ledger.errors import LedgerRefused, ReleaseDiffers
from das.trust.ledger.state import LedgerInfo, fold_run
from das.trust.ledger.store import Entry, LedgerTransaction

RELEASES_BESIDE = ("release", "releases")


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
    witnesses: tuple[str, str],
) -> list[str]:
    """Heads of this ledger that witnesses outside it recorded — ``(name, {id, seq, hash})``
    — that it no longer holds as recorded, one problem per kind, each with a count and the
    first few names (:func:`das.listing.folded`); ``witnesses`` names them, singular and
    plural. A head of another ledger means the witness knew another ledger here (swapped, or
    re-created after it was emptied)."""
    elsewhere: dict[str, list[str]] = {}  # another ledger's id -> the witnesses recorded in it
    lost: list[str] = []
    for name, head in heads:
        if head.get("id") != info.ledger_id:
            elsewhere.setdefault(str(head.get("id")), []).append(name)
        else:
            held = ledger.entry(int(head.get("seq", 0)))
            if held is None or held.hash != head.get("hash"):
                lost.append(name)

    def counted(names: list[str]) -> str:
        noun = witnesses[0] if len(names) == 1 else witnesses[1]
        return f"{len(names)} {noun} ({folded(dict.fromkeys(names))})"

    problems = [
        f"{counted(names)} {'was' if len(names) == 1 else 'were'} recorded in ledger {other}, "
        f"not in this one ({info.ledger_id})"
        for other, names in elsewhere.items()
    ]
    if lost:
        problems.append(
            f"this ledger does not hold, as recorded, the entries named by {counted(lost)}: "
            "its history was cut or rewritten"
        )
    return problems


def releases_beside(output: Path) -> list[tuple[str, Mapping[str, Any]]]:
    """The releases beside ``output`` (its siblings with a MANIFEST), each with the ledger head
    it was published at: ``(folder name, {id, seq, hash})``."""
    from das.trust.release_files import read_manifest

    parent = Path(output).parent
    if not parent.is_dir():
        return []
    return [
        (sibling.name, head)
        for sibling in sorted(parent.iterdir())
        if sibling != Path(output) and sibling.is_dir()
        for head in [(read_manifest(sibling) or {}).get("ledger")]
        if isinstance(head, dict)
    ]


def release_anchor_problems(ledger: EntryReader, info: LedgerInfo, output: Path) -> list[str]:
    """Releases beside ``output`` carry the ledger head they were published at: each must be
    in this ledger (:func:`witness_problems`). A release recorded in another ledger means this
    is not the ledger of these releases (e.g. a mistyped ``DAS_LEDGER_DIR``, or a ledger that
    replaced theirs: :func:`anchor_remedy`)."""
    return witness_problems(ledger, info, releases_beside(output), RELEASES_BESIDE)


def anchor_remedy(info: LedgerInfo, output: Path) -> Remedy:
    """The next step when the releases beside ``output`` are not this ledger's. Made with
    another ledger: this ledger replaced theirs (the approvers chartered it: moving to
    PostgreSQL), and those releases move to a folder of their own — or the run was given the
    wrong ledger. Entries this ledger lost: it was cut back or restored from an old copy."""
    parent = Path(output).parent
    others = [name for name, head in releases_beside(output) if head.get("id") != info.ledger_id]
    if others:
        kept = parent.with_name(f"{parent.name}-before-ledger-{info.ledger_id[:8]}")
        return Remedy(
            command=f"if the approvers chartered this ledger to replace the one those releases "
            f"were made with (docs/how-to/ledger-on-postgresql.md), keep them in a folder of "
            f"their own, then run again: mv {shlex.quote(str(parent))} "
            f"{shlex.quote(str(kept))}; if not, give the run their ledger (DAS_LEDGER_DIR or "
            "DAS_LEDGER_URL; for the deployments, das deploy --ledger or --ledger-url)"
        )
    return Remedy(
        command="restore the copy of this ledger that holds those entries and treat it as an "
        f"incident; das ledger verify --ledger … --release {shlex.quote(str(parent))}/NAME "
        "reports each release"
    )
