"""The run's signing key: how a release proves which pipeline made it.

Every release carries a certificate (:mod:`das.trust.certificate`) signed with the key of the
service account that runs the pipeline — an OpenSSH ed25519 private key in a file only that
account can read, named by ``DAS_RUN_KEY``. A charter names the public halves of the run keys
it trusts (its *runners*); a verifier outside the enclave accepts a certificate only from one of
them. The key is never in the ledger's database: whoever can write the database cannot sign.

Without ``DAS_RUN_KEY`` the key is the per-user one, ``${XDG_DATA_HOME:-~/.local/share}/das/
run-key``, created on first use (0600): enough for demos and for an unchartered ledger, whose
releases prove nothing anyway. In production the deployments' worker gives each flow run the
service account's ``DAS_RUN_KEY``.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from das.refusal import RunRefused
from das.trust.signing.errors import SigningError
from das.trust.signing.keys import PublicKey, generate_key, public_key_of

RUN_KEY_ENV = "DAS_RUN_KEY"


def default_run_key(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "das" / "run-key"


def run_key_path(environ: Mapping[str, str] | None = None) -> Path:
    """The run key's file: ``DAS_RUN_KEY``, else the per-user default."""
    environ = os.environ if environ is None else environ
    named = environ.get(RUN_KEY_ENV)
    return Path(named).expanduser() if named else default_run_key(environ)


def _create_default(path: Path) -> None:
    """Create the per-user key when missing — under a lock in its folder, held by whoever
    creates it: two first runs at once (two processes) would otherwise both write it, or one
    would read it half written; the other uses the key the first made."""
    if path.is_file() and path.with_name(path.name + ".pub").is_file():
        return  # made before: no lock needed for a key that is whole
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            generate_key(path, f"das run key of {os.environ.get('USER', 'this account')}")


def run_key(
    environ: Mapping[str, str] | None = None, *, create: bool = True
) -> tuple[Path, PublicKey]:
    """The run key's file and public half. The per-user default is created when missing
    (``create``); a key named by ``DAS_RUN_KEY`` must exist, be a regular file and be closed to
    group and others (refused otherwise: a key others can read signs for them too)."""
    environ = os.environ if environ is None else environ
    path = run_key_path(environ)
    named = bool(environ.get(RUN_KEY_ENV))
    if not named and create:
        _create_default(path)
    if not path.is_file():
        raise RunRefused(
            f"the run's signing key {path} ({RUN_KEY_ENV}) is missing or not a regular file: a "
            "release cannot be certified without it. Give the service account its key (an "
            "OpenSSH ed25519 key, mode 0600) and name it with " + RUN_KEY_ENV
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise RunRefused(
            f"the run's signing key {path} ({RUN_KEY_ENV}) is open to group or others (mode "
            f"{mode:04o}): run chmod 600 {path}"
        )
    try:
        return path, public_key_of(path)
    except SigningError as exc:
        raise RunRefused(
            f"the run's signing key {path} ({RUN_KEY_ENV}) cannot be used: {exc}"
        ) from None
