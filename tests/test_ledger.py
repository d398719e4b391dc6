"""The privacy ledger alone (das/trust/ledger/): runs bound to their output, approvals, spend
authorized per dataset, draws recorded, the hash chain and what breaks it, tried as a careless
or hostile operator would. Every test runs on each store (:func:`ledger_store`)."""

from __future__ import annotations

import multiprocessing
import os
import re
from fractions import Fraction
from pathlib import Path

import pytest

from das.listing import folded
from das.privacy.limits import MAX_PASS_TOTAL
from das.refusal import Remedy, RunRefused
from das.trust import (
    APPROVAL_NAMESPACE,
    ApprovalRequired,
    CeilingExceeded,
    CumulativeSpendRequired,
    DrawRefused,
    LedgerRefused,
    LedgerStore,
    PrivacyLedger,
    ReleaseDiffers,
    RunOpening,
    RunSigner,
    anchor_remedy,
    approval_statement,
    canonical_json,
    decimal_text,
    generate_key,
    open_ledger,
    parse_total,
    release_anchor_problems,
    sign,
)

US = {"US": Fraction("4.944")}
CONFIG = "c" * 64
SEAL = "s" * 64


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LedgerStore:
    """The same ledger logic over its two stores: a SQLite file, and a PostgreSQL database
    (the session's private cluster, emptied for each test)."""
    if request.param == "sqlite":
        return LedgerStore.in_directory(tmp_path / "ledger")
    cluster = request.getfixturevalue("postgres_cluster")
    store = LedgerStore(cluster.sync_url)
    with store.engine.begin() as db:
        db.exec_driver_sql("DROP TABLE IF EXISTS das_ledger_entries, das_ledger_key")
    return store


APPROVER: dict[str, Path] = {}  # ledger location -> its approver's key file
RUNNER: dict[str, Path] = {}  # ledger location -> the run key its charter names


def authorize(ledger: PrivacyLedger, run_id: str, dataset: str, **options) -> list:
    """``ledger.authorize`` as a run does it: signed by the run key of the ledger's charter."""
    key = RUNNER.get(ledger.location)
    return ledger.authorize(run_id, dataset, signer=key and RunSigner(key), **options)


@pytest.fixture
def ledger(store: LedgerStore, tmp_path: Path) -> PrivacyLedger:
    """A chartered (production) ledger: one approver, quorum 1."""
    return chartered(store, tmp_path)


@pytest.fixture
def plain(store: LedgerStore) -> PrivacyLedger:
    """A ledger without a charter: outside production."""
    return PrivacyLedger.initialize(store)


def chartered(store: LedgerStore, tmp_path: Path, quorum: int = 1) -> PrivacyLedger:
    import uuid

    from das.trust import CHARTER_NAMESPACE, charter_statement, ledger_ceilings

    approver = tmp_path / "keys" / "approver"
    approver.parent.mkdir(exist_ok=True)
    key = generate_key(approver, "approver")
    runner = generate_key(tmp_path / "keys" / "runner", "runner")
    runner_key = tmp_path / "keys" / "runner"
    ledger_id = str(uuid.uuid4())
    statement = charter_statement(
        ledger_id=ledger_id, approvers=[key], quorum=quorum, runners=[runner],
        ceilings=ledger_ceilings(None), previous=None,
    )  # fmt: skip
    signature = sign(canonical_json(statement), CHARTER_NAMESPACE, approver)
    ledger = PrivacyLedger.initialize(store, ledger_id=ledger_id, charter=(statement, signature))
    APPROVER[ledger.location] = approver
    RUNNER[ledger.location] = runner_key
    return ledger


def opening(run_id: str, budgets=None, *, output: str | None = None, definition: str = "zcdp",
            markers: tuple[str, ...] = (), seed_mode: str = "secure",
            product: str = "safetab-p") -> RunOpening:  # fmt: skip
    return RunOpening(
        run_id=run_id,
        product=product,
        output=output or f"/releases/{run_id}",
        config_sha256=CONFIG,
        seal=SEAL,
        definition=definition,
        budgets=US if budgets is None else budgets,
        seed_mode=seed_mode,
        markers=markers,
    )


