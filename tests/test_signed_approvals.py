"""No one spends alone (issue 23): a production ledger has a charter of approvers' keys, an
approval is a quorum's signatures on a statement of exactly the spend, and every release carries
a certificate a verifier outside the enclave checks with the approvers' public keys only.

Each numbered finding of the issue has its test here (they fail on the code before it): a
forged approval row (1), a second ledger (2), an operator approving their own run (3, the UI
side is in tests/test_e2e_prefect.py), production as an environment variable (4), an approval
that covered config.json only (5), run state inside a release (6), and the smaller ones (7).
Runs are the real flows (`das run` in process) on the Census SafeTab-P toy inputs, against the
session's Prefect server on Prefect's thread pool.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from chartered import Chartered, key_pair, make_chartered

from das.cli import main as das_main
from das.runs.folder import state_root
from das.trust import APPROVAL_NAMESPACE, LedgerStore, PrivacyLedger, canonical_json, sign

REPO = Path(__file__).resolve().parents[1]
TOY = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy"

pytestmark = [
    pytest.mark.skipif(not TOY.is_dir(), reason="../shared toy inputs absent"),
    pytest.mark.integration,
    pytest.mark.usefixtures("prefect_server", "thread_runner"),
]


def _params(tmp_path: Path, name: str = "params", infinite: bool = False) -> Path:
    folder = tmp_path / name
    if not folder.exists():
        shutil.copytree(TOY / "input_dir_zcdp", folder)
    config = folder / "config.json"
    if infinite:
        data = json.loads(config.read_text())
        for key, value in data.items():
            if key.startswith("privacy_budget_p_level_") and value > 0:
                data[key] = math.inf
        config.write_text(json.dumps(data))
    return config


def _data(tmp_path: Path, name: str = "data") -> Path:
    data = tmp_path / name
    if not data.exists():
        data.mkdir()
        for file in ("person-records.txt", "GRF-C.txt"):
            shutil.copy(TOY / file, data)
    return data


def _run(config: Path, data: Path, output: Path, *extra: str) -> int:
    argv = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output"]
    return das_main([*argv, str(output), *extra])


def _verify(
    release: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`das release verify` with the production ledger's trust root and approvers' keys."""
    root = production.trust_root()
    capsys.readouterr()
    code = das_main(["release", "verify", str(release), "--trust-root", str(root),
                     "--trusted-keys", str(production.public)])  # fmt: skip
    return code, capsys.readouterr().out


def _ledger(chartered: Chartered) -> PrivacyLedger:
    return PrivacyLedger(LedgerStore.in_directory(chartered.ledger))


@pytest.fixture
def production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Chartered:
    """A chartered ledger of two approvers, quorum 2, in force; the production environment."""
    return make_chartered(tmp_path, monkeypatch, approvers=3, quorum=2)


