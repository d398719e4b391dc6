"""Reading files the operator names on the page, without blocking and without reading a lot.

The explorer reads parameter files (config.json, the four spec files) from paths typed into
the page. A named pipe would block the reading thread until someone writes to it, and a device
such as ``/dev/zero`` never ends: a request stuck in either keeps the server from shutting down.
So a file is opened without blocking (``O_NONBLOCK``), checked on the open descriptor to be a
regular file (a check on the path alone could be raced), and read up to a cap: parameter files
are small (the Census's largest spec file is ~200 kB), so anything over
:data:`MAX_PARAMETER_FILE_BYTES` is refused as the wrong file.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from das.io.tables import not_a_regular_file

MAX_PARAMETER_FILE_BYTES = 4 * 1024 * 1024  # per file; docs/how-to/tune-budgets.md documents it
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC
_CHUNK = 1 << 20


class FileRefused(ValueError):
    """A path cannot be read as a small regular file; the message names what it is."""


def describe(path: Path) -> str | None:
    """Why ``path`` is not a readable regular file (absent, dangling link, pipe, device,
    directory), or None if it looks like one."""
    try:
        if not os.path.lexists(path):
            return f"{path}: not found"
        return not_a_regular_file(path)
    except OSError as exc:  # e.g. a folder on the way that this user may not enter
        return f"{path}: cannot be examined ({exc.strerror})"


@contextmanager
def open_regular(path: str | Path) -> Iterator[int]:
    """A descriptor of ``path`` opened without blocking, refused unless it is a regular file."""
    path = Path(path)
    problem = describe(path)
    if problem is not None:
        raise FileRefused(problem)
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise FileRefused(f"{path}: cannot open ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # replaced since the check above
            raise FileRefused(not_a_regular_file(path) or f"{path} is not a regular file")
        os.set_blocking(descriptor, True)
        yield descriptor
    finally:
        os.close(descriptor)


def read_small_file(path: str | Path, limit: int = MAX_PARAMETER_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; never reads more than
    ``limit + 1`` bytes (a /proc file reports size 0 and may still be long)."""
    path = Path(path)
    with open_regular(path) as descriptor:
        size = os.fstat(descriptor).st_size
        if size > limit:
            raise FileRefused(_too_big(path, limit, size))
        parts: list[bytes] = []
        total = 0
        while total <= limit:
            part = os.read(descriptor, min(_CHUNK, limit + 1 - total))
            if not part:
                break
            parts.append(part)
            total += len(part)
        if total > limit:
            raise FileRefused(_too_big(path, limit))
        return b"".join(parts)


def read_small_text(path: str | Path, limit: int = MAX_PARAMETER_FILE_BYTES) -> str:
    """:func:`read_small_file` decoded as UTF-8 (a BOM is dropped)."""
    data = read_small_file(path, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"{path}: not UTF-8 text (byte {exc.start})") from None


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a regular file (opened as :func:`open_regular` does), in hex."""
    digest = hashlib.sha256()
    with open_regular(path) as descriptor:
        while part := os.read(descriptor, _CHUNK):
            digest.update(part)
    return digest.hexdigest()


def _too_big(path: Path, limit: int, size: int | None = None) -> str:
    read = f"{size:,} bytes" if size is not None else f"more than {limit:,} bytes"
    return (
        f"{path}: {read}, over the {limit:,}-byte cap of a parameters file "
        "(config.json and spec files are small: is this the right file?)"
    )