def approve(ledger: PrivacyLedger, dataset: str, budgets=None, definition: str = "zcdp"):
    """An approval of the spend as an approver makes it: the statement, signed by the
    ledger's approver when it has a charter (unsigned without one)."""
    budgets = US if budgets is None else budgets
    passes, ceiling, chain, _ = ledger.plan_spend("safetab-p", dataset, SEAL, definition, budgets)
    statement = approval_statement(
        ledger_id=ledger.info().ledger_id, charter=chain.in_force, product="safetab-p",
        dataset=dataset, parameters={"digest": SEAL, "files": {}}, definition=definition,
        passes=passes, ceiling=ceiling, note="test", requested_by="test",
    )  # fmt: skip
    key = APPROVER.get(ledger.location) if chain.chartered else None
    signatures = [] if key is None else [sign(canonical_json(statement), APPROVAL_NAMESPACE, key)]
    return ledger.record_approval(statement, signatures)


def test_decimal_text_is_exact_and_parse_total_inverts_it() -> None:
    assert decimal_text(Fraction("9.888")) == "9.888"
    assert decimal_text(Fraction(4944, 1000) * 2) == "9.888"
    assert decimal_text(Fraction(1, 3)) == "1/3"
    assert decimal_text(float("inf")) == "Infinity"
    for text in ("9.888", "1/3", "0.000135", "Infinity"):
        assert decimal_text(parse_total(text)) == text
    with pytest.raises(ValueError):
        parse_total("lots")


# --- creating and opening -------------------------------------------------------------------


def test_a_ledger_is_created_once_with_ceilings_no_higher_than_the_system_maximum(
    store: LedgerStore,
) -> None:
    with pytest.raises(ValueError, match="outside"):
        PrivacyLedger.initialize(store, {"zcdp": Fraction(11)})
    with pytest.raises(ValueError, match="outside"):
        PrivacyLedger.initialize(store, {"puredp": Fraction(10) ** 300})
    ledger = PrivacyLedger.initialize(store, {"zcdp": Fraction(6)})
    info = ledger.info()
    assert info.ceilings == {"zcdp": Fraction(6), "puredp": MAX_PASS_TOTAL["puredp"]}
    assert info.head_seq == 1 and ledger.verify() == []
    with pytest.raises(LedgerRefused, match="exists already"):
        PrivacyLedger.initialize(store)
    _sql(store, "DELETE FROM das_ledger_entries")  # emptied behind the ledger's back ...
    _sql(store, "DELETE FROM das_ledger_key")
    with pytest.raises(LedgerRefused, match="emptied is not a new ledger"):
        PrivacyLedger.initialize(store)  # ... is not a place for a new one
    if store.path is not None:
        assert oct(store.path.stat().st_mode & 0o777) == "0o600"


def test_production_never_creates_a_ledger_and_refuses_a_missing_or_emptied_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAS_PRODUCTION", "1")
    monkeypatch.delenv("DAS_LEDGER_URL", raising=False)
    monkeypatch.delenv("DAS_LEDGER_DIR", raising=False)
    with pytest.raises(LedgerRefused, match="required under DAS_PRODUCTION"):
        open_ledger()
    folder = tmp_path / "typo"
    monkeypatch.setenv("DAS_LEDGER_DIR", str(folder))
    with pytest.raises(LedgerRefused, match="absent or never initialized"):
        open_ledger()
    assert not folder.exists()  # nothing created
    store = LedgerStore.in_directory(folder)
    PrivacyLedger.initialize(store)
    with pytest.raises(LedgerRefused, match="has no charter, and DAS_PRODUCTION asks"):
        open_ledger()  # production spends only under approvers' signatures
    store.path.unlink()
    ledger_id = chartered(store, tmp_path).info().ledger_id
    with pytest.raises(LedgerRefused, match=f"DAS_LEDGER_ID is required.*={ledger_id}"):
        open_ledger()  # production pins the ledger it spends against
    monkeypatch.setenv("DAS_LEDGER_ID", ledger_id)
    assert open_ledger().created is False
    store.path.write_bytes(b"")  # truncated to 0 bytes
    with pytest.raises(LedgerRefused, match="empty file: it was emptied or truncated"):
        open_ledger()
    with pytest.raises(LedgerRefused, match="empty"):
        PrivacyLedger.initialize(store)  # an emptied ledger is not a new one


