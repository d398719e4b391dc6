"""The charter: who may approve a spend of a production ledger, and who runs it.

A production ledger is one with a charter: a signed statement of the ledger's id, its
approvers' OpenSSH public keys, how many distinct approvers a spend needs (the quorum), the keys
of the service accounts whose runs sign releases (the runners), and the ceilings per pass. The
first charter is signed by a quorum of the approvers it names; a later one (new approvers, a new
runner key, lower ceilings) continues the one in force and is signed by a quorum of *its*
approvers. A charter becomes in force when its quorum of valid, distinct signatures is in the
ledger; until then the one before stays in force (or, for the first, nothing may be spent).

Nothing here trusts the ledger's database: every signature is verified against the keys the
charter chain itself names, and a verifier outside the enclave checks the same chain against
the approver keys the agency publishes (:mod:`das.trust.verifier`). An operator who can write
the database but holds no approver key can add a charter entry, never put one in force.

Entries: ``charter`` (``{"statement": ..., "signatures": [...]}``, the proposer's signature
first) and ``charter-signature`` (``{"charter": <digest>, "signature": ...}``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from das.privacy.limits import MAX_PASS_TOTAL
from das.privacy.mechanisms import fraction_text
from das.trust.ledger.amounts import decimal_text, unit
from das.trust.ledger.errors import LedgerRefused
from das.trust.ledger.store import Entry
from das.trust.signing.canonical import canonical_json, statement_digest
from das.trust.signing.errors import SignatureInvalid
from das.trust.signing.keys import PublicKey
from das.trust.signing.sshsig import signature_key, verify
from das.trust.text import shown

CHARTER_TYPE = "das-charter/1"
CHARTER_NAMESPACE = "das-charter"


def keys_of(items: Iterable[Mapping[str, Any]]) -> tuple[PublicKey, ...]:
    """The public keys of a statement's key list (``[{"key": ..., "label": ...}]``)."""
    return tuple(PublicKey.from_dict(item) for item in items)


def valid_signers(
    message: bytes, signatures: Iterable[str], namespace: str, allowed: Sequence[PublicKey]
) -> tuple[set[PublicKey], list[str]]:
    """The distinct allowed keys whose signatures over ``message`` verify, and why each other
    signature does not count (by the key it names, never trusting it)."""
    signers: set[PublicKey] = set()
    rejected: list[str] = []
    for signature in signatures:
        try:
            signers.add(verify(message, signature, namespace, allowed))
        except SignatureInvalid as exc:
            try:
                named = signature_key(signature).fingerprint
            except SignatureInvalid:
                named = "an unreadable signature"
            rejected.append(f"{named}: {exc}")
    return signers, rejected


@dataclass(frozen=True)
class Charter:
    """One charter statement as the ledger holds it, with every signature given for it."""

    statement: dict[str, Any]
    seq: int
    at: str
    signatures: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        return statement_digest(self.statement)

    @property
    def message(self) -> bytes:
        return canonical_json(self.statement)

    @property
    def ledger_id(self) -> str:
        return str(self.statement["ledger_id"])

    @property
    def version(self) -> int:
        return int(self.statement["version"])

    @property
    def previous(self) -> str | None:
        return self.statement.get("previous")

    @property
    def approvers(self) -> tuple[PublicKey, ...]:
        return keys_of(self.statement["approvers"])

    @property
    def runners(self) -> tuple[PublicKey, ...]:
        return keys_of(self.statement.get("runners", ()))

    @property
    def quorum(self) -> int:
        return int(self.statement["quorum"])

    @property
    def ceilings(self) -> dict[str, Fraction]:
        return {d: Fraction(v) for d, v in self.statement["ceilings"].items()}

    def signers(self, eligible: Sequence[PublicKey]) -> tuple[set[PublicKey], list[str]]:
        """The distinct ``eligible`` keys that signed this charter, and the signatures that do
        not count (with why)."""
        return valid_signers(self.message, self.signatures, CHARTER_NAMESPACE, eligible)

    def with_signature(self, signature: str) -> Charter:
        return Charter(self.statement, self.seq, self.at, (*self.signatures, signature))

    def summary(self) -> str:
        """What an approver reads before signing it (typed text shown escaped)."""
        approvers = "\n".join(
            f"    {key.fingerprint}  {shown(key.label)}" for key in self.approvers
        )
        runners = "\n".join(f"    {key.fingerprint}  {shown(key.label)}" for key in self.runners)
        ceilings = ", ".join(
            f"{unit(d)} {decimal_text(v)}" for d, v in sorted(self.ceilings.items())
        )
        return (
            f"charter version {self.version} of privacy ledger {self.ledger_id}"
            f" (digest {self.digest[:16]})\n"
            f"  approvers (a spend needs {self.quorum} of {len(self.approvers)}):\n{approvers}\n"
            f"  runners (their runs sign releases):\n{runners or '    (none)'}\n"
            f"  ceilings per pass of a dataset: {ceilings}\n"
            + (
                f"  continues charter {self.previous[:16]}\n"
                if self.previous
                else "  the ledger's first charter\n"
            )
        )


