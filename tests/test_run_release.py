"""The pieces of release integrity, alone: the dataset ledger, run identity, the output lock and
lease, the staged release and the production policy (das/runs/)."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from das.privacy.accounting import Measurement
from das.runs.folder import RunFolder
from das.runs.identity import RunIdentity, seed_mode
from das.runs.ledger import (
    CumulativeSpendRequired,
    PrivacyLedger,
    RunSpend,
    dataset_key,
    decimal_text,
    parse_total,
)
from das.runs.noise_store import NoiseStore, seeded_streams
from das.runs.policy import (
    RunRefused,
    check_release_policy,
    ledger_directory,
    privacy_markers,
)
from das.runs.release import (
    LeaseLost,
    OutputLock,
    ReleaseStager,
    new_lease,
    read_manifest,
)

INPUTS = {"person-records.txt": "ab" * 32}


def _spend(run_id: str, budget: str = "4.944", definition: str = "zcdp", **extra) -> RunSpend:
    fields = {
        "dataset": dataset_key(INPUTS),
        "run_id": run_id,
        "product": "safetab-p",
        "definition": definition,
        "budgets": {"US": Fraction(budget)},
        "seed_mode": "secure",
        "not_private": False,
        "config_sha256": "c" * 64,
        "inputs": INPUTS,
        "output": "/releases/out",
    }
    return RunSpend(**{**fields, **extra})


# --- ledger ---------------------------------------------------------------------------------


def test_decimal_text_is_exact_and_parse_total_inverts_it() -> None:
    assert decimal_text(Fraction("9.888")) == "9.888"
    assert decimal_text(Fraction(4944, 1000) * 2) == "9.888"
    assert decimal_text(Fraction(1, 3)) == "1/3"
    assert decimal_text(Fraction(7)) == "7"
    assert decimal_text(float("inf")) == "Infinity"
    for text in ("9.888", "1/3", "0.000135", "Infinity"):
        assert decimal_text(parse_total(text)) == text
    with pytest.raises(ValueError):
        parse_total("lots")


def test_a_second_run_on_the_same_data_needs_the_exact_cumulative_total(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path)
    first = ledger.reserve(_spend("a"))
    assert [p.cumulative for p in first] == [Fraction("4.944")]
    with pytest.raises(CumulativeSpendRequired, match=re.escape("--cumulative-total US=9.888")):
        ledger.reserve(_spend("b"))
    with pytest.raises(CumulativeSpendRequired, match="does not match"):
        ledger.reserve(_spend("b"), {"US": Fraction("9")})
    second = ledger.reserve(_spend("b"), {"US": Fraction("9.888")})
    assert second[0].prior == Fraction("4.944") and second[0].prior_runs == ("a",)
    assert ledger.totals(dataset_key(INPUTS)) == {"US": {"zcdp": "9.888"}}
    # The same run id resumes its reservation: nothing more is spent, no total is needed.
    ledger.reserve(_spend("a"))
    assert len(ledger.spends()) == 2


def test_a_run_that_never_drew_spends_nothing_and_one_that_drew_is_never_unspent(
    tmp_path: Path,
) -> None:
    ledger = PrivacyLedger(tmp_path)
    key = dataset_key(INPUTS)
    ledger.reserve(_spend("a"))
    ledger.set_status(key, "a", "released")  # e.g. validation failed
    ledger.reserve(_spend("b"))  # no earlier spend: no total needed
    ledger.set_status(key, "b", "drawing")
    ledger.set_status(key, "b", "released")  # refused: it may have drawn
    assert {s["run_id"]: s["status"] for s in ledger.spends()} == {"a": "released", "b": "drawing"}
    with pytest.raises(CumulativeSpendRequired):
        ledger.reserve(_spend("c"))


def test_pure_dp_and_zcdp_spends_compose_exactly(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path)
    ledger.reserve(_spend("pure", "2", "puredp"))
    # ε = 2 pure DP is ρ = ε²/2 = 2 zCDP; the zCDP run adds 0.5.
    ledger.reserve(_spend("z", "0.5"), {"US": Fraction("2.5")})
    # Under pure DP, a zCDP spend has no equivalent: the cumulative ε is infinite.
    with pytest.raises(CumulativeSpendRequired, match="US=Infinity"):
        ledger.reserve(_spend("p2", "1", "puredp"))


def test_other_passes_and_datasets_are_independent(tmp_path: Path) -> None:
    ledger = PrivacyLedger(tmp_path)
    ledger.reserve(_spend("us"))
    ledger.reserve(_spend("pr", budgets={"PR": Fraction("2.643")}))
    ledger.reserve(_spend("other", dataset="f" * 64))
    with pytest.raises(RunRefused, match="does not have"):
        ledger.reserve(_spend("x"), {"PR": Fraction(1)})


def _reserve_in_process(directory: str, run_id: str, start, results) -> None:
    start.wait()
    try:
        PrivacyLedger(directory).reserve(_spend(run_id))
        results.put((run_id, "reserved"))
    except CumulativeSpendRequired:
        results.put((run_id, "refused"))


def test_concurrent_reservations_in_two_processes_spend_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_reserve_in_process, args=(str(tmp_path), name, start, results))
        for name in ("one", "two")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    outcomes = sorted(results.get(timeout=5)[1] for _ in workers)
    assert outcomes == ["refused", "reserved"]
    assert len(PrivacyLedger(tmp_path).spends()) == 1


# --- identity -------------------------------------------------------------------------------


def test_identity_names_what_changed() -> None:
    base = RunIdentity("safetab-p", "1" * 64, {"codes.txt": "2" * 64}, INPUTS, {}, "seeded:7")
    assert base.differences(base) == []
    changed = RunIdentity(
        "safetab-p", "3" * 64, {}, {"person-records.txt": "9" * 64}, {}, seed_mode(None)
    )
    text = "; ".join(changed.differences(base))
    assert "config.json sha256 111111111111 → 333333333333" in text
    assert "spec file codes.txt removed" in text
    assert "input file person-records.txt sha256" in text
    assert "randomness seeded:7 → secure" in text
    assert RunIdentity.from_dict(json.loads(json.dumps(base.to_dict()))) == base


# --- lock, lease, noise store guard ---------------------------------------------------------


def _hold_lock(path: str, started, stop) -> None:
    lock = OutputLock(Path(path)).acquire()
    started.set()
    stop.wait(30)
    lock.release()


def test_the_output_lock_refuses_a_second_run_and_dies_with_its_holder(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "out", "a")
    context = multiprocessing.get_context("spawn")
    started, stop = context.Event(), context.Event()
    holder = context.Process(target=_hold_lock, args=(str(folder.lock_path), started, stop))
    holder.start()
    assert started.wait(30)
    with pytest.raises(RunRefused, match="another run is writing this output"):
        OutputLock(folder.lock_path, wait_seconds=0.5).acquire()
    holder.kill()  # kill -9: the kernel drops the lock
    holder.join()
    OutputLock(folder.lock_path, wait_seconds=5).acquire().release()


def test_a_lease_is_lost_when_the_owner_dies_or_a_newer_attempt_takes_over(
    tmp_path: Path,
) -> None:
    folder = RunFolder(tmp_path / "out", "a").create()
    lock = OutputLock(folder.lock_path).acquire()
    lease = new_lease(folder)
    lease.check()  # owner alive, token current
    newer = new_lease(folder)
    with pytest.raises(LeaseLost, match="newer attempt"):
        lease.check()
    newer.check()
    lock.release()
    with pytest.raises(LeaseLost, match="is gone"):
        newer.check()


def test_a_store_whose_run_is_gone_draws_nothing(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "out", "a").create()
    measurement = Measurement.create("US/USA/1/stage-1", "zcdp", Fraction(1, 2), 3)

    def gone() -> None:
        raise LeaseLost("the process that owns this run is gone; not drawing")

    store = NoiseStore.open(folder, "US/USA/1", "zcdp", Fraction(1, 2), seeded_streams(1), gone)
    with pytest.raises(LeaseLost):
        store.noise_for(measurement, 5, store.accountant)
    assert not list(folder.noise_dir.glob("*")) and measurement.name not in store.accountant


# --- staged release -------------------------------------------------------------------------


def _stage(folder: RunFolder, text: str, replace: bool = False) -> ReleaseStager:
    stager = ReleaseStager(folder, replace=replace)
    stager.check_target()
    staging = stager.prepare()
    (staging / "t1").mkdir()
    (staging / "t1" / "t1.txt").write_text(text)
    return stager


def test_a_release_appears_whole_with_its_manifest_and_is_never_overwritten(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    first = RunFolder(out, "a")
    result = _stage(first, "A|1\n").publish({"product": "p"}, {"t1/t1.txt": {"rows": 1}}, [])
    assert result["state"] == "published" and not first.staging_dir.exists()
    manifest = read_manifest(out)
    assert manifest["run_id"] == "a" and manifest["files"]["t1/t1.txt"]["rows"] == 1
    assert set(manifest["files"]) == {"t1/t1.txt", "audit.json"}
    # Another run may not publish over it ...
    with pytest.raises(RunRefused, match="holds the release of run a"):
        ReleaseStager(RunFolder(out, "b")).check_target()
    # ... unless it replaces it explicitly: the old release is moved aside, not deleted.
    result = _stage(RunFolder(out, "b"), "B|2\n", replace=True).publish(
        {"product": "p"}, {}, ["SEEDED"]
    )
    assert result["replaced"]["run_id"] == "a"
    assert (Path(result["replaced"]["moved_to"]) / "t1" / "t1.txt").read_text() == "A|1\n"
    assert (out / "SEEDED").is_file() and read_manifest(out)["markers"] == ["SEEDED"]


def test_a_rerun_of_the_published_run_keeps_an_identical_release(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "out", "a")
    _stage(folder, "A|1\n").publish({"product": "p", "seconds": 1}, {}, [])
    again = _stage(folder, "A|1\n").publish({"product": "p", "seconds": 2}, {}, [])
    assert again["state"] == "already-published"
    with pytest.raises(RuntimeError, match="differs"):
        _stage(folder, "A|2\n").publish({"product": "p"}, {}, [])
    assert (tmp_path / "out" / "t1" / "t1.txt").read_text() == "A|1\n"


def test_prepare_removes_killed_attempts_leftovers(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "out", "a")
    stale = folder.staging_dir.parent / "old-run"
    (stale / "t1").mkdir(parents=True)
    ReleaseStager(folder).prepare()
    assert not stale.exists() and folder.staging_dir.is_dir()


# --- policy ---------------------------------------------------------------------------------


def test_production_refuses_seeds_infinite_budgets_and_a_missing_ledger(tmp_path: Path) -> None:
    infinite = Measurement.create("US/USA/1/stage-1", "zcdp", float("inf"), 3)
    finite = Measurement.create("US/USA/1/stage-2", "zcdp", Fraction(1, 2), 3)
    production = {"DAS_PRODUCTION": "1", "DAS_LEDGER_DIR": str(tmp_path)}
    check_release_policy(None, [finite], production)
    for seed, plan, reason in (
        (3, [finite], "a seed was given"),
        (None, [finite, infinite], "1 query(ies) have an infinite budget"),
    ):
        with pytest.raises(RunRefused, match=re.escape(reason)):
            check_release_policy(seed, plan, production)
    with pytest.raises(RunRefused, match="DAS_LEDGER_DIR is not set"):
        check_release_policy(None, [finite], {"DAS_PRODUCTION": "1"})
    # Outside production: allowed, and marked.
    check_release_policy(3, [infinite], {})
    assert privacy_markers(3, [infinite]) == ["NOT-PRIVATE", "SEEDED"]
    assert privacy_markers(None, [finite]) == []
    assert ledger_directory(tmp_path / "out", {}) == tmp_path.resolve() / ".das-ledger"


def test_the_guard_is_checked_before_and_after_every_fresh_draw(tmp_path: Path) -> None:
    """Before charging and before persisting; a reuse from disk draws nothing, checks nothing."""
    folder = RunFolder(tmp_path / "out", "a").create()
    calls: list[int] = []
    store = NoiseStore.open(
        folder, "P", "zcdp", Fraction(1, 2), seeded_streams(1), lambda: calls.append(os.getpid())
    )
    measurement = Measurement.create("P/stage-1", "zcdp", Fraction(1, 2), 3)
    noise = store.noise_for(measurement, 4, store.accountant)
    assert len(calls) == 2 and noise.shape == (4,)
    again = NoiseStore.open(
        folder, "P", "zcdp", Fraction(1, 2), seeded_streams(2), lambda: calls.append(0)
    )
    assert np.array_equal(again.noise_for(measurement, 4, again.accountant), noise)
    assert len(calls) == 2 and again.reused == ["P/stage-1"]
