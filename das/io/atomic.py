"""Atomic writes: a file or an output folder appears complete, or not at all.

Everything is first written under a hidden temporary name in the *same* directory as the
target (so the final step is a same-filesystem rename), flushed and fsynced, then renamed into
place. A failure (exception, Ctrl-C) removes the temporary; a killed process can at worst leave
a hidden ``.<name>.tmp-<id>`` entry, whose name says it is incomplete. Files and folders get the
ordinary permissions of the process umask (not the 0600/0700 of :mod:`tempfile`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def _temporary_sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{uuid.uuid4().hex[:12]}")


def fsync_directory(directory: Path) -> None:
    """Persist a rename: fsync the directory that holds the entry (best effort off POSIX)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (``os.replace``).

    For writers that insist on opening the file themselves (Parquet, Arrow). The caller must
    have closed the file when the block ends. Parent folders are created as needed.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_sibling(final, "tmp")
    try:
        yield temporary
        if not temporary.exists():
            raise FileNotFoundError(f"{final}: nothing was written to the temporary file")
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, final)
        fsync_directory(final.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Open a binary file for writing that replaces ``path`` atomically when the block succeeds."""
    final = Path(path)
    with atomic_path(final) as temporary:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder + ``os.replace``)."""
    with atomic_open(path) as handle:
        handle.write(data)


def atomic_create_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path``: it appears complete or not at all, and a file
    already there is never replaced (FileExistsError): the temporary file is linked into
    place (``os.link`` fails on an existing name), where a rename would overwrite."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_sibling(final, "tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, final)
        fsync_directory(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically; newlines are written as given (no translation)."""
    atomic_write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def atomic_output_dir(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Build an output folder under a temporary sibling name; rename it to ``path`` on success.

    Yields the temporary folder to write into. If the block raises, the temporary folder is
    removed and ``path`` is untouched, so a failed run never leaves a half output under the
    final name.

    An existing ``path`` is refused (:class:`FileExistsError`, raised before any work starts and
    checked again at the end) unless ``overwrite=True``. With ``overwrite`` the old folder is
    renamed aside, the new one renamed in, and only then the old one deleted: at every instant
    ``path`` is either the complete old output, absent, or the complete new output (POSIX has
    no portable atomic exchange of two directories). If the second rename fails, the old
    folder is put back.
    """
    final = Path(path)
    if final.exists() and not final.is_dir():
        raise FileExistsError(f"{final}: exists and is not a folder")
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final}: output folder already exists (pass overwrite=True)")
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_sibling(final, "tmp")
    os.mkdir(temporary, 0o777)
    try:
        yield temporary
        fsync_directory(temporary)
        if final.exists():
            if not overwrite:
                raise FileExistsError(f"{final}: output folder appeared meanwhile; kept")
            old = _temporary_sibling(final, "old")
            os.rename(final, old)
            try:
                os.rename(temporary, final)
            except BaseException:
                os.rename(old, final)
                raise
            fsync_directory(final.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(temporary, final)
            fsync_directory(final.parent)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