@dataclass
class CharterChain:
    """Every charter of a ledger and which is in force (see the module docstring)."""

    charters: list[Charter] = field(default_factory=list)
    in_force: Charter | None = None
    chain: list[Charter] = field(default_factory=list)  # in force, oldest first
    problems: list[str] = field(default_factory=list)

    @property
    def chartered(self) -> bool:
        """A ledger with a charter entry is a production ledger, in force or not yet."""
        return bool(self.charters)

    @property
    def pending(self) -> Charter | None:
        """The newest charter that is not (yet) in force, if any was proposed after it."""
        newest = self.charters[-1] if self.charters else None
        if newest is None or (self.in_force is not None and newest.seq <= self.in_force.seq):
            return None
        return newest

    @property
    def runners(self) -> tuple[PublicKey, ...]:
        """Every run key a charter of the chain in force named: a run authorized under an
        earlier charter may resume under a later one."""
        return tuple(dict.fromkeys(key for charter in self.chain for key in charter.runners))

    @property
    def since(self) -> int:
        """The position of the ledger's first charter entry (0: none): entries before it were
        written when the ledger had no charter, and no run key was named to sign them."""
        return self.charters[0].seq if self.charters else 0

    def find(self, digest_prefix: str) -> Charter | None:
        found = [c for c in self.charters if c.digest.startswith(digest_prefix)]
        return found[0] if len(found) == 1 else None

    def required(self, charter: Charter) -> tuple[Sequence[PublicKey], int]:
        """Whose signatures ``charter`` needs, and how many: its own approvers' for the first,
        else those of the charter in force it continues."""
        if charter.version == 1:
            return charter.approvers, charter.quorum
        previous = next((c for c in self.chain if c.digest == charter.previous), None)
        if previous is None:
            return (), 1
        return previous.approvers, previous.quorum


def fold_charters(entries: Iterable[Entry]) -> CharterChain:
    """The charters of a ledger from its entries (``charter`` and ``charter-signature``), with
    the one in force: each signature verified, duplicates and strangers not counted."""
    chain = CharterChain()
    by_digest: dict[str, int] = {}
    for entry in entries:
        if entry.kind == "charter":
            data = entry.payload
            charter = Charter(
                dict(data["statement"]), entry.seq, entry.at, tuple(data.get("signatures", ()))
            )
            if charter.digest in by_digest:
                chain.problems.append(f"entry {entry.seq}: the same charter proposed again")
                continue
            by_digest[charter.digest] = len(chain.charters)
            chain.charters.append(charter)
        elif entry.kind == "charter-signature":
            data = entry.payload
            index = by_digest.get(str(data.get("charter")))
            if index is None:
                chain.problems.append(f"entry {entry.seq}: a signature of an unknown charter")
                continue
            chain.charters[index] = chain.charters[index].with_signature(str(data["signature"]))
    current: Charter | None = None
    for charter in chain.charters:
        continues = (
            charter.version == 1 and charter.previous is None
            if current is None
            else charter.previous == current.digest and charter.version == current.version + 1
        )
        if not continues:
            continue
        eligible, quorum = chain.required(charter)
        signers, _ = charter.signers(eligible)
        if len(signers) >= quorum:
            current = charter
            chain.chain.append(charter)
    chain.in_force = current
    return chain


def check_charter_statement(
    statement: Mapping[str, Any], ledger_id: str, previous: Charter | None
) -> None:
    """Refuse a charter that could not work: no approvers, a quorum above their number, a key
    both approver and runner (the operator who runs the pipeline holds no approver key), a
    ceiling above the system's maximum, another ledger, or a broken continuation."""
    problems = []
    if statement.get("type") != CHARTER_TYPE:
        problems.append(f"not a {CHARTER_TYPE} statement")
    if statement.get("ledger_id") != ledger_id:
        problems.append(f"it names ledger {statement.get('ledger_id')}, not {ledger_id}")
    approvers = keys_of(statement.get("approvers", ()))
    runners = keys_of(statement.get("runners", ()))
    quorum = int(statement.get("quorum", 0))
    if not approvers:
        problems.append("it names no approver")
    if len(set(approvers)) != len(approvers):
        problems.append("an approver's key is listed twice")
    if not 1 <= quorum <= len(set(approvers)):
        problems.append(f"a quorum of {quorum} is not between 1 and {len(set(approvers))}")
    both = sorted(k.fingerprint for k in set(approvers) & set(runners))
    if both:
        problems.append(
            "a key cannot both approve spends and run the pipeline (" + ", ".join(both) + ")"
        )
    for definition, text in dict(statement.get("ceilings", {})).items():
        if definition not in MAX_PASS_TOTAL:
            problems.append(f"unknown privacy definition {definition!r}")
        elif not 0 < Fraction(text) <= MAX_PASS_TOTAL[definition]:
            problems.append(
                f"a ceiling of {unit(definition)} {decimal_text(Fraction(text))} is outside (0, "
                f"{decimal_text(MAX_PASS_TOTAL[definition])}]"
            )
    version = int(statement.get("version", 0))
    if previous is None and (version != 1 or statement.get("previous") is not None):
        problems.append("the first charter of a ledger is version 1 and continues nothing")
    if previous is not None and (
        version != previous.version + 1 or statement.get("previous") != previous.digest
    ):
        problems.append(
            f"it must continue the charter in force (version {previous.version}, digest "
            f"{previous.digest[:16]})"
        )
    if problems:
        raise LedgerRefused("this charter cannot be proposed: " + "; ".join(problems))


def charter_statement(
    *,
    ledger_id: str,
    approvers: Sequence[PublicKey],
    quorum: int,
    runners: Sequence[PublicKey],
    ceilings: Mapping[str, Fraction],
    previous: Charter | None,
) -> dict[str, Any]:
    """A new charter statement (to be signed), continuing ``previous`` when there is one."""
    return {
        "type": CHARTER_TYPE,
        "ledger_id": ledger_id,
        "version": 1 if previous is None else previous.version + 1,
        "previous": None if previous is None else previous.digest,
        "approvers": [key.to_dict() for key in approvers],
        "quorum": int(quorum),
        "runners": [key.to_dict() for key in runners],
        "ceilings": {d: fraction_text(Fraction(v)) for d, v in sorted(ceilings.items())},
        "made": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
