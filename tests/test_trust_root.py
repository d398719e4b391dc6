"""A proof checked against a trust root the verifier holds (issue 38): the attacker holds one
approver key of a quorum of two, can write the ledger and the run folders, and holds every
published release. Each numbered finding has its test here, written so that it runs on the
code before this change too (the new names are reached only after the assertion that failed
there; each fails on ea048f5, main when this was written — the issue was found on 0e86879,
whose trust code ea048f5 only moved): 1, a charter of quorum 0 signed by no one; 2, one
approver's own "charter version 1" (forged in a copied release, or made with the stock `das
ledger init --quorum 1`); 3, the state root inside a published release; 4, restricted
allowed-signers lines (here and in tests/test_signing.py); 5, a repeated JSON key in a
certificate and a spent approval row appended again. Then the root itself: written and read
whole, a rotation followed forward from an older root, a newer root checked against the held
one, the run's own pin, and a release certified before this change.

Fast: ledgers and releases made in process (tests/certified.py), ed25519 keys, no subprocess.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from certified import (
    Certified,
    certified_run,
    copy_release,
    forge,
    make_certified,
    make_chartered_ledger,
    rotate,
)

from das.cli import main as das_main
from das.refusal import RunRefused
from das.trust import (
    CERTIFICATE,
    CHARTER_NAMESPACE,
    MANIFEST,
    Charter,
    LedgerRefused,
    LedgerStore,
    PrivacyLedger,
    canonical_json,
    certify,
    charter_statement,
    generate_key,
    sign,
    verify_releases,
)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Certified:
    """The agency's production ledger (two approvers, a quorum of two) and run-1's spend."""
    return make_certified(tmp_path_factory.mktemp("production"))


def _text(proof: Any) -> str:
    assert not proof.proven, "a forgery was proven"
    return "\n".join(proof.problems)


def _root_file(made: Certified, path: Path) -> Path:
    assert das_main(["ledger", "trust-root", "--ledger", str(made.ledger.store.path.parent),
                     "--output", str(path)]) == 0  # fmt: skip
    return path


# -- 1: quorum 0 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("quorum", [0, -1, "0", -(10**400)], ids=["0", "-1", "'0'", "-10**400"])
def test_finding_1_a_charter_of_quorum_zero_with_no_signature_proves_nothing(
    made: Certified, tmp_path: Path, quorum: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anyone, no approver key at all: a copied release with a count changed, its charter's
    quorum 0 (or -1, "0", -10**400), their own run key, no signature. Before this change `das
    release verify --trusted-keys approvers.pub --ledger-id <production id>` printed PROVEN."""
    mallory = generate_key(tmp_path / "mallory-run-key", "mallory")
    genuine = made.release(tmp_path / "genuine")
    forged = forge(genuine, tmp_path / "forged", tmp_path / "mallory-run-key",
                   {"quorum": quorum, "runners": [mallory.to_dict()]})  # fmt: skip
    ledger_id = made.predicate["ledger"]["id"]
    keys = tmp_path / "approvers.pub"
    keys.write_text("".join(key.openssh() + "\n" for key in made.trusted))
    capsys.readouterr()
    argv = ["release", "verify", str(forged), "--trusted-keys", str(keys), "--ledger-id", ledger_id]
    assert das_main(argv) == 1
    out = capsys.readouterr().out
    assert "NOT PROVEN" in out and "PROVEN —" not in out
    assert "not a valid charter" in out
    assert "a quorum of" in out or "its quorum '0' is not an integer" in out
    root = made.root()
    (proof,) = verify_releases([forged], roots=[root])
    assert "not a valid charter" in _text(proof)
    (proof,) = verify_releases([genuine], roots=[root])
    assert proof.proven, proof.problems


# -- 2: one approver's own charter ---------------------------------------------------------------


