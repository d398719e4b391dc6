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

Wherever a charter is read — the ledger's fold, a trust root (:mod:`das.trust.root`), a
release's certificate (:mod:`das.trust.verifier`), a charter about to be proposed — it is
checked by one function, :func:`charter_problems`: exact types and fields, a quorum from 1 to
the number of distinct approvers, no key both approver and runner, known ceilings within the
system's limits. A charter that fails it is never in force and never proves anything.

Entries: ``charter`` (``{"statement": ..., "signatures": [...]}``, the proposer's signature
first) and ``charter-signature`` (``{"charter": <digest>, "signature": ...}``).
"""

from __future__ import annotations

import datetime as dt
import re
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
from das.trust.signing.errors import SignatureInvalid, SigningError
from das.trust.signing.keys import PublicKey
from das.trust.signing.sshsig import signature_key, verify
from das.trust.text import shown

CHARTER_TYPE = "das-charter/1"
CHARTER_NAMESPACE = "das-charter"
# Every field a charter carries, and nothing else (what charter_statement writes).
CHARTER_FIELDS = frozenset(
    {"type", "ledger_id", "version", "previous", "approvers", "quorum", "runners", "ceilings",
     "made"}
)  # fmt: skip
_HEX64 = re.compile(r"[0-9a-f]{64}")


def exact_int(value: Any) -> bool:
    """An integer of JSON, not a bool (``True`` is an int to Python), not a string."""
    return isinstance(value, int) and not isinstance(value, bool)


def _key_list(value: Any, what: str, problems: list[str]) -> list[PublicKey]:
    if not isinstance(value, list):
        problems.append(f"its {what} are not a list")
        return []
    keys = []
    for index, item in enumerate(value):
        try:
            keys.append(PublicKey.from_dict(item))
        except (SigningError, TypeError) as exc:
            problems.append(f"its {what}[{index}] is not a key ({exc})")
    return keys


def charter_problems(statement: Any) -> list[str]:
    """What keeps ``statement`` from being a charter this system could make ([] when nothing):
    the exact fields (:data:`CHARTER_FIELDS`) of exact types; ``version`` an integer from 1,
    ``previous`` nothing for version 1 and a SHA-256 digest after; a non-empty list of distinct
    approver keys and a list of run keys, none both; a quorum an integer (not a bool, not a
    string) from 1 to the number of approvers; a ceiling per known privacy definition, exact
    fraction text within the system's maximum; ``made`` a time with its zone. The one check of
    a charter wherever one is read."""
    if not isinstance(statement, Mapping):
        return ["a charter is a JSON object"]
    problems: list[str] = []
    missing = sorted(CHARTER_FIELDS - set(statement))
    unknown = sorted(str(name)[:40] for name in set(statement) - CHARTER_FIELDS)
    if missing:
        problems.append(f"it lacks {', '.join(missing)}")
    if unknown:
        problems.append(f"it has unknown fields {', '.join(map(repr, unknown))}")
    if statement.get("type") != CHARTER_TYPE or not isinstance(statement.get("type"), str):
        problems.append(f"its type is not {CHARTER_TYPE!r}")
    ledger_id = statement.get("ledger_id")
    if not isinstance(ledger_id, str) or not ledger_id:
        problems.append("its ledger_id is not a non-empty string")
    version, previous = statement.get("version"), statement.get("previous")
    if not exact_int(version) or version < 1:
        problems.append(f"its version {str(version)[:20]!r} is not an integer from 1")
    elif version == 1 and previous is not None:
        problems.append("version 1 continues nothing (its previous must be null)")
    elif version > 1 and not (isinstance(previous, str) and _HEX64.fullmatch(previous)):
        problems.append(f"version {version} names no previous charter by its SHA-256 digest")
    approvers = _key_list(statement.get("approvers"), "approvers", problems)
    runners = _key_list(statement.get("runners"), "runners", problems)
    distinct = set(approvers)
    if isinstance(statement.get("approvers"), list) and not statement["approvers"]:
        problems.append("it names no approver")
    if len(distinct) != len(approvers):
        problems.append("an approver's key is listed twice")
    quorum = statement.get("quorum")
    if not exact_int(quorum):
        problems.append(f"its quorum {str(quorum)[:20]!r} is not an integer")
    elif not 1 <= quorum <= len(distinct):
        shown_quorum = str(quorum) if abs(quorum) < 10**12 else "a huge number"
        problems.append(
            f"a quorum of {shown_quorum} is not between 1 and {len(distinct)} (its approvers)"
        )
    both = sorted(k.fingerprint for k in distinct & set(runners))
    if both:
        problems.append(
            "a key cannot both approve spends and run the pipeline (" + ", ".join(both) + ")"
        )
    problems += _ceiling_problems(statement.get("ceilings"))
    made = statement.get("made")
    try:
        if not isinstance(made, str) or dt.datetime.fromisoformat(made).tzinfo is None:
            raise ValueError
    except ValueError:
        problems.append("its made is not a time with its zone (ISO 8601)")
    return problems


def _ceiling_problems(ceilings: Any) -> list[str]:
    """A ceiling for each privacy definition the system knows, as exact fraction text in
    (0, the system's maximum]."""
    if not isinstance(ceilings, Mapping):
        return ["its ceilings are not an object"]
    problems = []
    for definition in sorted(map(str, set(ceilings) - set(MAX_PASS_TOTAL))):
        problems.append(f"unknown privacy definition {definition[:40]!r} in its ceilings")
    for definition in sorted(set(MAX_PASS_TOTAL) - set(ceilings)):
        problems.append(f"it has no {definition} ceiling")
    for definition in sorted(set(ceilings) & set(MAX_PASS_TOTAL)):
        text = ceilings[definition]
        try:
            if not isinstance(text, str):
                raise ValueError
            value = Fraction(text)
            if fraction_text(value) != text:
                raise ValueError
        except (ValueError, ZeroDivisionError):
            problems.append(f"its {definition} ceiling is not exact fraction text")
            continue
        if not 0 < value <= MAX_PASS_TOTAL[definition]:
            problems.append(
                f"a ceiling of {unit(definition)} {decimal_text(value)} is outside (0, "
                f"{decimal_text(MAX_PASS_TOTAL[definition])}]"
            )
    return problems


def charter_record(record: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The statement and signatures of a charter as certificates and trust roots carry it,
    ``{"statement": {...}, "signatures": ["-----BEGIN SSH SIGNATURE-----..."]}`` exactly;
    ValueError naming what is wrong (the statement's :func:`charter_problems` too)."""
    if not isinstance(record, Mapping) or set(record) != {"statement", "signatures"}:
        raise ValueError("a charter record is exactly {statement, signatures}")
    signatures = record["signatures"]
    if not isinstance(signatures, list) or not all(isinstance(s, str) for s in signatures):
        raise ValueError("a charter record's signatures are a list of text")
    problems = charter_problems(record["statement"])
    if problems:
        raise ValueError("not a valid charter: " + "; ".join(problems))
    return dict(record["statement"]), tuple(signatures)


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
        return _exact(self.statement["version"], "version")

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
        return _exact(self.statement["quorum"], "quorum")

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


def _exact(value: Any, name: str) -> int:
    """An exact integer of a charter; never a string or a bool read as one (a quorum of
    ``"0"`` or ``True``)."""
    if not exact_int(value):
        raise ValueError(f"a charter's {name} is not an integer: not a valid charter")
    return int(value)


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
    """The charters of a ledger from its entries (``init``, ``charter`` and
    ``charter-signature``), with the one in force: each signature verified, duplicates and
    strangers not counted, and a charter that is not valid (:func:`charter_problems`, or of
    another ledger than the ``init`` entry names) never counted — named in ``problems``."""
    chain = CharterChain()
    by_digest: dict[str, int] = {}
    ledger_id: str | None = None
    for entry in entries:
        if entry.kind == "init":
            ledger_id = _payload(entry).get("ledger_id")
        elif entry.kind == "charter":
            data = _payload(entry)
            try:
                statement, signatures = charter_record(
                    {"statement": data.get("statement"), "signatures": data.get("signatures", [])}
                )
            except ValueError as exc:
                chain.problems.append(f"entry {entry.seq}: {exc}: never in force (forged?)")
                continue
            if ledger_id is not None and statement["ledger_id"] != ledger_id:
                chain.problems.append(
                    f"entry {entry.seq}: a charter of ledger {statement['ledger_id']!s:.40}, not "
                    f"of this one ({ledger_id}): never in force (copied from another ledger?)"
                )
                continue
            charter = Charter(statement, entry.seq, entry.at, signatures)
            if charter.digest in by_digest:
                chain.problems.append(f"entry {entry.seq}: the same charter proposed again")
                continue
            by_digest[charter.digest] = len(chain.charters)
            chain.charters.append(charter)
        elif entry.kind == "charter-signature":
            data = _payload(entry)
            index = by_digest.get(str(data.get("charter")))
            if index is None or not isinstance(data.get("signature"), str):
                chain.problems.append(f"entry {entry.seq}: a signature of an unknown charter")
                continue
            chain.charters[index] = chain.charters[index].with_signature(data["signature"])
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


def _payload(entry: Entry) -> dict[str, Any]:
    """An entry's payload read strictly ({} when it cannot be: a row written by hand, which
    `das ledger verify` names)."""
    try:
        return entry.strict_payload
    except ValueError:
        return {}


def check_charter_statement(
    statement: Mapping[str, Any], ledger_id: str, previous: Charter | None
) -> None:
    """Refuse a charter that could not work (:func:`charter_problems`: no approvers, a quorum
    outside 1 to their number, a key both approver and runner — the operator who runs the
    pipeline holds no approver key —, a ceiling above the system's maximum...), of another
    ledger, or that does not continue the charter in force."""
    problems = charter_problems(statement)
    if not problems and statement["ledger_id"] != ledger_id:
        problems.append(f"it names ledger {statement['ledger_id']}, not {ledger_id}")
    version = statement.get("version") if isinstance(statement, Mapping) else None
    if previous is None and not problems and version != 1:
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
