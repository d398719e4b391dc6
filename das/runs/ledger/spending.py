"""Spending and approvals: what a run may spend on a dataset, and who allowed it.

Privacy is spent on data, not on run ids. A run is bound to the dataset it read (a keyed hash
of the records' canonical fingerprint) with its earlier, this-run and cumulative totals per
pass (``spend-authorized``), under an approval (production) or an accepted cumulative total
(outside production). The dataset's recorded spend plus this run must stay within the ledger's
ceiling. Every function here runs inside one ledger transaction (``db``), so a decision read
from the ledger and the entry recording it are atomic.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from das.privacy.mechanisms import Budget, fraction_text, parse_fraction_text
from das.runs.ledger.amounts import PassSpend, add, decimal_text, in_definition, unit
from das.runs.ledger.errors import (
    ApprovalRequired,
    CeilingExceeded,
    CumulativeSpendRequired,
    LedgerRefused,
)
from das.runs.ledger.state import LedgerInfo, RunState, fold_approvals, fold_run
from das.runs.ledger.store import LedgerTransaction
from das.runs.policy import Remedy


def dataset_runs(db: LedgerTransaction, dataset: str) -> list[RunState]:
    """Every run bound to ``dataset``, in the order they were bound."""
    run_ids = dict.fromkeys(
        e.run_id for e in db.entries(dataset=dataset, kinds=("spend-authorized",))
    )
    runs = [fold_run(db.entries(run_id=run_id)) for run_id in run_ids if run_id]
    return [run for run in runs if run is not None and run.dataset == dataset]


def prior_spend(
    runs: Iterable[RunState], pass_name: str, definition: str
) -> tuple[Budget, tuple[str, ...]]:
    """What ``runs`` spent on pass ``pass_name``, in ``definition``'s unit, and which runs."""
    total: Budget = Fraction(0)
    names = []
    for run in runs:
        for item in run.passes:
            if item.pass_name == pass_name:
                total = add(total, in_definition(definition, item.definition, item.this_run))
                names.append(run.run_id)
    return total, tuple(names)


def _spend_line(item: PassSpend) -> str:
    return (
        f"pass {item.pass_name}: earlier {decimal_text(item.prior)} + this run "
        f"{decimal_text(item.this_run)} = {decimal_text(item.cumulative)}"
    )


def authorize(
    db: LedgerTransaction,
    info: LedgerInfo,
    location: str,
    run_id: str,
    dataset: str,
    *,
    production: bool,
    accepted: Mapping[str, Budget] | None,
    files: Mapping[str, str] | None,
    input_stats: Mapping[str, Any] | None,
    remedy: Remedy | None,
) -> list[PassSpend]:
    """Bind the run to the dataset it read and count its spend, or refuse.

    A run already bound to ``dataset`` (a resume) spends nothing more; one bound to another
    dataset is refused (its noise was drawn for other records). Otherwise the dataset's
    recorded spend plus this run must stay within the ledger's ceiling (private runs), and be
    covered by an approval of this config for this dataset (production) or, when the dataset
    already has spend, by the operator's ``accepted`` cumulative totals or an approval (outside
    production). ``remedy`` is what the refusal tells the operator.
    """
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
    others = [r for r in dataset_runs(db, dataset) if r.run_id != run_id]
    counting = [r for r in others if r.counting]
    passes = []
    for pass_name, budget in state.budgets.items():
        prior, names = prior_spend(counting, pass_name, state.definition)
        passes.append(
            PassSpend(pass_name, state.definition, prior, budget, add(prior, budget), names)
        )
    ceiling = info.ceilings[state.definition]
    over = [p for p in passes if p.cumulative > ceiling]
    if over and not state.not_private:
        raise CeilingExceeded(
            f"the privacy ledger's ceiling of {unit(state.definition)} {decimal_text(ceiling)} "
            f"per pass would be passed on dataset {dataset[:16]} ("
            + "; ".join(_spend_line(p) for p in over)
            + "). No approval can allow it. Nothing was drawn"
        )
    approval = usable_approval(db, state, dataset, passes)
    accepted_text = None
    if approval is None:
        if production:
            raise ApprovalRequired(
                f"no approval in the privacy ledger covers this spend on dataset "
                f"{dataset[:16]}: "
                + "; ".join(
                    f"{_spend_line(p)} {unit(state.definition)} (ceiling {decimal_text(ceiling)})"
                    for p in passes
                )
                + ". Nothing was drawn",
                remedy or Remedy(),
                passes,
                info.ceilings,
                dataset,
            )
        accepted_text = _accepted_totals(location, dataset, passes, accepted, remedy)
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


