"""The streamed (national-scale) SafeTab-P engine releases exactly what the in-memory one does.

Same per-measurement seeded streams (``seeded_streams``) in both engines: the in-memory
engine draws through an in-memory provider, the streamed one through the persisted noise
store's streamed method (one store per level, as the flow uses). Files are compared byte for
byte, on synthetic demo data (with tiny pieces and chunks, so every boundary is crossed), on
the Census toy inputs, and with Infinity budgets (the exact counts).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import das.safetab_p.streamed as streamed
from das.io.safetab_p import read_grf_c, read_person_records
from das.privacy.accounting import Measurement, PrivacyAccountant, compose, noise_digest
from das.runs.folder import RunFolder
from das.runs.noise_store import NoiseStore, seeded_streams
from das.safetab_p import spill
from das.safetab_p.engine import run_safetab_p, write_release
from das.safetab_p.iterations import _code_iteration_matrix, code_positions, iteration_filter
from das.safetab_p.spill import _SORTING_NETWORK_8, CombinationCodec
from das.safetab_p.streamed import key_sets, state_records, task_groups
from das.specs.config import SafeTabPConfig, load_safetab_p_config
from das.specs.race_specs import load_race_specs
from das.synth import generate_safetab_p
from tests.spec_fixtures import DEMO_SPECS
from tests.test_safetab_engine import Reference

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "safetab_p" / "toy"


class SeededProvider:
    """In-memory noise provider: measurement m draws from ``seeded_streams(seed)(m)``."""

    def __init__(self, seed: int) -> None:
        self.rng_for = seeded_streams(seed)

    def noise_for(
        self, measurement: Measurement, size: int, accountant: PrivacyAccountant | None
    ) -> np.ndarray:
        if accountant is not None:
            accountant.charge(measurement)
        noise = np.ascontiguousarray(
            measurement.mechanism.sample(size, self.rng_for(measurement)), dtype=np.int64
        )
        if accountant is not None:
            accountant.record(measurement, noise_digest(noise))
        return noise


def _stores(config: SafeTabPConfig, specs, folder: RunFolder, seed: int):
    """Per level: its persisted noise store (its own ledger), as the flow opens them."""
    plan = streamed.plan_by_partition(config, specs)
    opened: dict[str, NoiseStore] = {}

    def noise_for_level(partition: str):
        store = NoiseStore.open(
            folder,
            partition,
            config.privacy_defn.value,
            compose(plan[partition].values()),
            seeded_streams(seed),
        )
        opened[partition] = store
        return store, store.accountant

    return noise_for_level, opened


def _both(config, specs_dir: Path, data: Path, tmp_path: Path, seed: int = 7):
    """(in-memory files, streamed files, the streamed run) for the same seeded streams."""
    specs = load_race_specs(specs_dir)
    persons_path = next(p for p in data.iterdir() if p.name.startswith("person-records"))
    grf_path = next(p for p in data.iterdir() if p.name.startswith("GRF-C"))
    grfc = read_grf_c(grf_path)
    release = run_safetab_p(config, specs, read_person_records(persons_path), grfc,
                            SeededProvider(seed))  # fmt: skip
    write_release(release, tmp_path / "memory")
    noise_for_level, stores = _stores(config, specs, RunFolder(tmp_path, "run").create(), seed)
    run = streamed.run_safetab_p_streamed(
        config, specs, persons_path, grfc, tmp_path / "work", tmp_path / "streamed",
        noise_for_level=noise_for_level,
    )  # fmt: skip
    files = {}
    for name in ("t1/t1.txt", "t2/t2.txt"):
        files[name] = ((tmp_path / "memory" / name).read_bytes(),
                       (tmp_path / "streamed" / name).read_bytes())  # fmt: skip
    return files, run, stores, release


def _assert_identical(files) -> None:
    for name, (memory, streamed_bytes) in files.items():
        assert memory.count(b"\n") > 1, name  # a real table, not a header alone
        assert streamed_bytes == memory, name


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("demo") / "data"
    generate_safetab_p(folder, 30_000, 5, DEMO_SPECS)
    return folder


def test_streamed_release_is_byte_identical_on_demo_data(
    demo_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_records, "PIECE_ROWS", 4_000)  # many pieces per state
    monkeypatch.setattr(key_sets, "CHUNK_GROUPS", 700)  # many chunks per level
    config = load_safetab_p_config(demo_data / "config.json")
    # low thresholds: many groups get a sex × age breakdown (the cells path)
    config = config.model_copy(
        update={"thresholds": {level: (20, 60, 150) for level in config.thresholds}}
    )
    files, run, stores, release = _both(config, demo_data, demo_data, tmp_path)
    _assert_identical(files)
    assert files["t2/t2.txt"][0].count(b"\n") > 1_000
    assert run.rows == {"t1": len(release.t1), "t2": len(release.t2)}
    # every level drew through its persisted store, nothing reused, digests as in memory
    in_memory = {
        e.measurement.name: e.noise_digest for a in release.accountants.values() for e in a.entries
    }
    drawn = {
        e.measurement.name: e.noise_digest for s in stores.values() for e in s.accountant.entries
    }
    assert drawn == in_memory
    assert all(s.fresh and not s.reused for s in stores.values())


@pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")
@pytest.mark.parametrize("definition", ["zcdp", "puredp"])
def test_streamed_release_is_byte_identical_on_the_census_toy(
    definition: str, tmp_path: Path
) -> None:
    specs_dir = TOY / f"input_dir_{definition}"
    base = load_safetab_p_config(specs_dir / "config.json")
    config = base.model_copy(  # thresholds around 0: every workload occurs (noise σ ≈ 75)
        update={
            "run_pr": True,
            "zero_suppression_chance": 1e-12,
            "thresholds": {level: (-60, 0, 60) for level in base.thresholds},
        }
    )
    files, *_ = _both(config, specs_dir, TOY, tmp_path, seed=3)
    _assert_identical(files)


@pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")
def test_infinite_budgets_release_the_exact_counts_in_both_engines(tmp_path: Path) -> None:
    specs_dir = TOY / "input_dir_zcdp"
    base = load_safetab_p_config(specs_dir / "config.json")
    config = base.model_copy(
        update={
            "budgets": {lv: (math.inf if b > 0 else b) for lv, b in base.budgets.items()},
            "thresholds": {level: (1, 3, 5) for level in base.thresholds},
            "run_pr": True,
        }
    )
    files, *_ = _both(config, specs_dir, TOY, tmp_path)
    _assert_identical(files)
    # and they are the exact counts: every T1 row against the brute-force reference
    rows = [line.split("|") for line in files["t1/t1.txt"][1].decode().splitlines()[1:]]
    checked = 0
    for level in config.tabulated_levels():
        geography = level.geography.value
        states = ["72"] if geography.startswith("PR-") else list(config.state_filter_us)
        people = Reference(specs_dir, states).people(geography, level.iteration_level)
        for region, kind, iteration, count in rows:
            if kind == geography and (region, iteration) in people:
                assert int(count) == len(people[(region, iteration)])
                checked += 1
    assert checked > 20


def test_a_wrong_noise_vector_changes_the_release(demo_data: Path, tmp_path: Path) -> None:
    """The comparison can fail: another seed in the streamed run gives other bytes."""
    config = load_safetab_p_config(demo_data / "config.json")
    specs = load_race_specs(demo_data)
    grfc = read_grf_c(demo_data / "GRF-C.txt")
    release = run_safetab_p(config, specs, read_person_records(demo_data / "person-records.txt"),
                            grfc, SeededProvider(1))  # fmt: skip
    write_release(release, tmp_path / "memory")
    noise_for_level, _ = _stores(config, specs, RunFolder(tmp_path, "r").create(), 2)
    streamed.run_safetab_p_streamed(
        config, specs, demo_data / "person-records.txt", grfc, tmp_path / "work",
        tmp_path / "streamed", noise_for_level=noise_for_level,
    )  # fmt: skip
    assert (tmp_path / "memory/t1/t1.txt").read_bytes() != (
        tmp_path / "streamed/t1/t1.txt"
    ).read_bytes()


def test_combination_codec_round_trips_positions() -> None:
    specs = load_race_specs(DEMO_SPECS)
    codec = CombinationCodec(specs)
    rng = np.random.default_rng(0)
    codes = np.zeros((500, 8), dtype=np.int16)
    listed = specs.code.astype(np.int64)
    for k in range(8):
        take = rng.random(500) < 0.6 / (k + 1)
        codes[take, k] = rng.choice(listed, take.sum())
    codes[0, :3] = (9_999, 1, 0)  # codes the specs do not list
    qspan = rng.choice(listed, 500).astype(np.int16)
    lo, hi = codec.pack(codes, qspan)
    positions, qspan_positions = codec.unpack(lo, hi)
    expected = np.where(codes != 0, code_positions(specs, codes), -1)
    assert np.array_equal(np.sort(positions, axis=1), np.sort(expected, axis=1))
    assert np.array_equal(qspan_positions, code_positions(specs, qspan))
    # equal words <=> equal multisets (order of the codes within a record does not matter)
    lo2, hi2 = codec.pack(codes[:, ::-1], qspan)
    assert np.array_equal(lo, lo2) and np.array_equal(hi, hi2)


def test_the_codecs_sorting_network_sorts_every_input() -> None:
    """The eight race values are sorted by a network of minima and maxima: by the 0-1
    principle it sorts every input if it sorts all 256 inputs of zeros and ones."""
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1
    values = [bits[:, k].astype(np.uint16) for k in range(8)]
    for first, second in _SORTING_NETWORK_8:
        low = np.minimum(values[first], values[second])
        values[second] = np.maximum(values[first], values[second])
        values[first] = low
    assert np.array_equal(np.stack(values, axis=1), np.sort(bits, axis=1))


def test_state_groups_split_the_states_by_their_public_blocks(
    demo_data: Path, tmp_path: Path
) -> None:
    """The flow's per-state steps run a task per group of states: every state in exactly one
    group, at most the groups asked for, loads within one state's blocks of each other (largest
    first into the lightest group), the same groups for the same GRF-C whatever the records
    (the groups are task parameters the Prefect server sees: no record may weigh in)."""
    config = load_safetab_p_config(demo_data / "config.json")
    grfc = read_grf_c(demo_data / "GRF-C.txt")
    work = spill.WorkFolder(tmp_path / "work")
    spill.prepare_geography(config, grfc, work)
    states = state_records.tabulated_states(work)
    blocks = grfc.groupby(grfc["TABBLKST"].astype(int)).size()
    assert len(states) > 8 and blocks.nunique() > 1  # groups can differ: the test can fail
    for groups in (1, 2, 3, 8, len(states), 100):
        split = task_groups.state_groups(work, states, groups)
        assert sorted(s for group in split for s in group) == sorted(states)
        assert len(split) == min(groups, len(states))
        assert split == sorted(split) and all(group == sorted(group) for group in split)
        loads = [sum(int(blocks[s]) + 1 for s in group) for group in split]
        assert max(loads) - min(loads) <= int(blocks.max()) + 1, (groups, loads)
        assert split == task_groups.state_groups(work, list(reversed(states)), groups)
    # records spilled or not, the same groups: only the GRF-C weighs
    before = task_groups.state_groups(work, states, 4)
    spill.spill_persons(config, load_race_specs(demo_data), demo_data / "person-records.txt", work)
    assert work.spilled_states()
    assert task_groups.state_groups(work, states, 4) == before
    with pytest.raises(ValueError, match="at least 1"):
        task_groups.state_groups(work, states, 0)


def test_level_groups_hold_every_level_once_in_order_balanced_by_size(
    demo_data: Path, tmp_path: Path
) -> None:
    """The measure stage runs a task per group of levels: every tabulated level in exactly one
    group, in configuration order within it, loads within one level's size of each other."""
    config = load_safetab_p_config(demo_data / "config.json")
    specs = load_race_specs(demo_data)
    work = spill.WorkFolder(tmp_path / "work")
    spill.prepare_geography(config, read_grf_c(demo_data / "GRF-C.txt"), work)
    spaces = [
        space
        for pass_name in spill.PASSES
        if (geography := spill.load_geography(work, pass_name)) is not None
        for space in key_sets.level_spaces(config, specs, geography)
    ]
    order = [space.partition for space in spaces]
    size = {space.partition: space.n_groups for space in spaces}
    assert len(order) > 4 and len(set(size.values())) > 1
    for groups in (1, 2, 4, len(order), 50):
        split = task_groups.level_groups(config, specs, work, groups)
        assert sorted(p for group in split for p in group) == sorted(order)
        assert len(split) == min(groups, len(order))
        assert all(group == sorted(group, key=order.index) for group in split)
        loads = [sum(size[p] + 1 for p in group) for group in split]
        assert max(loads) - min(loads) <= max(size.values()) + 1, (groups, loads)


