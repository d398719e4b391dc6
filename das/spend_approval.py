"""What an approver does: read the spend a run would make, see it, and sign exactly that.

`das ledger approve` (and the local profile of `das deploy`) come here. The spend is computed
from the same inputs a run reads: the sealed parameters (config, the spec files by name, the
coterminous file) and the records (read once, to fingerprint them: the dataset's id in the
ledger). The approver's statement (:mod:`das.trust.ledger.approvals`) is the open one another
approver started for the same spend, or a new one; the approver sees it — and what their own
journal (:mod:`das.trust.journal`) knows of these records and this ledger — before
their key signs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.products import release_product
from das.refusal import RunRefused
from das.runs.seal import SealedParameters, seal_files
from das.runs.start import check_inputs_regular
from das.trust import (
    APPROVAL_NAMESPACE,
    Approval,
    PassSpend,
    PrivacyLedger,
    approval_statement,
    who,
)


def input_fingerprints(product: str, data: Path) -> tuple[str, dict[str, str]]:
    """The canonical fingerprint of a dataset's confidential records (one read of each) and
    those of its public reference files (SafeTab-P's GRF-C), by name."""
    from das.io.fingerprint import combine_fingerprints, fingerprint_file
    from das.io.phsafe import PHSAFE_INPUTS
    from das.io.safetab_p import GRF_C, PERSON_RECORDS

    specs = {spec.name: spec for spec in (PERSON_RECORDS, GRF_C, *PHSAFE_INPUTS)}
    inputs = release_product(product).run_inputs(Path("config.json"), data)
    check_inputs_regular(inputs)  # a FIFO or device is refused by name, never opened
    names = release_product(product).confidential
    missing = sorted(set(names) - set(inputs.confidential))
    if missing:
        raise ValueError(f"{data}: no {', '.join(missing)} input (.txt/.csv or .parquet)")
    records = combine_fingerprints(
        {name: fingerprint_file(inputs.confidential[name], specs[name]) for name in names}
    )
    reference = {
        name: fingerprint_file(path, specs[name]) for name, path in sorted(inputs.reference.items())
    }
    return records, reference


def records_fingerprint(product: str, data: Path) -> str:
    """The canonical fingerprint of a dataset's confidential records (one read of each)."""
    return input_fingerprints(product, data)[0]


def sealed_spend(
    product: str, config: Path, data: Path, coterminous: Path | None = None
) -> tuple[SealedParameters, Any]:
    """The sealed parameters a run of them would read, and their plan (its passes' totals)."""
    released = release_product(product)
    sealed = seal_files(released.run_inputs(config, data, coterminous).parameters)
    parameters = released.parse_parameters(sealed)
    if parameters is None:
        raise RunRefused(f"{config}: the parameters cannot be parsed (run `das validate`)")
    return sealed, parameters.run_plan()


@dataclass(frozen=True)
class Proposal:
    """The statement an approver is about to sign, and what they are shown about it."""

    statement: dict[str, Any]
    existing: Approval | None  # another approver's open statement of the same spend
    passes: list[PassSpend]
    fingerprint: str | None  # the records' (to key the approver's journal); None: not read


# What an approver's own statement and one another approver started must agree on before the
# second signs the first (the rest — its id, times, note, who asked — is the first's, and shown).
SUBSTANCE = ("type", "ledger_id", "charter", "product", "dataset", "parameters", "reference",
             "definition", "passes", "ceiling")  # fmt: skip


def substance(statement: dict[str, Any]) -> dict[str, Any]:
    return {key: statement.get(key) for key in SUBSTANCE}


def propose(
    ledger: PrivacyLedger,
    product: str,
    config: Path,
    data: Path,
    *,
    coterminous: Path | None = None,
    note: str = "",
    valid_days: int = 7,
) -> Proposal:
    """The spend of ``config`` (and its spec and coterminous files) on the records in ``data``:
    an open statement another approver started that says exactly what this approver's own
    would (the same ledger, charter, records, reference files, sealed parameter files, passes
    and ceiling) and expires no later than this approver asked, or a new one. Refuses an
    ``Infinity`` budget and a spend above the ceiling."""
    sealed, plan = sealed_spend(product, config, data, coterminous)
    info = ledger.require_intact()
    fingerprint, reference = input_fingerprints(product, data)
    dataset = ledger.dataset_id(fingerprint)
    reference_ids = {name: ledger.dataset_id(digest) for name, digest in reference.items()}
    passes, ceiling, chain, open_ = ledger.plan_spend(
        product, dataset, sealed.digest, plan.definition, plan.pass_totals(), reference_ids
    )
    statement = approval_statement(
        ledger_id=info.ledger_id,
        charter=chain.in_force,
        product=product,
        dataset=dataset,
        parameters={"digest": sealed.digest, "files": sealed.hashes()},
        definition=plan.definition,
        passes=passes,
        ceiling=ceiling,
        note=note,
        requested_by=f"das ledger approve by {who()}",
        valid_days=valid_days,
        reference=reference_ids,
    )
    mine = substance(statement)
    for existing in open_:
        if substance(existing.statement) == mine and existing.expires <= _time(statement):
            return Proposal(existing.statement, existing, passes, fingerprint)
    return Proposal(statement, None, passes, fingerprint)


def _time(statement: dict[str, Any]) -> Any:
    import datetime as dt

    return dt.datetime.fromisoformat(str(statement["expires"]))


def sign_proposal(ledger: PrivacyLedger, proposal: Proposal, key: Path | None) -> Approval:
    """Sign the statement with ``key`` (an approver's OpenSSH key, or its ``.pub`` when the
    private half is in ssh-agent) and record it: a signature added to the open statement, or
    the new statement with it. Without ``key`` (a ledger with no charter) the statement is
    recorded unsigned."""
    from das.trust import canonical_json, sign

    if key is None:
        return ledger.record_approval(proposal.statement)
    signature = sign(canonical_json(proposal.statement), APPROVAL_NAMESPACE, key)
    if proposal.existing is not None:
        return ledger.sign_approval(proposal.existing.approval_id, signature)
    return ledger.record_approval(proposal.statement, [signature])
