"""Draws: each measurement's noise, charged before it exists and recorded after.

``drawing-started`` makes a run count as spent in full; each measurement is then charged
(``draw-charged``) before its noise is drawn and recorded with its file and SHA-256
(``draw-recorded``) after. A resume reuses a noise file only when it matches this record, a
measurement is never drawn twice in one run, and a draw of an attempt that a newer one
superseded is refused: orphaned work of a killed attempt stops instead of drawing on.
"""

from __future__ import annotations

from dataclasses import dataclass

from das.trust.ledger.errors import DrawRefused, DuplicateDraw
from das.trust.ledger.run_signatures import RunSigner, signed
from das.trust.ledger.state import RunState, fold_run
from das.trust.ledger.store import LedgerTransaction


@dataclass(frozen=True)
class DrawRecord:
    """A measurement's noise as the ledger recorded it."""

    name: str
    digest: str
    size: int
    file: str


def current_attempt(db: LedgerTransaction, run_id: str, attempt: int) -> RunState:
    """The run's state, refusing an attempt that a newer one superseded."""
    state = fold_run(db.entries(run_id=run_id))
    if state is None:
        raise DrawRefused(f"run {run_id} is not in the ledger")
    if state.attempt != attempt:
        raise DrawRefused(
            f"attempt {attempt} of run {run_id} was superseded by attempt {state.attempt}; "
            "not drawing"
        )
    return state


def start_drawing(db: LedgerTransaction, run_id: str, attempt: int) -> None:
    """From here on the run counts as spent in full; draws are allowed to this attempt."""
    state = current_attempt(db, run_id, attempt)
    if state.status == "completed":
        return  # a rerun of a published run reuses its draws; it draws nothing new
    if state.status not in ("authorized", "drawing"):
        raise DrawRefused(
            f"run {run_id} has no authorized spend (status {state.status}); not drawing"
        )
    db.append("drawing-started", {"attempt": attempt}, run_id=run_id)


def release_reservation(
    db: LedgerTransaction, run_id: str, reason: str, by: str | None = None
) -> bool:
    """A run that stopped before its first draw spends nothing: its authorization (and
    approval) is returned. Refused silently (False) once drawing started. ``by``: who released
    it by hand (`das ledger release`); the run itself otherwise."""
    state = fold_run(db.entries(run_id=run_id))
    if state is None or state.status not in ("reserved", "authorized") or state.drew:
        return False
    detail = {"reason": reason} if by is None else {"reason": reason, "by": by}
    db.append("run-released", detail, run_id=run_id)
    return True


def charge_draw(db: LedgerTransaction, run_id: str, attempt: int, name: str) -> None:
    """Record that ``name`` is about to be drawn (before any noise exists)."""
    state = current_attempt(db, run_id, attempt)
    if state.status != "drawing":
        raise DrawRefused(f"run {run_id} is not drawing (status {state.status})")
    if name in state.draws:
        raise DuplicateDraw(f"{name}: already drawn in run {run_id}; reuse it")
    db.append("draw-charged", {"name": name, "attempt": attempt}, run_id=run_id)


def record_draw(
    db: LedgerTransaction,
    run_id: str,
    attempt: int,
    name: str,
    digest: str,
    size: int,
    file: str,
    signer: RunSigner | None = None,
) -> DrawRecord:
    """Record ``name``'s noise (its file and digest); if another process recorded it first,
    that record stands and is returned (the caller discards its own file)."""
    state = current_attempt(db, run_id, attempt)
    if name in state.draws:
        held = state.draws[name]
        return DrawRecord(name, held["digest"], held["size"], held["file"])
    if name not in state.charged:
        raise DrawRefused(f"{name}: drawn without being charged in the ledger")
    payload = {"name": name, "digest": digest, "size": int(size), "file": file, "attempt": attempt}
    db.append("draw-recorded", signed(payload, signer, "draw-recorded", run_id), run_id=run_id)
    return DrawRecord(name, digest, int(size), file)


def recorded_draws(state: RunState | None) -> dict[str, DrawRecord]:
    """Every draw a run's state records, by measurement name."""
    if state is None:
        return {}
    return {
        name: DrawRecord(name, d["digest"], d["size"], d["file"]) for name, d in state.draws.items()
    }
