"""The outsider's verifier: a release's certificate checked with public keys only — no ledger,
no Prefect server — against the approver keys the agency publishes (``--trusted-keys``).

It checks the charter chain signed by trusted approvers from its first version on, the
certificate (:mod:`das.trust.certificate`) signed by a run key that charter names, a quorum of
trusted approvers of that charter on an approval of exactly these sealed parameters, this
dataset and this spend (per pass this run's total exactly, the cumulative total within it, made
before the approval expired), the files exactly those certified and listed by the MANIFEST, and
a release labelled private. It says what it proved, or every reason it could not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from das.privacy.mechanisms import parse_fraction_text
from das.trust.certificate import PREDICATE_TYPE
from das.trust.ledger.amounts import decimal_text
from das.trust.ledger.approvals import APPROVAL_NAMESPACE, APPROVAL_TYPE, Approval
from das.trust.ledger.charter import Charter, valid_signers
from das.trust.release_files import AUDIT_FILE, CERTIFICATE, MANIFEST
from das.trust.signing.canonical import canonical_json, sha256_hex
from das.trust.signing.dsse import verify_envelope
from das.trust.signing.errors import SignatureInvalid
from das.trust.signing.keys import PublicKey


def file_digests(folder: Path) -> dict[str, str]:
    """Every regular file of a release folder but its certificate: relative path → SHA-256."""
    # das.io imports pandas with its package: loaded here, not when the face is imported.
    from das.io.writers import file_sha256

    return {
        path.relative_to(folder).as_posix(): file_sha256(path)
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        if path.relative_to(folder).as_posix() != CERTIFICATE
    }


@dataclass
class Proof:
    """What :func:`verify_release` found: proven, or the reasons it is not."""

    release: Path
    problems: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def proven(self) -> bool:
        return not self.problems


def _read_envelope(release: Path) -> dict[str, Any]:
    path = release / CERTIFICATE
    if not path.is_file():
        raise SignatureInvalid(f"no {CERTIFICATE}: the release carries no proof")
    try:
        envelope = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SignatureInvalid(f"{CERTIFICATE} is not readable JSON ({exc})") from None
    if not isinstance(envelope, dict) or set(envelope) != {"payload", "payloadType", "signatures"}:
        raise SignatureInvalid(
            f"{CERTIFICATE} is not a DSSE envelope of its exact form (payload, payloadType, "
            "signatures, nothing else)"
        )
    signatures = envelope["signatures"]
    if (
        not isinstance(signatures, list)
        or len(signatures) != 1
        or not isinstance(signatures[0], dict)
        or set(signatures[0]) != {"keyid", "sig"}
    ):
        raise SignatureInvalid(
            f"{CERTIFICATE} must carry exactly one signature (the run key's), nothing else"
        )
    return envelope


def _unverified_statement(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope's statement before its signature is checked: only to learn which charter
    it claims, whose run keys then decide whether its signature counts."""
    import base64

    try:
        document = json.loads(base64.b64decode(str(envelope.get("payload", ""))))
    except (ValueError, TypeError) as exc:
        raise SignatureInvalid(f"the certificate's payload is not readable ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("predicate"), dict):
        raise SignatureInvalid("the certificate's payload is not an in-toto statement")
    return document


def verify_charters(
    records: Sequence[Mapping[str, Any]], trusted: Sequence[PublicKey], problems: list[str]
) -> Charter | None:
    """The charter in force at the end of ``records`` (oldest first), each link signed by a
    quorum of keys that both the charter before it names (the first: itself) and the agency
    publishes; None (with the reasons) when the chain does not hold."""
    trusted_set = set(trusted)
    current: Charter | None = None
    if not records:
        problems.append("the certificate carries no charter: the release was not made under one")
        return None
    for index, record in enumerate(records):
        charter = Charter(dict(record["statement"]), index, "", tuple(record["signatures"]))
        if current is None and (charter.version != 1 or charter.previous is not None):
            problems.append("the charter chain does not start at the ledger's first charter")
            return None
        if current is not None and (
            charter.previous != current.digest or charter.version != current.version + 1
        ):
            problems.append(f"charter version {charter.version} does not continue the one before")
            return None
        eligible = charter.approvers if current is None else current.approvers
        quorum = charter.quorum if current is None else current.quorum
        signers, _ = charter.signers([k for k in eligible if k in trusted_set])
        if len(signers) < quorum:
            untrusted = [k.fingerprint for k in eligible if k not in trusted_set]
            problems.append(
                f"charter version {charter.version} (ledger {charter.ledger_id}) is signed by "
                f"{len(signers)} trusted approver(s); it needs {quorum}"
                + (
                    f" (keys it counts on that are not in the trusted keys: {', '.join(untrusted)})"
                    if untrusted
                    else ""
                )
            )
            return None
        current = charter
    return current


def _check_approvals(
    predicate: Mapping[str, Any],
    charter: Charter,
    trusted: Sequence[PublicKey],
    problems: list[str],
) -> list[str]:
    """The approval the run spent: signed by a quorum of trusted approvers of ``charter``, of
    exactly this release's parameters, dataset and spend; the signers' fingerprints."""
    approvals = predicate.get("approvals") or []
    if not approvals:
        problems.append("the certificate carries no approval: nobody approved this spend")
        return []
    record = approvals[0]
    approval = Approval(dict(record["statement"]), 0, "", None, tuple(record["signatures"]))
    st = approval.statement
    eligible = [k for k in charter.approvers if k in set(trusted)]
    signers, rejected = valid_signers(
        canonical_json(st), approval.signatures, APPROVAL_NAMESPACE, eligible
    )
    if len(signers) < charter.quorum:
        problems.append(
            f"approval {st.get('approval_id')} is signed by {len(signers)} trusted approver(s) "
            f"of the charter; it needs {charter.quorum}"
            + (f" (not counted: {'; '.join(rejected)})" if rejected else "")
        )
    expected = {
        "type": APPROVAL_TYPE,
        "ledger_id": charter.ledger_id,
        "charter": charter.digest,
        "product": predicate.get("product"),
        "dataset": predicate.get("dataset"),
        "definition": predicate.get("definition"),
    }
    if st.get("run_id") not in (None, predicate.get("run_id")):
        problems.append(
            f"approval {st.get('approval_id')} was requested by run {st.get('run_id')}, not by "
            f"run {predicate.get('run_id')}"
        )
    if (st.get("reference") or {}) != (predicate.get("reference") or {}):
        problems.append(
            "the release was made from other reference files (the GRF-C) than the approved ones"
        )
    for name, value in expected.items():
        if st.get(name) != value:
            problems.append(
                f"the approval's {name} is {str(st.get(name))[:40]!r}, the release's "
                f"{str(value)[:40]!r}"
            )
    if (st.get("parameters") or {}).get("digest") != (predicate.get("parameters") or {}).get(
        "digest"
    ):
        problems.append(
            "the release was made with other parameters (config, spec files or coterminous "
            "file) than the approved ones"
        )
    spend = {item["pass"]: item for item in predicate.get("spend", [])}
    allowed = st.get("passes") or {}
    if set(spend) != set(allowed):
        problems.append(f"the release spent passes {sorted(spend)}, approved {sorted(allowed)}")
    for name in sorted(set(spend) & set(allowed)):
        this_run = parse_fraction_text(spend[name]["this_run"])
        cumulative = parse_fraction_text(spend[name]["cumulative"])
        if this_run != parse_fraction_text(allowed[name]["this_run"]):
            problems.append(
                f"pass {name}: the release spent {decimal_text(this_run)}, approved "
                f"{decimal_text(parse_fraction_text(allowed[name]['this_run']))}"
            )
        if cumulative > parse_fraction_text(allowed[name]["cumulative"]):
            problems.append(
                f"pass {name}: the cumulative spend {decimal_text(cumulative)} is above the "
                f"approved {decimal_text(parse_fraction_text(allowed[name]['cumulative']))}"
            )
    authorized = str(predicate.get("authorized_at") or "")
    if not authorized or authorized >= str(st.get("expires", "")):
        problems.append(f"the spend ({authorized or 'no time'}) was not made before the "
                        f"approval expired ({st.get('expires')})")  # fmt: skip
    return sorted(k.fingerprint + (f" {k.label}" if k.label else "") for k in signers)


def _check_files(release: Path, statement_doc: Mapping[str, Any], problems: list[str]) -> None:
    """Every file of the release is a subject with its digest, none is missing, and the
    MANIFEST lists exactly the files beside it (a raw record file dropped in fails)."""
    certified = {
        item["name"]: item["digest"]["sha256"] for item in statement_doc.get("subject", [])
    }
    implied = {str(Path(name).parent) for name in certified} | {"."}
    for path in sorted(release.rglob("*")):
        name = path.relative_to(release).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            problems.append(f"{name} is not a regular file (a link, a pipe, a device)")
        elif path.is_dir() and not any(i == name or i.startswith(name + "/") for i in implied):
            problems.append(
                f"{name}/ is a folder no certified file is in (added after publication)"
            )
    present = file_digests(release)
    for name in sorted(set(present) - set(certified)):
        problems.append(f"{name} is in the release but not certified (added after publication)")
    for name in sorted(set(certified) - set(present)):
        problems.append(f"{name} is certified but missing from the release")
    for name in sorted(set(certified) & set(present)):
        if certified[name] != present[name]:
            problems.append(f"{name} differs from the certified file")
    try:
        manifest = json.loads((release / MANIFEST).read_text())
        listed = set(manifest.get("files", {}))
    except (OSError, ValueError, AttributeError):
        problems.append(f"no readable {MANIFEST}")
        return
    beside = set(present) - {MANIFEST}
    for name in sorted(beside - listed):
        problems.append(f"{name} is not listed by the MANIFEST")
    for name in sorted(listed - beside):
        problems.append(f"{name} is listed by the MANIFEST but missing")


def _check_audit(release: Path, predicate: Mapping[str, Any], problems: list[str]) -> None:
    """The audit in the release states the same spend as the certificate."""
    try:
        audit = json.loads((release / AUDIT_FILE).read_text())
    except (OSError, ValueError):
        problems.append(f"no readable {AUDIT_FILE}")
        return
    passes = ((audit.get("privacy_ledger") or {}).get("passes")) or []
    stated = {p["pass"]: p["this_run"] for p in passes}
    certified = {
        p["pass"]: decimal_text(parse_fraction_text(p["this_run"]))
        for p in predicate.get("spend", [])
    }
    if stated != certified:
        problems.append(f"the audit states the spend {stated}, the certificate {certified}")


def verify_release(release: Path, trusted: Sequence[PublicKey]) -> Proof:
    """Everything :mod:`this module's <das.trust.verifier>` docstring says is checked."""
    release = Path(release)
    proof = Proof(release)
    problems = proof.problems
    if not release.is_dir():
        problems.append(f"{release} is not a folder")
        return proof
    try:
        envelope = _read_envelope(release)
        claimed = _unverified_statement(envelope)
    except SignatureInvalid as exc:
        problems.append(str(exc))
        return proof
    claimed_predicate = claimed["predicate"]
    charter = verify_charters(claimed_predicate.get("charters") or [], trusted, problems)
    if charter is None:
        return proof
    runners = charter.runners
    if not runners:
        problems.append("the charter names no run key: no pipeline can sign a release under it")
        return proof
    try:
        statement_doc, signers = verify_envelope(envelope, runners)
    except SignatureInvalid as exc:
        problems.append(f"the certificate is not signed by a run key of the charter: {exc}")
        return proof
    if statement_doc.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"the certificate is not a {PREDICATE_TYPE} statement")
        return proof
    predicate = statement_doc["predicate"]
    if predicate.get("charters") != claimed_predicate.get("charters"):
        problems.append("the certificate's charters changed after it was signed")
    if predicate.get("ledger", {}).get("id") != charter.ledger_id:
        problems.append(
            f"the release was made in ledger {predicate.get('ledger', {}).get('id')}, the "
            f"charter governs ledger {charter.ledger_id}"
        )
    approved_by = _check_approvals(predicate, charter, trusted, problems)
    _check_files(release, statement_doc, problems)
    _check_audit(release, predicate, problems)
    markers = list(predicate.get("markers") or [])
    if markers or predicate.get("private") is not True:
        problems.append(f"the release is not private ({', '.join(markers) or 'not labelled so'})")
    proof.facts = {
        "product": predicate.get("product"),
        "run_id": predicate.get("run_id"),
        "ledger": predicate.get("ledger"),
        "charter": {
            "version": charter.version,
            "digest": charter.digest,
            "quorum": charter.quorum,
        },
        "signed_by_run_key": [k.fingerprint for k in signers],
        "approval": (predicate.get("approvals") or [{}])[0].get("statement", {}).get("approval_id"),
        "approved_by": approved_by,
        "spend": predicate.get("spend"),
        "parameters": (predicate.get("parameters") or {}).get("digest"),
        "content": _content_digest(statement_doc),
    }
    return proof