def _accepted_totals(
    location: str,
    dataset: str,
    passes: list[PassSpend],
    accepted: Mapping[str, Budget] | None,
    remedy: Remedy | None,
) -> dict[str, str]:
    """Outside production, without an approval: a dataset with recorded spend needs the
    operator to name each new cumulative total exactly (refused otherwise)."""
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
            f"privacy ledger {location}: dataset {dataset[:16]} already has "
            "recorded spend. " + "; ".join(problems) + ". Nothing was drawn.",
            remedy
            or Remedy(
                cli="accept the new total with "
                + " ".join(f"--cumulative-total {k}={v}" for k, v in totals.items()),
                deployment=f"run again with the parameter cumulative_total = "
                f"{dict(totals)}".replace("'", '"'),
            ),
        )
    return {k: fraction_text(v) for k, v in accepted.items()}


def usable_approval(
    db: LedgerTransaction, run: RunState, dataset: str, passes: list[PassSpend]
) -> dict[str, Any] | None:
    """The oldest open approval of this product and config for this dataset whose allowed
    cumulative totals cover this run's, else None."""
    runs = dataset_runs(db, dataset)
    taken = {r.approval for r in runs if r.counting and r.approval}
    wanted = {p.pass_name: p for p in passes}
    for approval in fold_approvals(db.entries(dataset=dataset, kinds=("approval",))):
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


def approve(
    db: LedgerTransaction,
    info: LedgerInfo,
    *,
    product: str,
    dataset: str,
    config_sha256: str,
    definition: str,
    budgets: Mapping[str, Budget],
    note: str,
    by: str,
    via: str,
) -> dict[str, Any]:
    """Record a person's approval of this config's per-pass totals on this dataset; refuses
    an infinite budget or totals that would pass the ceiling."""
    infinite = sorted(name for name, b in budgets.items() if isinstance(b, float))
    if infinite:
        raise LedgerRefused(
            f"pass(es) {infinite} have an infinite budget (no noise): that is not a private "
            "release and cannot be approved"
        )
    ceiling = info.ceilings[definition]
    counting = [r for r in dataset_runs(db, dataset) if r.counting]
    passes: dict[str, dict[str, str]] = {}
    over = []
    for name, budget in sorted(budgets.items()):
        prior, _ = prior_spend(counting, name, definition)
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
            f"cannot approve: the ledger's ceiling is {unit(definition)} "
            f"{decimal_text(ceiling)} per pass on a dataset ({'; '.join(over)})"
        )
    approval = {
        "approval_id": uuid.uuid4().hex[:16],
        "product": product,
        "config_sha256": config_sha256,
        "definition": definition,
        "passes": passes,
        "ceiling": fraction_text(ceiling),
        "by": by,
        "note": note,
        "via": via,
    }
    entry = db.append("approval", approval, dataset=dataset)
    return {**approval, "dataset": dataset, "at": entry.at, "seq": entry.seq}


def approvals(db: LedgerTransaction, dataset: str | None = None) -> list[dict[str, Any]]:
    """Every approval (oldest first) with the run that used it, if any."""
    found = fold_approvals(db.entries(dataset=dataset, kinds=("approval",)))
    used: dict[str, str] = {}
    for item in found:
        for run in dataset_runs(db, str(item["dataset"])):
            if run.counting and run.approval:
                used[run.approval] = run.run_id
    return [{**item, "used_by": used.get(item["approval_id"])} for item in found]


def totals(db: LedgerTransaction, dataset: str) -> dict[str, dict[str, str]]:
    """Cumulative spend per pass of a dataset (exact decimal text): ρ whenever a run used
    zCDP or pure DP (ε²/2), and ε too when every run was pure DP."""
    runs = [r for r in dataset_runs(db, dataset) if r.counting]
    result: dict[str, dict[str, str]] = {}
    names = sorted({p.pass_name for r in runs for p in r.passes})
    for pass_name in names:
        definitions = ["zcdp"]
        kinds = {p.definition for r in runs for p in r.passes if p.pass_name == pass_name}
        if kinds == {"puredp"}:
            definitions.append("puredp")
        result[pass_name] = {
            d: decimal_text(prior_spend(runs, pass_name, d)[0]) for d in definitions
        }
    return result
