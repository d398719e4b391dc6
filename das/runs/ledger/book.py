"""The privacy ledger: the system of record of every run, approval, spend and draw.

Privacy is spent on data, not on run ids. The ledger (:mod:`das.runs.ledger.store`: one
hash-chained table in SQLite or PostgreSQL) records, as entries that are never changed:

- ``init``: the ledger's id, its ceilings per pass (ρ under zCDP, ε under pure DP; at most
  :data:`das.privacy.limits.MAX_PASS_TOTAL`) and a commitment to its secret key.
- ``approval``: a person's decision, before a run, to spend a config's per-pass totals on one
  dataset: who, when, why (note), the config's hash, the cumulative totals it allows.
- ``run-opened`` / ``run-resumed``: a run id bound, once and for all, to its output, product,
  sealed parameters, privacy definition, per-pass budgets and seed mode; an attempt number.
- ``spend-authorized``: the run bound to the dataset it read (:meth:`PrivacyLedger.dataset_id`:
  a keyed hash of the records' canonical fingerprint) with its earlier, this-run and
  cumulative totals per pass, under an approval (production) or an accepted cumulative total.
- ``drawing-started``, ``draw-charged``, ``draw-recorded``: each measurement's noise, charged
  before it is drawn and recorded with its file and digest after; a resume reuses a noise file
  only when it matches this record, and a draw of an attempt that a newer one superseded is
  refused.
- ``release-sealed`` / ``run-completed``: the release's content digest and the head the
  release carries in its MANIFEST; then the MANIFEST's own digest.
- ``run-released`` (stopped before any draw: spends nothing), ``run-failed``, ``validation``,
  ``refused``, ``release-replaced``: the rest of the trail.

A run's state, a dataset's totals and the open approvals are folds over these entries. Runs in
status ``authorized``, ``drawing`` or ``completed`` count as spent in full (a run killed after
authorization may have drawn, and resuming it spends nothing more). Cumulative totals are exact:
under zCDP they add ρ (a pure-DP ε counts as ε²/2); under pure DP they add ε (a zCDP spend has
no pure-DP equivalent: ∞).
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import os
import secrets
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.privacy.accounting import ZCDP
from das.privacy.limits import MAX_PASS_TOTAL
from das.privacy.mechanisms import Budget, fraction_text, parse_fraction_text
from das.runs.ledger.store import (
    Entry,
    LedgerRefused,
    LedgerStore,
    LedgerTransaction,
    chain_problems,
)
from das.runs.policy import Remedy

LEDGER_FORMAT = "das-ledger/1"
INFINITY = float("inf")
COUNTING = ("authorized", "drawing", "completed")  # statuses that count as spent
DATASET_TAG = "das-dataset/1"
NOISE_TAG = "das-noise/1"


class CumulativeSpendRequired(LedgerRefused):
    """Outside production: the dataset already has recorded spend, and the operator must name
    the new cumulative total (or approve it in the ledger)."""


class ApprovalRequired(LedgerRefused):
    """Production: no approval in the ledger covers this spend. Carries what a person needs to
    decide (the planned spend per pass, the cumulative spend, the ceiling)."""

    def __init__(self, message: str, remedy: Remedy, passes: list[PassSpend],
                 ceilings: Mapping[str, Fraction], dataset: str) -> None:  # fmt: skip
        super().__init__(message, remedy)
        self.passes = passes
        self.ceilings = dict(ceilings)
        self.dataset = dataset


class CeilingExceeded(LedgerRefused):
    """The cumulative spend would pass the ledger's ceiling: no approval can allow it."""


class ReleaseDiffers(RuntimeError):
    """A run tried to publish content other than the release it sealed (never allowed)."""


class DrawRefused(RuntimeError):
    """A draw the ledger does not allow: the run is not drawing, or a newer attempt owns it
    (orphaned work of a killed attempt stops instead of drawing on)."""


class DuplicateDraw(RuntimeError):
    """A measurement already recorded as drawn: it is never drawn twice in one run."""


def decimal_text(value: Budget) -> str:
    """An exact budget as the operator types it: a finite decimal when there is one
    (``"9.888"``), else ``"n/d"``; ``"Infinity"`` for ∞."""
    if isinstance(value, float):
        return "Infinity"
    value = Fraction(value)
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    digits = max(twos, fives)
    scaled = value * 10**digits
    sign = "-" if scaled < 0 else ""
    whole = str(abs(scaled.numerator))
    if digits == 0:
        return sign + whole
    whole = whole.rjust(digits + 1, "0")
    return f"{sign}{whole[:-digits]}.{whole[-digits:]}".rstrip("0").rstrip(".")


