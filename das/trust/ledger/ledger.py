"""The privacy ledger: the system of record of every run, approval, spend and draw.

:class:`PrivacyLedger` is the one object the rest of the pipeline holds. It owns the
transactions (each decision and the entry recording it are atomic) and delegates the rules to
the modules of this package, one per concept:

- :mod:`~das.trust.ledger.store`: the hash-chained entries in SQLite or PostgreSQL;
- :mod:`~das.trust.ledger.state`: what the entries mean (a run's state, the ledger's identity);
- :mod:`~das.trust.ledger.amounts`: exact budgets, cumulative totals;
- :mod:`~das.trust.ledger.spending`: authorizing a run's spend, approvals, ceilings;
- :mod:`~das.trust.ledger.draws`: charging and recording each measurement's noise;
- :mod:`~das.trust.ledger.anchors`: the sealed release and the heads kept outside the ledger;
- :mod:`~das.trust.ledger.validations`, :mod:`~das.trust.ledger.identity`,
  :mod:`~das.trust.ledger.errors`.

Entries: ``init`` (the ledger's id, its ceilings per pass — ρ under zCDP, ε under pure DP, at
most :data:`das.privacy.limits.MAX_PASS_TOTAL` — and a commitment to its secret key),
``approval``, ``run-opened`` / ``run-resumed``, ``spend-authorized``, ``drawing-started``,
``draw-charged``, ``draw-recorded``, ``release-sealed``, ``run-completed``; and the trail of
what did not become a spend: ``run-released`` (stopped before any draw), ``run-failed``,
``validation``, ``refused``, ``release-replaced``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from das.listing import folded
from das.privacy.limits import MAX_PASS_TOTAL
from das.privacy.mechanisms import ZCDP, Budget, fraction_text
from das.refusal import Remedy
from das.trust.ledger import anchors, draws, spending, validations
from das.trust.ledger.amounts import PassSpend, decimal_text
from das.trust.ledger.approvals import Approval, fold_approvals, repeated_approvals
from das.trust.ledger.charter import Charter, CharterChain, check_charter_statement, fold_charters
from das.trust.ledger.draws import DrawRecord
from das.trust.ledger.errors import LedgerRefused
from das.trust.ledger.identity import DATASET_TAG, NOISE_TAG, keyed_id, who
from das.trust.ledger.run_signatures import RunSigner, entry_signer, unsigned
from das.trust.ledger.state import (
    LEDGER_FORMAT,
    LedgerInfo,
    RunOpening,
    RunState,
    fold_run,
    ledger_info,
)
from das.trust.ledger.store import Entry, LedgerStore, LedgerTransaction, chain_problems
from das.trust.signing.keys import PublicKey


def ledger_ceilings(ceilings: Mapping[str, Fraction] | None) -> dict[str, Fraction]:
    """A new ledger's ceilings per pass: the system's maxima, lowered where asked."""
    limits = dict(MAX_PASS_TOTAL)
    for definition, value in (ceilings or {}).items():
        if definition not in limits:
            raise ValueError(f"unknown privacy definition {definition!r}")
        value = Fraction(value)
        if not 0 < value <= MAX_PASS_TOTAL[definition]:
            unit = "rho" if definition == ZCDP else "epsilon"
            raise ValueError(
                f"a ceiling of {unit} {decimal_text(value)} per pass is outside (0, "
                f"{decimal_text(MAX_PASS_TOTAL[definition])}], the largest this system accepts"
            )
        limits[definition] = value
    return limits


def _first_entries(
    db: LedgerTransaction,
    limits: Mapping[str, Fraction],
    ledger_id: str | None = None,
    charter: tuple[Mapping[str, Any], str] | None = None,
) -> None:
    """A new ledger's secret key and its ``init`` entry, which names it and commits to it;
    with ``charter`` (its statement and the proposer's signature), its first charter too, in
    the same transaction: a production ledger never exists without one."""
    key = secrets.token_hex(32)
    db.set_key(key)
    db.append(
        "init",
        {
            "format": LEDGER_FORMAT,
            "ledger_id": ledger_id or str(uuid.uuid4()),
            "ceilings": {d: fraction_text(v) for d, v in sorted(limits.items())},
            "key_sha256": hashlib.sha256(key.encode()).hexdigest(),
            "by": who(),
        },
    )
    if charter is not None:
        statement, signature = charter
        db.append("charter", {"statement": dict(statement), "signatures": [signature]})


def signature_problems(entries: Sequence[Entry]) -> list[str]:
    """Signatures in the ledger that do not count — a charter or an approval carrying a
    signature no eligible key made — and production spends that no quorum approved: rows
    written around `das ledger` (a forged approval authorizes nothing, and verify names it)."""
    problems: list[str] = []
    chain = fold_charters(entries)
    problems += chain.problems
    problems += repeated_approvals(entries)
    for charter in chain.charters:
        eligible, _ = chain.required(charter)
        for reason in charter.signers(eligible)[1]:
            problems.append(
                f"charter {charter.digest[:16]} carries a signature that does not count "
                f"({reason}): not made by `das ledger` (forged?)"
            )
    by_digest = {c.digest: c for c in chain.charters}
    approvals = {a.approval_id: a for a in fold_approvals(entries)}
    for approval in approvals.values():
        charter = by_digest.get(str(approval.charter))
        if chain.chartered and approval.signatures:
            for reason in approval.signers(charter)[1]:
                problems.append(
                    f"approval {approval.approval_id} carries a signature that does not count "
                    f"({reason}) (forged?)"
                )
    for entry in entries:
        statement = entry.payload.get("statement") if entry.kind == "approval" else None
        if isinstance(statement, dict) and entry.dataset != statement.get("dataset"):
            problems.append(
                f"entry {entry.seq} files approval {statement.get('approval_id')} under dataset "
                f"{str(entry.dataset)[:16]}, its signed statement names "
                f"{str(statement.get('dataset'))[:16]} (a copied row?)"
            )
    spent: dict[str, str] = {}
    for entry in entries:
        production = entry.payload.get("production") or (
            chain.chartered and entry.seq > chain.since
        )
        if entry.kind != "spend-authorized" or not production:
            continue
        problems += _spend_problems(entry, approvals, by_digest, spent)
    if chain.in_force is not None:
        for entry in unsigned(entries, chain.runners):
            if entry.seq > chain.since:
                problems.append(
                    f"entry {entry.seq} ({entry.kind} of run {entry.run_id}) is not signed by a "
                    "run key of the charter: written around the pipeline (forged?)"
                )
    return problems


def _unreadable(entries: Sequence[Entry]) -> list[str]:
    """Entries whose payload is not one JSON object with each key once: no row the pipeline
    writes (its payloads are canonical JSON), and one two readers could read two ways."""
    problems = []
    for entry in entries:
        try:
            _ = entry.strict_payload
        except ValueError as exc:
            problems.append(
                f"entry {entry.seq} ({entry.kind}) is not readable as written: {exc}; written "
                "around the pipeline (forged?)"
            )
    return problems


def _spend_problems(
    entry: Entry,
    approvals: Mapping[str, Approval],
    charters: Mapping[str, Charter],
    spent: dict[str, str],
) -> list[str]:
    """Why a production spend is not one a quorum approved: no agreed approval of its dataset,
    expired or rejected before the spend, or one another run spent already."""
    data = entry.payload
    approval = approvals.get(str(data.get("approval")))
    where = f"run {entry.run_id} spent in production (entry {entry.seq})"
    if approval is None:
        return [f"{where} under no approval the ledger holds (forged?)"]
    charter = charters.get(str(approval.charter))
    signed = len(approval.signers(charter)[0])
    problems = []
    if charter is None or signed < charter.quorum:
        problems.append(f"{where} under approval {approval.approval_id}, which {signed} "
                        "approver(s) signed: no quorum approved it (forged?)")  # fmt: skip
    if approval.statement.get("dataset") != entry.dataset:
        problems.append(f"{where} on other records than approval {approval.approval_id} names")
    at = dt.datetime.fromisoformat(entry.at)
    if approval.expired(at):
        problems.append(f"{where} after approval {approval.approval_id} expired")
    rejected = approval.rejection
    if rejected is not None and str(rejected.get("at", "")) <= entry.at:
        problems.append(f"{where} under approval {approval.approval_id}, rejected before")
    other = spent.setdefault(approval.approval_id, str(entry.run_id))
    if other != entry.run_id:
        problems.append(
            f"{where} under approval {approval.approval_id}, which run {other} spent already"
        )
    return problems


class PrivacyLedger:
    """The ledger in ``store``; see the module docstring. Picklable (the store is a URL)."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store
        self._key: bytes | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.store = state["store"]
        self._key = None

    @property
    def location(self) -> str:
        return self.store.location

    # -- creating and checking ------------------------------------------------------------------

    @classmethod
    def initialize(
        cls,
        store: LedgerStore,
        ceilings: Mapping[str, Fraction] | None = None,
        *,
        ledger_id: str | None = None,
        charter: tuple[Mapping[str, Any], str] | None = None,
    ) -> PrivacyLedger:
        """Create the ledger: tables, secret key, the ``init`` entry and, for a production
        ledger, its first charter (statement and proposer's signature, checked first: see
        :mod:`~das.trust.ledger.charter`). Refuses an existing one."""
        limits = ledger_ceilings(ceilings)
        if charter is not None:
            if ledger_id is None:
                raise ValueError("a charter names its ledger: give the ledger_id it names")
            statement, signature = charter
            check_charter_statement(statement, ledger_id, None)
            first = Charter(dict(statement), 0, "", (signature,))
            signers, rejected = first.signers(first.approvers)
            if not signers:
                raise LedgerRefused(
                    "the charter's signature does not count: "
                    + "; ".join(rejected)
                    + ". It is signed by one of the approvers it names"
                )
            if first.ceilings != {d: Fraction(v) for d, v in limits.items()}:
                raise ValueError("the charter's ceilings are not the ledger's")
        if (
            store.file_state() == "empty"
            or store.has_tables()
            or not store.create(lambda db: _first_entries(db, limits, ledger_id, charter))
        ):
            raise LedgerRefused(
                f"{store.location} exists already (an empty file, or the ledger's tables): a "
                "ledger that was emptied is not a new ledger. Restore it from its backup, or "
                "move the file (drop the tables) away deliberately first"
            )
        return cls(store)

    @classmethod
    def create_if_absent(cls, store: LedgerStore) -> bool:
        """Create a ledger with the default ceilings where there is none; False when another
        process created one there first (then use that one)."""
        limits = ledger_ceilings(None)
        return store.create(lambda db: _first_entries(db, limits))

    def initialized(self) -> bool:
        if not self.store.has_tables():
            return False
        with self.store.transaction() as db:
            return db.entry(1) is not None

    def info(self) -> LedgerInfo:
        """The ledger's identity and head; refuses one that was never initialized."""
        if not self.store.has_tables():
            raise LedgerRefused(self._uninitialized())
        with self.store.transaction() as db:
            return self._info(db)

    def _uninitialized(self) -> str:
        state = self.store.file_state()
        if state == "empty":
            return (
                f"privacy ledger {self.location} is an empty file: it was emptied or truncated. "
                "Its history cannot be read as 'no spend'; restore it from its backup"
            )
        return (
            f"no privacy ledger at {self.location} (absent or never initialized). A release "
            "manager creates it once with `das ledger init`; production never creates one "
            "implicitly"
        )

    def _info(self, db: LedgerTransaction) -> LedgerInfo:
        first, head = db.entry(1), db.head()
        if first is None or head is None or first.kind != "init":
            raise LedgerRefused(self._uninitialized())
        return ledger_info(first, head, self.location)

    def verify(self) -> list[str]:
        """Everything wrong with the chain and the key (empty: intact)."""
        if not self.store.has_tables():
            return [self._uninitialized()]
        with self.store.transaction() as db:
            entries = db.entries()
            key = db.key()
        if not entries:
            return [self._uninitialized()]
        problems = chain_problems(entries)
        unreadable = _unreadable(entries)
        if unreadable:  # what folds the entries would read them otherwise than written
            return problems + unreadable
        commitment = entries[0].payload.get("key_sha256") if entries[0].kind == "init" else None
        if key is None or hashlib.sha256(key.encode()).hexdigest() != commitment:
            problems.append("the ledger's key does not match the commitment of its init entry")
        by_run: dict[str, list[Entry]] = {}
        for entry in entries:
            if entry.run_id is not None:
                by_run.setdefault(entry.run_id, []).append(entry)
        for run_id, run_entries in by_run.items():
            state = fold_run(run_entries)
            for problem in state.out_of_order if state is not None else ():
                problems.append(f"run {run_id}: {problem}, which no run writes (forged?)")
        return problems + signature_problems(entries)

    def require_intact(self) -> LedgerInfo:
        """The ledger's info after checking its whole chain; refuses a broken one."""
        info = self.info()
        problems = self.verify()
        if problems:
            raise LedgerRefused(
                f"privacy ledger {self.location} fails its integrity check ("
                + folded(problems, sep="; ")
                + "). It was altered outside the pipeline; nothing can be spent against it "
                "until it is restored (run `das ledger verify` for the whole report)"
            )
        return info

    def entry(self, seq: int) -> Entry | None:
        with self.store.transaction() as db:
            return db.entry(seq)

    # -- dataset identity ----------------------------------------------------------------------

    def _secret(self) -> bytes:
        if self._key is None:
            with self.store.transaction() as db:
                key = db.key()
            if key is None:
                raise LedgerRefused(self._uninitialized())
            self._key = key.encode()
        return self._key

    def dataset_id(self, fingerprint: str) -> str:
        """The ledger's name for a dataset: HMAC-SHA256 of its canonical fingerprint under the
        ledger's secret key (:mod:`~das.trust.ledger.identity`)."""
        return keyed_id(self._secret(), DATASET_TAG, fingerprint)

    def noise_id(self, digest: str) -> str:
        """What a release's audit shows for a noise vector: a keyed hash of its SHA-256. The
        digest itself must stay in the enclave — noise + a released count is the true count."""
        return keyed_id(self._secret(), NOISE_TAG, digest)

    def public_accountant(self, ledger: Mapping[str, Any]) -> dict[str, Any]:
        """A partition or pass accountant (``PrivacyAccountant.to_dict``) fit for a release's
        audit: every ``noise_digest`` replaced by its :meth:`noise_id`."""
        measurements = [
            {k: v for k, v in item.items() if k != "noise_digest"}
            | {
                "noise_id": None
                if item.get("noise_digest") is None
                else self.noise_id(item["noise_digest"])
            }
            for item in ledger.get("measurements", [])
        ]
        return {**ledger, "measurements": measurements}

    # -- runs -----------------------------------------------------------------------------------

    def run(self, run_id: str) -> RunState | None:
        with self.store.transaction() as db:
            return fold_run(db.entries(run_id=run_id))

    def open_run(self, opening: RunOpening) -> RunState:
        """Bind a new run id, or resume the run it names (a new attempt). Refuses a run id bound
        to another output, product, configuration, budgets or seed mode."""
        with self.store.transaction(write=True) as db:
            self._info(db)
            state = fold_run(db.entries(run_id=opening.run_id))
            binding = opening.binding()
            if state is None:
                db.append(
                    "run-opened",
                    {
                        "binding": binding,
                        "markers": list(opening.markers),
                        "attempt": 1,
                        "by": who(),
                        "flow_run_id": opening.flow_run_id,
                    },
                    run_id=opening.run_id,
                )
            else:
                changed = [
                    f"{key} {state.binding.get(key)!s:.60} → {value!s:.60}"
                    for key, value in binding.items()
                    if state.binding.get(key) != value
                ]
                if changed:
                    raise LedgerRefused(
                        f"run id {opening.run_id} is bound in the ledger to another run ("
                        + "; ".join(changed)
                        + "). A run id is never reused for other outputs, parameters or "
                        "randomness: its noise was drawn for them. Start a new run (new run id)"
                    )
                db.append(
                    "run-resumed",
                    {"attempt": state.attempt + 1, "by": who(), "flow_run_id": opening.flow_run_id},
                    run_id=opening.run_id,
                )
            result = fold_run(db.entries(run_id=opening.run_id))
        assert result is not None
        return result

    def runs(self) -> list[RunState]:
        with self.store.transaction() as db:
            ids = dict.fromkeys(
                e.run_id for e in db.entries(kinds=("run-opened",)) if e.run_id is not None
            )
            states = [fold_run(db.entries(run_id=run_id)) for run_id in ids]
        return [s for s in states if s is not None]

    # -- spending (:mod:`~das.trust.ledger.spending`) --------------------------------------------

    def authorize(
        self,
        run_id: str,
        dataset: str,
        *,
        production: bool,
        accepted: Mapping[str, Budget] | None = None,
        files: Mapping[str, str] | None = None,
        input_stats: Mapping[str, Any] | None = None,
        remedy: Remedy | None = None,
        signer: RunSigner | None = None,
        reference: Mapping[str, str] | None = None,
    ) -> list[PassSpend]:
        """Bind the run to the dataset it read and count its spend, or refuse
        (:func:`~das.trust.ledger.spending.authorize`); ``signer``: the run key that signs the
        entry (:mod:`~das.trust.ledger.run_signatures`)."""
        with self.store.transaction(write=True) as db:
            return spending.authorize(
                db,
                self._info(db),
                self.location,
                run_id,
                dataset,
                production=production,
                accepted=accepted,
                files=files,
                input_stats=input_stats,
                remedy=remedy,
                signer=signer,
                reference=reference,
            )

    # -- the charter (:mod:`~das.trust.ledger.charter`) -----------------------------------------

    def charter_chain(self) -> CharterChain:
        """Every charter of the ledger, with the one in force (signatures verified)."""
        with self.store.transaction() as db:
            return spending.charter_chain(db)

    def propose_charter(self, statement: Mapping[str, Any], signature: str) -> Charter:
        """Append a charter (the first of the ledger, or one continuing the charter in force)
        with its proposer's signature, who must be one of the approvers it needs."""
        with self.store.transaction(write=True) as db:
            info = self._info(db)
            chain = spending.charter_chain(db)
            if chain.in_force is None and chain.chartered:
                raise LedgerRefused(
                    "this ledger's first charter is not in force yet: its approvers sign it "
                    "(das ledger charter sign) before another can be proposed"
                )
            if chain.pending is not None:
                raise LedgerRefused(
                    f"charter {chain.pending.digest[:16]} awaits its signatures: sign it, or "
                    "let it be, before proposing another"
                )
            check_charter_statement(statement, info.ledger_id, chain.in_force)
            charter = Charter(dict(statement), 0, "", (signature,))
            eligible, _ = chain.required(charter) if chain.in_force else (charter.approvers, 0)
            signers, rejected = charter.signers(eligible)
            if not signers:
                raise LedgerRefused(
                    "the proposer's signature does not count: "
                    + "; ".join(rejected)
                    + ". A charter is proposed by one of the approvers whose quorum it needs"
                )
            entry = db.append("charter", {"statement": dict(statement), "signatures": [signature]})
        return Charter(dict(statement), entry.seq, entry.at, (signature,))

    def sign_charter(self, digest: str, signature: str) -> Charter:
        """Add an approver's signature to a charter that is not in force yet."""
        with self.store.transaction(write=True) as db:
            chain = spending.charter_chain(db)
            charter = chain.find(digest)
            if charter is None:
                raise LedgerRefused(f"no charter {digest[:16]} in this ledger")
            if chain.in_force is not None and charter.seq <= chain.in_force.seq:
                raise LedgerRefused(f"charter {digest[:16]} is in force or was superseded")
            eligible, _ = chain.required(charter)
            before, _ = charter.signers(eligible)
            after, rejected = charter.with_signature(signature).signers(eligible)
            if len(after) == len(before):
                reason = (
                    rejected[-1]
                    if len(rejected) > len(charter.signers(eligible)[1])
                    else ("this key signed it already")
                )
                raise LedgerRefused(f"the signature does not count: {reason}")
            db.append("charter-signature", {"charter": charter.digest, "signature": signature})
            return spending.charter_chain(db).find(charter.digest) or charter

    # -- approvals (:mod:`~das.trust.ledger.approvals`) -----------------------------------------

    def plan_spend(
        self,
        product: str,
        dataset: str,
        parameters: str,
        definition: str,
        budgets: Mapping[str, Budget],
        reference: Mapping[str, str] | None = None,
    ) -> tuple[list[PassSpend], Fraction, CharterChain, list[Approval]]:
        """What approving this spend would say — per pass the earlier, this-run and cumulative
        totals, the ceiling, the charters — and the open statements of this dataset under the
        charter in force (unused, unrejected, unexpired), which an approver may co-sign when
        one says exactly what they would (:func:`das.spend_approval.propose` decides). Refuses
        an infinite budget and a spend above the ceiling."""
        infinite = sorted(name for name, b in budgets.items() if isinstance(b, float))
        if infinite:
            raise LedgerRefused(
                f"pass(es) {infinite} have an infinite budget (no noise): that is not a private "
                "release and cannot be approved"
            )
        with self.store.transaction() as db:
            info = self._info(db)
            chain = spending.charter_chain(db)
            runs = spending.dataset_runs(db, dataset)
            counting = [r for r in runs if r.counting]
            passes = spending.plan_passes(counting, budgets, definition)
            ceiling = spending.ceilings(info, chain)[definition]
            spending.check_ceiling(
                passes, ceiling, dataset, counting, "cannot approve: ", location=self.location
            )
            used = spending.used_approvals(runs)
            charter = None if chain.in_force is None else chain.in_force.digest
            open_ = [
                a
                for a in spending.dataset_approvals(db, dataset)
                if a.approval_id not in used
                and a.rejection is None
                and not a.expired()
                and a.statement.get("ledger_id") == info.ledger_id
                and a.charter == charter
            ]
        return passes, ceiling, chain, open_

    def record_approval(
        self, statement: Mapping[str, Any], signatures: Sequence[str] = ()
    ) -> Approval:
        """Append an approval statement with the signatures made so far (none: a request a
        paused run writes for its approvers). Each signature must be an approver's."""
        with self.store.transaction(write=True) as db:
            info = self._info(db)
            chain = spending.charter_chain(db)
            if statement.get("ledger_id") != info.ledger_id:
                raise LedgerRefused(
                    f"the approval names ledger {statement.get('ledger_id')}, not this one"
                )
            in_force = chain.in_force
            if statement.get("charter") != (None if in_force is None else in_force.digest):
                raise LedgerRefused("the approval was made under another charter than the one "
                                    "in force: make it again")  # fmt: skip
            approval = Approval(
                dict(statement), 0, "", str(statement["dataset"]), tuple(signatures)
            )
            if signatures:
                if in_force is None:
                    raise LedgerRefused(
                        "this ledger has no charter: nobody is an approver whose signature "
                        "could be checked (a chartered ledger is created with das ledger init "
                        "--approvers FILE --quorum K --key KEY)"
                    )
                signers, rejected = approval.signers(in_force)
                if len(signers) != len(signatures):
                    raise LedgerRefused("a signature does not count: " + "; ".join(rejected))
            entry = db.append(
                "approval",
                {"statement": dict(statement), "signatures": list(signatures)},
                dataset=str(statement["dataset"]),
            )
        return Approval(dict(statement), entry.seq, entry.at, approval.dataset, tuple(signatures))

    def approval(self, approval_id: str) -> Approval | None:
        with self.store.transaction() as db:
            found = [a for a in spending.dataset_approvals(db, None) if
                     a.approval_id == approval_id]  # fmt: skip
        return found[0] if found else None

    def sign_approval(self, approval_id: str, signature: str) -> Approval:
        """Add an approver's signature to an approval statement; refuses a signature that does
        not verify, is not an approver's of the charter in force, or was given already."""
        with self.store.transaction(write=True) as db:
            chain = spending.charter_chain(db)
            found = [a for a in spending.dataset_approvals(db, None) if
                     a.approval_id == approval_id]  # fmt: skip
            if not found:
                raise LedgerRefused(f"no approval {approval_id} in this ledger")
            approval = found[0]
            if chain.in_force is None or approval.charter != chain.in_force.digest:
                raise LedgerRefused(
                    f"approval {approval_id} was not made under the charter in force: it "
                    "cannot be signed (make a new one)"
                )
            if approval.withdrawn:
                raise LedgerRefused(
                    f"approval {approval_id} was withdrawn "
                    f"({approval.rejection.get('reason', '') if approval.rejection else ''}): "
                    "it authorizes nothing, and nobody needs to sign it"
                )
            if approval.rejection is not None:
                raise LedgerRefused(f"approval {approval_id} was rejected; make a new one")
            if approval.expired():
                raise LedgerRefused(f"approval {approval_id} expired at {approval.expires}")
            before, _ = approval.signers(chain.in_force)
            after, rejected = approval.with_signature(signature).signers(chain.in_force)
            if len(after) == len(before):
                new = rejected[len(approval.signers(chain.in_force)[1]) :]
                raise LedgerRefused(
                    "the signature does not count: "
                    + (new[0] if new else "this approver signed it already")
                )
            db.append(
                "approval-signature",
                {"approval_id": approval_id, "signature": signature},
                dataset=approval.dataset,
            )
            return approval.with_signature(signature)

    def reject_approval(self, approval_id: str, reason: str, by: str, via: str) -> None:
        """Record that a person rejected an approval request (it then authorizes nothing)."""
        with self.store.transaction(write=True) as db:
            found = [a for a in spending.dataset_approvals(db, None) if
                     a.approval_id == approval_id]  # fmt: skip
            if not found:
                raise LedgerRefused(f"no approval {approval_id} in this ledger")
            db.append(
                "approval-rejected",
                {"approval_id": approval_id, "reason": reason, "by": by, "via": via},
                dataset=found[0].dataset,
            )

    def withdraw_approval(self, approval_id: str, reason: str, by: str) -> bool:
        """Close the request of a run that was cancelled (or deleted) while it waited: no later
        signature authorizes anything. False when there is nothing to close (unknown, already
        rejected or withdrawn, or spent by its run)."""
        with self.store.transaction(write=True) as db:
            found = [a for a in spending.dataset_approvals(db, None) if
                     a.approval_id == approval_id]  # fmt: skip
            if not found or found[0].rejection is not None:
                return False
            approval = found[0]
            if approval.dataset and approval_id in spending.used_approvals(
                spending.dataset_runs(db, approval.dataset)
            ):
                return False
            db.append(
                "approval-withdrawn",
                {"approval_id": approval_id, "reason": reason, "by": by},
                dataset=approval.dataset,
            )
        return True

    def approval_request(self, run_id: str) -> Approval | None:
        """The approval statement a waiting run asked its approvers to sign (made under the
        charter in force): open, or rejected or expired while the run waited for it (the run
        then ends Refused). Not one the run was refused for since, nor a withdrawn one (the
        run was cancelled): a Retry then asks anew."""
        with self.store.transaction() as db:
            chain = spending.charter_chain(db)
            charter = None if chain.in_force is None else chain.in_force.digest
            refusals = db.entries(run_id=run_id, kinds=("refused",))
            refused = max((e.seq for e in refusals), default=0)
            found = [
                a
                for a in spending.dataset_approvals(db, None)
                if a.run_id == run_id
                and a.charter == charter
                and (not a.expired() or a.seq > refused)
                and not a.withdrawn
            ]
        return found[-1] if found else None

    def approval_agreed(self, approval_id: str) -> tuple[bool, list[PublicKey], int]:
        """Whether a quorum signed the approval, who did (verified), and how many are needed."""
        with self.store.transaction() as db:
            chain = spending.charter_chain(db)
            found = [a for a in spending.dataset_approvals(db, None) if
                     a.approval_id == approval_id]  # fmt: skip
        if not found:
            return False, [], 0
        signers, _ = found[0].signers(chain.in_force)
        needed = 0 if chain.in_force is None else chain.in_force.quorum
        return found[0].agreed(chain), sorted(signers, key=lambda k: k.fingerprint), needed

    def spend_summary(self, run_id: str) -> dict[str, Any]:
        """What a run's audit says of its spend's authority: production or not, the charter
        it was made under, who signed its approval (key fingerprints)."""
        with self.store.transaction() as db:
            found = db.entries(run_id=run_id, kinds=("spend-authorized",))
        data = found[0].payload if found else {}
        return {
            "production": bool(data.get("production")),
            "charter": data.get("charter"),
            "approved_by": list(data.get("approved_by") or []),
        }

    def spend_proof(self, run_id: str) -> dict[str, Any]:
        """What a release's certificate carries of its run's spend: the charter chain up to
        the charter the spend was authorized under, the approval it used (statement and
        signatures), when it was authorized, and whether it was a production spend."""
        with self.store.transaction() as db:
            authorized = [e for e in db.entries(run_id=run_id, kinds=("spend-authorized",))]
            if not authorized:
                raise LedgerRefused(f"run {run_id} has no authorized spend")
            entry = authorized[0]
            data = entry.payload
            chain = spending.charter_chain(db)
            if (
                chain.in_force is not None
                and entry.seq > chain.since
                and entry_signer(entry, chain.runners) is None
            ):
                raise LedgerRefused(
                    f"run {run_id}'s authorization (entry {entry.seq}) is not signed by a "
                    "run key of the charter: no certificate is made for it"
                )
            charters = []
            for charter in chain.chain:
                charters.append({"statement": charter.statement,
                                 "signatures": list(charter.signatures)})  # fmt: skip
                if charter.digest == data.get("charter"):
                    break
            if data.get("charter") is None:
                charters = []
            approval = next(
                (a for a in spending.dataset_approvals(db, entry.dataset)
                 if a.approval_id == data.get("approval")),
                None,
            )  # fmt: skip
        return {
            "charters": charters,
            "reference": dict(data.get("reference") or {}),
            "approvals": [] if approval is None else [approval.record()],
            "authorized_at": entry.at,
            "production": bool(data.get("production")),
        }

    def approvals(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every approval (oldest first): its statement, who signed it (verified), whether a
        quorum did, the run that used it, and a rejection."""
        with self.store.transaction() as db:
            chain = spending.charter_chain(db)
            found = spending.dataset_approvals(db, dataset)
            used: dict[str, str] = {}
            for item in {a.dataset for a in found if a.dataset}:
                used.update(spending.used_approvals(spending.dataset_runs(db, item)))
        listing = []
        for item in found:
            charter = (
                chain.in_force
                if chain.in_force is not None and item.charter == chain.in_force.digest
                else next((c for c in chain.charters if c.digest == item.charter), None)
            )
            signers, rejected = item.signers(charter)
            listing.append({
                "approval_id": item.approval_id,
                "dataset": item.dataset,
                "at": item.at,
                "seq": item.seq,
                "statement": item.statement,
                "signed_by": sorted(
                    f"{k.fingerprint} {k.label}".strip() for k in signers
                ),
                "signatures_not_counted": rejected,
                "quorum": None if charter is None else charter.quorum,
                "agreed": item.agreed(chain),
                "expired": item.expired(),
                "used_by": used.get(item.approval_id),
                "rejection": item.rejection,
            })  # fmt: skip
        return listing

    def has_open_approval(self, product: str, parameters: str) -> bool:
        """Whether an agreed, unexpired, unused and unrejected approval of this product and
        these sealed parameters exists (a cheap check before any record is read: without one,
        a production run cannot spend)."""
        return any(
            a["agreed"]
            and not a["expired"]
            and a["used_by"] is None
            and a["rejection"] is None
            and a["statement"]["product"] == product
            and a["statement"]["parameters"]["digest"] == parameters
            for a in self.approvals()
        )

    def approval_holders(self, product: str, parameters: str) -> list[spending.Holder]:
        """The unfinished runs that used an approval of this product and these sealed
        parameters, each with its way out: what a run refused for want of an open approval
        tells the operator when a crashed run took it."""
        used = {
            a["used_by"]
            for a in self.approvals()
            if a["used_by"] is not None
            and a["statement"]["product"] == product
            and a["statement"]["parameters"]["digest"] == parameters
        }
        runs = [self.run(run_id) for run_id in sorted(used)]
        return spending.holders((r for r in runs if r is not None), self.location)

    def totals(self, dataset: str) -> dict[str, dict[str, str]]:
        """Cumulative spend per pass of a dataset (:func:`~das.trust.ledger.spending.totals`)."""
        with self.store.transaction() as db:
            return spending.totals(db, dataset)

    # -- draws (:mod:`~das.trust.ledger.draws`) --------------------------------------------------

    def start_drawing(self, run_id: str, attempt: int) -> None:
        """From here on the run counts as spent in full; draws are allowed to this attempt."""
        with self.store.transaction(write=True) as db:
            draws.start_drawing(db, run_id, attempt)

    def release_reservation(self, run_id: str, reason: str, by: str | None = None) -> bool:
        """A run that stopped before its first draw spends nothing (False once it drew);
        ``by``: the person who released it (`das ledger release`), else the run itself."""
        with self.store.transaction(write=True) as db:
            return draws.release_reservation(db, run_id, reason, by)

    def charge_draw(self, run_id: str, attempt: int, name: str) -> None:
        """Record that ``name`` is about to be drawn (before any noise exists)."""
        with self.store.transaction(write=True) as db:
            draws.charge_draw(db, run_id, attempt, name)

    def record_draw(
        self,
        run_id: str,
        attempt: int,
        name: str,
        digest: str,
        size: int,
        file: str,
        signer: RunSigner | None = None,
    ) -> DrawRecord:
        """Record ``name``'s noise; the record that stands (another process's, if first)."""
        with self.store.transaction(write=True) as db:
            return draws.record_draw(db, run_id, attempt, name, digest, size, file, signer)

    def draws(self, run_id: str) -> dict[str, DrawRecord]:
        """The draws the ledger recorded for a run. In a chartered ledger each record must be
        signed by a run key of the charter: a record written by hand (a noise file of zeros
        "already drawn") is refused, never reused."""
        with self.store.transaction() as db:
            chain = spending.charter_chain(db)
            entries = db.entries(run_id=run_id)
        if chain.in_force is not None:
            forged = [
                e for e in unsigned(entries, chain.runners)
                if e.kind == "draw-recorded" and e.seq > chain.since
            ]  # fmt: skip
            if forged:
                raise LedgerRefused(
                    f"the ledger's record of {forged[0].payload.get('name')} drawn by run "
                    f"{run_id} (entry {forged[0].seq}) is not signed by a run key of the "
                    "charter: it was written around the pipeline (forged?). Its noise is never "
                    "reused; `das ledger verify` names it"
                )
        return draws.recorded_draws(fold_run(entries))

    # -- the release (:mod:`~das.trust.ledger.anchors`) ------------------------------------------

    def seal_release(self, run_id: str, content_sha256: str) -> dict[str, Any]:
        """Record the release's content before it is published; the head its MANIFEST carries."""
        with self.store.transaction(write=True) as db:
            return anchors.seal_release(db, self._info(db), run_id, content_sha256)

    def complete(self, run_id: str, manifest_sha256: str, release: str) -> None:
        with self.store.transaction(write=True) as db:
            db.append(
                "run-completed",
                {"manifest_sha256": manifest_sha256, "release": release},
                run_id=run_id,
            )

    def record_failure(self, run_id: str, attempt: int, error_type: str) -> None:
        with self.store.transaction(write=True) as db:
            db.append("run-failed", {"attempt": attempt, "error_type": error_type}, run_id=run_id)

    def record_event(
        self, kind: str, detail: Mapping[str, Any], dataset: str | None, run_id: str | None
    ) -> None:
        """A refusal, a replaced release, ...: the trail of what did not become a spend."""
        with self.store.transaction(write=True) as db:
            db.append(kind, dict(detail), run_id=run_id, dataset=dataset)

    # -- validations (:mod:`~das.trust.ledger.validations`) --------------------------------------

    def record_validation(
        self,
        product: str,
        dataset: str | None,
        config_sha256: str,
        summary: Mapping[str, Any],
        run_id: str | None = None,
        signer: RunSigner | None = None,
    ) -> None:
        """A validation verdict of these records under this config (counts and check names),
        signed by ``signer``'s run key when there is one."""
        with self.store.transaction(write=True) as db:
            validations.record_validation(
                db, product, dataset, config_sha256, summary, run_id, signer
            )

    def record_validation_of(
        self,
        product: str,
        confidential: Iterable[str],
        fingerprints: Mapping[str, str],
        config_sha256: str,
        summary: Mapping[str, Any],
        run_id: str | None = None,
        signer: RunSigner | None = None,
    ) -> str | None:
        """:meth:`record_validation` under the dataset id of the records validated (none when a
        confidential file was not read whole); the dataset id."""
        from das.io.fingerprint import combine_fingerprints

        names = sorted(confidential)
        dataset = None
        if names and all(name in fingerprints for name in names):
            dataset = self.dataset_id(combine_fingerprints({n: fingerprints[n] for n in names}))
        self.record_validation(product, dataset, config_sha256, summary, run_id, signer)
        return dataset

    def passing_validation(self, product: str, dataset: str, config_sha256: str) -> bool:
        """Whether the latest validation of these records under this config passed (in a
        chartered ledger: the latest one a run key of the charter signed)."""
        with self.store.transaction() as db:
            chain = spending.charter_chain(db)
            runners = chain.runners if chain.in_force is not None else None
            return validations.passing_validation(db, product, dataset, config_sha256, runners)

    # -- reading ---------------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        with self.store.transaction() as db:
            return db.entries()
