"""The bucketed (national-scale) PHSafe engine releases exactly what the in-memory one does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from toy_configs import phsafe_toy_config

from das.io.phsafe import input_paths, read_geo, read_persons, read_units
from das.phsafe import streamed
from das.phsafe.engine import (
    prepare_records,
    queries_by_table,
    run_phsafe,
    tabulation_input,
    write_release,
)
from das.phsafe.measure import query_counts
from das.phsafe.plan import plan_phsafe
from das.phsafe.streamed import PHSafeWork, bucket_tabulations, run_phsafe_streamed
from das.phsafe.truncate import first_per_key, truncate_per_key, truncation_order
from das.specs.config import load_phsafe_config
from das.synth import generate_phsafe
from tests.test_national_safetab_p import SeededProvider

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "phsafe" / "toy"
US_2020 = SHARED / "census_specs" / "phsafe" / "production_2020" / "us" / "config.json"
REPO = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"


def _compare(config, data: Path, tmp_path: Path, buckets: int) -> int:
    paths = input_paths(data)
    memory = run_phsafe(
        config, read_persons(paths["persons"]), read_units(paths["units"]),
        read_geo(paths["geo"]), SeededProvider(9),
    )  # fmt: skip
    write_release(memory, tmp_path / "memory")
    bucketed = run_phsafe_streamed(
        config, paths, tmp_path / "work", SeededProvider(9), buckets=buckets
    )
    write_release(bucketed, tmp_path / "streamed")
    files = sorted((tmp_path / "memory").rglob("*.txt"))
    assert files
    for path in files:
        other = tmp_path / "streamed" / path.relative_to(tmp_path / "memory")
        assert other.read_bytes() == path.read_bytes(), path.name
    assert PHSafeWork(tmp_path / "work").buckets() == buckets
    return len(files)


@pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")
@pytest.mark.parametrize("definition", ["zcdp", "puredp"])
@pytest.mark.parametrize("buckets", [1, 3])
def test_bucketed_release_is_byte_identical_on_the_census_toy(
    definition: str, buckets: int, tmp_path: Path
) -> None:
    config = load_phsafe_config(phsafe_toy_config(definition, tmp_path / "config"))
    assert _compare(config, TOY, tmp_path, buckets) == 11


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ph") / "data"
    generate_phsafe(folder, 40_000, 8, DEMO_CONFIG)
    return folder


def test_bucketed_release_is_byte_identical_on_synthetic_data(
    demo_data: Path, tmp_path: Path
) -> None:
    config = load_phsafe_config(demo_data / "config.json")
    _compare(config, demo_data, tmp_path, buckets=5)


def test_each_table_is_measured_after_the_counting_gives_its_memory_back(
    demo_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_phsafe_config(demo_data / "config.json")
    released: list[int] = []
    monkeypatch.setattr(streamed.allocator, "release", lambda: released.append(1))
    run_phsafe_streamed(
        config, input_paths(demo_data), tmp_path / "work", SeededProvider(9), buckets=2
    )
    assert len(released) == len(queries_by_table(plan_phsafe(config)))


def test_bucket_tabulations_count_what_truncate_and_join_counts(demo_data: Path) -> None:
    """Per table and query, the single-sort truncation gives tabulation_input's counts,
    including households above τ (the synthetic data has them)."""
    config = load_phsafe_config(demo_data / "config.json")
    paths = input_paths(demo_data)
    records = prepare_records(
        config, read_persons(paths["persons"]), read_units(paths["units"]), read_geo(paths["geo"])
    )
    by_table = queries_by_table(plan_phsafe(config))
    fast = bucket_tabulations(config, records, list(by_table))
    for table, measurements in by_table.items():
        reference = tabulation_input(table, config, records.persons, records.units)
        for m in measurements:
            expected = query_counts(m, reference, config.state_filter)
            assert expected.sum() > 0, m.name
            assert np.array_equal(query_counts(m, fast[table], config.state_filter), expected)


def test_first_per_key_keeps_the_first_tau_masked_rows_of_each_key() -> None:
    keys = np.array([1, 1, 1, 1, 2, 2, 3, 3, 3])
    mask = np.array([1, 0, 1, 1, 1, 1, 0, 0, 1], dtype=bool)
    assert first_per_key(keys, mask, 2).tolist() == [1, 0, 1, 0, 1, 1, 0, 0, 1]
    assert first_per_key(keys, mask, 1).tolist() == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    with pytest.raises(ValueError):
        first_per_key(keys, mask, 0)


def test_truncation_order_is_what_truncate_per_key_keeps(demo_data: Path) -> None:
    persons = read_persons(input_paths(demo_data)["persons"])
    kept = truncate_per_key(persons, 3)
    order = truncation_order(persons)
    keys = persons["MAFID"].to_numpy().astype(np.int64)[order]
    mine = np.sort(order[first_per_key(keys, np.ones(keys.size, dtype=bool), 3)])
    assert np.array_equal(mine, kept.index.to_numpy())
    assert len(kept) < len(persons)  # some households were truncated


@pytest.mark.skipif(not US_2020.is_file(), reason="2020 production config absent")
def test_production_config_in_several_buckets(demo_data: Path, tmp_path: Path) -> None:
    config = load_phsafe_config(US_2020)
    _compare(config, demo_data, tmp_path, buckets=4)