def parse_total(text: str) -> Budget:
    """A cumulative total as typed by the operator (``"9.888"``, ``"1/3"``, ``"Infinity"``)."""
    cleaned = str(text).strip()
    if cleaned.lower() in ("inf", "infinity"):
        return INFINITY
    try:
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a number: {text!r}") from None
    if value < 0:
        raise ValueError(f"a cumulative total cannot be negative: {text!r}")
    return value


def in_definition(definition: str, spend_definition: str, budget: Budget) -> Budget:
    """A recorded spend in the unit of ``definition`` (see the module docstring)."""
    if isinstance(budget, float):
        return INFINITY
    if definition == spend_definition:
        return Fraction(budget)
    if definition == ZCDP:  # an ε-DP spend is ε²/2-zCDP
        return Fraction(budget) ** 2 / 2
    return INFINITY  # zCDP has no pure-DP equivalent


def add(a: Budget, b: Budget) -> Budget:
    if isinstance(a, float) or isinstance(b, float):
        return INFINITY
    return Fraction(a) + Fraction(b)


def who() -> str:
    """The operating-system user and host that acted (for approvals and run entries)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _ceilings(ceilings: Mapping[str, Fraction] | None) -> dict[str, Fraction]:
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


def _first_entries(db: LedgerTransaction, limits: Mapping[str, Fraction]) -> None:
    """A new ledger's secret key and its ``init`` entry, which names it and commits to it."""
    key = secrets.token_hex(32)
    db.set_key(key)
    db.append(
        "init",
        {
            "format": LEDGER_FORMAT,
            "ledger_id": str(uuid.uuid4()),
            "ceilings": {d: fraction_text(v) for d, v in sorted(limits.items())},
            "key_sha256": hashlib.sha256(key.encode()).hexdigest(),
            "by": who(),
        },
    )


@dataclass(frozen=True)
class PassSpend:
    """One pass of an authorized spend: before, this run, the new cumulative total."""

    pass_name: str
    definition: str
    prior: Budget
    this_run: Budget
    cumulative: Budget
    prior_runs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass": self.pass_name,
            "definition": self.definition,
            "prior": decimal_text(self.prior),
            "this_run": decimal_text(self.this_run),
            "cumulative": decimal_text(self.cumulative),
            "prior_runs": list(self.prior_runs),
        }

    def exact(self) -> dict[str, Any]:
        return {
            "pass": self.pass_name,
            "definition": self.definition,
            "prior": fraction_text(self.prior),
            "this_run": fraction_text(self.this_run),
            "cumulative": fraction_text(self.cumulative),
            "prior_runs": list(self.prior_runs),
        }

    @classmethod
    def from_exact(cls, data: Mapping[str, Any]) -> PassSpend:
        return cls(
            str(data["pass"]),
            str(data["definition"]),
            parse_fraction_text(data["prior"]),
            parse_fraction_text(data["this_run"]),
            parse_fraction_text(data["cumulative"]),
            tuple(data.get("prior_runs", ())),
        )


@dataclass(frozen=True)
class RunOpening:
    """What a run declares when it opens: the ledger binds its run id to all of it."""

    run_id: str
    product: str
    output: str
    config_sha256: str
    seal: str
    definition: str
    budgets: Mapping[str, Budget]
    seed_mode: str
    markers: tuple[str, ...]
    flow_run_id: str | None = None

    @property
    def not_private(self) -> bool:
        return bool(self.markers)

    def binding(self) -> dict[str, Any]:
        """The fields a resume must present unchanged."""
        return {
            "product": self.product,
            "output": self.output,
            "config_sha256": self.config_sha256,
            "seal": self.seal,
            "definition": self.definition,
            "budgets": {name: fraction_text(b) for name, b in sorted(self.budgets.items())},
            "seed_mode": self.seed_mode,
        }


