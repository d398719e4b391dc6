"""The standard-tools procedure of docs/how-to/verify-a-release.md, run exactly as printed
(tests/outsider.py): it proves a release certified by the pipeline's own code (the ledger,
the approvals, the certificate; a real `das run` release is proven by it in
tests/test_signed_approvals.py) and refuses the forgeries of issue 38 — a charter of quorum 0
signed by no one, one approver's own charter version 1 — a file changed, an approval one
signature short, a root that is not the published one; and it follows a rotation forward from
an older root, as `das release verify` does.

Integration: it runs bash, ssh-keygen and openssl (about 1 s of CPU per check).
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from certified import (
    TABLE,
    Certified,
    certified_run,
    forge,
    make_certified,
    make_chartered_ledger,
    rotate,
)
from outsider import outsider_check

from das.trust import generate_key, root_document

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (shutil.which("ssh-keygen") and shutil.which("openssl")), reason="no OpenSSH/OpenSSL"
    ),
]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Certified:
    return make_certified(tmp_path_factory.mktemp("production"))


@pytest.fixture(scope="module")
def root(made: Certified, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("published") / "trust-root.json"
    path.write_bytes(root_document(made.ledger.charter_chain().chain))
    return path


def test_the_procedure_proves_a_release_the_pipeline_certified(
    made: Certified, root: Path, tmp_path: Path
) -> None:
    proven, output = outsider_check(root, made.release(tmp_path / "release"))
    assert proven, output
    assert "under charter version 1" in output


def test_the_procedure_refuses_the_forgeries(made: Certified, root: Path, tmp_path: Path) -> None:
    genuine = made.release(tmp_path / "genuine")
    mallory = generate_key(tmp_path / "mallory", "mallory")
    alice_key, alice = made.approvers[0], made.trusted[0]
    forgeries = {
        # finding 1: no key at all
        "quorum 0": forge(genuine, tmp_path / "q0", tmp_path / "mallory",
                          {"quorum": 0, "runners": [mallory.to_dict()]}),
        # finding 2: one approver's own charter version 1
        "one approver": forge(
            genuine, tmp_path / "alone", tmp_path / "mallory",
            {"approvers": [alice.to_dict()], "quorum": 1, "runners": [mallory.to_dict()]},
            signers=(alice_key,),
        ),
    }  # fmt: skip
    for name, release in forgeries.items():
        proven, output = outsider_check(root, release)
        assert not proven, name
        assert "NOT PROVEN: charter version 1 is not the trust root's" in output, name
    changed = shutil.copytree(genuine, tmp_path / "changed", symlinks=True)
    (changed / TABLE).write_text("1|USA|0001|43\n")
    proven, output = outsider_check(root, changed)
    assert not proven and f"{TABLE}: FAILED" in output  # sha256sum names it
    assert output.endswith("NOT PROVEN: a file is not the certified one\n")
    added = shutil.copytree(genuine, tmp_path / "added", symlinks=True)
    (added / "records.txt").write_text("1|2|3\n")
    assert outsider_check(root, added) == (False, "NOT PROVEN: a file added or missing\n")
    proven, output = outsider_check(root, genuine, digest="0" * 64)
    assert not proven and "not the published trust root" in output


def test_attack2_the_procedure_refuses_a_folder_no_certified_file_is_in(
    made: Certified, root: Path, tmp_path: Path
) -> None:
    """Issue 38's second pass, B4: the procedure proved a release with an extra empty folder,
    whose name can carry data (`das release verify` refuses it)."""
    genuine = made.release(tmp_path / "genuine")
    for folder in ("true-count-TRACT-0101-is-17", "t1/leak"):  # at the top, in a table's
        empty = shutil.copytree(genuine, tmp_path / f"empty-{folder[:2]}", symlinks=True)
        (empty / folder).mkdir()
        assert outsider_check(root, empty) == (
            False,
            "NOT PROVEN: a folder no certified file is in\n",
        ), folder


def test_the_procedure_counts_distinct_approvers(
    made: Certified, root: Path, tmp_path: Path
) -> None:
    """An approval one signature short of the quorum — one approver's signature given twice —
    is refused."""
    predicate = copy.deepcopy(made.predicate)
    signatures = predicate["approvals"][0]["signatures"]
    signatures[1] = signatures[0]
    release = made.release(tmp_path / "release", predicate=predicate)
    proven, output = outsider_check(root, release)
    assert (proven, output) == (False, "NOT PROVEN: the approval is signed by 1 approvers; it "
                                "needs 2\n")  # fmt: skip


def test_the_procedure_follows_a_rotation_forward_from_an_older_root(tmp_path: Path) -> None:
    ledger, keys, trusted, run_key = make_chartered_ledger(tmp_path, approvers=3, quorum=2)
    old = tmp_path / "root-v1.json"
    old.write_bytes(root_document(ledger.charter_chain().chain))
    rotate(ledger, keys[1:3], approvers=trusted[1:], quorum=2)  # version 2: key 1 retired
    run = certified_run(ledger, keys, keys[1:3], trusted, run_key, "run-2")
    proven, output = outsider_check(old, run.release(tmp_path / "release"))
    assert proven, output
    assert "under charter version 2" in output
