"""Approvals: signed statements of exactly what a run may spend.

An approval is a statement (``das-approval/1``) of the ledger and its charter, the product, the
dataset (its id in this ledger), the digest of the sealed parameters (config, every spec file,
the coterminous file), the privacy definition, per pass the earlier, this-run and cumulative
totals, an expiry and a note. Approvers sign its canonical bytes with their OpenSSH keys (SSHSIG,
namespace ``das-approval``): with `das ledger approve --key`, or with plain ``ssh-keygen -Y sign``
and the signature pasted into the paused run's form. In a chartered (production) ledger an
approval authorizes one run when a quorum of distinct approvers of the charter in force signed
it; a row without valid signatures authorizes nothing — whoever wrote it into the database.
In a ledger without a charter (the per-user default) nobody can sign, and an unsigned approval
stands for the operator's own decision (it spares a ``--cumulative-total``); such a ledger never
makes a release that proves it was approved.

Entries: ``approval`` (``{"statement": ..., "signatures": [...]}``; a waiting run writes it with
none), ``approval-signature`` (``{"approval_id", "signature"}``), ``approval-rejected``
(``{"approval_id", "reason", "by", "via"}``: a rejection needs no key — it spends nothing) and
``approval-withdrawn`` (``{"approval_id", "reason", "by"}``: the request of a run that was
cancelled or deleted while it waited; like a rejection it closes the statement — no later
signature authorizes anything — but a Retry of that run asks anew instead of ending Refused).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from das.privacy.mechanisms import Budget, fraction_text, parse_fraction_text
from das.trust.ledger.amounts import PassSpend, decimal_text
from das.trust.ledger.charter import Charter, CharterChain, valid_signers
from das.trust.ledger.store import Entry
from das.trust.signing.canonical import canonical_json, statement_digest
from das.trust.signing.keys import PublicKey

APPROVAL_TYPE = "das-approval/1"
APPROVAL_NAMESPACE = "das-approval"
DEFAULT_VALID_DAYS = 7
MAX_VALID_DAYS = 90


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@dataclass(frozen=True)
class Approval:
    """One approval statement as the ledger holds it: its signatures, and a rejection."""

    statement: dict[str, Any]
    seq: int
    at: str
    dataset: str | None
    signatures: tuple[str, ...] = ()
    rejection: dict[str, Any] | None = None

    @property
    def approval_id(self) -> str:
        return str(self.statement["approval_id"])

    @property
    def digest(self) -> str:
        return statement_digest(self.statement)

    @property
    def message(self) -> bytes:
        """The bytes an approver signs: exactly these, shown to them before they sign."""
        return canonical_json(self.statement)

    @property
    def product(self) -> str:
        return str(self.statement["product"])

    @property
    def parameters(self) -> str:
        return str(self.statement["parameters"]["digest"])

    @property
    def passes(self) -> dict[str, dict[str, str]]:
        return dict(self.statement["passes"])

    @property
    def expires(self) -> dt.datetime:
        return _time(str(self.statement["expires"]))

    @property
    def charter(self) -> str | None:
        return self.statement.get("charter")

    @property
    def run_id(self) -> str | None:
        return self.statement.get("run_id")

    @property
    def withdrawn(self) -> bool:
        """Closed because the run that asked for it was cancelled (not a person's rejection)."""
        return bool(self.rejection and self.rejection.get("withdrawn"))

    def expired(self, at: dt.datetime | None = None) -> bool:
        return (at or now()) >= self.expires

    def signers(self, charter: Charter | None) -> tuple[set[PublicKey], list[str]]:
        """The distinct approvers of ``charter`` whose signatures verify, and why each other
        signature does not count. Under no charter nobody can sign."""
        if charter is None:
            return set(), []
        return valid_signers(self.message, self.signatures, APPROVAL_NAMESPACE, charter.approvers)

    def agreed(self, chain: CharterChain) -> bool:
        """Whether it stands as a decision: a quorum of the charter in force signed it (and it
        was made under that charter), or, in a ledger without a charter, it was recorded."""
        if not chain.chartered:
            return True
        charter = chain.in_force
        if charter is None or self.charter != charter.digest:
            return False
        return len(self.signers(charter)[0]) >= charter.quorum

    def covers(
        self, product: str, parameters: str, definition: str, passes: Sequence[PassSpend]
    ) -> bool:
        """Whether it allows this spend: the same product, sealed parameters, definition and
        passes, each pass's this-run total exactly and a cumulative total within it."""
        wanted = {p.pass_name: p for p in passes}
        allowed = self.passes
        return (
            self.product == product
            and self.parameters == parameters
            and self.statement.get("definition") == definition
            and set(allowed) == set(wanted)
            and all(
                parse_fraction_text(allowed[name]["this_run"]) == item.this_run
                and item.cumulative <= parse_fraction_text(allowed[name]["cumulative"])
                for name, item in wanted.items()
            )
        )

    def with_signature(self, signature: str) -> Approval:
        return Approval(
            self.statement, self.seq, self.at, self.dataset, (*self.signatures, signature),
            self.rejection,
        )  # fmt: skip

    def record(self) -> dict[str, Any]:
        """The statement and its signatures, as a release's certificate carries them."""
        return {"statement": self.statement, "signatures": list(self.signatures)}


def fold_approvals(entries: Iterable[Entry]) -> list[Approval]:
    """Every approval statement (oldest first) with its signatures and rejection. Rows of the
    unsigned format of earlier versions carry no statement: they authorize nothing; nor does a
    row that is not of the form the pipeline writes (`das ledger verify` names it), and an
    approval recorded again counts once, as first recorded (:func:`repeated_approvals`)."""
    found: dict[str, Approval] = {}
    for entry in entries:
        try:
            data = entry.strict_payload  # a repeated key: no approval (verify names it)
        except ValueError:
            continue
        if entry.kind == "approval":
            statement, signatures = data.get("statement"), data.get("signatures", [])
            if (
                not isinstance(statement, dict)
                or not isinstance(statement.get("approval_id"), str)
                or not isinstance(signatures, list)
                or not all(isinstance(item, str) for item in signatures)
            ):
                continue
            approval = Approval(statement, entry.seq, entry.at, entry.dataset, tuple(signatures))
            found.setdefault(approval.approval_id, approval)
        elif entry.kind == "approval-signature" and data.get("approval_id") in found:
            if isinstance(data.get("signature"), str):
                key = str(data["approval_id"])
                found[key] = found[key].with_signature(data["signature"])
        elif entry.kind in CLOSING_KINDS and data.get("approval_id") in found:
            key = str(data["approval_id"])
            item = found[key]
            if item.rejection is None:  # the first closing stands
                closing = {**data, "at": entry.at}
                if entry.kind == "approval-withdrawn":
                    closing["withdrawn"] = True
                found[key] = Approval(
                    item.statement, item.seq, item.at, item.dataset, item.signatures, closing
                )
    return list(found.values())


def repeated_approvals(entries: Iterable[Entry]) -> list[str]:
    """The ``approval`` rows that record an approval id recorded before: the pipeline records
    each approval once (co-signers add ``approval-signature`` rows), so a second row — a spent
    approval appended again, to be spent again — was written around it. It never counts."""
    first: dict[str, int] = {}
    problems = []
    for entry in entries:
        if entry.kind != "approval":
            continue
        try:
            statement = entry.strict_payload.get("statement")
        except ValueError:
            continue
        ident = statement.get("approval_id") if isinstance(statement, dict) else None
        if not isinstance(ident, str):
            continue
        if ident in first:
            problems.append(
                f"entry {entry.seq} records approval {ident[:40]} again (entry {first[ident]} "
                "recorded it): written around the pipeline (a spent approval appended again?); "
                "it counts once"
            )
        else:
            first[ident] = entry.seq
    return problems


CLOSING_KINDS = ("approval-rejected", "approval-withdrawn")
APPROVAL_KINDS = ("approval", "approval-signature", *CLOSING_KINDS)


def approval_statement(
    *,
    ledger_id: str,
    charter: Charter | None,
    product: str,
    dataset: str,
    parameters: Mapping[str, Any],
    definition: str,
    passes: Sequence[PassSpend],
    ceiling: Budget,
    note: str,
    requested_by: str,
    run_id: str | None = None,
    valid_days: int = DEFAULT_VALID_DAYS,
    reference: Mapping[str, str] | None = None,
    valid_for: dt.timedelta | None = None,
) -> dict[str, Any]:
    """A new approval statement (to be signed). ``parameters``: ``{"digest": ...,
    "files": {name: sha256}}`` of the sealed parameters; ``reference``: the public files the
    run reads besides (SafeTab-P's GRF-C, which sets the geography), by their ids;
    ``valid_for``: its validity when not whole days (a waiting run's request)."""
    if not 1 <= valid_days <= MAX_VALID_DAYS:
        raise ValueError(f"an approval is valid for 1 to {MAX_VALID_DAYS} days, not {valid_days}")
    validity = dt.timedelta(days=valid_days) if valid_for is None else valid_for
    if not dt.timedelta(seconds=1) <= validity <= dt.timedelta(days=MAX_VALID_DAYS):
        raise ValueError(f"an approval is valid for at most {MAX_VALID_DAYS} days, not {validity}")
    made = now().replace(microsecond=0)
    return {
        "type": APPROVAL_TYPE,
        "approval_id": uuid.uuid4().hex[:16],
        "ledger_id": ledger_id,
        "charter": None if charter is None else charter.digest,
        "product": product,
        "dataset": dataset,
        "parameters": {"digest": str(parameters["digest"]), "files": dict(parameters["files"])},
        "reference": dict(reference or {}),
        "definition": definition,
        "passes": {
            p.pass_name: {
                "prior": fraction_text(p.prior),
                "this_run": fraction_text(p.this_run),
                "cumulative": fraction_text(p.cumulative),
            }
            for p in passes
        },
        "ceiling": fraction_text(ceiling),
        "note": note,
        "requested_by": requested_by,
        "run_id": run_id,
        "made": made.isoformat(),
        "expires": (made + validity).isoformat(),
    }


_HEX64 = re.compile(r"[0-9a-f]{64}")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


def statement_problems(statement: Mapping[str, Any]) -> list[str]:
    """What makes a statement not one this pipeline writes: an approver is never asked to sign
    it. The sealed parameters' digest must be the one their file list gives, every name a plain
    file name and every digest a SHA-256, the validity within the maximum — so that what the
    approver reads (:func:`statement_text`) is what the run will check."""
    problems = []
    if statement.get("type") != APPROVAL_TYPE:
        problems.append(f"not a {APPROVAL_TYPE} statement")
    parameters = statement.get("parameters") or {}
    files = parameters.get("files") or {}
    if not isinstance(files, dict) or not files:
        problems.append("it lists no sealed parameter file")
        files = {}
    for name, digest in files.items():
        if not _FILE_NAME.fullmatch(str(name)) or not _HEX64.fullmatch(str(digest)):
            problems.append(f"parameter file {str(name)[:40]!r} is not a plain name with a sha256")
    lines = "".join(f"{name}:{files[name]}\n" for name in sorted(files))
    if hashlib.sha256(lines.encode()).hexdigest() != parameters.get("digest"):
        problems.append("its parameters' digest is not the one its file list gives")
    for name, ident in dict(statement.get("reference") or {}).items():
        if not _FILE_NAME.fullmatch(str(name)) or not _HEX64.fullmatch(str(ident)):
            problems.append(f"reference file {str(name)[:40]!r} is not a plain name with an id")
    if not _HEX64.fullmatch(str(statement.get("dataset", ""))):
        problems.append("its dataset is not a dataset id")
    try:
        made, expires = _time(str(statement["made"])), _time(str(statement["expires"]))
        if not dt.timedelta(0) < expires - made <= dt.timedelta(days=MAX_VALID_DAYS):
            problems.append(f"it is valid for more than {MAX_VALID_DAYS} days, or for none")
        for item in dict(statement.get("passes") or {}).values():
            for key in ("prior", "this_run", "cumulative"):
                parse_fraction_text(item[key])
    except (KeyError, TypeError, ValueError):
        problems.append("its times or totals do not parse")
    return problems


def statement_text(statement: Mapping[str, Any]) -> str:
    """An approval statement as a person reads it before signing (typed text escaped)."""
    from das.trust.text import shown

    unit = "rho (zCDP)" if statement["definition"] == "zcdp" else "epsilon (pure DP)"
    lines = [
        f"approval {shown(statement['approval_id'])} of a {shown(statement['product'])} spend",
        f"  privacy ledger {shown(statement['ledger_id'])}, charter "
        f"{shown(statement.get('charter') or 'none')[:16]}",
        f"  dataset {shown(statement['dataset'])[:16]} (its id in this ledger)",
        *(
            f"  reference file {shown(name)}  id {shown(ident)[:16]}"
            for name, ident in sorted(dict(statement.get("reference") or {}).items())
        ),
        f"  sealed parameters {shown(statement['parameters']['digest'])[:16]}:",
        *(
            f"    {shown(name)}  sha256 {shown(digest)[:16]}"
            for name, digest in sorted(statement["parameters"]["files"].items())
        ),
        f"  spend, {unit}:",
        *(
            f"    pass {shown(name)}: earlier {decimal_text(parse_fraction_text(p['prior']))} "
            f"+ this run {decimal_text(parse_fraction_text(p['this_run']))} = cumulative "
            f"{decimal_text(parse_fraction_text(p['cumulative']))} (ceiling "
            f"{decimal_text(parse_fraction_text(statement['ceiling']))})"
            for name, p in sorted(statement["passes"].items())
        ),
        f"  valid until {shown(statement['expires'])}",
        f"  note: {shown(statement.get('note', ''))}",
        f"  requested by {shown(statement.get('requested_by', ''))}"
        + (f" for run {shown(statement['run_id'])}" if statement.get("run_id") else ""),
    ]
    return "\n".join(lines)
