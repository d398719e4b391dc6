"""The trust root: what a verifier pins, so that its rules never come from the evidence it
checks.

A release's certificate carries the charter chain it was made under, but a chain is only as
good as its first link: anyone can write a "charter version 1" that names their own key, a
quorum of one (or of zero) and their own run key, and sign it. So the approvers publish, once
and after each change of charter, the **trust root** of their production ledger — after TUF's
root metadata, which a client pins and which rotates only under a threshold of the old root::

    {"type": "das-trust-root/1", "ledger_id": "...",
     "charters": [{"statement": <charter v1>, "signatures": [...]}, ..., <charter vN>]}

— the ledger's chain in force when it was exported (`das ledger trust-root`), each charter with
the signatures that count for it, and nothing else. Its digest is the SHA-256 of the file's
bytes, published beside it, so an outsider checks it with ``sha256sum``. Exporting the same
chain again gives the same bytes.

Reading a root checks it whole (:func:`read_trust_root`): strict JSON, its exact fields, every
charter valid (:func:`~das.trust.ledger.charter.charter_problems`) and of the root's ledger,
version 1 signed by a quorum of its own approvers, each later one continuing the one before
and signed by a quorum of *its* approvers, and every signature it carries counting.

A release proves against a root (:func:`follow_chain`) when its charter chain agrees with the
root's on every version both hold (the same digests: another "charter version 1" is refused)
and each charter beyond the root's newest is signed by a quorum of the one before: a verifier
holding an older root follows a rotation forward, as TUF's clients do. A newer root is pinned
only once it extends the held one (:func:`extension_problems`, `das release check-root`).

The pipeline's own side (:func:`check_pinned_roots`): a run refuses a ledger whose chain in
force does not extend a root pinned for it — ``DAS_TRUST_ROOT``, and ``trust-root.json`` in the
run key's own folder (resolved), which whoever edits a deployment's environment can neither
write nor switch off while the run signs with that key — so a ledger an operator charters with
one approver's key spends nothing under the service account's key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.refusal import Remedy
from das.trust.ledger.charter import CHARTER_NAMESPACE, Charter, charter_record
from das.trust.ledger.errors import LedgerRefused
from das.trust.ledger.spending import ledger_option
from das.trust.run_keys import RUN_KEY_ENV, run_key_path
from das.trust.signing.canonical import StrictJSONError, strict_loads
from das.trust.signing.errors import SignatureInvalid
from das.trust.signing.keys import PublicKey
from das.trust.signing.sshsig import verify

ROOT_TYPE = "das-trust-root/1"
ROOT_FIELDS = frozenset({"type", "ledger_id", "charters"})
TRUST_ROOT_ENV = "DAS_TRUST_ROOT"
PINNED_ROOT_FILE = "trust-root.json"  # beside the run key: the service account's own pin


class RootInvalid(ValueError):
    """A trust root that cannot be pinned; the message says why."""


@dataclass(frozen=True)
class TrustRoot:
    """A checked trust root: its ledger, its charters (version 1 first), and the SHA-256 of
    the bytes it was read from (what the agency publishes beside it)."""

    ledger_id: str
    charters: tuple[Charter, ...]
    digest: str

    @property
    def newest(self) -> Charter:
        return self.charters[-1]

    def describe(self) -> str:
        return (
            f"trust root {self.digest[:16]} (ledger {self.ledger_id}, charter versions 1 to "
            f"{self.newest.version})"
        )


def link_problem(
    charter: Charter, previous: Charter | None, trusted: Collection[PublicKey] | None = None
) -> str:
    """Why ``charter`` is not the next link after ``previous`` (the first: ``None``) — it
    does not continue it, or is not signed by a quorum of distinct approvers of ``previous``
    (of its own for version 1) — ``""`` when it is. With ``trusted``, only those keys' signatures
    count (the published keys, an additional restriction)."""
    if previous is None:
        if charter.version != 1 or charter.previous is not None:
            return f"the chain starts at charter version {charter.version}, not at version 1"
    elif charter.ledger_id != previous.ledger_id:
        return f"charter version {charter.version} is of ledger {charter.ledger_id:.40}"
    elif charter.previous != previous.digest or charter.version != previous.version + 1:
        return f"charter version {charter.version} does not continue the one before"
    deciding = charter if previous is None else previous
    eligible = [k for k in deciding.approvers if trusted is None or k in trusted]
    signers, _ = charter.signers(eligible)
    if len(signers) >= deciding.quorum:
        return ""
    outside = [k.fingerprint for k in deciding.approvers if k not in eligible]
    whose = (
        "its own approvers" if previous is None else f"the approvers of version {previous.version}"
    )
    return (
        f"charter version {charter.version} (ledger {charter.ledger_id:.40}) is signed by "
        f"{len(signers)} of {whose}; it needs {deciding.quorum}"
        + (f" (keys it counts on that are not trusted: {', '.join(outside)})" if outside else "")
    )


def counting_signatures(charter: Charter, deciding: Charter) -> list[str]:
    """The signatures of ``charter`` that count, one per distinct approver of ``deciding``
    (the charter before it; itself for version 1), in the order they were given."""
    kept: list[str] = []
    seen: set[PublicKey] = set()
    for signature in charter.signatures:
        try:
            key = verify(charter.message, signature, CHARTER_NAMESPACE, deciding.approvers)
        except SignatureInvalid:
            continue
        if key not in seen:
            seen.add(key)
            kept.append(signature)
    return kept


def root_document(chain: Sequence[Charter]) -> bytes:
    """The bytes of the trust root of ``chain`` (a ledger's charters in force, version 1
    first): each charter with the signatures that count for it. The same chain always gives
    the same bytes."""
    if not chain:
        raise RootInvalid("no charter in force: a ledger without one has no trust root")
    records = [
        {
            "statement": charter.statement,
            "signatures": counting_signatures(charter, chain[index - 1] if index else charter),
        }
        for index, charter in enumerate(chain)
    ]
    document = {"type": ROOT_TYPE, "ledger_id": chain[0].ledger_id, "charters": records}
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    data = text.encode("utf-8")
    trust_root_of(data)  # what is written is what a verifier accepts
    return data


def trust_root_of(data: bytes) -> TrustRoot:
    """The trust root in ``data``, checked whole (see the module docstring); RootInvalid."""
    try:
        document: Any = strict_loads(data.decode("utf-8"))
    except (UnicodeDecodeError, StrictJSONError) as exc:
        raise RootInvalid(f"not a trust root: not strict JSON ({exc})") from None
    if not isinstance(document, dict) or set(document) != ROOT_FIELDS:
        raise RootInvalid(f"not a trust root: a JSON object of exactly {sorted(ROOT_FIELDS)}")
    if document["type"] != ROOT_TYPE:
        raise RootInvalid(f"not a trust root: its type is not {ROOT_TYPE!r}")
    ledger_id, records = document["ledger_id"], document["charters"]
    if not isinstance(ledger_id, str) or not ledger_id:
        raise RootInvalid("the trust root's ledger_id is not a non-empty string")
    if not isinstance(records, list) or not records:
        raise RootInvalid("the trust root holds no charter")
    charters: list[Charter] = []
    for index, record in enumerate(records):
        try:
            statement, signatures = charter_record(record)
        except ValueError as exc:
            raise RootInvalid(f"the trust root's charter {index + 1}: {exc}") from None
        charter = Charter(statement, index, "", signatures)
        previous = charters[-1] if charters else None
        if charter.ledger_id != ledger_id:
            raise RootInvalid(
                f"the trust root's charter {index + 1} is of ledger {charter.ledger_id:.40}, "
                f"not {ledger_id}"
            )
        problem = link_problem(charter, previous)
        if problem:
            raise RootInvalid(f"the trust root's chain does not hold: {problem}")
        counting = counting_signatures(charter, previous or charter)
        if len(counting) != len(signatures):
            raise RootInvalid(
                f"the trust root's charter version {charter.version} carries a signature that "
                "does not count (not made by a distinct approver whose quorum it needs)"
            )
        charters.append(charter)
    return TrustRoot(ledger_id, tuple(charters), hashlib.sha256(data).hexdigest())


def read_trust_root(path: Path) -> TrustRoot:
    """The trust root of the file ``path``, checked whole; RootInvalid naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RootInvalid(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return trust_root_of(data)
    except RootInvalid as exc:
        raise RootInvalid(f"{path}: {exc}") from None


def follow_chain(
    charters: Sequence[Charter],
    root: TrustRoot | None,
    trusted: Collection[PublicKey] | None = None,
) -> list[str]:
    """Why ``charters`` (a release's chain, version 1 first) is not a chain ``root`` proves
    ([] when it is): every version the root holds must be the root's own (the same digest),
    and each one beyond it a link signed by a quorum of the one before. Without a root each
    link is checked against the chain itself, which proves nothing on its own (the caller
    says so). ``trusted``: only those keys' signatures count, on every link."""
    if not charters:
        return ["the certificate carries no charter: the release was not made under one"]
    if root is not None and charters[0].ledger_id != root.ledger_id:
        return [
            f"the release is of ledger {charters[0].ledger_id:.40}; the trust root pins ledger "
            f"{root.ledger_id}"
        ]
    for index, charter in enumerate(charters):
        previous = charters[index - 1] if index else None
        if root is not None and index < len(root.charters):
            pinned = root.charters[index]
            if charter.digest != pinned.digest:
                return [
                    f"charter version {charter.version} ({charter.digest[:16]}) is not the "
                    f"trust root's ({pinned.digest[:16]}): not the agency's charter"
                ]
            charter = pinned  # its signatures, checked when the root was read
        problem = link_problem(charter, previous, trusted)
        if problem:
            return [problem]
    return []


def extension_problems(new: TrustRoot, old: TrustRoot) -> list[str]:
    """Why ``new`` does not extend the pinned ``old`` ([] when it does): the same ledger, the
    old chain as its beginning (the same digests), and each charter after it signed by a quorum
    of the one before (checked when ``new`` was read). A root that stops earlier (a rollback)
    or forks does not extend it."""
    if new.ledger_id != old.ledger_id:
        return [f"the new root is of ledger {new.ledger_id}, the pinned one of {old.ledger_id}"]
    if len(new.charters) < len(old.charters):
        return [
            f"the new root stops at charter version {new.newest.version}, before the pinned "
            f"root's version {old.newest.version} (a rollback)"
        ]
    for held, offered in zip(old.charters, new.charters, strict=False):
        if held.digest != offered.digest:
            return [
                f"the new root's charter version {offered.version} ({offered.digest[:16]}) is "
                f"not the pinned root's ({held.digest[:16]}): another history"
            ]
    return []


def ledger_root_problems(ledger_id: str, chain: Sequence[Charter], root: TrustRoot) -> list[str]:
    """Why a ledger (its id, its charters in force, version 1 first) does not extend ``root``
    ([] when it does): another ledger, a chain that stops before the root's newest charter (cut
    back, or not the published ledger), or one that is not the root's."""
    if ledger_id != root.ledger_id:
        return [f"it is ledger {ledger_id}, the trust root pins ledger {root.ledger_id}"]
    if len(chain) < len(root.charters):
        held = f"version {chain[-1].version}" if chain else "no charter"
        return [
            f"its charter in force is {held}, the trust root pins version "
            f"{root.newest.version} (a ledger cut back, or not the published one)"
        ]
    return follow_chain(chain, root)


def pinned_roots(environ: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """The trust roots a run's ledger must extend, each with where it was pinned:
    ``DAS_TRUST_ROOT``, and ``trust-root.json`` beside the run key (``DAS_RUN_KEY``, else the
    per-user one), in its resolved folder: a link to the key elsewhere brings no other pin."""
    environ = os.environ if environ is None else environ
    pins = []
    named = (environ.get(TRUST_ROOT_ENV) or "").strip()
    if named:
        pins.append((TRUST_ROOT_ENV, Path(named).expanduser()))
    beside = run_key_path(environ).resolve().parent / PINNED_ROOT_FILE
    if beside.exists() or beside.is_symlink():
        pins.append((f"the run key's folder ({RUN_KEY_ENV})", beside))
    return pins


def check_pinned_roots(
    ledger_id: str,
    chain: Sequence[Charter],
    location: str,
    environ: Mapping[str, str] | None = None,
    *,
    production: bool = False,
) -> None:
    """Refuse (LedgerRefused) a run's ledger — its id, its charters in force, version 1 first —
    that does not extend every trust root pinned for the run (:func:`pinned_roots`): an
    operator's ledger of their own (one approver's charter, even under the production ledger's
    id) spends nothing here. A ``production`` run (a chartered ledger, or DAS_PRODUCTION) with
    no root pinned at all is refused too: else one approver's own ledger (quorum 1, the service
    account's run key as its runner) would spend under the service account's key."""
    pins = pinned_roots(environ)
    if production and not pins:
        beside = run_key_path(environ).resolve().parent / PINNED_ROOT_FILE
        raise LedgerRefused(
            f"no trust root is pinned for this production run (neither {TRUST_ROOT_ENV} nor "
            f"{beside}): a production run spends only against the ledger its approvers "
            "published, so that a ledger one approver charters alone spends nothing here. "
            "Nothing was read or drawn",
            Remedy(
                command=f"once the ledger's charter is in force, write its root beside the run "
                f"key: das ledger trust-root {ledger_option(location)} --output "
                f"{shlex.quote(str(beside))} (or name the published root in {TRUST_ROOT_ENV})"
            ),
        )
    for source, path in pins:
        try:
            root = read_trust_root(path)
        except RootInvalid as exc:
            raise LedgerRefused(
                f"the trust root pinned by {source} cannot be used: {exc}. Nothing is spent "
                "until it is the agency's published root (das ledger trust-root)"
            ) from None
        problems = ledger_root_problems(ledger_id, chain, root)
        if problems:
            raise LedgerRefused(
                f"privacy ledger {location} does not extend the trust root {path} (pinned by "
                f"{source}): " + "; ".join(problems) + ". This account spends only against the "
                "production ledger its approvers published; nothing was read or drawn"
            )