def test_geography_is_read_once_and_again_once_prepared_again(
    demo_data: Path, tmp_path: Path
) -> None:
    """Every state's and level's step asks for its pass's geography: it is read once while its
    files stay the same, read-only (a step changing it would change every later step's), and
    read again once prepared again (a rerun in the same work folder)."""
    config = load_safetab_p_config(demo_data / "config.json")
    grfc = read_grf_c(demo_data / "GRF-C.txt")
    work = spill.WorkFolder(tmp_path / "work")
    spill.prepare_geography(config, grfc, work)
    first = spill.load_geography(work, "US")
    assert first is not None and spill.load_geography(work, "US") is first
    for array in (first.blocks, first.geounit_state, *first.geounit_entity.values()):
        with pytest.raises(ValueError, match="read-only"):
            array[:1] = 0
    fewer = grfc[grfc["TABBLKST"].astype(int) != first.states[0]]
    spill.prepare_geography(config, fewer, work)
    again = spill.load_geography(work, "US")
    assert again is not first and again.states == first.states[1:]


def test_spec_derived_values_are_made_once_per_specs(demo_data: Path, monkeypatch) -> None:
    """The code → iteration matrices and the plan are made once per specs object (every piece of
    every state, every level asked again); the plan's callers get their own dictionaries."""
    config = load_safetab_p_config(demo_data / "config.json")
    specs, other = load_race_specs(demo_data), load_race_specs(demo_data)
    selected = iteration_filter(specs, 2, state_or_above=False)
    mask = np.ones(selected.size, dtype=bool)
    matrix = _code_iteration_matrix(specs, selected.index, mask)
    assert _code_iteration_matrix(specs, selected.index, mask) is matrix
    assert _code_iteration_matrix(other, selected.index, mask) is not matrix
    assert not matrix.data.flags.writeable and matrix.nnz > 0
    made = []
    original = key_sets.plan_safetab_p
    monkeypatch.setattr(key_sets, "plan_safetab_p", lambda *a: made.append(1) or original(*a))
    plan = key_sets.plan_by_partition(config, specs)
    partition = next(iter(plan))
    plan[partition].clear()
    assert key_sets.plan_by_partition(config, specs)[partition] and len(made) == 1


