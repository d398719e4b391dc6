"""Spending: what a run may spend on a dataset, under whose approval, within which ceiling.

Privacy is spent on data, not on run ids. A run is bound to the dataset it read (a keyed hash
of the records' canonical fingerprint) with its earlier, this-run and cumulative totals per
pass (``spend-authorized``). The dataset's recorded spend plus this run must stay within the
ceiling (the charter's, else the ledger's). A production run — any run against a chartered
ledger — spends only under an approval signed by a quorum of the charter's approvers
(:mod:`~das.trust.ledger.approvals`); outside production a further spend on a dataset needs the
operator's exact cumulative total, or an (unsigned) approval. Every function here runs inside
one ledger transaction (``db``), so a decision read from the ledger and the entry recording it
are atomic.

A refusal that counts a run which never finished (killed, crashed, failed after drawing) names
it and the way out: resuming it spends nothing more; one that never drew can be released
(`das ledger release`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.privacy.mechanisms import Budget, fraction_text
from das.refusal import Remedy
from das.trust.ledger.amounts import PassSpend, add, decimal_text, in_definition, unit
from das.trust.ledger.approvals import APPROVAL_KINDS, Approval, fold_approvals
from das.trust.ledger.charter import CharterChain, fold_charters
from das.trust.ledger.errors import (
    ApprovalRequired,
    CeilingExceeded,
    CumulativeSpendRequired,
    LedgerRefused,
)
from das.trust.ledger.run_signatures import RunSigner, entry_signer, signed
from das.trust.ledger.state import LedgerInfo, RunState, fold_run
from das.trust.ledger.store import LedgerTransaction


def charter_chain(db: LedgerTransaction) -> CharterChain:
    return fold_charters(db.entries(kinds=("init", "charter", "charter-signature")))


def ceilings(info: LedgerInfo, chain: CharterChain) -> dict[str, Fraction]:
    """The ceilings per pass in force: the charter's, else those the ledger was created with."""
    return chain.in_force.ceilings if chain.in_force is not None else dict(info.ceilings)


def dataset_runs(db: LedgerTransaction, dataset: str) -> list[RunState]:
    """Every run bound to ``dataset``, in the order they were bound."""
    run_ids = dict.fromkeys(
        e.run_id for e in db.entries(dataset=dataset, kinds=("spend-authorized",))
    )
    runs = [fold_run(db.entries(run_id=run_id)) for run_id in run_ids if run_id]
    return [run for run in runs if run is not None and run.dataset == dataset]


def dataset_approvals(db: LedgerTransaction, dataset: str | None) -> list[Approval]:
    return fold_approvals(db.entries(dataset=dataset, kinds=APPROVAL_KINDS))


def used_approvals(runs: Iterable[RunState]) -> dict[str, str]:
    """approval id → the run that spent it (one run uses one approval)."""
    return {r.approval: r.run_id for r in runs if r.counting and r.approval}


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


def resume_step(run: RunState) -> str:
    """How to resume ``run``, in the syntax of where it was started."""
    if run.flow_run_id:
        return (
            f"Retry flow run {run.flow_run_id} (its page in the Prefect UI, top right; "
            f"`das prefect flow-run retry {run.flow_run_id}` from a terminal)"
        )
    return f"run the same `das run` command again with --run-id {run.run_id}"


@dataclass(frozen=True)
class Holder:
    """An unfinished run that holds part of a dataset's spend, and the way out of it."""

    run: RunState
    way: str

    @property
    def line(self) -> str:
        run = self.run
        when = f"last drew {run.last_draw_at[:19]}" if run.last_draw_at else "drew nothing yet"
        return (
            f"run {run.run_id} ({run.product}, {run.status}, attempt {run.attempt}, {when}) "
            f"holds its spend but never published a release: {self.way}"
        )


def ledger_option(location: str) -> str:
    """The ``das ledger`` option that names the ledger at ``location`` (a SQLite file's folder,
    or the server's URL from the environment): a command printed for this ledger must act on it,
    not on the default one."""
    if location.endswith(".sqlite"):
        return f"--ledger {Path(location).parent}"
    return '--url "$DAS_LEDGER_URL"'


def holders(runs: Iterable[RunState], location: str = "") -> list[Holder]:
    """The unfinished runs among ``runs`` (their budget counts, their release never came),
    each with the way out: resuming it spends nothing more; one that never drew may instead
    be released (in the ledger at ``location``, when given)."""
    where = f" {ledger_option(location)}" if location else ""
    found = []
    for run in runs:
        if not run.unfinished:
            continue
        if run.drew:
            way = f"resume it (it reuses its draws and spends nothing more): {resume_step(run)}"
        else:
            way = (
                f"resume it ({resume_step(run)}), or, if it will not run again, release its "
                f"reservation: das ledger release{where} --run-id {run.run_id} "
                '--reason "..."'
            )
        found.append(Holder(run, way))
    return found


