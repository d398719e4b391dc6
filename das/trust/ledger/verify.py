"""``das ledger verify``: the ledger's chain, and each release against what the ledger recorded.

A release carries in its MANIFEST the ledger entry (id, seq, hash) that recorded its content
just before it was published. Verifying a release checks that this ledger still holds that entry
as written (a ledger emptied, truncated, swapped or rewritten since no longer does), that the
files are the ones recorded (content digest), that the run completed with this very MANIFEST,
and that the release's audit agrees with the ledger: the dataset, the per-pass spend, the
markers, and every noise vector (the audit shows each by a keyed id of its digest; the ledger's
draw records are the only ones that count).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from das.trust.ledger.ledger import PrivacyLedger
from das.trust.ledger.state import LedgerInfo
from das.trust.release_files import AUDIT_FILE, CERTIFICATE, MANIFEST, content_digest, read_manifest
from das.trust.signing.canonical import StrictJSONError, strict_loads


def _audit_noise_ids(audit: dict[str, Any]) -> dict[str, str | None]:
    ids: dict[str, str | None] = {}
    for ledger in (audit.get("ledger") or {}).values():
        for item in (ledger or {}).get("measurements", []):
            ids[str(item["name"])] = item.get("noise_id")
    return ids


def release_problems(ledger: PrivacyLedger, info: LedgerInfo, release: Path) -> list[str]:
    """Everything in which ``release`` disagrees with the ledger (empty: it is as recorded)."""
    # das.io imports pandas with its package: loaded here, not when the face is imported.
    from das.io.writers import file_sha256

    release = Path(release)
    manifest = read_manifest(release)
    if manifest is None:
        return [f"{release}: no readable {MANIFEST} (not a DAS release)"]
    head = manifest.get("ledger")
    run_id = str(manifest.get("run_id"))
    if not isinstance(head, dict):
        return [f"{release}: its MANIFEST names no ledger entry (published before ledger heads)"]
    if head.get("id") != info.ledger_id:
        return [
            f"{release}: recorded in ledger {head.get('id')}, not in this one ({info.ledger_id})"
        ]
    problems = []
    entry = ledger.entry(int(head.get("seq", 0)))
    if entry is None or entry.hash != head.get("hash"):
        problems.append(
            f"the ledger does not hold entry {head.get('seq')} as the release recorded it "
            "(the ledger was cut, swapped or rewritten after the release)"
        )
    elif entry.kind != "release-sealed" or entry.run_id != run_id:
        problems.append(f"ledger entry {entry.seq} is not the sealing of run {run_id}")
    files = manifest.get("files") or {}
    for name, item in sorted(files.items()):
        path = release / name
        if not path.is_file():
            problems.append(f"{name}: listed in the MANIFEST but missing")
        elif file_sha256(path) != item.get("sha256"):
            problems.append(f"{name}: its content differs from the MANIFEST")
    # Anything else in the folder was put there after publication (run state, a record file).
    present = {
        path.relative_to(release).as_posix()
        for path in release.rglob("*")
        if path.is_file() or path.is_symlink()
    }
    for name in sorted(present - set(files) - {MANIFEST, CERTIFICATE}):
        problems.append(f"{name}: in the release folder but not in its MANIFEST (added after "
                        "publication; a release holds only what its MANIFEST lists)")  # fmt: skip
    sealed = entry is not None and entry.kind == "release-sealed"
    if sealed and entry.payload.get("content_sha256") != content_digest(files):
        problems.append("the MANIFEST's file list is not the content the ledger recorded")
    state = ledger.run(run_id)
    if state is None:
        return [*problems, f"run {run_id} is not in the ledger"]
    if state.status != "completed" or state.completed is None:
        problems.append(f"run {run_id} is not recorded as completed (status {state.status})")
    elif file_sha256(release / MANIFEST) not in state.manifests:
        problems.append("the MANIFEST differs from the one the ledger recorded at publication")
    audit_path = release / AUDIT_FILE
    try:
        audit = strict_loads(audit_path.read_bytes())
        if not isinstance(audit, dict):
            raise StrictJSONError("not an object")
    except (OSError, StrictJSONError):
        return [*problems, f"{AUDIT_FILE}: missing or unreadable"]
    recorded = audit.get("privacy_ledger") or {}
    if recorded.get("dataset") != state.dataset:
        problems.append("the audit names another dataset than the ledger bound the run to")
    if recorded.get("passes") != [p.to_dict() for p in state.passes]:
        problems.append("the audit's per-pass spend differs from the ledger's")
    if list(audit.get("markers") or []) != list(state.markers):
        problems.append("the audit's privacy markers differ from the ledger's")
    if list(manifest.get("markers") or []) != list(state.markers):
        problems.append("the MANIFEST's privacy markers differ from the ledger's")
    audited = _audit_noise_ids(audit)
    held = {name: ledger.noise_id(draw["digest"]) for name, draw in state.draws.items()}
    if audited != held:
        missing = sorted(set(held) - set(audited))
        extra = sorted(set(audited) - set(held))
        changed = sorted(n for n in set(held) & set(audited) if held[n] != audited[n])
        for label, names in (
            ("drawn in the ledger, absent from the audit", missing),
            ("in the audit, never recorded as drawn", extra),
            ("noise differs from the ledger's record", changed),
        ):
            if names:
                problems.append(f"{label}: {', '.join(names[:3])}" + (" ..." if len(names) > 3
                                                                     else ""))  # fmt: skip
    return problems
