"""The persisted noise store: draw once, reuse on rerun, refuse tampering and changed queries."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from das.privacy.accounting import (
    BudgetExceededError,
    Measurement,
    PrivacyAccountant,
    noise_digest,
)
from das.privacy.mechanisms import DiscreteGaussianMechanism
from das.runs.folder import RunFolder, new_run_id, safe_name
from das.runs.noise_store import (
    NoiseDigestError,
    NoiseStore,
    describe_streams,
    seeded_streams,
)

PARTITION = "US/COUNTY/1"


def _measurement(stage: str = "stage-1", budget: Fraction = Fraction(1, 2)) -> Measurement:
    return Measurement.create(
        f"{PARTITION}/{stage}", "zcdp", budget, 1, partition=PARTITION, branch="adaptive",
        stage=stage, confidence=0.95,
    )  # fmt: skip


def _store(tmp_path: Path, total: Fraction = Fraction(1), seed: int = 4) -> NoiseStore:
    folder = RunFolder(tmp_path, "run-1").create()
    return NoiseStore.open(folder, PARTITION, "zcdp", total, seeded_streams(seed))


@pytest.fixture
def sampler_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the draws (the release's one draw path: ``sample_blocks``)."""
    calls: list[int] = []
    original = DiscreteGaussianMechanism.sample_blocks

    def counting(self, size, rng=None, *args, **kwargs):
        calls.append(int(size))
        return original(self, size, rng, *args, **kwargs)

    monkeypatch.setattr(DiscreteGaussianMechanism, "sample_blocks", counting)
    return calls


def test_draw_persists_noise_and_ledger_then_a_reopened_store_reuses(
    tmp_path: Path, sampler_calls: list[int]
) -> None:
    store = _store(tmp_path)
    m = _measurement()
    first = store.noise_for(m, 50, store.accountant)
    assert first.dtype == np.int64 and first.shape == (50,) and np.any(first != 0)
    assert store.fresh == [m.name] and sampler_calls == [50]
    ledger = json.loads(store.folder.accountant_path(PARTITION).read_text())
    assert ledger["measurements"][0]["noise_digest"] == noise_digest(first)
    again = _store(tmp_path, seed=99)  # another seed: only stored noise can give `first`
    reused = again.noise_for(m, 50, again.accountant)
    assert np.array_equal(reused, first) and again.reused == [m.name]
    assert sampler_calls == [50]  # no second draw
    assert again.accountant.spent == Fraction(1, 2)  # not charged twice


def test_tampered_or_missing_noise_is_refused_not_redrawn(
    tmp_path: Path, sampler_calls: list[int]
) -> None:
    store = _store(tmp_path)
    m = _measurement()
    noise = store.noise_for(m, 10, store.accountant)
    path = store.folder.noise_path(m.name)
    np.save(path, noise + 1)
    reopened = _store(tmp_path)
    with pytest.raises(NoiseDigestError, match="does not match"):
        reopened.noise_for(m, 10, reopened.accountant)
    with pytest.raises(NoiseDigestError, match="does not match"):  # wrong size
        np.save(path, noise)
        reopened.noise_for(m, 11, reopened.accountant)
    path.unlink()
    with pytest.raises(NoiseDigestError, match="missing") as refused:
        reopened.noise_for(m, 10, reopened.accountant)
    assert "cannot be resumed" in str(refused.value) and "another run id" in str(refused.value)
    assert sampler_calls == [10]


def test_changed_parameters_cannot_reuse_and_overspend_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.noise_for(_measurement(), 5, store.accountant)
    reopened = _store(tmp_path)
    with pytest.raises(ValueError, match="different parameters"):
        reopened.noise_for(_measurement(budget=Fraction(1, 4)), 5, reopened.accountant)
    with pytest.raises(BudgetExceededError):
        reopened.noise_for(_measurement("stage-2", Fraction(3, 4)), 5, reopened.accountant)
    assert not reopened.folder.noise_path(f"{PARTITION}/stage-2").exists()
    with pytest.raises(ValueError, match="another definition or total"):
        _store(tmp_path, total=Fraction(2))