def test_outside_production_the_default_is_one_ledger_per_user_created_once(
    private_default_ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAS_LEDGER_DIR", raising=False)
    monkeypatch.delenv("DAS_PRODUCTION", raising=False)
    first = open_ledger()
    assert first.created and Path(first.info.location).parent == private_default_ledger
    second = open_ledger()
    assert not second.created and second.info.ledger_id == first.info.ledger_id
    Path(first.info.location).write_bytes(b"")  # emptied: never silently re-created
    with pytest.raises(LedgerRefused, match="emptied or truncated"):
        open_ledger()


def test_a_pinned_ledger_id_refuses_another_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "real")).info()
    PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "other"))
    monkeypatch.setenv("DAS_LEDGER_ID", real.ledger_id)
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "other"))
    with pytest.raises(LedgerRefused, match="points at another ledger"):
        open_ledger()
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "real"))
    assert open_ledger().info.ledger_id == real.ledger_id


# --- runs, approvals, spend -------------------------------------------------------------------


def test_a_run_id_is_bound_to_its_output_parameters_and_randomness(
    plain: PrivacyLedger,
) -> None:
    ledger = plain
    assert ledger.open_run(opening("r")).attempt == 1
    assert ledger.open_run(opening("r")).attempt == 2  # a resume
    for other, changed in (
        (opening("r", output="/releases/elsewhere"), "output"),
        (opening("r", {"US": Fraction(1)}), "budgets"),
        (opening("r", seed_mode="seeded:3"), "seed_mode"),
        (opening("r", product="phsafe"), "product"),
    ):
        with pytest.raises(LedgerRefused, match=f"bound in the ledger to another run .*{changed}"):
            ledger.open_run(other)
    assert ledger.run("r").attempt == 2


def test_production_spends_only_what_a_person_approved_for_that_dataset(
    ledger: PrivacyLedger,
) -> None:
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("a"))
    with pytest.raises(ApprovalRequired) as refused:
        authorize(ledger, "a", data, production=True)
    assert [p.cumulative for p in refused.value.passes] == [Fraction("4.944")]
    assert "ceiling 10" in str(refused.value)
    approval = approve(ledger, data)
    assert approval.passes["US"]["cumulative"] == "618/125"  # 4.944
    assert [p.prior for p in authorize(ledger, "a", data, production=True)] == [0]
    assert ledger.run("a").approval == approval.approval_id
    # The approval is used: a second run on the same records needs its own.
    ledger.open_run(opening("b"))
    with pytest.raises(ApprovalRequired, match=re.escape("earlier 4.944 + this run 4.944")):
        authorize(ledger, "b", data, production=True)
    # An approval of another dataset or another config does not count.
    approve(ledger, ledger.dataset_id("e" * 64))
    with pytest.raises(ApprovalRequired):
        authorize(ledger, "b", data, production=True)
    second = approve(ledger, data)
    assert second.passes["US"]["prior"] == "618/125"
    passes = authorize(ledger, "b", data, production=True)
    assert passes[0].cumulative == Fraction("9.888") and passes[0].prior_runs == ("a",)
    assert ledger.totals(data) == {"US": {"zcdp": "9.888"}}


def test_an_approval_given_before_another_spend_no_longer_covers_the_new_total(
    ledger: PrivacyLedger,
) -> None:
    data = ledger.dataset_id("f" * 64)
    approve(ledger, data)
    approve(ledger, data)  # both approved against an earlier total of 0
    for run_id in ("a", "b"):
        ledger.open_run(opening(run_id))
    authorize(ledger, "a", data, production=True)
    with pytest.raises(ApprovalRequired):
        authorize(ledger, "b", data, production=True)  # 9.888 > the 4.944 approved


