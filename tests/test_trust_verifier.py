"""The outsider's verifier (das.trust.verifier) on releases certified in process: a release made
under a quorum's approval is proven, and each way of forging, editing or re-using one is named.

Fast: one chartered SQLite ledger for the module (tests/certified.py), and per test a release
folder of three small files certified with ed25519 keys in process.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from certified import TABLE, Certified, copy_release, make_certified

from das.trust import AUDIT_FILE, CERTIFICATE, MANIFEST, generate_key, verify_release
from das.trust.verifier import verify_releases


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Certified:
    return make_certified(tmp_path_factory.mktemp("certified"))


def _problems(made: Certified, release: Path) -> str:
    proof = verify_release(release, root=made.root())
    assert not proof.proven, "a forged or edited release was proven"
    return "\n".join(proof.problems)


def test_a_release_made_under_a_quorums_approval_is_proven(made: Certified, tmp_path: Path):
    root = made.root()
    proof = verify_release(made.release(tmp_path / "release"), root=root)
    assert proof.problems == []
    assert proof.facts["trust_root"] == root.digest
    assert proof.facts["run_id"] == "run-1"
    assert proof.facts["charter"]["quorum"] == 2
    assert len(proof.facts["approved_by"]) == 2
    assert proof.facts["parameters"] == made.predicate["parameters"]["digest"]


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _edit_envelope(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def change(release: Path) -> None:
        envelope = json.loads((release / CERTIFICATE).read_text())
        edit(envelope)
        (release / CERTIFICATE).write_text(json.dumps(envelope))

    return change


def _payload_quorum_zero(envelope: dict[str, Any]) -> None:
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["charters"][0]["statement"]["quorum"] = 0
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()


# What anyone holding the release (or write access to its folder) can do after publication.
AFTER_PUBLICATION: dict[str, tuple[Callable[[Path], None], str]] = {
    "a table edited": (
        lambda r: _write(r / TABLE, "1|USA|0001|43\n"),
        f"{TABLE} differs from the certified file",
    ),
    "a file added": (
        lambda r: _write(r / "records.txt", "1|2|3\n"),
        "records.txt is in the release but not certified",
    ),
    "a table removed": (lambda r: (r / TABLE).unlink(), f"{TABLE} is certified but missing"),
    "a folder added": (lambda r: (r / "state").mkdir(), "state/ is a folder no certified file"),
    "a link added": (
        lambda r: (r / "link").symlink_to(r / TABLE),
        "link is not a regular file",
    ),
    "the certificate removed": (lambda r: (r / CERTIFICATE).unlink(), "carries no proof"),
    "the certificate not JSON": (
        lambda r: _write(r / CERTIFICATE, "{"),
        "is not readable strict JSON",
    ),
    "a field added to the envelope": (
        _edit_envelope(lambda e: e.update(extra=1)),
        "exact form",
    ),
    "a second signature": (
        _edit_envelope(lambda e: e["signatures"].append(dict(e["signatures"][0]))),
        "exactly one signature",
    ),
    "the charter's quorum set to 0 in the payload": (
        _edit_envelope(_payload_quorum_zero),
        "not a valid charter: a quorum of 0 is not between 1 and 2",
    ),
    "the MANIFEST unreadable": (lambda r: _write(r / MANIFEST, "not json"), "differs from"),
    "the audit unreadable": (lambda r: _write(r / AUDIT_FILE, "not json"), "no readable"),
}


@pytest.mark.parametrize("change", sorted(AFTER_PUBLICATION))
def test_a_release_changed_after_publication_is_not_proven(
    made: Certified, tmp_path: Path, change: str
) -> None:
    release = made.release(tmp_path / "release")
    edit, reason = AFTER_PUBLICATION[change]
    edit(release)
    assert reason in _problems(made, release)


def _predicate(edit: Callable[[dict[str, Any]], None]) -> Callable[[Certified], dict[str, Any]]:
    def changed(made: Certified) -> dict[str, Any]:
        predicate = copy.deepcopy(made.predicate)
        edit(predicate)
        return predicate

    return changed


def _approval(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda p: edit(p["approvals"][0])


# What a run-key holder could certify (the run key signs what it is given): each is refused
# by what the approvers signed, not by the run key's signature.
CERTIFIED_WRONGLY: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "one approver's signature dropped": (
        _approval(lambda a: a["signatures"].pop()),
        "is signed by 1 trusted approver(s) of the charter; it needs 2",
    ),
    "no approval": (lambda p: p.update(approvals=[]), "nobody approved this spend"),
    "no charter": (lambda p: p.update(charters=[]), "was not made under one"),
    "other parameters": (
        lambda p: p["parameters"].update(digest="0" * 64),
        "other parameters",
    ),
    "another dataset": (lambda p: p.update(dataset="another"), "the approval's dataset"),
    "more spent than approved": (
        lambda p: p["spend"][0].update(this_run="5"),
        "the release spent 5",
    ),
    "spent after the approval expired": (
        lambda p: p.update(authorized_at="9999-01-01T00:00:00+00:00"),
        "was not made before the approval expired",
    ),
    "labelled not private": (lambda p: p.update(private=False), "the release is not private"),
    "a marker": (lambda p: p.update(markers=["SEEDED"]), "not private (SEEDED)"),
    "another ledger": (lambda p: p.update(ledger={"id": "other"}), "the charter governs ledger"),
}


@pytest.mark.parametrize("change", sorted(CERTIFIED_WRONGLY))
def test_a_certificate_of_what_the_approvers_did_not_sign_is_not_proven(
    made: Certified, tmp_path: Path, change: str
) -> None:
    edit, reason = CERTIFIED_WRONGLY[change]
    release = made.release(tmp_path / "release", predicate=_predicate(edit)(made))
    assert reason in _problems(made, release)


def test_a_certificate_by_a_key_the_charter_does_not_name_is_not_proven(
    made: Certified, tmp_path: Path
) -> None:
    other = generate_key(tmp_path / "other-run-key", "not a runner")
    assert other not in made.trusted
    release = made.release(tmp_path / "release", key=tmp_path / "other-run-key")
    assert "is not signed by a run key of the charter" in _problems(made, release)


def test_keys_the_agency_does_not_publish_prove_nothing(made: Certified, tmp_path: Path):
    release = made.release(tmp_path / "release")
    strangers = [generate_key(tmp_path / f"stranger-{i}", "stranger") for i in range(2)]
    proof = verify_release(release, strangers, root=made.root())
    assert "is signed by 0 of its own approvers; it needs 2" in "\n".join(proof.problems)
    assert "(keys it counts on that are not trusted: " in "\n".join(proof.problems)


def test_a_folder_that_is_no_release_is_not_proven(made: Certified, tmp_path: Path) -> None:
    assert "is not a folder" in _problems(made, tmp_path / "absent")


def test_one_approval_spent_by_two_releases_of_other_content_fails_both(
    made: Certified, tmp_path: Path
) -> None:
    first = made.release(tmp_path / "first")
    second = made.release(tmp_path / "second", table=b"1|USA|0001|7\n")
    copy = copy_release(first, tmp_path / "copy")
    roots = [made.root()]
    proofs = verify_releases([first, second, copy], roots=roots)
    assert [p.proven for p in proofs] == [False, False, False]
    assert all("one approval authorizes one release" in "\n".join(p.problems) for p in proofs)
    alone = verify_releases([first, copy], roots=roots)  # two copies of one release
    assert [p.problems for p in alone] == [[], []]


def test_releases_of_a_ledger_not_published_are_not_proven(made: Certified, tmp_path: Path):
    release = made.release(tmp_path / "release")
    roots = [made.root()]
    (proof,) = verify_releases([release], ledger_ids=["the-production-ledger"], roots=roots)
    assert "not in the published production ledger(s) the-production-ledger" in proof.problems[0]
    ledger_ids = [made.predicate["ledger"]["id"]]
    (proof,) = verify_releases([release], made.trusted, ledger_ids, roots=roots)
    assert proof.proven
