"""A release's certificate: what the run signs, so that the release carries the proof of who
approved it.

Beside its MANIFEST every release holds ``CERTIFICATE.intoto.json``: an in-toto Statement v1 in
a DSSE envelope, signed by the run's service-account key (:mod:`das.trust.run_keys`). Its
subjects are every file of the release (the MANIFEST too) by SHA-256; its predicate
(:data:`PREDICATE_TYPE`) carries the charter chain (each charter with its approvers'
signatures), the approval the run spent (its statement with the approvers' signatures), the
sealed parameters' digest, the dataset, the spend per pass, the ledger and the head at which
it sealed the release, and whether the release is private. :mod:`das.trust.verifier` checks it
with public keys only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from das.trust.ledger.charter import Charter
from das.trust.release_files import CERTIFICATE, MANIFEST
from das.trust.signing.dsse import sign_envelope, statement

PREDICATE_TYPE = "urn:das-pipeline:release:v1"


def certify(
    staging: Path, predicate: Mapping[str, Any], key: Path, manifest: Mapping[str, Any]
) -> str:
    """Sign the release being built in ``staging`` and write its certificate beside the
    MANIFEST; the certificate's SHA-256. Its subjects are the files the MANIFEST lists (their
    digests taken from it: at national scale the tables are not read a second time) and the
    MANIFEST itself; a file in staging that the MANIFEST does not list is refused."""
    # das.io imports pandas with its package: loaded here, not when the face is imported.
    from das.io.atomic import atomic_write_text
    from das.io.writers import file_sha256

    listed = {name: str(item["sha256"]) for name, item in manifest.get("files", {}).items()}
    present = {
        path.relative_to(staging).as_posix()
        for path in staging.rglob("*")
        if path.is_file() or path.is_symlink()
    }
    stray = sorted(present - set(listed) - {MANIFEST, CERTIFICATE})
    if stray:
        raise RuntimeError(f"files in the release the MANIFEST does not list: {stray[:5]}")
    subjects = {**listed, MANIFEST: file_sha256(staging / MANIFEST)}
    envelope = sign_envelope(statement(subjects, PREDICATE_TYPE, predicate), key)
    atomic_write_text(staging / CERTIFICATE, json.dumps(envelope, indent=1) + "\n")
    return file_sha256(staging / CERTIFICATE)


def charter_record(charter: Charter) -> dict[str, Any]:
    return {"statement": charter.statement, "signatures": list(charter.signatures)}
