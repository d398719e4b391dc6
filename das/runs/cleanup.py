"""Run state has a lifecycle: what the ledger no longer needs goes, what a resume needs stays.

A run's folder under the state root holds copies of confidential data: the spilled records and
true counts (``work/``), the noise it drew (``noise/``), the sealed parameters. What may go
depends on what the privacy ledger says of the run:

- **never drew** (refused, stopped before its first draw, its reservation returned): nothing can
  resume it into a spend, so its copies of the records go at once — the run removes them itself
  when it ends (:func:`forget_records`) and `das runs clean` removes what is left;
- **published** (completed): its release is out; the noise and work files are removed by `das
  runs clean` (the ledger keeps their digests; `das ledger verify` needs no file of the run);
- **holds its spend** (authorized or drawing, never published — killed, crashed, failed after
  drawing): a resume reuses every draw, so everything stays;
- **waits for its approvers** (an open request of it in the ledger: a suspended deployment
  run): it goes on from its completed steps once they decide, so everything stays;
- **unknown to this ledger**: left alone and named.

The run log, the audit and the validation report (the curator's) always stay.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from das.trust import PrivacyLedger, RunState

CONFIDENTIAL = ("work", "noise", "sealed", "steps")  # copies of records, noise, parameters


def forget_records(root: Path) -> list[str]:
    """Remove a run folder's copies of records and parameters (its run never drew: nothing
    resumes from them); the names removed."""
    removed = []
    for name in ("work", "sealed", "steps"):
        path = root / name
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


@dataclass(frozen=True)
class Cleaned:
    """What `das runs clean` did (or would do) with one run folder."""

    run_id: str
    status: str
    action: str  # "removed" | "kept" | "unknown"
    removed: tuple[str, ...]
    freed: int
    why: str


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# A run's status in the ledger, in words ("released" is a returned reservation, not a release).
STATUS_WORDS = {
    "completed": "published",
    "released": "never drew, reservation returned",
    "reserved": "never drew",
    "authorized": "holds its spend",
    "drawing": "holds its spend",
    "unknown": "unknown to this ledger",
    "waiting": "waits for its approvers",
}


def _decide(state: RunState | None, waiting: bool) -> tuple[str, tuple[str, ...], str]:
    if state is None:
        return "unknown", (), "not a run of this ledger: left alone (another ledger's?)"
    if state.status == "completed":
        return "removed", CONFIDENTIAL, "published: the ledger keeps the digests of its draws"
    if state.counting:
        return "kept", (), "holds its spend and never published: a resume reuses its draws"
    if waiting:
        return "kept", (), "waits for its approvers: it goes on from its completed steps"
    return "removed", CONFIDENTIAL, "never drew: nothing can resume it into a spend"


def _waiting(ledger: PrivacyLedger, run_id: str) -> bool:
    """Whether the run waits for its approvers: its request is open (not rejected, unexpired)."""
    request = ledger.approval_request(run_id)
    return request is not None and request.rejection is None and not request.expired()


def clean_runs(
    state_root: Path,
    ledger: PrivacyLedger,
    *,
    older_than_days: float = 0,
    dry_run: bool = False,
    now: float | None = None,
) -> list[Cleaned]:
    """Apply the module docstring's rules to every run folder under ``state_root`` not touched
    for ``older_than_days``; with ``dry_run``, only say what would go."""
    runs = state_root / "runs"
    if not runs.is_dir():
        return []
    now = time.time() if now is None else now
    results = []
    for folder in sorted(p for p in runs.iterdir() if p.is_dir()):
        age_days = (now - folder.stat().st_mtime) / 86400
        state = ledger.run(folder.name)
        waiting = state is not None and not state.counting and _waiting(ledger, folder.name)
        action, names, why = _decide(state, waiting)
        status = "unknown" if state is None else "waiting" if waiting else state.status
        present = tuple(n for n in names if (folder / n).exists())
        if action == "removed" and age_days < older_than_days:
            action, present, why = "kept", (), f"younger than {older_than_days:g} days"
        freed = sum(_size(folder / n) for n in present) if action == "removed" else 0
        if action == "removed" and not dry_run:
            for name in present:
                shutil.rmtree(folder / name, ignore_errors=True)
        results.append(Cleaned(folder.name, status, action, present, freed, why))
    return results


def summary(results: Iterable[Cleaned]) -> str:
    results = list(results)
    freed = sum(r.freed for r in results)
    removed = [r for r in results if r.action == "removed" and r.removed]
    return f"{len(removed)} run folder(s) cleaned, {freed / 2**20:.1f} MiB freed"