@dataclass
class RunState:
    """A run as the ledger's entries tell it."""

    run_id: str
    binding: dict[str, Any]
    markers: tuple[str, ...]
    attempt: int
    status: str
    dataset: str | None = None
    passes: list[PassSpend] = field(default_factory=list)
    approval: str | None = None
    input_stats: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    charged: dict[str, int] = field(default_factory=dict)  # name -> attempt
    draws: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {digest, size, file}
    sealed_release: dict[str, Any] | None = None
    completed: dict[str, Any] | None = None
    manifests: list[str] = field(default_factory=list)  # every MANIFEST it published
    opened: str = ""
    # entries this code never writes in that order (a forged, well-hashed append): ignored
    # when they would lower the spend, and named by verify()
    out_of_order: list[str] = field(default_factory=list)

    @property
    def counting(self) -> bool:
        return self.status in COUNTING

    @property
    def product(self) -> str:
        return str(self.binding["product"])

    @property
    def output(self) -> str:
        return str(self.binding["output"])

    @property
    def definition(self) -> str:
        return str(self.binding["definition"])

    @property
    def budgets(self) -> dict[str, Budget]:
        return {k: parse_fraction_text(v) for k, v in self.binding["budgets"].items()}

    @property
    def not_private(self) -> bool:
        return bool(self.markers)


def fold_run(entries: Iterable[Entry]) -> RunState | None:
    """A run's state from its entries (in chain order).

    The ledger writes a run's entries in one order (opened → authorized → drawing → sealed →
    completed; released only before the first draw). An entry out of that order cannot come
    from this code: it is recorded in ``out_of_order`` and, where it would un-count a spend
    (released after drawing, authorized again), ignored.
    """
    state: RunState | None = None
    for entry in entries:
        data = entry.payload
        if entry.kind == "run-opened" and state is None:
            state = RunState(
                run_id=str(entry.run_id),
                binding=data["binding"],
                markers=tuple(data.get("markers", ())),
                attempt=int(data["attempt"]),
                status="reserved",
                opened=entry.at,
            )
            continue
        if state is None:
            continue
        unexpected = _out_of_order(state, entry.kind)
        if unexpected:
            state.out_of_order.append(f"entry {entry.seq} ({entry.kind}) {unexpected}")
            if entry.kind in ("run-opened", "spend-authorized", "run-released"):
                continue
        if entry.kind == "run-resumed":
            state.attempt = int(data["attempt"])
        elif entry.kind == "spend-authorized":
            state.status = "authorized"
            state.dataset = entry.dataset
            state.passes = [PassSpend.from_exact(p) for p in data["passes"]]
            state.approval = data.get("approval")
            state.input_stats = data.get("input_stats")
            state.files = dict(data.get("files", {}))
        elif entry.kind == "drawing-started":
            state.status = "drawing"
        elif entry.kind == "draw-charged":
            state.charged[data["name"]] = int(data["attempt"])
        elif entry.kind == "draw-recorded":
            state.draws[data["name"]] = {
                "digest": data["digest"],
                "size": int(data["size"]),
                "file": data["file"],
                "attempt": int(data["attempt"]),
            }
        elif entry.kind == "run-released":
            state.status = "released"
            state.approval = None
        elif entry.kind == "release-sealed" and state.sealed_release is None:
            state.sealed_release = {"seq": entry.seq, "hash": entry.hash, **data}
        elif entry.kind == "run-completed":
            state.status = "completed"
            state.completed = data
            state.manifests.append(str(data["manifest_sha256"]))
    return state


def _out_of_order(state: RunState, kind: str) -> str:
    """Why ``kind`` cannot follow ``state`` as this code writes a run (empty: it can)."""
    if kind == "run-opened":
        return "opens a run that is open already"
    if kind == "spend-authorized" and state.counting:
        return f"authorizes a run already counted as spent (status {state.status})"
    if kind == "run-released" and (state.status not in ("reserved", "authorized") or state.charged):
        return f"returns the spend of a run that drew (status {state.status})"
    if kind in ("drawing-started", "draw-charged") and state.status not in (
        "authorized",
        "drawing",
        "completed",
    ):
        return f"draws for a run without an authorized spend (status {state.status})"
    if kind == "run-completed" and state.sealed_release is None:
        return "completes a run whose release was never sealed"
    return ""