def plan_passes(
    counting: Sequence[RunState], budgets: Mapping[str, Budget], definition: str
) -> list[PassSpend]:
    """This spend per pass against what ``counting`` runs already spent."""
    passes = []
    for pass_name, budget in sorted(budgets.items()):
        prior, names = prior_spend(counting, pass_name, definition)
        passes.append(PassSpend(pass_name, definition, prior, budget, add(prior, budget), names))
    return passes


def check_ceiling(
    passes: Sequence[PassSpend],
    ceiling: Fraction,
    dataset: str,
    counting: Sequence[RunState],
    what: str = "",
    location: str = "",
) -> None:
    """Refuse a spend whose cumulative total would pass the ceiling, naming the unfinished
    runs that hold part of it (their way out frees nothing, but resuming them spends nothing
    more: a second run of the same release would)."""
    over = [p for p in passes if p.cumulative > ceiling]
    if not over:
        return
    definition = over[0].definition
    message = (
        f"{what}the privacy ledger's ceiling of {unit(definition)} {decimal_text(ceiling)} per "
        f"pass would be passed on dataset {dataset[:16]} ("
        + "; ".join(_spend_line(p) for p in over)
        + "). No approval can allow it. Nothing was drawn"
    )
    held = holders(
        (r for r in counting if r.run_id in {n for p in over for n in p.prior_runs}), location
    )
    if held:
        raise CeilingExceeded(
            message + ". The earlier spend includes " + "; ".join(h.line for h in held),
            Remedy(command=held[0].way),
        )
    room = "; ".join(
        f"pass {p.pass_name}: at most {unit(definition)} {decimal_text(max(ceiling - p.prior, 0))}"
        for p in over
        if not isinstance(p.prior, float)
    )
    raise CeilingExceeded(
        message + f". What is left on this dataset: {room or 'nothing'}",
        Remedy(
            cli="release these records only with a config whose pass totals fit what is left "
            "(a smaller budget), or not at all",
            deployment="start a new custom run whose config's pass totals fit what is left "
            "(a Retry would reuse this config and be refused again), or release no more",
        ),
    )


