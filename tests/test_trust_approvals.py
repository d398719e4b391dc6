"""The ledger's charter and approvals, in process (das.trust.ledger: charter, approvals,
ledger): an approval counts once a quorum of the charter in force signed it, a rejected one
never does, a new charter is in force only under a quorum of the one before, and a charter that
could not work is refused where it is proposed. Fast: SQLite ledgers and ed25519 keys."""

from __future__ import annotations

import copy
import hashlib
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from certified import SEAL, make_chartered_ledger

from das.trust import (
    APPROVAL_NAMESPACE,
    CHARTER_NAMESPACE,
    LedgerRefused,
    PrivacyLedger,
    approval_statement,
    canonical_json,
    charter_statement,
    generate_key,
    ledger_ceilings,
    sign,
    statement_problems,
    statement_text,
)

FILES = {"config.json": "ab" * 32, "race-codes.txt": "cd" * 32}
DIGEST = hashlib.sha256("".join(f"{n}:{FILES[n]}\n" for n in sorted(FILES)).encode()).hexdigest()


def _statement(ledger: PrivacyLedger, parameters: dict[str, Any] | None = None) -> dict:
    dataset = ledger.dataset_id(uuid.uuid4().hex)
    budgets = {"US": Fraction("4.944")}
    planned, ceiling, chain, _ = ledger.plan_spend("safetab-p", dataset, DIGEST, "zcdp", budgets)
    return approval_statement(
        ledger_id=ledger.info().ledger_id, charter=chain.in_force, product="safetab-p",
        dataset=dataset, parameters=parameters or {"digest": DIGEST, "files": FILES},
        definition="zcdp", passes=planned, ceiling=ceiling, note="tables\nof 2030",
        requested_by="operator",
    )  # fmt: skip


def _signed(statement: dict, key: Path) -> str:
    return sign(canonical_json(statement), APPROVAL_NAMESPACE, key)


def test_an_approval_counts_once_a_quorum_of_the_charter_signed_it(tmp_path: Path) -> None:
    ledger, keys, trusted, _ = make_chartered_ledger(tmp_path)
    statement = _statement(ledger)
    approval = statement["approval_id"]
    ledger.record_approval(statement, [_signed(statement, keys[0])])
    assert ledger.approval_agreed(approval) == (False, [trusted[0]], 2)
    assert not ledger.has_open_approval("safetab-p", DIGEST)
    with pytest.raises(LedgerRefused, match="signed it already"):
        ledger.sign_approval(approval, _signed(statement, keys[0]))
    stranger = tmp_path / "stranger"
    generate_key(stranger, "stranger")
    with pytest.raises(LedgerRefused, match="the signature does not count"):
        ledger.sign_approval(approval, _signed(statement, stranger))
    with pytest.raises(LedgerRefused, match="no approval nope"):
        ledger.sign_approval("nope", _signed(statement, keys[1]))
    ledger.sign_approval(approval, _signed(statement, keys[1]))
    agreed, signers, needed = ledger.approval_agreed(approval)
    assert (agreed, set(signers), needed) == (True, set(trusted), 2)
    assert ledger.has_open_approval("safetab-p", DIGEST)
    assert not ledger.has_open_approval("safetab-p", SEAL)  # other parameters
    (listed,) = ledger.approvals()
    assert (listed["agreed"], listed["quorum"], listed["used_by"]) == (True, 2, None)
    assert len(listed["signed_by"]) == 2 and listed["signatures_not_counted"] == []
    assert ledger.approval_holders("safetab-p", DIGEST) == []


def test_a_rejected_approval_authorizes_nothing(tmp_path: Path) -> None:
    ledger, keys, _, _ = make_chartered_ledger(tmp_path)
    statement = _statement(ledger)
    approval = statement["approval_id"]
    ledger.record_approval(statement, [_signed(statement, keys[0])])
    ledger.reject_approval(approval, "wrong config", by="approver-2", via="das ledger reject")
    with pytest.raises(LedgerRefused, match="was rejected"):
        ledger.sign_approval(approval, _signed(statement, keys[1]))
    (listed,) = ledger.approvals()
    assert listed["rejection"]["reason"] == "wrong config" and not listed["agreed"]
    with pytest.raises(LedgerRefused, match="no approval nope"):
        ledger.reject_approval("nope", "why", by="x", via="y")


