"""Synthetic populations of the explorer's workspace, and the proof that a folder is one.

Simulate and "What τ truncates" report figures computed on a population: on confidential
records those would be exact, un-noised statistics of the confidential data, which the explorer
has no ledger to spend budget on. So they run only on a population the explorer itself wrote,
unchanged since:

* it lies directly in the workspace (a folder elsewhere is refused, whatever it holds);
* its manifest (:data:`MANIFEST`) lists every file the explorer wrote with its size and SHA-256,
  and is signed (HMAC-SHA-256) with a key kept in the workspace (:data:`KEY_FILE`, mode 0600),
  so a manifest copied next to other files, or edited to describe them, does not verify;
* the folder holds exactly those files, each a regular file with that size and digest.

A manifest without a valid signature, a file added, missing, changed or replaced by a link or
a pipe: refused, naming what differs. (Whoever can read the key and write the workspace could
forge a manifest; such a person could as well run the engine directly. The check keeps the
explorer from being the way exact figures of real records are computed by mistake or by a
copied file.)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from das.resources import demo_specs
from das.specs.race_specs import SPEC_FILES
from das.synth import generate_phsafe, generate_safetab_p
from explorer.files import FileRefused, read_small_file, read_small_text, sha256_file
from explorer.params import ParameterError, copy_spec_files, export_text

MANIFEST = "explorer-synthetic.json"
KEY_FILE = ".explorer-key"
FORMAT = 2
PRODUCTS = ("safetab-p", "phsafe")
MAX_PERSONS = 5_000_000
DEFAULT_SPECS = demo_specs("safetab_p")


# ------------------------------------------------------------------------------ signing
def _key(workspace: Path, create: bool = False) -> bytes | None:
    """The workspace's signing key (made on first synthesis), or None if there is none."""
    path = workspace / KEY_FILE
    if create and not os.path.lexists(path):
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_hex(32))
    try:
        return read_small_file(path, 1024).strip()
    except FileRefused:
        return None