def usable_approval(
    db: LedgerTransaction,
    info: LedgerInfo,
    chain: CharterChain,
    run: RunState,
    dataset: str,
    passes: Sequence[PassSpend],
    at: dt.datetime,
    reference: Mapping[str, str] | None = None,
) -> Approval | None:
    """The oldest approval that allows this run's spend: agreed (a quorum's signatures under
    the charter in force; any, without a charter), of this ledger, this product, these sealed
    parameters and passes, unexpired, unrejected and not spent by another run."""
    used = used_approvals(dataset_runs(db, dataset))
    for approval in dataset_approvals(db, dataset):
        if approval.approval_id in used or approval.rejection is not None:
            continue
        if approval.statement.get("ledger_id") != info.ledger_id or approval.expired(at):
            continue
        if approval.run_id not in (None, run.run_id):
            continue
        if approval.statement.get("dataset") != dataset:
            continue  # the statement names its records; the row's column is no authority
        if (approval.statement.get("reference") or {}) != dict(reference or {}):
            continue  # approved for other reference files (another GRF-C: other geography)
        if not approval.covers(run.product, str(run.binding["seal"]), run.definition, passes):
            continue
        if approval.agreed(chain):
            return approval
    return None


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
    signer: RunSigner | None = None,
    reference: Mapping[str, str] | None = None,
) -> list[PassSpend]:
    """Bind the run to the dataset it read and count its spend, or refuse.

    A run already bound to ``dataset`` (a resume) spends nothing more; one bound to another
    dataset is refused (its noise was drawn for other records). Otherwise the spend must stay
    within the ceiling (private runs) and, in production (``production``, or any chartered
    ledger), be allowed by a quorum-signed approval; outside production a dataset with recorded
    spend needs the operator's ``accepted`` cumulative totals or an approval. ``remedy`` is
    what a refusal for want of an approval tells the operator.
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
    chain = charter_chain(db)
    if state.counting:
        _check_signed_authorization(db, chain, run_id)
        return list(state.passes)
    production = production or chain.chartered
    if production and chain.in_force is None:
        raise LedgerRefused(
            f"privacy ledger {location} has no charter in force"
            + (" (its charter awaits approvers' signatures)" if chain.chartered else "")
            + ": a production spend needs one. Nothing was drawn",
            Remedy(command="each approver: das ledger charter sign --key <approver key>"),
        )
    counting = [r for r in dataset_runs(db, dataset) if r.run_id != run_id and r.counting]
    passes = plan_passes(counting, state.budgets, state.definition)
    ceiling = ceilings(info, chain)[state.definition]
    if not state.not_private:
        check_ceiling(passes, ceiling, dataset, counting, location=location)
    approval = usable_approval(
        db, info, chain, state, dataset, passes, dt.datetime.now(dt.UTC), reference
    )
    accepted_text = None
    if approval is None:
        if production:
            held = holders(counting, location)
            raise ApprovalRequired(
                f"no approval in the privacy ledger covers this spend on dataset "
                f"{dataset[:16]}: "
                + "; ".join(
                    f"{_spend_line(p)} {unit(state.definition)} (ceiling {decimal_text(ceiling)})"
                    for p in passes
                )
                + (
                    ". The earlier spend includes " + "; ".join(h.line for h in held)
                    if held
                    else ""
                )
                + ". Nothing was drawn",
                remedy or Remedy(),
                passes,
                ceilings(info, chain),
                dataset,
            )
        accepted_text = _accepted_totals(location, dataset, passes, accepted, remedy, counting)
    signers = (
        sorted(k.fingerprint for k in approval.signers(chain.in_force)[0])
        if approval is not None
        else []
    )
    payload = {
        "passes": [p.exact() for p in passes],
        "approval": None if approval is None else approval.approval_id,
        "approval_digest": None if approval is None else approval.digest,
        "approved_by": signers,
        "charter": None if chain.in_force is None else chain.in_force.digest,
        "accepted": accepted_text,
        "files": dict(files or {}),
        "reference": dict(reference or {}),
        "input_stats": dict(input_stats or {}),
        "ceiling": fraction_text(ceiling),
        "production": production,  # a spend without approval shows why
    }
    db.append(
        "spend-authorized",
        signed(payload, signer, "spend-authorized", run_id, dataset),
        run_id=run_id,
        dataset=dataset,
    )
    return passes


def _check_signed_authorization(db: LedgerTransaction, chain: CharterChain, run_id: str) -> None:
    """A resume trusts its run's authorization only when a run key of the charter signed it: a
    ``spend-authorized`` entry written into the database by hand (to resume a run "already
    authorized" under an approval another run spent) is refused."""
    if chain.in_force is None:
        return
    found = db.entries(run_id=run_id, kinds=("spend-authorized",))
    if found and found[0].seq > chain.since and not entry_signer(found[0], chain.runners):
        raise LedgerRefused(
            f"the ledger's record that run {run_id} was authorized (entry {found[0].seq}) is "
            "not signed by a run key of the charter: it was written around the pipeline "
            "(forged?). Nothing was drawn; `das ledger verify` names it. Start a new run",
            Remedy(
                command="report it to the approvers; start a new run (a new run id), which "
                "asks for its own approval"
            ),
        )


def _accepted_totals(
    location: str,
    dataset: str,
    passes: list[PassSpend],
    accepted: Mapping[str, Budget] | None,
    remedy: Remedy | None,
    counting: Sequence[RunState],
) -> dict[str, str]:
    """Outside production, without an approval: a dataset with recorded spend needs the
    operator to name each new cumulative total exactly (refused otherwise). When an unfinished
    run holds part of that spend, resuming it is the way out, not a second spend."""
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
    if not problems:
        return {k: fraction_text(v) for k, v in accepted.items()}
    totals = {p.pass_name: decimal_text(p.cumulative) for p in passes}
    spend_twice = Remedy(
        cli="accept the new total with "
        + " ".join(f"--cumulative-total {k}={v}" for k, v in totals.items()),
        deployment="start a new custom run with the parameter cumulative_total = "
        + f"{dict(totals)}".replace("'", '"'),
    )
    held = holders(counting, location)
    message = (
        f"privacy ledger {location}: dataset {dataset[:16]} already has "
        "recorded spend. " + "; ".join(problems) + "."
    )
    if held:
        raise CumulativeSpendRequired(
            message
            + " The earlier spend includes "
            + "; ".join(h.line for h in held)
            + ". Nothing was drawn.",
            Remedy(command=held[0].way + " (a new cumulative total would spend the budget twice)"),
        )
    raise CumulativeSpendRequired(message + " Nothing was drawn.", remedy or spend_twice)


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