def _content_digest(statement_doc: Mapping[str, Any]) -> str:
    """The certified tables and markers (not the audit or MANIFEST, which carry times): what
    two copies of one release share, and two different releases do not."""
    rows = sorted(
        f"{item['name']}:{item['digest']['sha256']}"
        for item in statement_doc.get("subject", [])
        if item["name"] not in (MANIFEST, AUDIT_FILE)
    )
    return sha256_hex("\n".join(rows).encode())


def verify_releases(
    releases: Iterable[Path], trusted: Sequence[PublicKey], ledger_ids: Sequence[str] = ()
) -> list[Proof]:
    """:func:`verify_release` of each; with ``ledger_ids`` (published beside the approver keys),
    each must be a release of one of those ledgers; and one check across them: an approval
    authorizes one run's one release, so releases that carry the same approval with other
    content (another run, or the same run id in a copy of the ledger) fail, all of them."""
    proofs = [verify_release(release, trusted) for release in releases]
    for proof in proofs:
        ledger = (proof.facts.get("ledger") or {}).get("id")
        if ledger_ids and proof.facts and ledger not in set(ledger_ids):
            proof.problems.append(
                f"made in ledger {ledger}, not in the published production ledger(s) "
                f"{', '.join(ledger_ids)}"
            )
    by_approval: dict[str, list[Proof]] = {}
    for proof in proofs:
        if proof.facts.get("approval") is not None:
            by_approval.setdefault(str(proof.facts["approval"]), []).append(proof)
    for approval, sharing in by_approval.items():
        contents = {p.facts.get("content") for p in sharing}
        if len(contents) > 1:
            for proof in sharing:
                others = [str(p.release) for p in sharing if p is not proof]
                proof.problems.append(
                    f"approval {approval} is spent by another release with other content too "
                    f"({', '.join(others)}): one approval authorizes one release"
                )
    return proofs
