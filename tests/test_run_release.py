"""The pieces of release integrity, alone: the output lock and lease, the staged release and the
production policy (das/runs/; the privacy ledger has tests/test_ledger.py)."""

from __future__ import annotations

import multiprocessing
import os
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from das.privacy.accounting import Measurement
from das.production import production_mode
from das.refusal import RunRefused
from das.runs.folder import RunFolder
from das.runs.noise_store import NoiseStore, seeded_streams
from das.runs.policy import check_release_policy, privacy_markers
from das.runs.release import LeaseLost, OutputLock, ReleaseStager, new_lease
from das.trust import read_manifest

# --- lock, lease, noise store guard ---------------------------------------------------------


def _hold_lock(path: str, started, stop) -> None:
    lock = OutputLock(Path(path)).acquire()
    started.set()
    stop.wait(30)
    lock.release()


@pytest.mark.integration  # a lock held, then dropped, by another process
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
        {"product": "p"}, {"t1/t1.txt": {"rows": 1}}, ["SEEDED"]
    )
    assert result["replaced"]["run_id"] == "a"
    assert (Path(result["replaced"]["moved_to"]) / "t1" / "t1.txt").read_text() == "A|1\n"
    assert (out / "SEEDED").is_file() and read_manifest(out)["markers"] == ["SEEDED"]


def test_a_rerun_of_the_published_run_keeps_an_identical_release(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "out", "a")
    tables = {"t1/t1.txt": {"rows": 1}}
    _stage(folder, "A|1\n").publish({"product": "p", "seconds": 1}, tables, [])
    again = _stage(folder, "A|1\n").publish({"product": "p", "seconds": 2}, tables, [])
    assert again["state"] == "already-published"
    with pytest.raises(RuntimeError, match="differs"):
        _stage(folder, "A|2\n").publish({"product": "p"}, tables, [])
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
    with pytest.raises(RunRefused, match="neither DAS_LEDGER_DIR nor DAS_LEDGER_URL is set"):
        check_release_policy(None, [finite], {"DAS_PRODUCTION": "1"})
    with pytest.raises(RunRefused, match="cumulative total was named"):
        check_release_policy(None, [finite], production, cumulative_total={"US": "9.888"})
    # Outside production: allowed, and marked.
    check_release_policy(3, [infinite], {})
    assert privacy_markers(3, [infinite]) == ["NOT-PRIVATE", "SEEDED"]
    assert privacy_markers(None, [finite]) == []


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), ("true", True), ("TRUE", True), ("Yes", True), (" yes ", True),
     (None, False), ("", False), ("0", False), ("false", False), ("No", False)],
)  # fmt: skip
def test_das_production_takes_the_usual_spellings(value: str | None, on: bool) -> None:
    environ = {} if value is None else {"DAS_PRODUCTION": value}
    assert production_mode(environ) is on


@pytest.mark.parametrize("value", ["2", "prod", "on?", "ture", "1 1"])
def test_an_unknown_das_production_value_is_refused_not_read_as_off(value: str) -> None:
    with pytest.raises(RunRefused, match="refusing to guess"):
        production_mode({"DAS_PRODUCTION": value})
    with pytest.raises(RunRefused, match="refusing to guess"):
        check_release_policy(None, [], {"DAS_PRODUCTION": value})


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


def test_only_what_the_run_wrote_is_published(tmp_path: Path) -> None:
    """A file dropped into staging while the run writes (a record file, an exact table) or a
    table changed after the writer hashed it stops the publication: the MANIFEST and the
    certificate vouch for exactly what the run made (attacker pass)."""
    folder = RunFolder(tmp_path / "out", "a")
    stager = _stage(folder, "A|1\n")
    (stager.staging / "person-records.txt").write_text("secret|record\n")
    with pytest.raises(RuntimeError, match=r"did not write .person-records\.txt"):
        stager.publish({"product": "p"}, {"t1/t1.txt": {"rows": 1}}, [])
    assert not (tmp_path / "out").exists()
    stager = _stage(RunFolder(tmp_path / "out", "b"), "A|1\n")
    written = {"t1/t1.txt": {"rows": 1, "sha256": "0" * 64}}  # not the bytes now in staging
    with pytest.raises(RuntimeError, match=r"changed .* after the run wrote it"):
        stager.publish({"product": "p"}, written, [])
    assert not (tmp_path / "out").exists()
