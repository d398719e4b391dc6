"""Release certificates: an in-toto Statement v1 in a DSSE envelope.

A release is named by the digests of its files (the statement's subjects) and carries a typed
predicate (the approvals and the spend). The statement's canonical JSON is the envelope's
payload; each signature covers DSSE's pre-authentication encoding (PAE)::

    "DSSEv1" SP LEN(payloadType) SP payloadType SP LEN(payload) SP payload

so that a signature over one payload type can never be read as one over another. Anyone holding
the trusted public keys can check a certificate, with no access to the enclave that made it.
Specifications: https://github.com/in-toto/attestation (Statement v1) and
https://github.com/secure-systems-lab/dsse (envelope, PAE).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from das.trust.signing.canonical import StrictJSONError, canonical_json, strict_loads
from das.trust.signing.errors import SignatureInvalid, SigningError
from das.trust.signing.keys import (
    PublicKey,
    crypto_public_key,
    load_private_key,
    public_key_of_private,
)

__all__ = [
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "pae",
    "sign_envelope",
    "statement",
    "verify_envelope",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def statement(
    subjects: Mapping[str, str], predicate_type: str, predicate: Mapping[str, Any]
) -> dict[str, Any]:
    """An in-toto Statement v1 about ``subjects`` (name → SHA-256 hex, listed by name), in the
    JSON form :func:`verify_envelope` returns it (tuples become lists). ValueError or TypeError
    when it could not be signed as it is (no subject, a digest that is not SHA-256 hex, a float)."""
    if not isinstance(subjects, Mapping) or not subjects:
        raise ValueError("a statement needs at least one subject (name → sha256 hex)")
    for name, digest in subjects.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"subject name {name!r}: a non-empty string")
        if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest):
            raise ValueError(f"subject {name!r}: the digest must be 64 lowercase hex (SHA-256)")
    if not isinstance(predicate_type, str) or not predicate_type:
        raise ValueError("predicate_type: a non-empty string (a URI naming the predicate)")
    if not isinstance(predicate, Mapping):
        raise TypeError("predicate: a mapping (a JSON object)")
    built = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": name, "digest": {"sha256": subjects[name]}} for name in sorted(subjects)
        ],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }
    return json.loads(canonical_json(built))


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: the bytes every envelope signature covers."""
    return Envelope(payload, payload_type, {}).pae()


def sign_envelope(statement: Mapping[str, Any], key: Path) -> dict[str, Any]:
    """A DSSE envelope of ``statement`` (payload: its canonical JSON), signed with the unencrypted
    OpenSSH private key file ``key`` (ed25519; RSA with RSASSA-PSS/SHA-256; ECDSA P-256/384/521).
    The signature's keyid is the key's ``SHA256:`` fingerprint (a hint: verification does not
    rely on it). SigningError when the key cannot sign unattended."""
    problem = _statement_problem(statement)
    if problem:
        raise ValueError(f"not an in-toto Statement v1: {problem}")
    key = Path(key)
    private, reason = load_private_key(key)
    if private is None:
        raise SigningError(
            f"{key}: cannot sign a release certificate with it ({reason}); the run's "
            "service-account key must be an unencrypted OpenSSH private key file (mode 0600)"
        )
    public = public_key_of_private(private, str(key))
    signer = CryptoSigner(private, SSlibKey.from_crypto(private.public_key(), public.fingerprint))
    envelope = Envelope(canonical_json(statement), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    return envelope.to_dict()


def verify_envelope(
    envelope: Mapping[str, Any], keys: Iterable[PublicKey], threshold: int = 1
) -> tuple[dict[str, Any], list[PublicKey]]:
    """The statement of ``envelope`` and the keys of ``keys`` whose signatures verified (in the
    order of ``keys``), when at least ``threshold`` distinct ones did; else SignatureInvalid
    saying why (malformed envelope, wrong payload type, too few trusted signatures, naming the
    keyids of signatures by other keys, or a payload that is not an in-toto Statement v1).

    Each signature is tried against every trusted key: DSSE's keyid is an unauthenticated hint,
    so it neither admits nor excludes a key. securesystemslib's ``Envelope.verify`` matches by
    keyid, stops at the threshold and cannot say which signatures failed, so the loop is here;
    the PAE and the per-key verification are securesystemslib's.
    """
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
        raise ValueError(f"threshold must be a positive integer, not {threshold!r}")
    payload, payload_type, signatures = _parse_envelope(envelope)
    if payload_type != PAYLOAD_TYPE:
        raise SignatureInvalid(
            f"wrong payload type {payload_type[:80]!r}: an in-toto statement is {PAYLOAD_TYPE!r}"
        )
    trusted: dict[PublicKey, SSlibKey] = {}
    for key in keys:
        if key not in trusted and not key.algorithm.startswith("sk-"):
            trusted[key] = SSlibKey.from_crypto(crypto_public_key(key), key.fingerprint)
    signed_bytes = pae(payload_type, payload)
    verified: list[PublicKey] = []
    strangers: list[str] = []
    for keyid, raw in signatures:
        signer = _signer_of(raw, signed_bytes, trusted)
        if signer is None:
            strangers.append(keyid or "(no keyid)")
        elif signer not in verified:
            verified.append(signer)
    if len(verified) < threshold:
        by_other = (
            f"; signatures that no trusted key made: {', '.join(strangers)}" if strangers else ""
        )
        raise SignatureInvalid(
            f"{len(verified)} of the {threshold} required trusted signatures verified "
            f"({len(signatures)} signatures in the envelope, {len(trusted)} trusted keys)"
            f"{by_other}"
        )
    try:
        document = strict_loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, StrictJSONError) as exc:
        raise SignatureInvalid(f"the payload is not JSON: {exc}") from None
    problem = _statement_problem(document)
    if problem:
        raise SignatureInvalid(f"the payload is not an in-toto Statement v1: {problem}")
    order = list(trusted)
    return document, sorted(verified, key=order.index)


