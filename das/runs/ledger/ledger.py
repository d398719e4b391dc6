"""The privacy ledger: the system of record of every run, approval, spend and draw.

:class:`PrivacyLedger` is the one object the rest of the pipeline holds. It owns the
transactions (each decision and the entry recording it are atomic) and delegates the rules to
the modules of this package, one per concept:

- :mod:`~das.runs.ledger.store`: the hash-chained entries in SQLite or PostgreSQL;
- :mod:`~das.runs.ledger.state`: what the entries mean (a run's state, the ledger's identity);
- :mod:`~das.runs.ledger.amounts`: exact budgets, cumulative totals;
- :mod:`~das.runs.ledger.spending`: authorizing a run's spend, approvals, ceilings;
- :mod:`~das.runs.ledger.draws`: charging and recording each measurement's noise;
- :mod:`~das.runs.ledger.anchors`: the sealed release and the heads kept outside the ledger;
- :mod:`~das.runs.ledger.validations`, :mod:`~das.runs.ledger.identity`,
  :mod:`~das.runs.ledger.errors`.

Entries: ``init`` (the ledger's id, its ceilings per pass — ρ under zCDP, ε under pure DP, at
most :data:`das.privacy.limits.MAX_PASS_TOTAL` — and a commitment to its secret key),
``approval``, ``run-opened`` / ``run-resumed``, ``spend-authorized``, ``drawing-started``,
``draw-charged``, ``draw-recorded``, ``release-sealed``, ``run-completed``; and the trail of
what did not become a spend: ``run-released`` (stopped before any draw), ``run-failed``,
``validation``, ``refused``, ``release-replaced``.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from das.privacy.accounting import ZCDP
from das.privacy.limits import MAX_PASS_TOTAL
from das.privacy.mechanisms import Budget, fraction_text
from das.runs.ledger import anchors, draws, spending, validations
from das.runs.ledger.amounts import PassSpend, decimal_text
from das.runs.ledger.draws import DrawRecord
from das.runs.ledger.errors import LedgerRefused
from das.runs.ledger.identity import DATASET_TAG, NOISE_TAG, keyed_id, who
from das.runs.ledger.state import (
    LEDGER_FORMAT,
    LedgerInfo,
    RunOpening,
    RunState,
    fold_run,
    ledger_info,
)
from das.runs.ledger.store import Entry, LedgerStore, LedgerTransaction, chain_problems
from das.runs.policy import Remedy


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
        ledger's secret key (:mod:`~das.runs.ledger.identity`)."""
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

    # -- spending (:mod:`~das.runs.ledger.spending`) --------------------------------------------

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
        """Bind the run to the dataset it read and count its spend, or refuse
        (:func:`~das.runs.ledger.spending.authorize`)."""
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
            )

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
        """Record a person's approval of this config's per-pass totals on this dataset."""
        with self.store.transaction(write=True) as db:
            return spending.approve(
                db,
                self._info(db),
                product=product,
                dataset=dataset,
                config_sha256=config_sha256,
                definition=definition,
                budgets=budgets,
                note=note,
                by=by or who(),
                via=via,
            )

    def approvals(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every approval (oldest first) with the run that used it, if any."""
        with self.store.transaction() as db:
            return spending.approvals(db, dataset)

    def has_open_approval(self, product: str, config_sha256: str) -> bool:
        """Whether any approval of this product and config is not used by a run yet (a cheap
        check before any record is read: without one, a production run cannot spend)."""
        return any(
            a["used_by"] is None and a["product"] == product and a["config_sha256"] == config_sha256
            for a in self.approvals()
        )

    def totals(self, dataset: str) -> dict[str, dict[str, str]]:
        """Cumulative spend per pass of a dataset (:func:`~das.runs.ledger.spending.totals`)."""
        with self.store.transaction() as db:
            return spending.totals(db, dataset)

    # -- draws (:mod:`~das.runs.ledger.draws`) --------------------------------------------------

    def start_drawing(self, run_id: str, attempt: int) -> None:
        """From here on the run counts as spent in full; draws are allowed to this attempt."""
        with self.store.transaction(write=True) as db:
            draws.start_drawing(db, run_id, attempt)

    def release_reservation(self, run_id: str, reason: str) -> bool:
        """A run that stopped before its first draw spends nothing (False once it drew)."""
        with self.store.transaction(write=True) as db:
            return draws.release_reservation(db, run_id, reason)

    def charge_draw(self, run_id: str, attempt: int, name: str) -> None:
        """Record that ``name`` is about to be drawn (before any noise exists)."""
        with self.store.transaction(write=True) as db:
            draws.charge_draw(db, run_id, attempt, name)

    def record_draw(
        self, run_id: str, attempt: int, name: str, digest: str, size: int, file: str
    ) -> DrawRecord:
        """Record ``name``'s noise; the record that stands (another process's, if first)."""
        with self.store.transaction(write=True) as db:
            return draws.record_draw(db, run_id, attempt, name, digest, size, file)

    def draws(self, run_id: str) -> dict[str, DrawRecord]:
        return draws.recorded_draws(self.run(run_id))

    # -- the release (:mod:`~das.runs.ledger.anchors`) ------------------------------------------

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

    # -- validations (:mod:`~das.runs.ledger.validations`) --------------------------------------

    def record_validation(
        self,
        product: str,
        dataset: str | None,
        config_sha256: str,
        summary: Mapping[str, Any],
        run_id: str | None = None,
    ) -> None:
        """A validation verdict of these records under this config (counts and check names)."""
        with self.store.transaction(write=True) as db:
            validations.record_validation(db, product, dataset, config_sha256, summary, run_id)

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
            return validations.passing_validation(db, product, dataset, config_sha256)

    # -- reading ---------------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        with self.store.transaction() as db:
            return db.entries()