def test_a_quorum_signed_release_is_proven_with_public_keys_only(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Proven by `das release verify --trust-root` and by the standard-tools procedure of
    docs/how-to/verify-a-release.md (tests/outsider.py); not proven without the root. The run
    was pinned to that root (DAS_TRUST_ROOT) and went on."""
    from outsider import outsider_check

    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    monkeypatch.setenv("DAS_TRUST_ROOT", str(production.trust_root()))
    out = tmp_path / "out"
    assert _run(config, data, out) == 0
    assert (out / "CERTIFICATE.intoto.json").is_file()
    code, text = _verify(out, production, capsys)
    assert code == 0, text
    assert "PROVEN" in text and "signed by 2 of the 2 approvers" in text
    proven, printed = outsider_check(production.trust_root(), out)
    assert proven, printed
    assert das_main(["release", "verify", str(out), "--trusted-keys", str(production.public)]) == 1
    assert "no trust root" in capsys.readouterr().out


def test_a_run_pinned_to_the_agencys_root_refuses_a_ledger_one_approver_chartered(
    tmp_path: Path, production: Chartered, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Issue 38, finding 2 on the pipeline's side: `das ledger init --quorum 1 --key alice
    --new-history` makes a ledger in force at once; a run pinned to the published root refuses
    it before reading any record."""
    config, data = _params(tmp_path), _data(tmp_path)
    root = production.trust_root()
    own = tmp_path / "own"
    assert das_main(["ledger", "init", "--ledger", str(own), "--approvers", str(production.public),
                     "--quorum", "1", "--key", str(production.approvers[0]),
                     "--new-history"]) == 0  # fmt: skip
    assert das_main(["ledger", "approve", "--ledger", str(own), "--product", "safetab-p",
                     "--config", str(config), "--data", str(data), "--key",
                     str(production.approvers[0]), "--new-history"]) == 0  # fmt: skip
    own_id = PrivacyLedger(LedgerStore.in_directory(own)).info().ledger_id
    monkeypatch.setenv("DAS_LEDGER_DIR", str(own))
    monkeypatch.setenv("DAS_LEDGER_ID", own_id)
    monkeypatch.setenv("DAS_TRUST_ROOT", str(root))
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    assert "does not extend the trust root" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    ledger = PrivacyLedger(LedgerStore.in_directory(own))
    assert not [e for e in ledger.entries() if e.kind == "spend-authorized"]


def test_attack2_one_approvers_own_ledger_spends_nothing_when_no_root_is_pinned(
    tmp_path: Path, production: Chartered, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Issue 38's second pass, B6: alice's own ledger (quorum 1, the service account's run key
    its runner), approved by her alone, and a service account that pinned no root: the run is
    refused before reading a record, with the step that pins one."""
    config, data = _params(tmp_path), _data(tmp_path)
    (production.run_key.parent / "trust-root.json").unlink()  # no pin at all
    monkeypatch.delenv("DAS_TRUST_ROOT", raising=False)
    own = tmp_path / "own"
    alice = str(production.approvers[0])
    assert das_main(["ledger", "init", "--ledger", str(own), "--approvers", str(production.public),
                     "--quorum", "1", "--key", alice, "--new-history", "--runner-key",
                     f"{production.run_key}.pub"]) == 0  # fmt: skip
    assert das_main(["ledger", "approve", "--ledger", str(own), "--product", "safetab-p",
                     "--config", str(config), "--data", str(data), "--key", alice,
                     "--new-history"]) == 0  # fmt: skip
    monkeypatch.setenv("DAS_LEDGER_DIR", str(own))
    monkeypatch.setenv(
        "DAS_LEDGER_ID", PrivacyLedger(LedgerStore.in_directory(own)).info().ledger_id
    )
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "no trust root is pinned" in err and "das ledger trust-root --ledger" in err, err
    assert not (tmp_path / "out").exists()
    ledger = PrivacyLedger(LedgerStore.in_directory(own))
    assert not [e for e in ledger.entries() if e.kind in ("run-opened", "spend-authorized")]


def test_one_signature_of_a_quorum_of_two_spends_nothing(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data, "safetab-p", 1)
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    assert "signed by a quorum" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_1_a_forged_approval_row_authorizes_nothing_and_verify_names_it(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approval appended to the database with the hash chain recomputed — unsigned, or
    signed by a key of the operator's own — is no approval: the run is refused, `das ledger
    verify` names the forgery, `das ledger show` says no quorum signed it."""
    config, data = _params(tmp_path), _data(tmp_path)
    ledger = _ledger(production)
    from das.spend_approval import propose

    proposal = propose(ledger, "safetab-p", config, data, note="forged")
    mallory, _ = key_pair(tmp_path / "mallory", "mallory")
    forged = sign(canonical_json(proposal.statement), APPROVAL_NAMESPACE, mallory)
    with ledger.store.transaction(write=True) as db:  # the operator's own write, chain intact
        db.append("approval", {"statement": proposal.statement, "signatures": [forged, forged]},
                  dataset=proposal.statement["dataset"])  # fmt: skip
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    assert not (tmp_path / "out").exists()
    assert das_main(["ledger", "verify", "--ledger", str(production.ledger), "--no-prefect"]) == 1
    text = capsys.readouterr().out
    assert "does not count" in text and "forged?" in text
    assert das_main(["ledger", "show", "--ledger", str(production.ledger)]) == 0
    assert "NO QUORUM: authorizes nothing" in capsys.readouterr().out


def test_1_a_forged_spend_entry_is_named_by_verify(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _ledger(production)
    with ledger.store.transaction(write=True) as db:
        db.append("spend-authorized", {"passes": [], "approval": "0" * 16, "production": True},
                  run_id="forged-run", dataset="d" * 64)  # fmt: skip
    capsys.readouterr()
    assert das_main(["ledger", "verify", "--ledger", str(production.ledger), "--no-prefect"]) == 1
    shown = capsys.readouterr().out
    assert "under no approval the ledger holds (forged?)" in shown, shown
    assert "not signed by a run key of the charter" in shown


def test_2_a_second_ledger_needs_the_approvers_and_they_are_told(
    tmp_path: Path, production: Chartered, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A dataset spent in one ledger is fresh budget in another: the operator cannot make one
    alone (its charter needs approvers' keys), an approver asked to charter it is told it is a
    second ledger and must say so, and asked to approve spend on records they approved in the
    first ledger is shown that spend and must say so. A release of an unchartered second ledger
    proves nothing."""
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    assert _run(config, data, tmp_path / "out") == 0
    second = tmp_path / "second"
    argv = ["ledger", "init", "--ledger", str(second), "--approvers", str(production.public),
            "--quorum", "1", "--key", str(production.approvers[0])]  # fmt: skip
    capsys.readouterr()
    assert das_main(argv) == 2
    assert "SECOND ledger" in capsys.readouterr().out
    assert not (second / "ledger.sqlite").exists()
    assert das_main([*argv, "--new-history"]) == 0
    approve = ["ledger", "approve", "--ledger", str(second), "--product", "safetab-p",
               "--config", str(config), "--data", str(data), "--key",
               str(production.approvers[0])]  # fmt: skip
    capsys.readouterr()
    assert das_main(approve) == 2
    shown = capsys.readouterr().out
    assert "ANOTHER ledger" in shown and "pass US up to" in shown
    # an operator's own second ledger, without a charter: its release proves nothing
    monkeypatch.delenv("DAS_PRODUCTION")
    monkeypatch.delenv("DAS_LEDGER_ID")
    monkeypatch.delenv("DAS_RUN_KEY")  # the operator's own key: the service account's is pinned
    own = tmp_path / "own"
    assert das_main(["ledger", "init", "--ledger", str(own)]) == 0
    monkeypatch.setenv("DAS_LEDGER_DIR", str(own))
    again = tmp_path / "elsewhere" / "again"  # not beside the first ledger's release
    assert _run(config, data, again) == 0
    code, text = _verify(again, production, capsys)
    assert code == 1 and "no charter" in text


def test_4_a_chartered_ledger_is_production_whatever_the_environment_says(
    tmp_path: Path, production: Chartered, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.delenv("DAS_PRODUCTION")
    config, data = _params(tmp_path), _data(tmp_path)
    capsys.readouterr()
    assert _run(config, data, tmp_path / "seeded", "--seed", "3") == 2
    assert "refused under a chartered (production) ledger: a seed was given" in (
        capsys.readouterr().err
    )
    infinite = _params(tmp_path, "infinite", infinite=True)
    assert _run(infinite, data, tmp_path / "exact") == 2
    assert "infinite budget" in capsys.readouterr().err
    assert _run(config, data, tmp_path / "unapproved") == 2  # no approval: refused
    assert "signed by a quorum" in capsys.readouterr().err
    for out in ("seeded", "exact", "unapproved"):
        assert not (tmp_path / out).exists()


def test_4_das_production_with_a_ledger_without_a_charter_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    assert das_main(["ledger", "init", "--ledger", str(plain)]) == 0
    monkeypatch.setenv("DAS_PRODUCTION", "1")
    monkeypatch.setenv("DAS_LEDGER_DIR", str(plain))
    monkeypatch.setenv(
        "DAS_LEDGER_ID", PrivacyLedger(LedgerStore.in_directory(plain)).info().ledger_id
    )
    capsys.readouterr()
    assert _run(_params(tmp_path), _data(tmp_path), tmp_path / "out") == 2
    assert "has no charter" in capsys.readouterr().err


def test_5_an_approval_covers_every_spec_file_not_only_the_config(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    iterations = config.parent / "race-characteristic-iterations.txt"
    lines = iterations.read_text().splitlines(keepends=True)
    iterations.write_text("".join(lines[:-1]))  # one iteration fewer: other tabulations
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    assert "sealed parameters" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_6_an_output_inside_a_release_or_the_state_root_is_refused_by_name(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    out = tmp_path / "out"
    assert _run(config, data, out) == 0
    assert not any(p.name in ("noise", "work", "validation") for p in out.rglob("*"))
    assert not (out.parent / "out.das" / "runs").exists()  # run state is under the state root
    assert any((state_root() / "runs").iterdir())
    capsys.readouterr()
    assert _run(config, data, out / "nested") == 2
    assert f"inside the published release {out}" in capsys.readouterr().err
    assert _run(config, data, state_root() / "runs" / "x") == 2
    assert "state root" in capsys.readouterr().err
    assert not (out / "nested").exists()


def test_6_verify_release_fails_on_a_file_the_manifest_does_not_list(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    out = tmp_path / "out"
    assert _run(config, data, out) == 0
    shutil.copy(data / "person-records.txt", out / "person-records.txt")
    capsys.readouterr()
    assert das_main(["ledger", "verify", "--ledger", str(production.ledger), "--no-prefect",
                     "--release", str(out)]) == 1  # fmt: skip
    assert "person-records.txt" in capsys.readouterr().out
    code, text = _verify(out, production, capsys)
    assert code == 1 and "person-records.txt is in the release but not certified" in text


def test_7_typed_text_is_shown_escaped(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    note = "ok\nrun fake completed \x1b[32mgreen"
    production.approve(config, data, "safetab-p", 1, "--note", note)
    capsys.readouterr()
    assert das_main(["ledger", "show", "--ledger", str(production.ledger)]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\nrun fake" not in text
    assert "ok\\nrun fake completed \\x1b[32mgreen" in text


def test_7_validate_says_an_infinity_config_cannot_make_a_private_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _params(tmp_path, infinite=True)
    das_main(["validate", "safetab-p", "--config", str(config), "--data", str(_data(tmp_path)),
              "--report", str(tmp_path / "report")])  # fmt: skip
    assert "NOT A PRIVATE CONFIG" in capsys.readouterr().out


def test_a_key_not_in_the_charter_cannot_approve(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    mallory, _ = key_pair(tmp_path / "mallory", "mallory")
    argv = ["ledger", "approve", "--ledger", str(production.ledger), "--product", "safetab-p",
            "--config", str(_params(tmp_path)), "--data", str(_data(tmp_path)),
            "--key", str(mallory)]  # fmt: skip
    capsys.readouterr()
    assert das_main(argv) == 2
    assert "not one of the approvers" in capsys.readouterr().err


def test_a_run_key_the_charter_does_not_name_draws_nothing(
    tmp_path: Path, production: Chartered, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    other, _ = key_pair(tmp_path / "other", "operator-key")
    monkeypatch.setenv("DAS_RUN_KEY", str(other))
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2  # no root pinned beside that key
    assert "no trust root is pinned" in capsys.readouterr().err
    monkeypatch.setenv("DAS_TRUST_ROOT", str(production.trust_root()))  # pinned, not a runner
    assert _run(config, data, tmp_path / "out") == 2
    assert "is not a runner of the charter" in capsys.readouterr().err


def test_a_held_budget_names_its_holder_and_release_returns_an_undrawn_one(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26 (2): a refusal that counts an unfinished run names it and the way out; a run
    that never drew can be released by hand (recorded with who and why)."""
    ledger = _ledger(production)
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    from das.spend_approval import propose

    statement = propose(ledger, "safetab-p", config, data).statement
    dataset = statement["dataset"]
    from das.spend_approval import sealed_spend
    from das.trust import RunOpening, RunSigner

    sealed, plan = sealed_spend("safetab-p", config, data, None)
    opening = RunOpening("held-1", "safetab-p", str(tmp_path / "x"), "c", sealed.digest,
                         plan.definition, plan.pass_totals(), "secure", ())  # fmt: skip
    ledger.open_run(opening)
    # as a run killed after its (approved, signed) authorization and before its first draw
    ledger.authorize("held-1", dataset, production=True, signer=RunSigner(production.run_key),
                     reference=statement.get("reference"))  # fmt: skip
    from tasks.ledger_witness import post_head

    post_head(ledger.info(), "after run held-1 authorized its spend")  # as the run would have
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    err = capsys.readouterr().err
    # The way out, printed for this ledger (not the default one), and the next step is it, not
    # a second approval; run as printed (the reason filled in), it frees the approval.
    printed = re.search(r"das ledger release (--ledger \S+) --run-id held-1 --reason", err)
    assert printed and printed.group(1) == f"--ledger {production.ledger}", err
    assert "Next step" in err and "das ledger approve" not in err.split("Next step")[-1], err
    argv = ["ledger", "release", *printed.group(1).split(), "--run-id", "held-1",
            "--reason", "killed before it drew"]  # fmt: skip
    assert das_main(argv) == 0
    assert _run(config, data, tmp_path / "out") == 0


# --- the attacker pass of this issue: what a writer of the database or the run folders tried ---


def _forge(ledger: PrivacyLedger, kind: str, payload: dict, run_id: str | None = None,
           dataset: str | None = None) -> None:  # fmt: skip
    """A well-hashed append by someone who can write the database (not the pipeline)."""
    with ledger.store.transaction(write=True) as db:
        db.append(kind, payload, run_id=run_id, dataset=dataset)


def test_a_run_created_in_the_database_by_hand_is_never_resumed_into_a_release(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator writes `run-opened` and `spend-authorized` for a new run id, citing the
    approval a published run spent, then has the service account run that id: it would resume
    "an authorized run" without any approval check. The run refuses (its authorization is not
    signed by a run key), nothing is published, and verify names the entry."""
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    first = tmp_path / "releases" / "r1"
    assert _run(config, data, first, "--run-id", "r1") == 0
    ledger = _ledger(production)
    spent = ledger.run("r1")
    forged = tmp_path / "releases" / "x2"
    binding = {**spent.binding, "output": str(forged)}
    _forge(ledger, "run-opened", {"binding": binding, "markers": [], "attempt": 1}, "x2")
    _forge(ledger, "spend-authorized", {"passes": [p.exact() for p in spent.passes],
                                        "approval": spent.approval, "production": True},
           "x2", spent.dataset)  # fmt: skip
    capsys.readouterr()
    assert _run(config, data, forged, "--run-id", "x2") == 2
    assert "not signed by a run key of the charter" in capsys.readouterr().err
    assert not forged.exists()
    assert das_main(["ledger", "verify", "--ledger", str(production.ledger), "--no-prefect"]) == 1
    text = capsys.readouterr().out
    assert "spend-authorized of run x2) is not signed by a run key" in text
    assert "which run r1 spent already" in text


def test_noise_recorded_in_the_database_by_hand_is_never_reused(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zero noise files and `draw-recorded` entries naming them, appended for a run before it
    draws, would make a release of exact counts: the records are not signed by a run key, so
    the run refuses them — nothing is published — and verify names them."""
    import numpy as np

    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    ledger = _ledger(production)
    noise = state_root() / "runs" / "z1" / "noise"
    noise.mkdir(parents=True)
    np.save(noise / "zeros.npy", np.zeros(7, dtype=np.int64))
    _forge(ledger, "draw-recorded", {"name": "US/USA/1/stage-1", "digest": "0" * 64, "size": 7,
                                     "file": "zeros.npy", "attempt": 1}, "z1")  # fmt: skip
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out", "--run-id", "z1") != 0
    assert not (tmp_path / "out").exists()
    assert das_main(["ledger", "verify", "--ledger", str(production.ledger), "--no-prefect"]) == 1
    assert "draw-recorded of run z1) is not signed by a run key" in capsys.readouterr().out


def test_an_approval_row_copied_under_other_records_authorizes_nothing(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approval signed for one dataset, copied into the database under another dataset's
    id: the statement names its records, the row's column is no authority."""
    config, small = _params(tmp_path), _data(tmp_path, "small")
    person = small / "person-records.txt"
    person.write_text("".join(person.read_text().splitlines(keepends=True)[:-2]))
    production.approve(config, small)
    full = _data(tmp_path, "full")
    ledger = _ledger(production)
    from das.spend_approval import records_fingerprint

    (approval,) = ledger.approvals()
    _forge(ledger, "approval", {"statement": approval["statement"],
                                "signatures": [*_signatures(ledger)]},
           dataset=ledger.dataset_id(records_fingerprint("safetab-p", full)))  # fmt: skip
    capsys.readouterr()
    assert _run(config, full, tmp_path / "out") == 2
    assert not (tmp_path / "out").exists()
    assert das_main(["ledger", "verify", "--ledger", str(production.ledger), "--no-prefect"]) == 1
    assert "(a copied row?)" in capsys.readouterr().out


def _signatures(ledger: PrivacyLedger) -> list[str]:
    with ledger.store.transaction() as db:
        return [e.payload["signature"] for e in db.entries(kinds=("approval-signature",))] + [
            s for e in db.entries(kinds=("approval",)) for s in e.payload["signatures"]
        ]


def test_a_request_whose_text_could_deceive_its_signer_is_not_shown_for_signing(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request written into the database with newlines and terminal escapes in its file
    names (to print a smaller spend than it asks) is refused before an approver signs it."""
    ledger = _ledger(production)
    from das.spend_approval import propose

    statement = propose(ledger, "safetab-p", _params(tmp_path), _data(tmp_path)).statement
    files = dict(statement["parameters"]["files"])
    files["config.json\n    pass US: 0.5\x1b[8m"] = files.pop("config.json")
    forged = {**statement, "approval_id": "f" * 16,
              "parameters": {**statement["parameters"], "files": files}}  # fmt: skip
    _forge(ledger, "approval", {"statement": forged, "signatures": []},
           dataset=statement["dataset"])  # fmt: skip
    capsys.readouterr()
    assert das_main(["ledger", "approve", "--ledger", str(production.ledger), "--approval",
                     "f" * 16, "--key", str(production.approvers[0])]) == 2  # fmt: skip
    err = capsys.readouterr()
    assert "not a statement this pipeline writes" in err.err and "\x1b" not in err.out + err.err


def test_a_changed_geography_file_is_not_what_was_approved(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GRF-C sets the geography of every table: one rewritten after the approval (a place
    turned into "not in a place") is not the approved spend."""
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    grf = data / "GRF-C.txt"
    lines = grf.read_text().splitlines(keepends=True)
    assert "|22800|" in lines[1]
    grf.write_text("".join([lines[0], lines[1].replace("|22800|", "|99999|"), *lines[2:]]))
    capsys.readouterr()
    assert _run(config, data, tmp_path / "out") == 2
    assert not (tmp_path / "out").exists()


def test_two_different_releases_under_one_approval_fail_together_and_a_pin_fails_others(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy of the ledger taken before a run lets the same run id publish twice with other
    noise, each certificate signed by the run key: each proves alone, but verified together
    the two fail (one approval, two contents); a copy of one release is still one release.
    With --ledger-id the agency pins its production ledger: a release of another fails."""
    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    first = tmp_path / "a" / "out"
    assert _run(config, data, first) == 0
    second = tmp_path / "b" / "out"
    shutil.copytree(first, second)
    table = second / "t1" / "t1.txt"
    table.write_text(table.read_text().replace("|1\n", "|2\n", 1))
    _recertify(second, production.run_key)  # as the forked ledger's run would sign it
    copy = tmp_path / "c" / "out"
    shutil.copytree(first, copy)
    code, text = _verify(second, production, capsys)
    assert code == 0, text  # alone, it proves
    capsys.readouterr()
    root = ["--trust-root", str(production.trust_root())]
    argv = ["release", "verify", str(first), str(second), *root]
    assert das_main(argv) == 1
    assert "spent by another release with other content" in capsys.readouterr().out
    argv = ["release", "verify", str(first), str(copy), *root]
    assert das_main(argv) == 0
    capsys.readouterr()
    other = "00000000-0000-0000-0000-000000000000"
    assert das_main([*argv, "--ledger-id", other]) == 2  # it contradicts the root: usage
    assert "is not the ledger of any --trust-root" in capsys.readouterr().err
    assert das_main([*argv[:3], "--trusted-keys", str(production.public), "--ledger-id",
                     other]) == 1  # fmt: skip
    assert "not in the published production ledger" in capsys.readouterr().out


def _recertify(release: Path, run_key: Path) -> None:
    """The release's certificate made again over its files as they are now."""
    import base64

    from das.io.writers import file_sha256
    from das.trust import certify

    envelope = json.loads((release / "CERTIFICATE.intoto.json").read_text())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    manifest = json.loads((release / "MANIFEST.json").read_text())
    for name, item in manifest["files"].items():
        item["sha256"] = file_sha256(release / name)
    (release / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    certify(release, predicate, run_key, manifest)


def test_verify_refuses_what_was_added_to_a_release_folder(
    tmp_path: Path, production: Chartered, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    config, data = _params(tmp_path), _data(tmp_path)
    production.approve(config, data)
    out = tmp_path / "out"
    assert _run(config, data, out) == 0
    (out / "0001-persons").mkdir()  # a folder named after a record
    os.mkfifo(out / "pipe")
    code, text = _verify(out, production, capsys)
    assert code == 1 and "0001-persons/ is a folder no certified file is in" in text
    assert "pipe is not a regular file" in text