def test_what_an_approver_reads_is_what_is_signed_and_a_forged_statement_is_named(
    tmp_path: Path,
) -> None:
    ledger, _, _, _ = make_chartered_ledger(tmp_path)
    statement = _statement(ledger)
    assert statement_problems(statement) == []
    text = statement_text(statement)
    assert "pass US: earlier 0 + this run 4.944 = cumulative 4.944 (ceiling 10)" in text
    assert "note: tables\\nof 2030" in text  # typed text on one line, escaped
    assert f"race-codes.txt  sha256 {'cd' * 8}" in text
    forged = {
        "another digest": ("parameters", {"digest": SEAL, "files": FILES}, "digest is not"),
        "no file": ("parameters", {"digest": DIGEST, "files": {}}, "no sealed parameter file"),
        "a path": (
            "parameters",
            {"digest": DIGEST, "files": {"../x": "ab" * 32}},
            "is not a plain name",
        ),
        "no dataset id": ("dataset", "records.txt", "not a dataset id"),
        "valid for years": ("expires", "2999-01-01T00:00:00+00:00", "valid for more than"),
        "another type": ("type", "something-else", "not a das"),
        "unparsable totals": ("passes", {"US": {"prior": "x"}}, "do not parse"),
    }
    for name, (field, value, reason) in forged.items():
        changed = copy.deepcopy(statement)
        changed[field] = value
        assert any(reason in p for p in statement_problems(changed)), name


def _rotation(ledger: PrivacyLedger, trusted: list, run_key: Path, **changes: Any) -> dict:
    from das.trust import public_key_of

    statement = charter_statement(
        ledger_id=ledger.info().ledger_id, approvers=changes.pop("approvers", trusted),
        quorum=changes.pop("quorum", 1), runners=changes.pop("runners", [public_key_of(run_key)]),
        ceilings=ledger_ceilings(None), previous=ledger.charter_chain().in_force,
    )  # fmt: skip
    statement.update(changes)
    return statement


def test_a_new_charter_is_in_force_only_under_a_quorum_of_the_one_before(tmp_path: Path):
    ledger, keys, trusted, run_key = make_chartered_ledger(tmp_path)
    newcomer = tmp_path / "approver-3"
    added = generate_key(newcomer, "approver-3")
    second = _rotation(ledger, trusted, run_key, approvers=[*trusted, added])
    message = canonical_json(second)
    with pytest.raises(LedgerRefused, match="the proposer's signature does not count"):
        ledger.propose_charter(second, sign(message, CHARTER_NAMESPACE, newcomer))
    proposed = ledger.propose_charter(second, sign(message, CHARTER_NAMESPACE, keys[0]))
    chain = ledger.charter_chain()
    assert (chain.in_force.version, chain.pending.digest) == (1, proposed.digest)
    assert "a spend needs 1 of 3" in proposed.summary()
    assert "continues charter" in proposed.summary()
    with pytest.raises(LedgerRefused, match="awaits its signatures"):
        ledger.propose_charter(second, sign(message, CHARTER_NAMESPACE, keys[0]))
    with pytest.raises(LedgerRefused, match="does not count"):
        ledger.sign_charter(proposed.digest, sign(message, CHARTER_NAMESPACE, keys[0]))
    with pytest.raises(LedgerRefused, match="does not count"):  # not an approver of version 1
        ledger.sign_charter(proposed.digest, sign(message, CHARTER_NAMESPACE, newcomer))
    ledger.sign_charter(proposed.digest, sign(message, CHARTER_NAMESPACE, keys[1]))
    chain = ledger.charter_chain()
    assert (chain.in_force.version, chain.in_force.quorum, chain.pending) == (2, 1, None)
    first = chain.charters[0]
    with pytest.raises(LedgerRefused, match="in force or was superseded"):
        ledger.sign_charter(first.digest, sign(first.message, CHARTER_NAMESPACE, keys[0]))
    with pytest.raises(LedgerRefused, match="no charter"):
        ledger.sign_charter("f" * 16, sign(message, CHARTER_NAMESPACE, keys[0]))


def test_a_charter_that_could_not_work_is_refused_where_it_is_proposed(tmp_path: Path) -> None:
    ledger, keys, trusted, run_key = make_chartered_ledger(tmp_path)
    refusals = {
        "quorum 0": ({"quorum": 0}, "a quorum of 0 is not between 1 and 2"),
        "quorum above the approvers": ({"quorum": 3}, "a quorum of 3 is not between 1 and 2"),
        "an approver runs": ({"runners": [trusted[0]]}, "cannot both approve spends and run"),
        "a twice-listed approver": (
            {"approvers": [trusted[0], trusted[0]]},
            "an approver's key is listed twice",
        ),
        "another ledger": ({"ledger_id": "another"}, "it names ledger another"),
        "a skipped version": ({"version": 3}, "it must continue the charter in force"),
        "a ceiling above the maximum": ({"ceilings": {"zcdp": "11"}}, "is outside (0, 10]"),
        "an unknown definition": ({"ceilings": {"renyi": "1"}}, "unknown privacy definition"),
    }
    for name, (changes, reason) in refusals.items():
        statement = _rotation(ledger, trusted, run_key, **changes)
        signature = sign(canonical_json(statement), CHARTER_NAMESPACE, keys[0])
        with pytest.raises(LedgerRefused, match="this charter cannot be proposed") as caught:
            ledger.propose_charter(statement, signature)
        assert reason in str(caught.value), name
    assert ledger.charter_chain().pending is None
