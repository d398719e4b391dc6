"""Publishing a release whole, and making sure only one live run writes it.

- :class:`OutputLock`: an exclusive ``flock`` on ``OUT.das/lock``, held by the flow process for
  the whole run. A second run on the same output is refused at once. The kernel drops the lock
  when the holder dies (kill -9 included), so there is no stale lock to clean up.
- :class:`RunLease`: what a task (a thread, or a Dask worker process) checks before each draw:
  the lock is still held *and* the lease file still names its attempt. When the flow process was
  killed, or a newer attempt (a Retry) took over, the task stops instead of drawing on.
- :class:`ReleaseStager`: tables are written into ``OUT.das/staging/<run-id>/``, then the markers,
  ``audit.json`` and, last, ``MANIFEST.json`` (every file, its bytes and SHA-256, and the row
  counts of the tables); one ``rename`` puts the folder at ``OUT``. A reader sees no release, or
  a complete one. An existing release is never overwritten: publishing over another run's
  release requires the explicit replace, which moves the old one to ``OUT.das/replaced/``.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.io.atomic import atomic_write_text, fsync_directory
from das.io.writers import file_sha256
from das.listing import folded
from das.refusal import RunRefused
from das.runs.folder import RunFolder
from das.runs.policy import MARKER_TEXT
from das.trust import (
    AUDIT_FILE,
    MANIFEST,
    MANIFEST_FORMAT,
    content_digest,
    read_manifest,
)


class LeaseLost(RuntimeError):
    """The run that owns this task is gone (killed) or was superseded (a Retry): stop drawing."""


@dataclass(frozen=True)
class RunLease:
    """A picklable handle a task uses to check that its run still owns the output."""

    lock_path: str
    lease_path: str
    token: str

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless the lock is held and the lease names this attempt."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR)
        except FileNotFoundError:
            raise LeaseLost("the run's lock file is gone") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = True
            else:
                held = False
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        if not held:
            raise LeaseLost("the process that owns this run is gone; not drawing")
        try:
            current = Path(self.lease_path).read_text().strip()
        except FileNotFoundError:
            current = ""
        if current != self.token:
            raise LeaseLost("a newer attempt of this run owns it now; not drawing")


class OutputLock:
    """Exclusive lock on an output's work folder; see the module docstring."""

    def __init__(self, path: Path, wait_seconds: float = 10.0) -> None:
        self.path = Path(path)
        self.wait_seconds = wait_seconds
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        """Take the lock (waiting briefly: a dying attempt's tasks may be probing it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise RunRefused(
                        f"another run is writing this output (lock {self.path} is held); "
                        "wait for it to finish, or choose another --output"
                    ) from None
                time.sleep(0.2)
        # The lock file's content and times are left alone: a refused run touches nothing.
        self._fd = fd
        return self

    @staticmethod
    def held_elsewhere(path: Path) -> bool:
        """Whether a live run holds the lock at ``path`` (creates nothing: a refused run must
        leave no lock folder behind)."""
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def new_lease(folder: RunFolder) -> RunLease:
    """Hand the run to a new attempt: a fresh token in the lease file (older attempts' tasks
    stop at their next check)."""
    token = secrets.token_hex(16)
    atomic_write_text(folder.lease_path, token + "\n")
    return RunLease(str(folder.lock_path), str(folder.lease_path), token)


def describe_existing(release: Path) -> str | None:
    """Why ``release`` would be overwritten, or None when it is absent (or an empty folder)."""
    release = Path(release)
    if not release.exists():
        return None
    if not release.is_dir():
        return f"{release} exists and is not a folder"
    manifest = read_manifest(release)
    if manifest is not None:
        return f"{release} holds the release of run {manifest.get('run_id')}"
    if any(release.iterdir()):
        return f"{release} is not empty (it holds files that are not a DAS release)"
    return None


def _table_files(
    staging: Path, outputs: Mapping[str, Mapping[str, Any]], markers: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The release's files: the tables the run wrote (``outputs``: name → rows and the sha256
    the writer took), its markers and its audit — nothing else. A file in staging that the run
    did not write (a record file dropped in, an extra table) or a table whose bytes are not the
    ones written stops the publication: the MANIFEST and the certificate vouch for exactly what
    the run made."""
    expected = {*outputs, *markers, AUDIT_FILE}
    present = {
        path.relative_to(staging).as_posix(): path
        for path in sorted(staging.rglob("*"))
        if not path.is_dir() or path.is_symlink()
    }
    stray = sorted(set(present) - expected - {MANIFEST})
    missing = sorted(expected - set(present))
    if stray or missing:
        extra, absent = folded(stray) or "none", folded(missing) or "none"
        raise RuntimeError(
            f"the release being built in {staging} holds files the run did not write ({extra}) "
            f"or lacks some it wrote ({absent}): nothing was published; the ledger keeps the "
            "run's spend"
        )
    files = {}
    for name in sorted(expected):
        path = present[name]
        if path.is_symlink() or not path.is_file():
            raise RuntimeError(f"{name} in the release being built is not a regular file")
        digest = file_sha256(path)
        written = outputs.get(name, {}).get("sha256")
        if written is not None and written != digest:
            raise RuntimeError(
                f"{name} changed in {staging} after the run wrote it: nothing was published; "
                "the ledger keeps the run's spend"
            )
        files[name] = {"bytes": path.stat().st_size, "sha256": digest}
    return files