def test_nothing_passes_the_ceiling_neither_an_approval_nor_a_run(plain: PrivacyLedger) -> None:
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    with pytest.raises(CeilingExceeded, match="ceiling of rho 10"):
        approve(ledger, data, {"US": Fraction(11)})
    with pytest.raises(CeilingExceeded):
        approve(ledger, data, {"US": Fraction(10) ** 300})
    with pytest.raises(LedgerRefused, match="infinite budget"):
        approve(ledger, data, {"US": float("inf")})
    approve(ledger, data, {"US": Fraction(6)})
    ledger.open_run(opening("big", {"US": Fraction(6)}))
    authorize(ledger, "big", data, production=False)
    with pytest.raises(CeilingExceeded, match="ceiling of rho 10"):
        approve(ledger, data, {"US": Fraction(6)})  # 6 spent: another 6 would make 12
    # Outside production too: a private run's cumulative total stays under the ceiling.
    ledger.open_run(opening("more", {"US": Fraction(5)}))
    with pytest.raises(CeilingExceeded, match=re.escape("= 11")):
        authorize(ledger, "more", data, production=False, accepted={"US": Fraction(11)})


def test_outside_production_a_further_spend_needs_the_exact_cumulative_total(
    plain: PrivacyLedger,
) -> None:
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    for run_id in ("a", "b"):
        ledger.open_run(opening(run_id))
    authorize(ledger, "a", data, production=False)  # the first spend needs nothing
    with pytest.raises(CumulativeSpendRequired) as refused:
        authorize(ledger, "b", data, production=False)
    # run a holds its spend but never published: resuming it, not a second spend, is the way
    assert "run a (safetab-p, authorized" in str(refused.value)
    assert "--run-id a" in refused.value.explained("cli")
    assert "--cumulative-total" not in refused.value.explained("cli")
    _publish(ledger, "a")
    with pytest.raises(CumulativeSpendRequired) as refused:
        authorize(ledger, "b", data, production=False)
    assert refused.value.explained("cli").endswith("--cumulative-total US=9.888")
    assert 'cumulative_total = {"US": "9.888"}' in refused.value.explained("deployment")
    with pytest.raises(CumulativeSpendRequired, match="does not match"):
        authorize(ledger, "b", data, production=False, accepted={"US": Fraction(9)})
    with pytest.raises(CumulativeSpendRequired, match="does not have"):
        authorize(ledger, "b", data, production=False, accepted={"PR": Fraction(1)})
    authorize(ledger, "b", data, production=False, accepted={"US": Fraction("9.888")})


def test_pure_dp_and_zcdp_spends_compose_exactly(plain: PrivacyLedger) -> None:
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("pure", {"US": Fraction(2)}, definition="puredp"))
    authorize(ledger, "pure", data, production=False)
    # ε = 2 pure DP is ρ = ε²/2 = 2 zCDP; the zCDP run adds 0.5.
    ledger.open_run(opening("z", {"US": Fraction(1, 2)}))
    authorize(ledger, "z", data, production=False, accepted={"US": Fraction("2.5")})
    # Under pure DP a zCDP spend has no equivalent: the cumulative ε is infinite.
    ledger.open_run(opening("p2", {"US": Fraction(1)}, definition="puredp"))
    with pytest.raises(CeilingExceeded, match="Infinity"):
        authorize(ledger, "p2", data, production=False, accepted={"US": float("inf")})


def test_an_infinity_run_leaves_no_room_for_a_private_release(plain: PrivacyLedger) -> None:
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("exact", {"US": float("inf")}, markers=("NOT-PRIVATE",)))
    authorize(ledger, "exact", data, production=False)  # golden tests: allowed, marked
    ledger.open_run(opening("finite"))
    with pytest.raises(CeilingExceeded, match="Infinity"):
        authorize(ledger, "finite", data, production=False, accepted={"US": float("inf")})
    assert ledger.totals(data) == {"US": {"zcdp": "Infinity"}}


def test_a_run_that_never_drew_returns_its_spend_one_that_drew_never_does(
    ledger: PrivacyLedger,
) -> None:
    data = ledger.dataset_id("f" * 64)
    approval = approve(ledger, data)
    ledger.open_run(opening("a"))
    authorize(ledger, "a", data, production=True)
    assert ledger.release_reservation("a", "ValidationFailed")
    assert ledger.run("a").status == "released" and ledger.totals(data) == {}
    ledger.open_run(opening("b"))
    authorize(ledger, "b", data, production=True)  # the approval came back
    assert ledger.run("b").approval == approval.approval_id
    ledger.start_drawing("b", 1)
    assert not ledger.release_reservation("b", "crash")  # it may have drawn
    assert ledger.run("b").status == "drawing" and ledger.totals(data) == {"US": {"zcdp": "4.944"}}