def test_finding_2_one_approvers_own_charter_version_1_proves_nothing(
    made: Certified, tmp_path: Path
) -> None:
    """The attacker holds approver-1's key (one of a quorum of two): a "charter version 1" of
    the production ledger id naming only that key, quorum 1, their own run key, signed by it,
    and the approval signed by it. PROVEN before this change with the agency's keys and ledger
    id; and verified with the genuine release, the two "charter version 1" passed together."""
    mallory = generate_key(tmp_path / "mallory-run-key", "mallory")
    alice_key, alice = made.approvers[0], made.trusted[0]
    genuine = made.release(tmp_path / "genuine")
    forged = forge(
        genuine, tmp_path / "forged", tmp_path / "mallory-run-key",
        {"approvers": [alice.to_dict()], "quorum": 1, "runners": [mallory.to_dict()]},
        signers=(alice_key,),
    )  # fmt: skip
    ledger_id = made.predicate["ledger"]["id"]
    (proof,) = verify_releases([forged], made.trusted, [ledger_id])
    assert "no trust root" in _text(proof)
    together = verify_releases([genuine, forged], made.trusted, [ledger_id])
    assert all("shows another charter version 1" in _text(p) for p in together)
    root = made.root()
    (proof,) = verify_releases([forged], made.trusted, [ledger_id], roots=[root])
    assert "charter version 1" in _text(proof) and "is not the trust root's" in _text(proof)
    # With the root pinned, a forgery beside the genuine release does not make it unprovable.
    genuine_proof, forged_proof = verify_releases([genuine, forged], roots=[root])
    assert genuine_proof.proven, genuine_proof.problems
    assert "is not the trust root's" in _text(forged_proof)