def _signature(key: bytes, payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def _entries(folder: Path) -> dict[str, os.stat_result]:
    """Every entry of the folder but the manifest, by name (links not followed)."""
    return {
        entry.name: entry.stat(follow_symlinks=False)
        for entry in os.scandir(folder)
        if entry.name != MANIFEST
    }


def write_manifest(workspace: Path, folder: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Record every file of a population the explorer just wrote, signed; returns the payload."""
    files = {}
    for name, status in sorted(_entries(folder).items()):
        if not stat.S_ISREG(status.st_mode):
            raise ParameterError(f"{folder / name}: the synthesizer wrote something not a file")
        files[name] = {"bytes": status.st_size, "sha256": sha256_file(folder / name)}
    payload = {"format": FORMAT, **info, "files": files}
    key = _key(workspace, create=True)
    if key is None:
        raise ParameterError(f"{workspace / KEY_FILE}: cannot read the workspace's key")
    signed = {**payload, "signature": _signature(key, payload)}
    temporary = folder / f".{MANIFEST}.tmp"
    temporary.write_text(json.dumps(signed, indent=1), encoding="utf-8")
    os.replace(temporary, folder / MANIFEST)
    return payload


# ------------------------------------------------------------------------------ checking
class NotAPopulation(ParameterError):
    """A folder is not a population the explorer wrote, unchanged; ``why`` says what differs."""

    def __init__(self, folder: Path, why: str) -> None:
        super().__init__(
            f"{folder}: {why}. Simulate and the truncation profile run only on populations the "
            "explorer synthesized in its workspace, unchanged (synthesize one on the Simulate "
            "tab)."
        )
        self.why = why


_refuse = NotAPopulation


# Digests computed for the list, by (path, size, inode, ctime): a change to a file changes its
# ctime, so the list hashes a population once, not at every refresh. A use always rehashes.
_LISTED_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def _digest(path: Path, status: os.stat_result, cached: bool) -> str:
    key = (str(path), status.st_size, status.st_ino, status.st_ctime_ns)
    if cached and key in _LISTED_DIGESTS:
        return _LISTED_DIGESTS[key]
    digest = sha256_file(path)
    _LISTED_DIGESTS[key] = digest
    return digest


def verify(workspace: Path, data_dir: str | Path, cached: bool = False) -> dict[str, Any]:
    """The manifest of a population the explorer wrote into ``workspace``, unchanged since;
    :class:`NotAPopulation` naming what differs otherwise. Every file's SHA-256 is recomputed
    (``cached``: reused while the file's size, inode and ctime are unchanged, for the list)."""
    workspace = workspace.resolve()
    given = Path(data_dir).expanduser()
    if not given.is_absolute():
        given = workspace / given
    if given.is_symlink() or not given.is_dir():
        raise _refuse(given, "not a folder of the explorer's workspace")
    folder = given.resolve()
    if folder.parent != workspace:
        raise _refuse(folder, f"not a population folder of the workspace {workspace}")
    try:
        manifest = json.loads(read_small_text(folder / MANIFEST))
    except FileRefused as exc:
        raise _refuse(folder, f"no readable explorer manifest ({exc})") from None
    except json.JSONDecodeError:
        raise _refuse(folder, "its manifest is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _refuse(folder, "its manifest is not one this explorer writes (synthesize it again)")
    payload = {key: value for key, value in manifest.items() if key != "signature"}
    key = _key(workspace)
    signature = manifest.get("signature")
    if (
        key is None
        or not isinstance(signature, str)
        or not hmac.compare_digest(signature, _signature(key, payload))
    ):
        raise _refuse(folder, "its manifest is not signed by this workspace's explorer")
    files: dict[str, Any] = payload.get("files") or {}
    present = _entries(folder)
    extra = sorted(set(present) - set(files))
    missing = sorted(set(files) - set(present))
    if extra or missing:
        parts = ([f"not written by the explorer: {', '.join(extra)}"] if extra else []) + (
            [f"missing: {', '.join(missing)}"] if missing else []
        )
        raise _refuse(folder, "its files differ from the manifest (" + "; ".join(parts) + ")")
    for name, expected in files.items():
        status = present[name]
        if not stat.S_ISREG(status.st_mode):
            raise _refuse(folder, f"{name} is no longer a regular file")
        if status.st_size != expected["bytes"]:
            raise _refuse(folder, f"{name} differs from the file the explorer wrote (size)")
    for name, expected in files.items():
        try:
            digest = _digest(folder / name, present[name], cached)
        except FileRefused as exc:
            raise _refuse(folder, str(exc)) from None
        if not hmac.compare_digest(digest, expected["sha256"]):
            raise _refuse(folder, f"{name} differs from the file the explorer wrote (SHA-256)")
    return {**payload, "path": str(folder)}


def require_population(workspace: Path, data_dir: Any, product: str | None = None) -> Path:
    """The verified folder of a population (of ``product`` if given) the explorer wrote."""
    if not isinstance(data_dir, str) or not data_dir.strip():
        raise ParameterError("choose a synthetic population (none is selected)")
    manifest = verify(workspace, data_dir)
    if product is not None and manifest.get("product") != product:
        raise ParameterError(
            f"{manifest['path']} is a {manifest.get('product')} population, not {product}"
        )
    return Path(manifest["path"])


def list_populations(workspace: Path) -> dict[str, Any]:
    """The workspace's populations that verify, and those that do not with the reason (a
    folder with a manifest that no longer matches its files)."""
    found: list[dict[str, Any]] = []
    refused: list[dict[str, str]] = []
    for folder in sorted(workspace.iterdir()) if workspace.is_dir() else []:
        if folder.name.startswith(".") or not os.path.lexists(folder / MANIFEST):
            continue
        try:
            manifest = verify(workspace, folder, cached=True)
        except NotAPopulation as exc:
            refused.append({"path": str(folder), "reason": exc.why})
            continue
        found.append(
            {key: manifest.get(key) for key in ("product", "persons", "seed", "created", "path")}
        )
    return {"workspace": str(workspace), "populations": found, "refused": refused}


# ------------------------------------------------------------------------------ writing
def synthesize(
    workspace: Path,
    product: Any,
    persons: Any,
    seed: Any,
    safetab_p: dict[str, Any] | None = None,
    phsafe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A new synthetic population in the workspace (``<product>-<persons>-seed<seed>``),
    written by :mod:`das.synth` and recorded in a signed manifest."""
    if product not in PRODUCTS:
        raise ParameterError(f"unknown product {product!r}")
    persons, seed = _whole(persons, "persons"), _whole(seed, "seed")
    if not 1 <= persons <= MAX_PERSONS:
        raise ParameterError(f"persons must be between 1 and {MAX_PERSONS:,}")
    if not 0 <= seed < 2**32:
        raise ParameterError("seed must be between 0 and 4294967295")
    started = time.monotonic()
    folder = workspace / f"{product}-{persons}-seed{seed}"
    with tempfile.TemporaryDirectory(prefix="das-explore-synth-") as staging:
        staged = Path(staging)
        if product == "safetab-p":
            specs = Path((safetab_p or {}).get("specs") or DEFAULT_SPECS)
            copy_spec_files(specs, staged, (*SPEC_FILES, "config.json"))
            generate_safetab_p(folder, persons, seed, staged, overwrite=True)
        else:
            raw = ((phsafe or {}).get("passes") or {}).get("US")
            if raw is None:
                raise ParameterError("a PHSafe population is made from the US pass: load one")
            config_file = staged / "config.json"
            config_file.write_text(export_text("phsafe", raw), encoding="utf-8")
            generate_phsafe(folder, persons, seed, config_file, overwrite=True)
    info = {
        "product": product,
        "persons": persons,
        "seed": seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_manifest(workspace, folder, info)
    return {**info, "path": str(folder), "seconds": round(time.monotonic() - started, 1)}


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ParameterError(f"{name} must be a whole number")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise ParameterError(f"{name} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise ParameterError(f"{name} must be a whole number, got {value!r}")
    return int(number)
