"""Secrets from files only their owner can read: never a command line or a committed file.

One home for the rule every secret of the pipeline follows (the Prefect server's auth string and
database password, the PostgreSQL password of the privacy ledger): a regular file, mode 0600
(refused, naming ``chmod 600``, when group or others may open it), one line.
"""

from __future__ import annotations

import stat
from pathlib import Path


class SecretError(ValueError):
    """A secret file that must not be used, or a missing secret; the message names the fix."""


def read_secret_file(path: str | Path, variable: str) -> str:
    """The one-line secret in ``path`` (named by ``variable``); refused unless a regular file
    that only its owner can read or write (``chmod 600``)."""
    path = Path(path)
    name = f"{path} ({variable})"
    try:
        info = path.stat()
    except OSError as exc:
        raise SecretError(f"{name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SecretError(f"{name} is not a regular file")
    if info.st_mode & 0o077:
        raise SecretError(
            f"{name} is open to group or others (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"run chmod 600 {path}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretError(f"{name}: cannot read it ({exc})") from None
    secret = text.rstrip("\r\n")
    if not secret.strip():
        raise SecretError(f"{name} is empty")
    if "\n" in secret or "\r" in secret:
        raise SecretError(f"{name} must hold the secret on one line")
    return secret