def test_a_small_geography_takes_one_task_per_slot(
    demo_data: Path, tmp_path: Path, monkeypatch
) -> None:
    """Below SMALL_GEOGRAPHY_BLOCKS GRF-C blocks (public) a stage's task runs cost more than its
    work: one group of states or levels per slot of the task runner, else ``per_slot``."""
    config = load_safetab_p_config(demo_data / "config.json")
    work = spill.WorkFolder(tmp_path / "work")
    spill.prepare_geography(config, read_grf_c(demo_data / "GRF-C.txt"), work)
    blocks = sum(
        geography.blocks.size
        for name in spill.PASSES
        if (geography := spill.load_geography(work, name)) is not None
    )
    assert 0 < blocks < task_groups.SMALL_GEOGRAPHY_BLOCKS
    assert task_groups.groups_for(work, slots=2, per_slot=3) == 2
    monkeypatch.setattr(task_groups, "SMALL_GEOGRAPHY_BLOCKS", blocks)
    assert task_groups.groups_for(work, slots=2, per_slot=3) == 6


def test_balanced_groups_put_the_largest_first_into_the_lightest_group() -> None:
    weights = {"a": 10, "b": 1, "c": 1, "d": 8, "e": 0}
    # a 11 | d 9, b 10 | c 13 (a tie: the first group) | e 11 (each item counts its weight + 1)
    assert task_groups.balanced_groups(list("abcde"), weights, 2) == [["a", "c"], ["b", "d", "e"]]
    assert task_groups.balanced_groups(list("abcde"), weights, 9) == [[x] for x in "abcde"]
    assert task_groups.balanced_groups([], weights, 3) == []