def _signer_of(
    raw: bytes, signed_bytes: bytes, trusted: Mapping[PublicKey, SSlibKey]
) -> PublicKey | None:
    """The trusted key whose signature ``raw`` is over ``signed_bytes``, or None."""
    for key, sslib_key in trusted.items():
        try:
            sslib_key.verify_signature(Signature(sslib_key.keyid, raw.hex()), signed_bytes)
        except (UnverifiedSignatureError, VerificationError, ValueError):
            continue
        return key
    return None


def _parse_envelope(envelope: Any) -> tuple[bytes, str, list[tuple[str, bytes]]]:
    """Payload, payload type and (keyid, signature) pairs; SignatureInvalid when malformed."""
    if not isinstance(envelope, Mapping):
        raise SignatureInvalid("malformed envelope: not a JSON object")
    missing = [name for name in ("payload", "payloadType", "signatures") if name not in envelope]
    if missing:
        raise SignatureInvalid(f"malformed envelope: no {', '.join(missing)}")
    payload_type = envelope["payloadType"]
    if not isinstance(payload_type, str):
        raise SignatureInvalid("malformed envelope: payloadType is not a string")
    payload = _b64(envelope["payload"], "payload")
    signatures = envelope["signatures"]
    if not isinstance(signatures, list) or not signatures:
        raise SignatureInvalid("malformed envelope: signatures is not a non-empty list")
    pairs = []
    for index, entry in enumerate(signatures):
        if not isinstance(entry, Mapping) or "sig" not in entry:
            raise SignatureInvalid(f"malformed envelope: signatures[{index}] has no sig")
        keyid = entry.get("keyid", "")
        if not isinstance(keyid, str):
            raise SignatureInvalid(f"malformed envelope: signatures[{index}].keyid is not text")
        pairs.append((keyid, _b64(entry["sig"], f"signatures[{index}].sig")))
    return payload, payload_type, pairs


def _b64(value: Any, name: str) -> bytes:
    """Base64 (standard or URL-safe, as DSSE allows) decoded strictly."""
    if not isinstance(value, str):
        raise SignatureInvalid(f"malformed envelope: {name} is not a base64 string")
    try:
        if "-" in value or "_" in value:
            return base64.b64decode(value, altchars=b"-_", validate=True)
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureInvalid(f"malformed envelope: {name} is not valid base64") from None


def _statement_problem(document: Any) -> str:
    """What keeps ``document`` from being an in-toto Statement v1 ("" when nothing)."""
    if not isinstance(document, Mapping):
        return "not a JSON object"
    if document.get("_type") != STATEMENT_TYPE:
        return f"_type is {str(document.get('_type'))[:80]!r}, not {STATEMENT_TYPE!r}"
    subjects = document.get("subject")
    if not isinstance(subjects, list) or not subjects:
        return "subject is not a non-empty list"
    for index, subject in enumerate(subjects):
        digest = subject.get("digest") if isinstance(subject, Mapping) else None
        if not isinstance(digest, Mapping) or not digest:
            return f"subject[{index}] has no digest"
        if not all(isinstance(value, str) for value in digest.values()):
            return f"subject[{index}].digest has a value that is not a string"
    predicate_type = document.get("predicateType")
    if not isinstance(predicate_type, str) or not predicate_type:
        return "predicateType is not a non-empty string"
    if "predicate" in document and not isinstance(document["predicate"], Mapping):
        return "predicate is not a JSON object"
    return ""