def test_a_run_bound_to_one_dataset_cannot_resume_on_other_records(plain: PrivacyLedger) -> None:
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("a"))
    authorize(ledger, "a", data, production=False)
    ledger.open_run(opening("a"))
    assert authorize(ledger, "a", data, production=False)[0].this_run == Fraction("4.944")
    with pytest.raises(LedgerRefused, match="read other records in an earlier attempt"):
        authorize(ledger, "a", ledger.dataset_id("e" * 64), production=False)


def test_dataset_ids_are_keyed_by_the_ledger(tmp_path: Path, plain: PrivacyLedger) -> None:
    ledger = plain
    other = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "other"))
    assert ledger.dataset_id("f" * 64) == ledger.dataset_id("f" * 64)
    assert ledger.dataset_id("f" * 64) != other.dataset_id("f" * 64)
    assert ledger.dataset_id("f" * 64) != ledger.dataset_id("e" * 64)


# --- draws ------------------------------------------------------------------------------------


def test_draws_are_charged_then_recorded_once_by_the_current_attempt_only(
    plain: PrivacyLedger,
) -> None:
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("a"))
    authorize(ledger, "a", data, production=False)
    with pytest.raises(DrawRefused, match="not drawing"):
        ledger.charge_draw("a", 1, "US/USA/1/stage-1")
    ledger.start_drawing("a", 1)
    with pytest.raises(DrawRefused, match="without being charged"):
        ledger.record_draw("a", 1, "US/USA/1/stage-1", "d" * 64, 5, "x.npy")
    ledger.charge_draw("a", 1, "US/USA/1/stage-1")
    first = ledger.record_draw("a", 1, "US/USA/1/stage-1", "d" * 64, 5, "x.npy")
    # A second process that drew the same measurement finds the first record standing.
    assert ledger.record_draw("a", 1, "US/USA/1/stage-1", "e" * 64, 5, "y.npy") == first
    ledger.open_run(opening("a"))  # a Retry: attempt 2 takes over
    with pytest.raises(DrawRefused, match="superseded by attempt 2"):
        ledger.charge_draw("a", 1, "US/USA/1/stage-2")
    assert ledger.draws("a")["US/USA/1/stage-1"].file == "x.npy"


def test_a_run_seals_one_release_a_resume_may_publish_only_that_again(
    plain: PrivacyLedger,
) -> None:
    """The same noise on other counts releases their difference: once a run sealed its
    release, other content is refused, the same content gets the same entry back."""
    ledger = plain
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("a"))
    authorize(ledger, "a", data, production=False)
    ledger.start_drawing("a", 1)
    first = ledger.seal_release("a", "1" * 64)
    assert ledger.seal_release("a", "1" * 64) == first
    with pytest.raises(ReleaseDiffers, match="already sealed its release"):
        ledger.seal_release("a", "2" * 64)
    ledger.complete("a", "m" * 64, "/releases/a")
    with pytest.raises(ReleaseDiffers):  # nor after it completed
        ledger.seal_release("a", "2" * 64)


# --- tamper evidence --------------------------------------------------------------------------


def _sql(store: LedgerStore, statement: str) -> None:
    """What a hostile operator with the database's credentials does, behind the ledger."""
    with store.engine.begin() as db:
        db.exec_driver_sql(statement)


def _publish(ledger: PrivacyLedger, run_id: str) -> None:
    """As a run that drew and published its release."""
    ledger.start_drawing(run_id, 1)
    ledger.seal_release(run_id, "c" * 64)
    ledger.complete(run_id, "m" * 64, f"/releases/{run_id}")


def _spent_ledger(ledger: PrivacyLedger) -> str:
    data = ledger.dataset_id("f" * 64)
    approve(ledger, data)
    ledger.open_run(opening("a"))
    authorize(ledger, "a", data, production=True)
    return data


