"""The names and digests of a published release's files, which the run, the ledger and the
verifier must agree on.

A release folder holds its tables and markers, ``audit.json``, ``MANIFEST.json`` (every file,
its bytes and SHA-256; written last) and ``CERTIFICATE.intoto.json`` (the proof,
:mod:`das.trust.certificate`). :func:`content_digest` is what the ledger records as the release
before it is published: the tables and markers, not the MANIFEST nor the audit, whose timings
differ between attempts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from das.trust.signing.canonical import StrictJSONError, strict_loads

MANIFEST = "MANIFEST.json"
CERTIFICATE = "CERTIFICATE.intoto.json"  # the release's proof (das.trust.certificate)
MANIFEST_FORMAT = "das-release-manifest/1"
AUDIT_FILE = "audit.json"


def read_manifest(release: Path) -> dict[str, Any] | None:
    """The MANIFEST of the release folder ``release``; None when it has none or it is not
    JSON."""
    path = Path(release) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = strict_loads(path.read_bytes())
    except StrictJSONError:
        return None
    return manifest if isinstance(manifest, dict) else None


def content_digest(files: Mapping[str, Mapping[str, Any]]) -> str:
    """SHA-256 over the sorted ``name:sha256`` lines of a release's released files (the tables
    and markers; not the MANIFEST, nor the audit, whose timings differ between attempts): what
    the privacy ledger records as the release before it is published, and what a resume must
    build again."""
    lines = "".join(
        f"{name}:{info['sha256']}\n"
        for name, info in sorted(files.items())
        if name not in (MANIFEST, AUDIT_FILE)
    )
    return hashlib.sha256(lines.encode()).hexdigest()
