"""The approver's journal (das.trust.journal), in process: what an approver is told before
they sign again — a second ledger, a history cut back, the same records approved elsewhere —
and that the journal itself names no records (a keyed mark) and is private to its owner."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from das.trust import ApproverJournal, generate_key

PASSES = {"US": {"prior": "1", "this_run": "1/2", "cumulative": "3/2"}}


@pytest.fixture
def journal(tmp_path: Path) -> ApproverJournal:
    key = generate_key(tmp_path / "keys" / "alice", "alice")
    return ApproverJournal(key, tmp_path / "journal")


def _approval(approval_id: str) -> dict:
    return {"approval_id": approval_id, "product": "safetab-p", "passes": PASSES}


def test_a_first_charter_a_continued_one_and_a_second_ledger(journal: ApproverJournal) -> None:
    info, needs = journal.charter_history("ledger-a", 1)
    assert (info, needs) == (["this key has signed no charter before (its first ledger)"], [])
    journal.record_charter("ledger-a", "d1", 1)
    info, needs = journal.charter_history("ledger-a", 2)
    assert needs == [] and "charter version(s) 1 of this ledger" in info[0]
    info, needs = journal.charter_history("ledger-b", 1)
    assert info == [] and "this is a SECOND ledger" in needs[0] and "ledger-a" in needs[0]


def test_an_approval_the_ledger_no_longer_holds_needs_new_history(journal: ApproverJournal):
    mark = journal.records_mark("fingerprint-1")
    journal.record_approval("ledger-a", mark, _approval("ap-1"))
    _, needs = journal.approval_history("ledger-a", mark, PASSES, held={"ap-1"})
    assert needs == []
    _, needs = journal.approval_history("ledger-a", mark, PASSES, held=set())
    assert len(needs) == 1 and "no longer holds approval ap-1" in needs[0]


def test_the_same_records_approved_in_another_ledger_need_new_history(
    journal: ApproverJournal,
) -> None:
    mark = journal.records_mark("fingerprint-1")
    journal.record_approval("ledger-a", mark, _approval("ap-1"))
    info, needs = journal.approval_history("ledger-b", mark, PASSES, held=set())
    assert len(needs) == 1 and "in ANOTHER ledger, ledger-a" in needs[0]
    assert "pass US up to 1.5" in needs[0]
    info, needs = journal.approval_history("ledger-a", mark, PASSES, held={"ap-1"})
    assert needs == [] and "you approved up to 1.5 on these records" in info[0]
    info, _ = journal.approval_history("ledger-a", journal.records_mark("other"), PASSES, set())
    assert info == ["you have approved no spend on these records before"]
    info, _ = journal.approval_history("ledger-a", None, PASSES, held={"ap-1"})
    assert "the records were not read here" in info[0]


def test_the_journal_names_records_by_a_keyed_mark_and_is_its_owners_alone(
    journal: ApproverJournal, tmp_path: Path
) -> None:
    mark = journal.records_mark("fingerprint-1")
    assert mark == journal.records_mark("fingerprint-1") != journal.records_mark("fingerprint-2")
    other = ApproverJournal(journal.key, tmp_path / "another-account")
    assert other.records_mark("fingerprint-1") != mark  # keyed: not the fingerprint's hash
    journal.record_approval("ledger-a", mark, _approval("ap-1"))
    assert "fingerprint-1" not in journal.path.read_text()
    assert stat.S_IMODE(journal.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((journal.folder / "journal.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.folder.stat().st_mode) == 0o700


def test_a_line_cut_by_a_crash_does_not_silence_the_rest(journal: ApproverJournal) -> None:
    journal.record_charter("ledger-a", "d1", 1)
    with journal.path.open("a") as handle:
        handle.write('{"kind": "charter", "ledger_')
    journal.record_charter("ledger-a", "d2", 2)
    assert [e["charter"] for e in journal.entries()] == ["d1", "d2"]