def test_an_edited_or_deleted_entry_breaks_the_chain_and_the_ledger_is_refused(
    store: LedgerStore, ledger: PrivacyLedger
) -> None:
    _spent_ledger(ledger)
    assert ledger.verify() == []
    _sql(  # the spend rewritten to a tenth of itself
        store,
        "UPDATE das_ledger_entries SET payload = replace(payload, '618/125', '309/625') "
        "WHERE kind = 'spend-authorized'",
    )
    assert any("altered" in problem for problem in ledger.verify())
    with pytest.raises(LedgerRefused, match="fails its integrity check"):
        ledger.require_intact()


def test_a_forged_well_hashed_entry_that_un_counts_a_spend_is_ignored_and_named(
    ledger: PrivacyLedger,
) -> None:
    """Someone who can write the database and knows the chain's hash appends entries that
    would return a spend that drew: the chain is intact, but the run still counts, verify names
    the entries and runs refuse the ledger."""
    data = _spent_ledger(ledger)
    ledger.start_drawing("a", 1)
    ledger.charge_draw("a", 1, "US/USA/1/stage-1")
    totals = ledger.totals(data)
    with ledger.store.transaction(write=True) as db:
        db.append("run-released", {"reason": "records changed"}, run_id="a")
        db.append(
            "spend-authorized", {"passes": []}, run_id="a", dataset=ledger.dataset_id("e" * 64)
        )
    assert ledger.run("a").status == "drawing" and ledger.totals(data) == totals
    problems = ledger.verify()
    assert any("run a: entry" in p and "returns the spend of a run that drew" in p
               for p in problems)  # fmt: skip
    assert any("authorizes a run already counted as spent" in p for p in problems)
    with pytest.raises(LedgerRefused, match="fails its integrity check"):
        ledger.require_intact()


def test_a_deleted_middle_entry_or_a_replaced_key_is_found(
    store: LedgerStore, ledger: PrivacyLedger
) -> None:
    _spent_ledger(ledger)
    _sql(store, "DELETE FROM das_ledger_entries WHERE kind = 'approval'")
    assert any("missing" in problem for problem in ledger.verify())
    _sql(store, "UPDATE das_ledger_key SET key = 'forged'")
    assert any("key does not match" in problem for problem in ledger.verify())


def test_a_ledger_cut_back_to_before_a_release_is_refused_by_the_releases_anchor(
    tmp_path: Path, store: LedgerStore, ledger: PrivacyLedger
) -> None:
    """A chain whose tail was cut is still a chain: the releases beside the output carry the
    heads they were published at, and those must be in the ledger."""
    import json

    _spent_ledger(ledger)
    info = ledger.info()
    published = tmp_path / "releases" / "earlier"
    published.mkdir(parents=True)
    (published / "MANIFEST.json").write_text(json.dumps({"run_id": "a", "ledger": info.head()}))
    output = tmp_path / "releases" / "next"
    assert release_anchor_problems(ledger, info, output) == []
    _sql(store, "DELETE FROM das_ledger_entries WHERE seq > 1")
    assert ledger.verify() == []  # what is left is a valid chain ...
    problems = release_anchor_problems(ledger, ledger.info(), output)
    assert problems and "cut or rewritten" in problems[0]  # ... but not the releases' ledger
    other = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "swapped"))
    problems = release_anchor_problems(other, other.info(), output)
    assert "was recorded in ledger" in problems[0]


def test_releases_of_a_replaced_ledger_are_counted_and_the_next_step_keeps_them_apart(
    tmp_path: Path,
) -> None:
    """A ledger that replaced another (moved to PostgreSQL): the releases beside the output
    were made with the old one. The refusal counts them and names the first few, not each
    (it ran to a thousand characters), and its next step is a command that, done as printed,
    lets the next run start."""
    import json
    import shlex

    old = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "old"))
    releases = tmp_path / "the releases"  # a space: the printed command quotes it
    for number in range(12):
        (releases / f"r{number:02}").mkdir(parents=True)
        (releases / f"r{number:02}" / "MANIFEST.json").write_text(
            json.dumps({"run_id": f"r{number:02}", "ledger": old.info().head()})
        )
    new = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "new"))
    output = releases / "next"
    (problem,) = release_anchor_problems(new, new.info(), output)
    assert problem == (
        f"12 releases (r00, r01, r02 and 9 more) were recorded in ledger {old.info().ledger_id},"
        f" not in this one ({new.info().ledger_id})"
    )
    step = anchor_remedy(new.info(), output).for_context("deployment")
    assert step is not None and "docs/how-to/ledger-on-postgresql.md" in step
    move = shlex.split(step.split(": mv ", 1)[1].split(";", 1)[0])
    assert len(move) == 2 and Path(move[0]) == releases
    Path(move[0]).rename(move[1])  # what `mv` does
    assert release_anchor_problems(new, new.info(), output) == []
    assert len(list(Path(move[1]).iterdir())) == 12