def _approvals(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    return [
        {**entry.payload, "dataset": entry.dataset, "at": entry.at, "seq": entry.seq}
        for entry in entries
        if entry.kind == "approval"
    ]


@dataclass(frozen=True)
class LedgerInfo:
    """What identifies a ledger: its id, ceilings, where it is, its head."""

    ledger_id: str
    location: str
    ceilings: dict[str, Fraction]
    head_seq: int
    head_hash: str
    created: str
    created_by: str

    def head(self) -> dict[str, Any]:
        return {"id": self.ledger_id, "seq": self.head_seq, "hash": self.head_hash}


@dataclass(frozen=True)
class DrawRecord:
    """A measurement's noise as the ledger recorded it."""

    name: str
    digest: str
    size: int
    file: str


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
        cls, store: LedgerStore, ceilings: Mapping[str, Fraction] | None = None
    ) -> PrivacyLedger:
        """Create the ledger: tables, secret key, the ``init`` entry. Refuses an existing one."""
        limits = _ceilings(ceilings)
        if (
            store.file_state() == "empty"
            or store.has_tables()
            or not store.create(lambda db: _first_entries(db, limits))
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
        limits = _ceilings(None)
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
        data = first.payload
        return LedgerInfo(
            ledger_id=str(data["ledger_id"]),
            location=self.location,
            ceilings={d: Fraction(v) for d, v in data["ceilings"].items()},
            head_seq=head.seq,
            head_hash=head.hash,
            created=first.at,
            created_by=str(data.get("by", "")),
        )

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
        return problems

    def require_intact(self) -> LedgerInfo:
        """The ledger's info after checking its whole chain; refuses a broken one."""
        info = self.info()
        problems = self.verify()
        if problems:
            raise LedgerRefused(
                f"privacy ledger {self.location} fails its integrity check ("
                + "; ".join(problems[:5])
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
        ledger's secret key. Ids mean nothing outside this ledger: shown in artifacts and
        audits, they let no one test a guess about the records."""
        return self._keyed(DATASET_TAG, fingerprint)

    def noise_id(self, digest: str) -> str:
        """What a release's audit shows for a noise vector: a keyed hash of its SHA-256. The
        digest itself must stay in the enclave — a short vector's digest can be inverted by
        trying every small value, and noise + a released count is the true count."""
        return self._keyed(NOISE_TAG, digest)

    def _keyed(self, tag: str, value: str) -> str:
        return hmac.new(self._secret(), f"{tag}\n{value}".encode(), hashlib.sha256).hexdigest()

    def public_accountant(self, ledger: Mapping[str, Any]) -> dict[str, Any]:
        """A partition or pass ledger (``PrivacyAccountant.to_dict``) fit for a release's
        audit: every ``noise_digest`` replaced by its :meth:`noise_id`."""
        measurements = [
            {k: v for k, v in item.items() if k != "noise_digest"}
            | {"noise_id": None if item.get("noise_digest") is None
               else self.noise_id(item["noise_digest"])}
            for item in ledger.get("measurements", [])
        ]  # fmt: skip
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
                    {
                        "attempt": state.attempt + 1,
                        "by": who(),
                        "flow_run_id": opening.flow_run_id,
                    },
                    run_id=opening.run_id,
                )
            result = fold_run(db.entries(run_id=opening.run_id))
        assert result is not None
        return result

    def _dataset_runs(self, db: LedgerTransaction, dataset: str) -> list[RunState]:
        run_ids = dict.fromkeys(
            e.run_id for e in db.entries(dataset=dataset, kinds=("spend-authorized",))
        )
        runs = [fold_run(db.entries(run_id=run_id)) for run_id in run_ids if run_id]
        return [run for run in runs if run is not None and run.dataset == dataset]

    @staticmethod
    def _prior(
        runs: Iterable[RunState], pass_name: str, definition: str
    ) -> tuple[Budget, tuple[str, ...]]:
        total: Budget = Fraction(0)
        names = []
        for run in runs:
            for item in run.passes:
                if item.pass_name == pass_name:
                    total = add(total, in_definition(definition, item.definition, item.this_run))
                    names.append(run.run_id)
        return total, tuple(names)

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
    ) -> list[PassSpend]:
        """Bind the run to the dataset it read and count its spend, or refuse.

        A run already bound to ``dataset`` (a resume) spends nothing more; one bound to another
        dataset is refused (its noise was drawn for other records). Otherwise the dataset's
        recorded spend plus this run must stay within the ledger's ceiling (private runs), and
        be covered by an approval of this config for this dataset (production) or, when the
        dataset already has spend, by the operator's ``accepted`` cumulative totals or an
        approval (outside production). ``remedy`` is what the refusal tells the operator.
        """
        with self.store.transaction(write=True) as db:
            info = self._info(db)
            state = fold_run(db.entries(run_id=run_id))
            if state is None:
                raise LedgerRefused(f"run {run_id} was never opened in the ledger")
            if state.dataset is not None and state.dataset != dataset:
                raise LedgerRefused(
                    f"run {run_id} read other records in an earlier attempt (dataset "
                    f"{state.dataset[:16]}, now {dataset[:16]}): its noise was drawn for them, "
                    "and reusing it on changed records would release the exact change. Nothing "
                    "was drawn now; start a new run (new run id) for these records"
                )
            if state.counting:
                return list(state.passes)
            others = [r for r in self._dataset_runs(db, dataset) if r.run_id != run_id]
            counting = [r for r in others if r.counting]
            passes = []
            for pass_name, budget in state.budgets.items():
                prior, names = self._prior(counting, pass_name, state.definition)
                passes.append(
                    PassSpend(pass_name, state.definition, prior, budget, add(prior, budget), names)
                )
            ceiling = info.ceilings[state.definition]
            unit = "rho" if state.definition == ZCDP else "epsilon"
            over = [p for p in passes if p.cumulative > ceiling]
            if over and not state.not_private:
                detail = "; ".join(
                    f"pass {p.pass_name}: earlier {decimal_text(p.prior)} + this run "
                    f"{decimal_text(p.this_run)} = {decimal_text(p.cumulative)}"
                    for p in over
                )
                raise CeilingExceeded(
                    f"the privacy ledger's ceiling of {unit} {decimal_text(ceiling)} per pass "
                    f"would be passed on dataset {dataset[:16]} ({detail}). No approval can "
                    "allow it. Nothing was drawn"
                )
            approval = self._usable_approval(db, state, dataset, passes)
            accepted_text = None
            if approval is None:
                if production:
                    raise ApprovalRequired(
                        f"no approval in the privacy ledger covers this spend on dataset "
                        f"{dataset[:16]}: "
                        + "; ".join(
                            f"pass {p.pass_name}: earlier {decimal_text(p.prior)} + this run "
                            f"{decimal_text(p.this_run)} = {decimal_text(p.cumulative)} {unit} "
                            f"(ceiling {decimal_text(ceiling)})"
                            for p in passes
                        )
                        + ". Nothing was drawn",
                        remedy or Remedy(),
                        passes,
                        info.ceilings,
                        dataset,
                    )
                accepted = dict(accepted or {})
                unknown = sorted(set(accepted) - {p.pass_name for p in passes})
                if unknown:
                    raise CumulativeSpendRequired(
                        f"a cumulative total was named for pass(es) {unknown} this run does "
                        f"not have (it has {[p.pass_name for p in passes]})"
                    )
                problems = []
                for item in passes:
                    named = accepted.get(item.pass_name)
                    if named is None and item.prior_runs:
                        problems.append(
                            f"pass {item.pass_name}: {len(item.prior_runs)} earlier run(s) "
                            f"spent {decimal_text(item.prior)} ({item.definition}) on this "
                            f"dataset; this run adds {decimal_text(item.this_run)}, a new "
                            f"cumulative total of {decimal_text(item.cumulative)}"
                        )
                    elif named is not None and named != item.cumulative:
                        problems.append(
                            f"pass {item.pass_name}: the cumulative total named, "
                            f"{decimal_text(named)}, does not match the new cumulative total "
                            f"{decimal_text(item.cumulative)} (earlier {decimal_text(item.prior)}"
                            f" + this run {decimal_text(item.this_run)})"
                        )
                if problems:
                    totals = {p.pass_name: decimal_text(p.cumulative) for p in passes}
                    raise CumulativeSpendRequired(
                        f"privacy ledger {self.location}: dataset {dataset[:16]} already has "
                        "recorded spend. " + "; ".join(problems) + ". Nothing was drawn.",
                        remedy
                        or Remedy(
                            cli="accept the new total with "
                            + " ".join(f"--cumulative-total {k}={v}" for k, v in totals.items()),
                            deployment=f"run again with the parameter cumulative_total = "
                            f"{dict(totals)}".replace("'", '"'),
                        ),
                    )
                accepted_text = {k: fraction_text(v) for k, v in accepted.items()}
            db.append(
                "spend-authorized",
                {
                    "passes": [p.exact() for p in passes],
                    "approval": None if approval is None else approval["approval_id"],
                    "accepted": accepted_text,
                    "files": dict(files or {}),
                    "input_stats": dict(input_stats or {}),
                    "ceiling": fraction_text(ceiling),
                    "production": production,  # a spend without approval shows why
                },
                run_id=run_id,
                dataset=dataset,
            )
        return passes

    def _usable_approval(
        self, db: LedgerTransaction, run: RunState, dataset: str, passes: list[PassSpend]
    ) -> dict[str, Any] | None:
        """The oldest open approval of this product and config for this dataset whose allowed
        cumulative totals cover this run's, else None."""
        runs = self._dataset_runs(db, dataset)
        taken = {r.approval for r in runs if r.counting and r.approval}
        wanted = {p.pass_name: p for p in passes}
        for approval in _approvals(db.entries(dataset=dataset, kinds=("approval",))):
            if approval["approval_id"] in taken:
                continue
            if approval["product"] != run.product:
                continue
            if approval["config_sha256"] != run.binding["config_sha256"]:
                continue
            allowed = approval["passes"]
            if set(allowed) != set(wanted):
                continue
            if all(
                parse_fraction_text(allowed[name]["this_run"]) == item.this_run
                and item.cumulative <= parse_fraction_text(allowed[name]["cumulative"])
                for name, item in wanted.items()
            ):
                return approval
        return None

    def start_drawing(self, run_id: str, attempt: int) -> None:
        """From here on the run counts as spent in full; draws are allowed to this attempt."""
        with self.store.transaction(write=True) as db:
            state = self._current(db, run_id, attempt)
            if state.status == "completed":
                return  # a rerun of a published run reuses its draws; it draws nothing new
            if state.status not in ("authorized", "drawing"):
                raise DrawRefused(
                    f"run {run_id} has no authorized spend (status {state.status}); not drawing"
                )
            db.append("drawing-started", {"attempt": attempt}, run_id=run_id)

    def release_reservation(self, run_id: str, reason: str) -> bool:
        """A run that stopped before its first draw spends nothing: its authorization (and
        approval) is returned. Refused silently (False) once drawing started."""
        with self.store.transaction(write=True) as db:
            state = fold_run(db.entries(run_id=run_id))
            if state is None or state.status not in ("reserved", "authorized"):
                return False
            db.append("run-released", {"reason": reason}, run_id=run_id)
        return True

    def _current(self, db: LedgerTransaction, run_id: str, attempt: int) -> RunState:
        state = fold_run(db.entries(run_id=run_id))
        if state is None:
            raise DrawRefused(f"run {run_id} is not in the ledger")
        if state.attempt != attempt:
            raise DrawRefused(
                f"attempt {attempt} of run {run_id} was superseded by attempt {state.attempt}; "
                "not drawing"
            )
        return state

    def charge_draw(self, run_id: str, attempt: int, name: str) -> None:
        """Record that ``name`` is about to be drawn (before any noise exists)."""
        with self.store.transaction(write=True) as db:
            state = self._current(db, run_id, attempt)
            if state.status != "drawing":
                raise DrawRefused(f"run {run_id} is not drawing (status {state.status})")
            if name in state.draws:
                raise DuplicateDraw(f"{name}: already drawn in run {run_id}; reuse it")
            db.append("draw-charged", {"name": name, "attempt": attempt}, run_id=run_id)

    def record_draw(
        self, run_id: str, attempt: int, name: str, digest: str, size: int, file: str
    ) -> DrawRecord:
        """Record ``name``'s noise (its file and digest); if another process recorded it first,
        that record stands and is returned (the caller discards its own file)."""
        with self.store.transaction(write=True) as db:
            state = self._current(db, run_id, attempt)
            if name in state.draws:
                held = state.draws[name]
                return DrawRecord(name, held["digest"], held["size"], held["file"])
            if name not in state.charged:
                raise DrawRefused(f"{name}: drawn without being charged in the ledger")
            db.append(
                "draw-recorded",
                {"name": name, "digest": digest, "size": int(size), "file": file,
                 "attempt": attempt},
                run_id=run_id,
            )  # fmt: skip
        return DrawRecord(name, digest, int(size), file)

    def draws(self, run_id: str) -> dict[str, DrawRecord]:
        state = self.run(run_id)
        if state is None:
            return {}
        return {
            name: DrawRecord(name, d["digest"], d["size"], d["file"])
            for name, d in state.draws.items()
        }

    def seal_release(self, run_id: str, content_sha256: str) -> dict[str, Any]:
        """Record the release's content before it is published; the entry is the head the
        release carries (its MANIFEST names it), so a later rewrite of the ledger shows.

        A run has one release: once its content is sealed, a resume (after a kill, or after
        the release folder was moved away) may publish only that very content again — the
        same entry is returned. Other content (its work files edited since) is refused: the
        same noise on other counts would release the exact difference."""
        with self.store.transaction(write=True) as db:
            info = self._info(db)
            state = fold_run(db.entries(run_id=run_id))
            if state is None or state.status not in ("drawing", "completed"):
                raise LedgerRefused(f"run {run_id} has nothing to release (not drawing)")
            sealed = state.sealed_release
            if sealed is not None:
                if sealed["content_sha256"] != content_sha256:
                    raise ReleaseDiffers(
                        f"run {run_id} already sealed its release (ledger entry "
                        f"{sealed['seq']}) and now built other content: its work files or "
                        "step records changed since. A run publishes one release — the same "
                        "noise on other counts would release their exact difference. Nothing "
                        "was published; the ledger keeps the run's spend"
                    )
                return {"id": info.ledger_id, "seq": sealed["seq"], "hash": sealed["hash"]}
            entry = db.append("release-sealed", {"content_sha256": content_sha256}, run_id=run_id)
        return {"id": info.ledger_id, "seq": entry.seq, "hash": entry.hash}

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

    # -- validations ----------------------------------------------------------------------------

    def record_validation(
        self, product: str, dataset: str | None, config_sha256: str, summary: Mapping[str, Any],
        run_id: str | None = None,
    ) -> None:  # fmt: skip
        """A validation verdict of these records under this config (counts and check names)."""
        detail = {
            "product": product,
            "config_sha256": config_sha256,
            "ok": bool(summary.get("ok")),
            "errors": int(summary.get("errors") or 0),
            "warnings": int(summary.get("warnings") or 0),
            "failed_checks": list(summary.get("failed_checks") or []),
            "by": who(),
        }
        with self.store.transaction(write=True) as db:
            db.append("validation", detail, run_id=run_id, dataset=dataset)

    def record_validation_of(
        self,
        product: str,
        confidential: Iterable[str],
        fingerprints: Mapping[str, str],
        config_sha256: str,
        summary: Mapping[str, Any],
        run_id: str | None = None,
    ) -> str | None:
        """:meth:`record_validation` under the dataset id of the records validated (none when a
        confidential file was not read whole); the dataset id."""
        from das.io.fingerprint import combine_fingerprints

        names = sorted(confidential)
        dataset = None
        if names and all(name in fingerprints for name in names):
            dataset = self.dataset_id(combine_fingerprints({n: fingerprints[n] for n in names}))
        self.record_validation(product, dataset, config_sha256, summary, run_id)
        return dataset

    def passing_validation(self, product: str, dataset: str, config_sha256: str) -> bool:
        """Whether the latest validation of these records under this config passed."""
        with self.store.transaction() as db:
            found = [
                e.payload
                for e in db.entries(dataset=dataset, kinds=("validation",))
                if e.payload["product"] == product and e.payload["config_sha256"] == config_sha256
            ]
        return bool(found) and bool(found[-1]["ok"])

    # -- approvals -------------------------------------------------------------------------------

    def approve(
        self,
        *,
        product: str,
        dataset: str,
        config_sha256: str,
        definition: str,
        budgets: Mapping[str, Budget],
        note: str = "",
        by: str | None = None,
        via: str = "das ledger approve",
    ) -> dict[str, Any]:
        """Record a person's approval of this config's per-pass totals on this dataset; refuses
        an infinite budget or totals that would pass the ceiling."""
        infinite = sorted(name for name, b in budgets.items() if isinstance(b, float))
        if infinite:
            raise LedgerRefused(
                f"pass(es) {infinite} have an infinite budget (no noise): that is not a private "
                "release and cannot be approved"
            )
        with self.store.transaction(write=True) as db:
            info = self._info(db)
            ceiling = info.ceilings[definition]
            unit = "rho" if definition == ZCDP else "epsilon"
            counting = [r for r in self._dataset_runs(db, dataset) if r.counting]
            passes: dict[str, dict[str, str]] = {}
            over = []
            for name, budget in sorted(budgets.items()):
                prior, _ = self._prior(counting, name, definition)
                cumulative = add(prior, budget)
                passes[name] = {
                    "prior": fraction_text(prior),
                    "this_run": fraction_text(budget),
                    "cumulative": fraction_text(cumulative),
                }
                if cumulative > ceiling:
                    over.append(
                        f"pass {name}: earlier {decimal_text(prior)} + {decimal_text(budget)} = "
                        f"{decimal_text(cumulative)}"
                    )
            if over:
                raise CeilingExceeded(
                    f"cannot approve: the ledger's ceiling is {unit} {decimal_text(ceiling)} per "
                    f"pass on a dataset ({'; '.join(over)})"
                )
            approval = {
                "approval_id": uuid.uuid4().hex[:16],
                "product": product,
                "config_sha256": config_sha256,
                "definition": definition,
                "passes": passes,
                "ceiling": fraction_text(ceiling),
                "by": by or who(),
                "note": note,
                "via": via,
            }
            entry = db.append("approval", approval, dataset=dataset)
        return {**approval, "dataset": dataset, "at": entry.at, "seq": entry.seq}

    def approvals(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every approval (oldest first) with the run that used it, if any."""
        with self.store.transaction() as db:
            found = _approvals(db.entries(dataset=dataset, kinds=("approval",)))
            used: dict[str, str] = {}
            for item in found:
                for run in self._dataset_runs(db, str(item["dataset"])):
                    if run.counting and run.approval:
                        used[run.approval] = run.run_id
        return [{**item, "used_by": used.get(item["approval_id"])} for item in found]

    def has_open_approval(self, product: str, config_sha256: str) -> bool:
        """Whether any approval of this product and config is not used by a run yet (a cheap
        check before any record is read: without one, a production run cannot spend)."""
        return any(
            a["used_by"] is None and a["product"] == product and a["config_sha256"] == config_sha256
            for a in self.approvals()
        )

    # -- reading ---------------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        with self.store.transaction() as db:
            return db.entries()

    def totals(self, dataset: str) -> dict[str, dict[str, str]]:
        """Cumulative spend per pass of a dataset (exact decimal text): ρ whenever a run used
        zCDP or pure DP (ε²/2), and ε too when every run was pure DP."""
        with self.store.transaction() as db:
            runs = [r for r in self._dataset_runs(db, dataset) if r.counting]
        result: dict[str, dict[str, str]] = {}
        names = sorted({p.pass_name for r in runs for p in r.passes})
        for pass_name in names:
            definitions = ["zcdp"]
            kinds = {p.definition for r in runs for p in r.passes if p.pass_name == pass_name}
            if kinds == {"puredp"}:
                definitions.append("puredp")
            result[pass_name] = {
                d: decimal_text(self._prior(runs, pass_name, d)[0]) for d in definitions
            }
        return result

    def runs(self) -> list[RunState]:
        with self.store.transaction() as db:
            ids = dict.fromkeys(
                e.run_id for e in db.entries(kinds=("run-opened",)) if e.run_id is not None
            )
            states = [fold_run(db.entries(run_id=run_id)) for run_id in ids]
        return [s for s in states if s is not None]


def witness_problems(
    ledger: PrivacyLedger, info: LedgerInfo, heads: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[str]:
    """Heads of this ledger that witnesses outside it recorded — ``(witness, {id, seq, hash})``
    — that it no longer holds as recorded. A chain cut back or rewritten consistently is still
    a valid chain; only a copy of its head kept elsewhere shows it. A head of another ledger
    means the witness knew another ledger here (swapped, or re-created after it was emptied)."""
    problems: list[str] = []
    for witness, head in heads:
        if head.get("id") != info.ledger_id:
            problems.append(
                f"{witness} was recorded in ledger {head.get('id')}, not in this one "
                f"({info.ledger_id} at {info.location})"
            )
        else:
            entry = ledger.entry(int(head.get("seq", 0)))
            if entry is None or entry.hash != head.get("hash"):
                problems.append(
                    f"{witness} recorded ledger entry {head.get('seq')}, which this ledger does "
                    "not hold as recorded (its history was cut or rewritten)"
                )
        if len(problems) >= 5:
            break
    return problems


def release_anchor_problems(ledger: PrivacyLedger, info: LedgerInfo, output: Path) -> list[str]:
    """Releases beside ``output`` carry the ledger head they were published at: each must be
    in this ledger (:func:`witness_problems`). A release recorded in another ledger means this
    is not the ledger of these releases (e.g. a mistyped ``DAS_LEDGER_DIR``)."""
    from das.runs.release import read_manifest

    parent = Path(output).parent
    if not parent.is_dir():
        return []
    heads = (
        (f"the release {sibling.name} beside this output", head)
        for sibling in sorted(parent.iterdir())
        if sibling != Path(output) and sibling.is_dir()
        for head in [(read_manifest(sibling) or {}).get("ledger")]
        if isinstance(head, dict)
    )
    return witness_problems(ledger, info, heads)
