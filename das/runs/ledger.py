"""The privacy ledger of each dataset, across runs: privacy is spent on data, not on run ids.

A run's run folder knows what *that run* drew; this ledger knows what every run ever spent on the
same confidential inputs. It is a SQLite database (``ledger.sqlite``) in ``DAS_LEDGER_DIR``,
outside every release folder, keyed by :func:`dataset_key`: the SHA-256 of the confidential
input files' contents. One row per (dataset, pass, run id):

- ``reserved`` when a run starts (before validation), so that a concurrent run on the same data
  sees it; ``drawing`` just before the first noise is drawn; ``completed`` when the release is
  published; ``released`` when the run stopped before drawing anything (e.g. invalid inputs),
  which spends nothing. A run that died while ``reserved`` or ``drawing`` counts as spent in full
  (it may have drawn); resuming it with the same run id spends nothing more.
- A new run on a dataset whose pass already has a recorded spend is refused unless the operator
  names the new cumulative total exactly (:class:`CumulativeSpendRequired`): a second release
  is a deliberate, recorded decision, never an accident.

Reservation is one ``BEGIN IMMEDIATE`` transaction (SQLite's database lock), so of two runs
that start at once on the same data only one can reserve without naming the cumulative total.
Writes are atomic (SQLite transactions, rollback journal, synchronous FULL). Events (refusals,
replaced releases) are kept beside the spends, for the trail.

Cumulative totals are exact. Under zCDP they add ρ; a pure-DP spend ε counts as ρ = ε²/2 (an
ε-DP mechanism is ε²/2-zCDP). Under pure DP they add ε; a zCDP spend has no pure-DP equivalent,
so it makes the cumulative ε infinite. Budgets are stored as exact fraction text.

The key is a content hash of the files as given: the same records re-encoded (text vs Parquet,
reordered rows) count as another dataset. Operators must keep one canonical copy per dataset;
the ledger lists every run with its files' names and hashes so a reviewer can check that.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.privacy.accounting import ZCDP
from das.privacy.mechanisms import Budget, fraction_text, parse_fraction_text
from das.runs.policy import RunRefused

LEDGER_FILE = "ledger.sqlite"
SPENDING = ("reserved", "drawing", "completed")  # statuses that count as spent
INFINITY = float("inf")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spends (
    id INTEGER PRIMARY KEY,
    dataset TEXT NOT NULL,
    pass TEXT NOT NULL,
    run_id TEXT NOT NULL,
    product TEXT NOT NULL,
    definition TEXT NOT NULL,
    budget TEXT NOT NULL,
    cumulative TEXT NOT NULL,
    status TEXT NOT NULL,
    seed_mode TEXT NOT NULL,
    not_private INTEGER NOT NULL,
    config_sha256 TEXT NOT NULL,
    inputs TEXT NOT NULL,
    output TEXT NOT NULL,
    started TEXT NOT NULL,
    updated TEXT NOT NULL,
    UNIQUE (dataset, pass, run_id)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    dataset TEXT,
    run_id TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""


class CumulativeSpendRequired(RunRefused):
    """The dataset already has recorded spend: the operator must name the new cumulative total."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def dataset_key(inputs: Mapping[str, str]) -> str:
    """SHA-256 over the sorted ``name:sha256`` lines of the confidential input files."""
    lines = "".join(f"{name}:{digest}\n" for name, digest in sorted(inputs.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


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
    cleaned = text.strip()
    if cleaned.lower() in ("inf", "infinity"):
        return INFINITY
    try:
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a number: {text!r}") from None
    if value < 0:
        raise ValueError(f"a cumulative total cannot be negative: {text!r}")
    return value


def _in_definition(definition: str, spend_definition: str, budget: Budget) -> Budget:
    """A recorded spend in the unit of ``definition`` (see the module docstring)."""
    if isinstance(budget, float):
        return INFINITY
    if definition == spend_definition:
        return Fraction(budget)
    if definition == ZCDP:  # an ε-DP spend is ε²/2-zCDP
        return Fraction(budget) ** 2 / 2
    return INFINITY  # zCDP has no pure-DP equivalent


def _add(a: Budget, b: Budget) -> Budget:
    if isinstance(a, float) or isinstance(b, float):
        return INFINITY
    return Fraction(a) + Fraction(b)


@dataclass(frozen=True)
class PassSpend:
    """One pass of a reservation: what was spent before, what this run spends, the new total."""

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


@dataclass(frozen=True)
class RunSpend:
    """What identifies one run's spend in the ledger."""

    dataset: str
    run_id: str
    product: str
    definition: str
    budgets: Mapping[str, Budget]  # pass -> this run's total
    seed_mode: str
    not_private: bool
    config_sha256: str
    inputs: Mapping[str, str]
    output: str


class PrivacyLedger:
    """The SQLite ledger in ``directory`` (created on first use)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LEDGER_FILE

    @contextlib.contextmanager
    def _connect(self, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        self.directory.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            connection.execute("PRAGMA synchronous = FULL")
            connection.executescript(_SCHEMA)
            connection.row_factory = sqlite3.Row
            connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            connection.close()

    # -- reading ----------------------------------------------------------------------------

    def spends(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every recorded spend (oldest first), optionally of one dataset."""
        if not self.path.is_file():
            return []
        with self._connect() as db:
            query = "SELECT * FROM spends"
            args: tuple[Any, ...] = ()
            if dataset is not None:
                query += " WHERE dataset = ?"
                args = (dataset,)
            rows = db.execute(query + " ORDER BY id", args).fetchall()
        return [self._row(row) for row in rows]

    def events(self, dataset: str | None = None) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        with self._connect() as db:
            query, args = "SELECT * FROM events", ()
            if dataset is not None:
                query, args = query + " WHERE dataset = ?", (dataset,)
            rows = db.execute(query + " ORDER BY id", args).fetchall()
        return [dict(row) | {"detail": json.loads(row["detail"])} for row in rows]

    @staticmethod
    def _row(row: sqlite3.Row) -> dict[str, Any]:
        data = dict(row)
        data["inputs"] = json.loads(data["inputs"])
        data["not_private"] = bool(data["not_private"])
        return data

    def totals(self, dataset: str) -> dict[str, dict[str, str]]:
        """Cumulative spend per pass of a dataset (exact decimal text): ρ whenever a run used
        zCDP or pure DP (ε²/2), and ε too when every run was pure DP."""
        result: dict[str, dict[str, str]] = {}
        spends = [s for s in self.spends(dataset) if s["status"] in SPENDING]
        for pass_name in sorted({s["pass"] for s in spends}):
            rows = [s for s in spends if s["pass"] == pass_name]
            definitions = ["zcdp"]
            if all(row["definition"] == "puredp" for row in rows):
                definitions.append("puredp")
            result[pass_name] = {
                definition: decimal_text(self._prior(rows, definition))
                for definition in definitions
            }
        return result

    @staticmethod
    def _prior(rows: list[dict[str, Any]], definition: str) -> Budget:
        total: Budget = Fraction(0)
        for row in rows:
            budget = parse_fraction_text(row["budget"])
            total = _add(total, _in_definition(definition, row["definition"], budget))
        return total

    # -- writing ----------------------------------------------------------------------------

    def reserve(
        self, spend: RunSpend, expected: Mapping[str, Budget] | None = None
    ) -> list[PassSpend]:
        """Record this run's spend (one row per pass), or refuse.

        A run id that already holds a spending row on a pass resumes it: nothing more is spent.
        Otherwise, when other runs have spent on the pass, ``expected[pass]`` must equal the new
        cumulative total exactly; else :class:`CumulativeSpendRequired`, and nothing is written.
        """
        expected = dict(expected or {})
        unknown = set(expected) - set(spend.budgets)
        if unknown:
            raise RunRefused(
                f"--cumulative-total names pass(es) {sorted(unknown)} this run does not have "
                f"(it has {sorted(spend.budgets)})"
            )
        now = _now()
        with self._connect(immediate=True) as db:
            rows = [
                self._row(r)
                for r in db.execute(
                    "SELECT * FROM spends WHERE dataset = ? ORDER BY id", (spend.dataset,)
                )
            ]
            passes: list[PassSpend] = []
            problems: list[str] = []
            for pass_name, budget in spend.budgets.items():
                mine = [r for r in rows if r["pass"] == pass_name and r["run_id"] == spend.run_id]
                others = [
                    r
                    for r in rows
                    if r["pass"] == pass_name
                    and r["run_id"] != spend.run_id
                    and r["status"] in SPENDING
                ]
                prior = self._prior(others, spend.definition)
                cumulative = _add(prior, budget)
                resuming = bool(mine) and mine[0]["status"] in SPENDING
                passes.append(
                    PassSpend(
                        pass_name,
                        spend.definition,
                        prior,
                        budget,
                        cumulative,
                        tuple(r["run_id"] for r in others),
                    )
                )
                named = expected.get(pass_name)
                if resuming:
                    continue
                if named is None and others:
                    problems.append(
                        f"pass {pass_name}: {len(others)} earlier run(s) spent "
                        f"{decimal_text(prior)} ({spend.definition}) on this dataset; this run "
                        f"adds {decimal_text(budget)}, so pass --cumulative-total "
                        f"{pass_name}={decimal_text(cumulative)} to accept the new total"
                    )
                elif named is not None and named != cumulative:
                    problems.append(
                        f"pass {pass_name}: --cumulative-total {decimal_text(named)} does not "
                        f"match the new cumulative total {decimal_text(cumulative)} "
                        f"(earlier {decimal_text(prior)} + this run {decimal_text(budget)})"
                    )
            if problems:
                raise CumulativeSpendRequired(
                    f"privacy ledger {self.path}: dataset {spend.dataset[:16]} already has "
                    "recorded spend. " + "; ".join(problems) + ". Nothing was drawn."
                )
            for item in passes:
                values = (
                    spend.product,
                    spend.definition,
                    fraction_text(item.this_run),
                    fraction_text(item.cumulative),
                    spend.seed_mode,
                    int(spend.not_private),
                    spend.config_sha256,
                    json.dumps(dict(spend.inputs), sort_keys=True),
                    spend.output,
                    now,
                )
                resumed = db.execute(
                    "SELECT status FROM spends WHERE dataset = ? AND pass = ? AND run_id = ?",
                    (spend.dataset, item.pass_name, spend.run_id),
                ).fetchone()
                if resumed is None:
                    db.execute(
                        "INSERT INTO spends (product, definition, budget, cumulative, seed_mode,"
                        " not_private, config_sha256, inputs, output, started, updated, status,"
                        " dataset, pass, run_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (*values, now, "reserved", spend.dataset, item.pass_name, spend.run_id),
                    )
                elif resumed["status"] not in SPENDING:
                    db.execute(
                        "UPDATE spends SET product=?, definition=?, budget=?, cumulative=?,"
                        " seed_mode=?, not_private=?, config_sha256=?, inputs=?, output=?,"
                        " updated=?, status='reserved' WHERE dataset=? AND pass=? AND run_id=?",
                        (*values, spend.dataset, item.pass_name, spend.run_id),
                    )
        return passes

    def set_status(self, dataset: str, run_id: str, status: str) -> None:
        """Move every pass of a run to ``status``; ``released`` only from ``reserved`` (a run
        that may have drawn is never un-spent)."""
        if status not in (*SPENDING, "released"):
            raise ValueError(f"unknown ledger status {status!r}")
        with self._connect(immediate=True) as db:
            if status == "released":
                db.execute(
                    "UPDATE spends SET status='released', updated=? "
                    "WHERE dataset=? AND run_id=? AND status='reserved'",
                    (_now(), dataset, run_id),
                )
            else:
                db.execute(
                    "UPDATE spends SET status=?, updated=? WHERE dataset=? AND run_id=?",
                    (status, _now(), dataset, run_id),
                )

    def record_event(
        self, kind: str, detail: Mapping[str, Any], dataset: str | None, run_id: str | None
    ) -> None:
        """A refusal, a replaced release, ...: the trail of what did not become a spend."""
        with self._connect(immediate=True) as db:
            db.execute(
                "INSERT INTO events (at, dataset, run_id, kind, detail) VALUES (?,?,?,?,?)",
                (_now(), dataset, run_id, kind, json.dumps(dict(detail), sort_keys=True)),
            )