def test_finding_2_a_ledger_one_approver_charters_with_the_stock_cli_spends_and_proves_nothing(
    made: Certified, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`das ledger init --approvers approvers.pub --quorum 1 --key alice --new-history`: in
    force at once, and its release was PROVEN whenever --ledger-id was left out (before this
    change). Now nothing proves without the root, the root refuses it, and a run pinned to the
    root refuses the ledger before it spends."""
    keys = tmp_path / "approvers.pub"
    keys.write_text("".join(key.openssh() + "\n" for key in made.trusted))
    generate_key(tmp_path / "mallory-run-key", "mallory")  # and its .pub beside it
    argv = ["ledger", "init", "--ledger", str(tmp_path / "own"), "--approvers", str(keys),
            "--quorum", "1", "--key", str(made.approvers[0]), "--new-history",
            "--runner-key", str(tmp_path / "mallory-run-key.pub")]  # fmt: skip
    assert das_main(argv) == 0
    own = PrivacyLedger(LedgerStore.in_directory(tmp_path / "own"))
    assert own.charter_chain().in_force is not None  # one approver's ledger, in force at once
    run = certified_run(own, made.approvers, made.approvers[:1], made.trusted,
                        tmp_path / "mallory-run-key")  # fmt: skip
    release = run.release(tmp_path / "release")
    (proof,) = verify_releases([release], made.trusted)
    assert "no trust root" in _text(proof)
    root = made.root()
    (proof,) = verify_releases([release], made.trusted, roots=[root])
    assert f"the trust root pins ledger {root.ledger_id}" in _text(proof)
    # The pipeline's side: a run pinned to the agency's root refuses that ledger.
    from das.trust import check_pinned_roots

    pinned = _root_file(made, tmp_path / "trust-root.json")
    chain, info = own.charter_chain(), own.info()
    with pytest.raises(LedgerRefused, match="does not extend the trust root"):
        check_pinned_roots(
            info.ledger_id, chain.chain, info.location, {"DAS_TRUST_ROOT": str(pinned)}
        )
    # ... whatever the run's environment says, when the root lies beside its run key.
    service = tmp_path / "service"
    service.mkdir()
    generate_key(service / "run-key", "das run key")
    (service / "trust-root.json").write_bytes(pinned.read_bytes())
    link = tmp_path / "elsewhere" / "run-key"
    link.parent.mkdir()
    link.symlink_to(service / "run-key")  # a link to the key does not leave the pin behind
    with pytest.raises(LedgerRefused, match="pinned by the run key's folder"):
        check_pinned_roots(info.ledger_id, chain.chain, info.location, {"DAS_RUN_KEY": str(link)})
    production = made.ledger.charter_chain()
    check_pinned_roots(root.ledger_id, production.chain, "production", {"DAS_RUN_KEY": str(link)})


# -- 3: the state root in a published release ----------------------------------------------------


def test_finding_3_a_state_root_a_release_would_carry_out_is_refused_by_name(
    made: Certified, tmp_path: Path
) -> None:
    """`DAS_STATE_DIR=releases/first/state das run …` wrote the run's noise, spills and true
    cells into a published release (before this change): refused now, by name, before anything is
    written — at, under, through a link into, or beside a release, or under a work folder."""
    from das.runs.folder import RunFolder, check_output_place

    first = made.release(tmp_path / "releases" / "first")
    output = tmp_path / "out" / "second"
    (tmp_path / "link").symlink_to(first)
    (tmp_path / "out.das").mkdir()
    places = {
        first / "state": "inside the published release",
        first: "is the published release",
        tmp_path / "link" / "state": "inside the published release",
        tmp_path / "releases" / "state": "beside the release",
        tmp_path / "out.das" / "state": "a run's work folder",
    }
    for state, reason in places.items():
        with pytest.raises(RunRefused, match=reason):
            check_output_place(output, state)
        with pytest.raises(RunRefused, match="DAS_STATE_DIR"):
            RunFolder(output, "run-2", state).create()
        assert not (state / "runs").exists()
    check_output_place(output, tmp_path / "enclave" / "state")  # a place of its own: fine


# -- 5: repeated keys, an approval row appended again ---------------------------------------------


def test_finding_5_a_certificate_with_a_repeated_key_is_not_proven(
    made: Certified, tmp_path: Path
) -> None:
    """`"payload"` twice: one reader keeps the last (and proved it, before this change), another the
    first — two statements in one file. Refused, as in every signed document."""
    release = made.release(tmp_path / "release")
    text = (release / CERTIFICATE).read_text()
    other = base64.b64encode(b'{"another": "statement"}').decode()
    (release / CERTIFICATE).write_text(
        text.replace('"payload":', f'"payload": "{other}", "payload":', 1)
    )
    (proof,) = verify_releases([release], made.trusted)
    assert "appears twice" in _text(proof)


def test_finding_5_a_spent_approval_row_appended_again_is_named(tmp_path: Path) -> None:
    """An approval row copied to the end of the ledger (hash chain recomputed): not named by
    `das ledger verify` before this change; named now, and it counts once."""
    made = make_certified(tmp_path)
    ledger = made.ledger
    (entry,) = [e for e in ledger.entries() if e.kind == "approval"]
    with ledger.store.transaction(write=True) as db:
        db.append("approval", entry.payload, dataset=entry.dataset)
    problems = "\n".join(ledger.verify())
    approval_id = entry.payload["statement"]["approval_id"]
    assert f"records approval {approval_id} again (entry {entry.seq} recorded it)" in problems
    assert len(ledger.approvals()) == 1


def test_a_ledger_row_with_a_repeated_key_is_named(tmp_path: Path) -> None:
    """A row no reader may read two ways (an approval whose signatures are given twice) is
    named by `das ledger verify`, and counts for nothing."""
    from das.trust.ledger.store import entries_table, entry_hash

    made = make_certified(tmp_path)
    ledger = made.ledger
    (entry,) = [e for e in ledger.entries() if e.kind == "approval"]
    text = entry.payload_text.replace('{"signatures":', '{"signatures":[],"signatures":', 1)
    with ledger.store.transaction(write=True) as db:  # the operator's own row, chain intact
        head = db.head()
        seq = head.seq + 1
        digest = entry_hash(seq, head.at, "approval", None, entry.dataset, text, head.hash)
        db.connection.execute(entries_table.insert().values(
            seq=seq, at=head.at, kind="approval", run_id=None, dataset=entry.dataset,
            payload=text, prev=head.hash, hash=digest))  # fmt: skip
    assert any(f"entry {seq} (approval)" in p and "appears twice" in p for p in ledger.verify())
    assert len(ledger.approvals()) == 1


def test_a_charter_entry_that_is_no_valid_charter_is_never_in_force(tmp_path: Path) -> None:
    """A "charter" of quorum 0 written into a fresh ledger's database: in force before this change
    (0 signatures reach a quorum of 0), so every approval needed none. Never in force now, and
    `das ledger verify` names it."""
    ledger, _, trusted, _ = make_chartered_ledger(tmp_path / "real")
    store = LedgerStore.in_directory(tmp_path / "own")
    own = PrivacyLedger.initialize(store)
    statement = charter_statement(
        ledger_id=own.info().ledger_id, approvers=trusted, quorum=2, runners=[],
        ceilings=ledger.charter_chain().in_force.ceilings, previous=None,
    ) | {"quorum": 0}  # fmt: skip
    with store.transaction(write=True) as db:
        db.append("charter", {"statement": statement, "signatures": []})
    chain = own.charter_chain()
    assert chain.chartered is False and chain.in_force is None
    assert any("a quorum of 0 is not between 1 and 2" in p for p in own.verify())


# -- the root: written, read whole, rotated ------------------------------------------------------


def test_the_trust_root_is_written_once_read_whole_and_its_digest_is_of_its_bytes(
    made: Certified, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    from das.trust import read_trust_root

    capsys.readouterr()
    path = _root_file(made, tmp_path / "trust-root.json")
    line = capsys.readouterr().out
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert line == f"{digest}  trust-root.json\n"  # sha256sum's form: sha256sum -c reads it
    root = read_trust_root(path)
    assert (root.digest, root.ledger_id) == (digest, made.predicate["ledger"]["id"])
    assert [c.digest for c in root.charters] == [c.digest for c in made.root().charters]
    again = _root_file(made, tmp_path / "again.json")
    assert again.read_bytes() == path.read_bytes()  # the same chain, the same bytes
    before = path.read_bytes()
    argv = ["ledger", "trust-root", "--ledger", str(made.ledger.store.path.parent), "--output",
            str(path)]  # fmt: skip
    assert das_main(argv) == 2 and "never overwritten" in capsys.readouterr().err
    assert path.read_bytes() == before


def _document(made: Certified) -> dict[str, Any]:
    from das.trust import root_document

    return json.loads(root_document(made.ledger.charter_chain().chain))


def _tampered(made: Certified, name: str) -> bytes:
    """The root's bytes changed as ``name`` says."""
    document = _document(made)
    first = document["charters"][0]
    if name == "a repeated key":
        text = json.dumps(document)
        return text.replace('"type":', '"type": "das-trust-root/1", "type":', 1).encode()
    if name == "an unknown field":
        document["note"] = "trust me"
    elif name == "another type":
        document["type"] = "das-trust-root/2"
    elif name == "no charter":
        document["charters"] = []
    elif name == "a quorum of 0":
        first["statement"]["quorum"] = 0
    elif name == "a quorum of True":
        first["statement"]["quorum"] = True
    elif name == "another ledger":
        document["ledger_id"] = "another"
    elif name == "one signature of a quorum of two":
        first["signatures"] = first["signatures"][:1]
    elif name == "a signature that does not count":
        first["signatures"].append(first["signatures"][0])
    elif name == "version 2 first":
        first["statement"]["version"] = 2
    return json.dumps(document).encode()


ROOT_REFUSALS = {
    "a repeated key": "appears twice",
    "an unknown field": "a JSON object of exactly",
    "another type": "its type is not",
    "no charter": "holds no charter",
    "a quorum of 0": "a quorum of 0 is not between 1 and 2",
    "a quorum of True": "its quorum 'True' is not an integer",
    "another ledger": "is of ledger",
    "one signature of a quorum of two": "is signed by 1 of its own approvers; it needs 2",
    "a signature that does not count": "carries a signature that does not count",
    "version 2 first": "version 2 names no previous charter",
}


@pytest.mark.parametrize("name", sorted(ROOT_REFUSALS))
def test_a_trust_root_that_does_not_hold_whole_is_refused(made: Certified, name: str) -> None:
    from das.trust.root import RootInvalid, trust_root_of

    with pytest.raises(RootInvalid, match=ROOT_REFUSALS[name]):
        trust_root_of(_tampered(made, name))


def test_a_verifier_holding_an_older_root_follows_a_rotation_forward(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TUF's root rotation: a release made under charter version 3 is proven with the root of
    version 1, each later charter being signed by a quorum of the one before; the newer root is
    checked against the held one before it is pinned; a rollback, another ledger or a fork is
    not pinned, and a release under a fork is not proven."""
    from das.trust import extension_problems, read_trust_root, root_document

    ledger, keys, trusted, run_key = make_chartered_ledger(tmp_path, approvers=3, quorum=2)
    old = tmp_path / "root-v1.json"
    old.write_bytes(root_document(ledger.charter_chain().chain))
    newcomer_key = tmp_path / "approver-4"
    newcomer = generate_key(newcomer_key, "approver-4")
    rotate(ledger, keys[:2], approvers=[*trusted[1:], newcomer])  # version 2: key 1 retired
    v2 = ledger.charter_chain().in_force
    rotate(ledger, [keys[1], newcomer_key], quorum=3)  # version 3: signed by 2 of version 2
    signers = [keys[1], keys[2], newcomer_key]
    run = certified_run(ledger, keys, signers, trusted, run_key, "run-3")
    release = run.release(tmp_path / "release")
    held = read_trust_root(old)
    (proof,) = verify_releases([release], roots=[held])
    assert proof.proven, proof.problems
    assert proof.facts["charter"]["version"] == 3 and len(proof.facts["approved_by"]) == 3
    new = tmp_path / "root-v3.json"
    new.write_bytes(root_document(ledger.charter_chain().chain))
    capsys.readouterr()
    assert das_main(["release", "check-root", str(new), "--trust-root", str(old)]) == 0
    assert "EXTENDS the pinned root" in capsys.readouterr().out
    assert das_main(["release", "check-root", str(old), "--trust-root", str(new)]) == 1
    assert "a rollback" in capsys.readouterr().out
    other, *_ = make_chartered_ledger(tmp_path / "other")
    elsewhere = tmp_path / "other-root.json"
    elsewhere.write_bytes(root_document(other.charter_chain().chain))
    assert das_main(["release", "check-root", str(elsewhere), "--trust-root", str(old)]) == 1
    assert "the new root is of ledger" in capsys.readouterr().out
    # A fork: another version 3, signed by a quorum of version 2 (two keys of it).
    fork = charter_statement(
        ledger_id=v2.ledger_id, approvers=list(v2.approvers), quorum=1,
        runners=list(v2.runners), ceilings=v2.ceilings, previous=v2,
    )  # fmt: skip
    forked = Charter(fork, 0, "", tuple(sign(canonical_json(fork), CHARTER_NAMESPACE, k)
                                        for k in (keys[1], newcomer_key)))  # fmt: skip
    forked_root = tmp_path / "forked-root.json"
    forked_root.write_bytes(root_document([*ledger.charter_chain().chain[:2], forked]))
    assert extension_problems(read_trust_root(forked_root), held) == []  # beyond v1: a quorum
    problems = extension_problems(read_trust_root(forked_root), read_trust_root(new))
    assert "another history" in problems[0]
    (proof,) = verify_releases([release], roots=[read_trust_root(forked_root)])
    assert "charter version 3" in _text(proof) and "is not the trust root's" in _text(proof)
    # Held root version 1, two releases showing two different version 3: they fail together.
    other_release = copy_release(release, tmp_path / "other-release")
    envelope = json.loads((other_release / CERTIFICATE).read_text())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    predicate["charters"][2] = {"statement": fork, "signatures": list(forked.signatures)}
    manifest = json.loads((other_release / MANIFEST).read_text())
    (other_release / CERTIFICATE).unlink()
    certify(other_release, predicate, run_key, manifest)
    together = verify_releases([release, other_release], roots=[held])
    assert all("shows another charter version 3" in _text(p) for p in together)


def test_without_a_trust_root_verify_says_what_is_missing_and_where_it_comes_from(
    made: Certified, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = made.release(tmp_path / "release")
    capsys.readouterr()
    assert das_main(["release", "verify", str(release)]) == 1
    out = capsys.readouterr().out
    assert "NOT PROVEN" in out and "no trust root" in out and "das ledger trust-root" in out
    root = _root_file(made, tmp_path / "trust-root.json")
    capsys.readouterr()
    assert das_main(["release", "verify", str(release), "--trust-root", str(root)]) == 0
    assert "PROVEN —" in capsys.readouterr().out
    argv = ["release", "verify", str(release), "--trust-root", str(root), "--ledger-id", "x"]
    assert das_main(argv) == 2
    assert "is not the ledger of any --trust-root" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_bytes(_tampered(made, "a quorum of 0"))
    assert das_main(["release", "verify", str(release), "--trust-root", str(broken)]) == 2
    assert "--trust-root" in capsys.readouterr().err


def test_finding_4_a_restricted_approver_line_is_refused_where_keys_are_read(
    made: Certified, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An allowed-signers line with `namespaces="git"` or `valid-before="20200101"` (a revoked
    key) was accepted and not enforced (before this change), at `das ledger init` and in
    `--trusted-keys`: refused now, saying what decides instead (the charter)."""
    alice, bob = made.trusted
    keys = tmp_path / "approvers.pub"
    keys.write_text(f'alice namespaces="git" {alice.openssh()}\nbob valid-before="20200101" '
                    f"{bob.openssh()}\n")  # fmt: skip
    generate_key(tmp_path / "run-key", "run key")
    capsys.readouterr()
    argv = ["ledger", "init", "--ledger", str(tmp_path / "ledger"), "--approvers", str(keys),
            "--quorum", "1", "--key", str(made.approvers[0]), "--new-history",
            "--runner-key", str(tmp_path / "run-key.pub")]  # fmt: skip
    assert das_main(argv) == 2
    assert "line 1: an allowed-signers line with options is refused" in capsys.readouterr().err
    assert not (tmp_path / "ledger" / "ledger.sqlite").exists()
    release = made.release(tmp_path / "release")
    assert das_main(["release", "verify", str(release), "--trusted-keys", str(keys)]) == 2
    assert "refused, not ignored" in capsys.readouterr().err


OLD = Path(__file__).parent / "data" / "release-ea048f5"


def test_a_release_certified_before_trust_roots_proves_under_its_ledgers_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tests/data/release-ea048f5 was certified by main's code before this change (ea048f5,
    tests/certified.py's make_certified); its root was exported from that ledger with `das
    ledger trust-root`. The certificate's format did not change: it proves, with the root and
    only with it."""
    root = OLD.with_name(OLD.name + ".trust-root.json")
    release = copy_release(OLD, tmp_path / "release")  # the checkout's copy is never touched
    capsys.readouterr()
    assert das_main(["release", "verify", str(release), "--trust-root", str(root)]) == 0
    assert "PROVEN —" in capsys.readouterr().out
    assert das_main(["release", "verify", str(release)]) == 1