def _content(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The released content of a manifest: every file but the audit (timings differ)."""
    return {
        name: info["sha256"]
        for name, info in manifest.get("files", {}).items()
        if name != AUDIT_FILE
    }


class ReleaseStager:
    """Builds a run's release in its staging folder and publishes it with one rename."""

    def __init__(self, folder: RunFolder, *, replace: bool = False) -> None:
        self.folder = folder
        self.replace = replace

    @property
    def staging(self) -> Path:
        return self.folder.staging_dir

    def prepare(self) -> Path:
        """An empty staging folder; leftovers of killed attempts (held under the output lock,
        so no live run owns them) are removed first."""
        parent = self.staging.parent
        if parent.is_dir():
            for stale in parent.iterdir():
                shutil.rmtree(stale, ignore_errors=True)
        self.staging.mkdir(parents=True)
        return self.staging

    def check_target(self) -> None:
        """Refuse at start when publishing would overwrite another run's release."""
        release = self.folder.release_dir
        manifest = read_manifest(release)
        if manifest is not None and manifest.get("run_id") == self.folder.run_id:
            return  # a rerun of the run that published it: checked for identity at the end
        problem = describe_existing(release)
        if problem is not None and not (self.replace and manifest is not None):
            hint = (
                "pass --replace-release to move it aside (recorded), or choose a new --output"
                if manifest is not None
                else "choose an empty or new --output"
            )
            raise RunRefused(f"{problem}; a release is never overwritten: {hint}")

    def replace_target(self) -> str | None:
        """The run id of the release this publish will move aside, if any."""
        manifest = read_manifest(self.folder.release_dir)
        if manifest is None or manifest.get("run_id") == self.folder.run_id or not self.replace:
            return None
        return str(manifest.get("run_id"))

    def publish(
        self,
        audit: Mapping[str, Any],
        outputs: Mapping[str, Mapping[str, Any]],
        markers: list[str],
        seal: Callable[[str], Mapping[str, Any]] | None = None,
        certify: Callable[[Path, Mapping[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Write markers, audit and the manifest (last) into staging, then rename it into
        place. Returns what happened: ``published``, ``already-published`` (a rerun of the same
        run whose content equals the release in place) and any replaced release.

        ``seal(content_digest)`` records the release in the privacy ledger just before the
        MANIFEST is written and returns the ledger head the MANIFEST carries (``ledger``);
        ``certify(staging, manifest)`` then writes the release's certificate beside it."""
        staging = self.staging
        for marker in markers:
            atomic_write_text(staging / marker, MARKER_TEXT[marker])
        atomic_write_text(
            staging / AUDIT_FILE, json.dumps(dict(audit), indent=1, allow_nan=False) + "\n"
        )
        files = _table_files(staging, outputs, markers)
        for name, info in outputs.items():
            if name in files and "rows" in info:
                files[name]["rows"] = info["rows"]
        manifest: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "run_id": self.folder.run_id,
            "product": audit.get("product"),
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "markers": markers,
            "files": files,
        }
        release = self.folder.release_dir
        result: dict[str, Any] = {"state": "published", "replaced": None}
        existing = read_manifest(release)
        if existing is not None and existing.get("run_id") == self.folder.run_id:
            if _content(existing) != _content(manifest):
                raise RuntimeError(
                    f"run {self.folder.run_id} rebuilt a release that differs from the one it "
                    f"published at {release}; the published release is kept"
                )
            shutil.rmtree(staging)
            result["state"] = "already-published"
            result["manifest"] = str(release / MANIFEST)
            result["ledger"] = existing.get("ledger")
            return result
        if seal is not None:
            manifest["ledger"] = dict(seal(content_digest(files)))
        atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        if certify is not None:
            certify(staging, manifest)
        fsync_directory(staging)
        if release.exists():
            problem = describe_existing(release)
            if problem is not None and not (self.replace and existing is not None):
                raise RunRefused(f"{problem}; a release is never overwritten")
            if problem is None:
                release.rmdir()  # an empty folder the operator made for the release
            else:
                stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
                aside = self.folder.replaced_dir / f"{existing.get('run_id')}-{stamp}"
                aside.parent.mkdir(parents=True, exist_ok=True)
                os.rename(release, aside)
                result["replaced"] = {"run_id": existing.get("run_id"), "moved_to": str(aside)}
        release.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, release)
        fsync_directory(release.parent)
        result["manifest"] = str(release / MANIFEST)
        result["manifest_sha256"] = file_sha256(release / MANIFEST)
        result["ledger"] = manifest.get("ledger")
        return result