def test_a_list_in_a_message_is_folded_to_the_first_few_and_a_count() -> None:
    assert folded([]) == ""
    assert folded(["a", "b", "c", "d"]) == "a, b, c, d"  # "1 more" would be no shorter
    assert folded(list("abcdefg")) == "a, b, c and 4 more"
    assert folded(list("abcdefg"), sep="; ") == "a; b; c; 4 more"
    assert folded(list("abcdefg"), shown=1) == "a and 6 more"


# --- concurrency ------------------------------------------------------------------------------


def _racers(monkeypatch: pytest.MonkeyPatch) -> multiprocessing.context.BaseContext:
    """Processes to race each other: forked from a server that imported this module once (a
    spawned child imports it again, 1.2 CPU-s each, 28 of them in this module); every racer
    is still its own process, with its own database connections, made after the fork. The
    server starts with the interpreter's own ``sys.path``, hence this folder on PYTHONPATH
    (else the preload fails silently and each racer imports the module after all)."""
    here = str(Path(__file__).parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def _open_in_process(environ: dict[str, str], start, results) -> None:
    start.wait()
    try:
        opened = open_ledger(environ)
        results.put(("created" if opened.created else "opened", opened.info.ledger_id))
    except Exception as exc:  # the test reports what each process met
        results.put((type(exc).__name__, str(exc)))


@pytest.mark.integration  # processes racing to create one ledger
def test_runs_that_find_no_ledger_at_once_create_one_ledger_together(
    store: LedgerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside production the first run creates the ledger: four at the same instant make one
    ledger, all four use it, none meets a half-made one (it appears whole or not at all)."""
    context = _racers(monkeypatch)
    for attempt in range(3):
        if store.path is None:
            _sql(store, "DROP TABLE IF EXISTS das_ledger_entries, das_ledger_key")
            environ = {"DAS_LEDGER_URL": store.url}
        else:
            environ = {"DAS_LEDGER_DIR": str(tmp_path / f"ledger-{attempt}")}
        start, results = context.Barrier(4), context.Queue()
        workers = [
            context.Process(target=_open_in_process, args=(environ, start, results))
            for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        outcomes = sorted(results.get(timeout=60) for _ in workers)
        for worker in workers:
            worker.join(10)
        assert [kind for kind, _ in outcomes] == ["created", "opened", "opened", "opened"], outcomes
        assert len({ledger_id for _, ledger_id in outcomes}) == 1
        opened = open_ledger(environ)
        assert opened.ledger.verify() == [] and opened.info.head_seq == 1
        if store.path is None:
            continue
        folder = Path(environ["DAS_LEDGER_DIR"])
        assert [p.name for p in folder.iterdir()] == [store.path.name]  # no drafts left
        assert oct((folder / store.path.name).stat().st_mode & 0o777) == "0o600"


def _authorize_in_process(url: str, run_id: str, key: str, start, results) -> None:
    ledger = PrivacyLedger(LedgerStore(url))
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening(run_id))
    start.wait()
    try:
        ledger.authorize(run_id, data, production=True, signer=RunSigner(Path(key)))
        results.put((run_id, "authorized"))
    except RunRefused:
        results.put((run_id, "refused"))


@pytest.mark.integration  # two processes racing for one approval
def test_two_processes_authorizing_at_once_use_one_approval_once(
    store: LedgerStore, ledger: PrivacyLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    approve(ledger, ledger.dataset_id("f" * 64))
    context = _racers(monkeypatch)
    start, results = context.Barrier(2), context.Queue()
    workers = [
        context.Process(
            target=_authorize_in_process,
            args=(store.url, name, str(RUNNER[ledger.location]), start, results),
        )
        for name in ("one", "two")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    outcomes = sorted(results.get(timeout=5)[1] for _ in workers)
    assert outcomes == ["authorized", "refused"]
    assert ledger.verify() == []


def test_a_postgresql_ledger_takes_its_password_from_a_0600_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_cluster
) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_cluster.sync_url)
    secret = tmp_path / "ledger-password"
    secret.write_text(url.password + "\n")
    monkeypatch.setenv("DAS_LEDGER_URL", url.set(password=None).render_as_string())
    monkeypatch.setenv("DAS_LEDGER_PASSWORD_FILE", str(secret))
    monkeypatch.delenv("DAS_PRODUCTION", raising=False)
    secret.chmod(0o644)
    with pytest.raises(LedgerRefused, match="chmod 600"):
        open_ledger()
    secret.chmod(0o600)
    with LedgerStore(postgres_cluster.sync_url).engine.begin() as db:
        db.exec_driver_sql("DROP TABLE IF EXISTS das_ledger_entries, das_ledger_key")
    opened = open_ledger()
    assert opened.created and url.password not in opened.info.location


def test_a_ledger_password_on_the_command_line_is_refused(tmp_path: Path, capsys) -> None:
    from das.cli import main

    url = "postgresql+psycopg://das:s3cret@127.0.0.1:5432/das"
    assert main(["ledger", "init", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "holds a password" in err and "DAS_LEDGER_PASSWORD_FILE" in err and "s3cret" not in err


def test_a_refusal_and_its_next_step_read_as_two_sentences() -> None:
    """The next step follows the reason as a sentence of its own, in the syntax of where the
    run was started, whether or not the reason ended with a full stop."""
    remedy = Remedy(cli="das ledger approve ...", deployment="approve it in the UI")
    for reason in ("Nothing was read or drawn", "Nothing was read or drawn."):
        refusal = RunRefused(reason, remedy)
        assert (
            refusal.explained("cli")
            == "Nothing was read or drawn. Next step: das ledger approve ..."
        )
        assert refusal.explained("deployment").endswith("drawn. Next step: approve it in the UI")
    closing = RunRefused("refused (a reason in brackets)", remedy).explained("cli")
    assert closing.startswith("refused (a reason in brackets). Next step: ")
    assert RunRefused("no step").explained("cli") == "no step"


def test_a_withdrawn_request_can_no_longer_be_signed_or_spent_and_a_retry_asks_anew(
    ledger: PrivacyLedger,
) -> None:
    """The request of a run cancelled while it waited for its approvers is withdrawn: a
    signature that comes later is refused and authorizes nothing, the run's Retry does not
    find it (it asks anew), and the ledger stays intact."""
    data = ledger.dataset_id("f" * 64)
    ledger.open_run(opening("a"))
    passes, ceiling, chain, _ = ledger.plan_spend("safetab-p", data, SEAL, "zcdp", US)
    statement = approval_statement(
        ledger_id=ledger.info().ledger_id, charter=chain.in_force, product="safetab-p",
        dataset=data, parameters={"digest": SEAL, "files": {}}, definition="zcdp",
        passes=passes, ceiling=ceiling, note="test", requested_by="flow run a", run_id="a",
    )  # fmt: skip
    request = ledger.record_approval(statement)  # the waiting run's request: unsigned
    assert ledger.approval_request("a") is not None
    assert ledger.withdraw_approval(request.approval_id, "flow run a was cancelled", "das")
    assert not ledger.withdraw_approval(request.approval_id, "again", "das")  # closed once
    signature = sign(canonical_json(statement), APPROVAL_NAMESPACE, APPROVER[ledger.location])
    with pytest.raises(LedgerRefused, match="was withdrawn"):
        ledger.sign_approval(request.approval_id, signature)
    assert ledger.approval_request("a") is None
    with pytest.raises(ApprovalRequired):
        authorize(ledger, "a", data, production=True)
    (listed,) = ledger.approvals()
    assert listed["rejection"]["withdrawn"] and listed["rejection"]["by"] == "das"
    assert ledger.verify() == []