def test_charged_but_unrecorded_draw_is_drawn_once_without_a_second_charge(
    tmp_path: Path,
) -> None:
    folder = RunFolder(tmp_path, "run-1").create()
    crashed = PrivacyAccountant("zcdp", Fraction(1))
    crashed.charge(_measurement())  # the process died between charge and record
    folder.accountant_path(PARTITION).write_text(json.dumps(crashed.to_dict()))
    store = NoiseStore.open(folder, PARTITION, "zcdp", Fraction(1), seeded_streams(1))
    store.noise_for(_measurement(), 3, store.accountant)
    assert store.fresh == [_measurement().name] and store.accountant.spent == Fraction(1, 2)
    assert store.accountant.pending == ()


def test_seeded_streams_depend_on_seed_and_name_not_on_order() -> None:
    a, b = _measurement("stage-1"), _measurement("stage-2")
    first = seeded_streams(3)
    x_then_y = (first(a).uint64(4), first(b).uint64(4))
    second = seeded_streams(3)
    y_then_x = (second(b).uint64(4), second(a).uint64(4))
    assert np.array_equal(x_then_y[0], y_then_x[1]) and np.array_equal(x_then_y[1], y_then_x[0])
    assert not np.array_equal(seeded_streams(4)(a).uint64(4), x_then_y[0])
    assert describe_streams(3)["secure"] is False and describe_streams(None)["secure"] is True
    with pytest.raises(ValueError):
        seeded_streams(-1)


def test_draw_noise_routes_providers_and_draws_plain_rngs_itself(tmp_path: Path) -> None:
    from das.privacy.accounting import draw_noise
    from das.privacy.rng import seeded_rng

    store = _store(tmp_path)
    m = _measurement()
    via_hook = draw_noise(m, 6, store, store.accountant)
    assert store.fresh == [m.name] and np.array_equal(
        via_hook, np.load(store.folder.noise_path(m.name))
    )
    plain = PrivacyAccountant("zcdp", Fraction(1))
    direct = draw_noise(m, 6, seeded_rng(1), plain)
    assert plain.get(m.name).drawn and direct.shape == (6,)
    assert plain.get(m.name).noise_digest == noise_digest(direct)
    unrecorded = draw_noise(m, 6, seeded_rng(1), None)  # library use: no ledger
    assert np.array_equal(unrecorded, direct)


def test_every_release_draw_goes_through_the_block_sampler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store (in memory and streamed) and draw_noise never call ``sample``: the audit,
    which draws with ``release_draw`` too, exercises exactly what a release draws with. The
    draws are still exactly ``sample``'s for the same source state."""
    from das.privacy.accounting import draw_noise
    from das.privacy.rng import seeded_rng

    m = _measurement()
    expected = m.mechanism.sample(5_000_000, seeded_streams(4)(m))  # more than one block

    def forbidden(self, *args, **kwargs):
        raise AssertionError("a release path drew with sample()")

    monkeypatch.setattr(DiscreteGaussianMechanism, "sample", forbidden)
    store = _store(tmp_path)
    assert np.array_equal(store.noise_for(m, 5_000_000, store.accountant), expected)
    streamed = _store(tmp_path / "streamed")
    assert np.array_equal(streamed.noise_file_for(m, 5_000_000, streamed.accountant), expected)
    plain = draw_noise(m, 1000, seeded_rng(3), None)
    assert np.array_equal(plain, DiscreteGaussianMechanism.sample_blocks(
        m.mechanism, 1000, seeded_rng(3)).__next__())  # fmt: skip


def test_run_folder_layout_and_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAS_STATE_DIR", str(tmp_path / "state"))
    folder = RunFolder(tmp_path / "out", "abc").create()
    assert folder.noise_dir.is_dir() and folder.accountants_dir.is_dir()
    # Run state lives under the state root, never inside (nor beside) the release.
    assert folder.root == tmp_path / "state" / "runs" / "abc" and folder.exists()
    assert folder.staging_dir == tmp_path / "out.das" / "staging" / "abc"
    assert not (tmp_path / "out").exists()
    assert safe_name("US/USA/1/stage-1") == "US__USA__1__stage-1"
    assert new_run_id() != new_run_id()
    for bad in ("", "../x", "a/b", "x" * 200):
        with pytest.raises(ValueError, match="Invalid run id"):
            RunFolder(tmp_path, bad)


def test_secure_streams_use_the_os_csprng() -> None:
    from das.runs.noise_store import secure_streams

    source = secure_streams()(_measurement())
    assert source.is_secure and source is secure_streams()(_measurement("stage-2"))
