"""The outsider's verifier: a release's certificate checked with public keys only — no ledger,
no Prefect server — against the trust root the agency publishes (:mod:`das.trust.root`).

The rules come from the root, never from the release: the release's charter chain must be the
root's on every version the root holds and signed by a quorum of the charter before on every
later one; every charter must be valid (:func:`~das.trust.ledger.charter.charter_problems`: a
quorum of 0, ``"0"`` or ``-1`` is no charter). Then: the certificate
(:mod:`das.trust.certificate`) signed by a run key that charter names, a quorum of its
approvers on an approval of exactly these sealed parameters, this dataset and this spend (per
pass this run's total exactly, the cumulative total within it, made before the approval
expired), the files exactly those certified and listed by the MANIFEST, and a release labelled
private. Without a root nothing is proven: a chain read from the release proves only that
someone signed it. Published approver keys (``trusted``) and ledger ids restrict further. Every
document is read strictly (a repeated key refused). It says what it proved, or every reason it
could not.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from das.privacy.mechanisms import parse_fraction_text
from das.trust.certificate import PREDICATE_TYPE
from das.trust.ledger.amounts import decimal_text
from das.trust.ledger.approvals import APPROVAL_NAMESPACE, APPROVAL_TYPE, Approval
from das.trust.ledger.charter import Charter, charter_record, valid_signers
from das.trust.release_files import AUDIT_FILE, CERTIFICATE, MANIFEST
from das.trust.root import TrustRoot, follow_chain
from das.trust.signing.canonical import StrictJSONError, canonical_json, sha256_hex, strict_loads
from das.trust.signing.dsse import verify_envelope
from das.trust.signing.errors import SignatureInvalid
from das.trust.signing.keys import PublicKey
from das.trust.text import shown

NO_ROOT = (
    "no trust root: the charter chain, the approvers and the quorum were read from the release "
    "itself, which anyone can write — pass the trust root the agency publishes for its "
    "production ledger with its SHA-256 (das release verify OUT --trust-root FILE; the agency "
    "makes it with das ledger trust-root)"
)


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
    # (ledger id, version, digest) of each charter the certificate shows, checked or not: two
    # releases that show different charters for one ledger and version fail together.
    shown_charters: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def proven(self) -> bool:
        return not self.problems


def _read_envelope(release: Path) -> dict[str, Any]:
    path = release / CERTIFICATE
    if not path.is_file():
        raise SignatureInvalid(f"no {CERTIFICATE}: the release carries no proof")
    try:
        envelope = strict_loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, StrictJSONError) as exc:
        raise SignatureInvalid(f"{CERTIFICATE} is not readable strict JSON ({exc})") from None
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
    try:
        document = strict_loads(base64.b64decode(str(envelope["payload"]), validate=True))
    except (binascii.Error, ValueError) as exc:
        raise SignatureInvalid(f"the certificate's payload is not readable ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("predicate"), dict):
        raise SignatureInvalid("the certificate's payload is not an in-toto statement")
    return document


def _shown_charters(records: Any) -> list[tuple[str, int, str]]:
    """What the certificate says each of its charters is (unchecked), for the check across
    releases."""
    shown = []
    for record in records if isinstance(records, list) else []:
        statement = record.get("statement") if isinstance(record, dict) else None
        if isinstance(statement, dict):
            try:
                charter = Charter(statement, 0, "")
                shown.append((str(statement.get("ledger_id")), charter.version, charter.digest))
            except (TypeError, ValueError):
                continue
    return shown


def verify_charters(
    records: Any,
    root: TrustRoot | None,
    trusted: Collection[PublicKey] | None,
    problems: list[str],
) -> Charter | None:
    """The charter the release was made under: the last of ``records`` (its chain, version 1
    first), when each is a valid charter and the chain is one ``root`` proves
    (:func:`das.trust.root.follow_chain`); None (with the reasons) otherwise."""
    if not isinstance(records, list):
        problems.append("the certificate's charters are not a list")
        return None
    charters = []
    for index, record in enumerate(records):
        try:
            statement, signatures = charter_record(record)
        except ValueError as exc:
            problems.append(f"the certificate's charter {index + 1}: {exc}")
            return None
        charters.append(Charter(statement, index, "", signatures))
    found = follow_chain(charters, root, trusted)
    if found:
        problems.extend(found)
        return None
    return charters[-1]


def _check_approvals(
    predicate: Mapping[str, Any],
    charter: Charter,
    trusted: Collection[PublicKey] | None,
    problems: list[str],
) -> list[str]:
    """The approval the run spent: signed by a quorum of trusted approvers of ``charter``, of
    exactly this release's parameters, dataset and spend; the signers' fingerprints."""
    approvals = predicate.get("approvals") or []
    if not approvals:
        problems.append("the certificate carries no approval: nobody approved this spend")
        return []
    record = approvals[0]
    if (
        not isinstance(record, dict)
        or set(record) != {"statement", "signatures"}
        or not isinstance(record["statement"], dict)
        or not isinstance(record["signatures"], list)
        or not all(isinstance(item, str) for item in record["signatures"])
    ):
        problems.append("the certificate's approval is not {statement, signatures}")
        return []
    approval = Approval(dict(record["statement"]), 0, "", None, tuple(record["signatures"]))
    st = approval.statement
    eligible = [k for k in charter.approvers if trusted is None or k in trusted]
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
    authorized, expires = _time(predicate.get("authorized_at")), _time(st.get("expires"))
    if authorized is None or expires is None or authorized >= expires:
        problems.append(f"the spend ({predicate.get('authorized_at') or 'no time'}) was not "
                        f"made before the approval expired ({st.get('expires')})")  # fmt: skip
    return sorted(k.fingerprint + (f" {k.label}" if k.label else "") for k in signers)


def _time(value: Any) -> dt.datetime | None:
    """An ISO 8601 time with its zone, else None (compared as times, not as text)."""
    try:
        moment = dt.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


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
            problems.append(f"{shown(name, None)} is not a regular file (a link, a pipe, a device)")
        elif path.is_dir() and not any(i == name or i.startswith(name + "/") for i in implied):
            problems.append(
                f"{shown(name, None)}/ is a folder no certified file is in (added after "
                "publication)"
            )
    present = file_digests(release)
    for name in sorted(set(present) - set(certified)):
        problems.append(
            f"{shown(name, None)} is in the release but not certified (added after publication)"
        )
    for name in sorted(set(certified) - set(present)):
        problems.append(f"{shown(name, None)} is certified but missing from the release")
    for name in sorted(set(certified) & set(present)):
        if certified[name] != present[name]:
            problems.append(f"{shown(name, None)} differs from the certified file")
    try:
        manifest = strict_loads((release / MANIFEST).read_bytes())
        listed = set(manifest.get("files", {}))
    except (OSError, ValueError, AttributeError, TypeError):
        problems.append(f"no readable {MANIFEST}")
        return
    beside = set(present) - {MANIFEST}
    for name in sorted(beside - listed):
        problems.append(f"{shown(name, None)} is not listed by the MANIFEST")
    for name in sorted(listed - beside):
        problems.append(f"{shown(name, None)} is listed by the MANIFEST but missing")


def _check_audit(release: Path, predicate: Mapping[str, Any], problems: list[str]) -> None:
    """The audit in the release states the same spend as the certificate."""
    try:
        audit = strict_loads((release / AUDIT_FILE).read_bytes())
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


def verify_release(
    release: Path,
    trusted: Collection[PublicKey] | None = None,
    *,
    root: TrustRoot | None = None,
) -> Proof:
    """Everything :mod:`this module's <das.trust.verifier>` docstring says is checked; without
    ``root`` the release is never proven (:data:`NO_ROOT` says why), though every other check
    is still made and said. ``trusted``: the published approver keys, when given the only ones
    whose signatures count."""
    release = Path(release)
    proof = Proof(release)
    trusted = None if trusted is None else frozenset(trusted)
    if root is None:
        proof.problems.append(NO_ROOT)
    try:
        _verify(release, trusted, root, proof)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        proof.problems.append(f"the certificate is malformed ({type(exc).__name__}: {exc})"[:300])
    return proof


def _verify(
    release: Path, trusted: Collection[PublicKey] | None, root: TrustRoot | None, proof: Proof
) -> None:
    problems = proof.problems
    if not release.is_dir():
        problems.append(f"{shown(release, None)} is not a folder")
        return
    try:
        envelope = _read_envelope(release)
        claimed = _unverified_statement(envelope)
    except SignatureInvalid as exc:
        problems.append(str(exc))
        return
    claimed_predicate = claimed["predicate"]
    proof.shown_charters = _shown_charters(claimed_predicate.get("charters"))
    charter = verify_charters(claimed_predicate.get("charters") or [], root, trusted, problems)
    if charter is None:
        return
    runners = charter.runners
    if not runners:
        problems.append("the charter names no run key: no pipeline can sign a release under it")
        return
    try:
        statement_doc, signers = verify_envelope(envelope, runners)
    except SignatureInvalid as exc:
        problems.append(f"the certificate is not signed by a run key of the charter: {exc}")
        return
    if statement_doc.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"the certificate is not a {PREDICATE_TYPE} statement")
        return
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
        "trust_root": None if root is None else root.digest,
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
    releases: Iterable[Path],
    trusted: Collection[PublicKey] | None = None,
    ledger_ids: Sequence[str] = (),
    *,
    roots: Sequence[TrustRoot] = (),
) -> list[Proof]:
    """:func:`verify_release` of each, against the root of its ledger among ``roots`` (a
    release of a ledger no root pins is not proven when roots are given); with ``ledger_ids``
    (published beside the approver keys), each must be a release of one of those ledgers; and
    the checks across them: an approval authorizes one run's one release, so releases that
    carry the same approval with other content (another run, or the same run id in a copy of
    the ledger) fail, all of them; and releases that show different charters for one ledger and
    version (two "charter version 1" of one ledger) fail, all of them."""
    by_ledger = {root.ledger_id: root for root in roots}
    if len(by_ledger) != len(roots):
        raise ValueError("two trust roots of one ledger: pin one (the newest that extends it)")
    proofs = []
    for release in releases:
        root = None
        if roots:
            root = by_ledger.get(_claimed_ledger(Path(release)) or "")
            if root is None and len(roots) == 1:
                root = roots[0]  # its own check names the other ledger
        proof = verify_release(release, trusted, root=root)
        if roots and root is None:  # not "no trust root": none of those given is its ledger's
            proof.problems[proof.problems.index(NO_ROOT)] = (
                "made in no ledger a trust root given pins (" + ", ".join(sorted(by_ledger)) + ")"
            )
        proofs.append(proof)
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
    _forks(proofs, by_ledger)
    return proofs


def _claimed_ledger(release: Path) -> str | None:
    """The ledger a release's certificate says its first charter is of (unchecked: only to
    pick the root it is then checked against)."""
    try:
        records = _unverified_statement(_read_envelope(release))["predicate"].get("charters")
        statement = records[0]["statement"]
        return str(statement["ledger_id"])
    except (SignatureInvalid, OSError, LookupError, TypeError):
        return None


def _forks(proofs: Sequence[Proof], roots: Mapping[str, TrustRoot]) -> None:
    """Releases that show two different charters for one ledger and version fail together:
    one ledger has one charter of each version, so one of them is not that ledger's, and
    nothing tells which — but where a root pins that version it does tell (the other is
    refused by its own check), and a forgery anyone can write must not make the agency's
    release unprovable."""
    seen: dict[tuple[str, int], dict[str, list[Proof]]] = {}
    for proof in proofs:
        for ledger, version, digest in dict.fromkeys(proof.shown_charters):
            root = roots.get(ledger)
            if root is not None and version <= len(root.charters):
                continue
            seen.setdefault((ledger, version), {}).setdefault(digest, []).append(proof)
    for (ledger, version), digests in sorted(seen.items()):
        if len(digests) < 2:
            continue
        for digest, holders in digests.items():
            others = sorted(
                {str(p.release) for d, ps in digests.items() if d != digest for p in ps}
            )
            for proof in holders:
                proof.problems.append(
                    f"another release ({', '.join(others)}) shows another charter version "
                    f"{version} of ledger {ledger:.40}: one ledger has one charter of each "
                    "version, so these releases fail together"
                )
