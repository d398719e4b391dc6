"""Streamed noise and large arrays: the same draws as the one-shot samplers, digests on the way,
the persisted store's streamed method, and the readers' typed fast path."""

from __future__ import annotations

import hashlib
import io
import math
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from das.io.arrays import (
    RawColumns,
    npy_data_digest,
    open_npy,
    read_npy_range,
    write_npy_blocks,
)
from das.io.phsafe import PERSONS
from das.io.safetab_p import PERSON_RECORDS
from das.io.tables import InputFormatError, iter_raw, iter_table, read_table
from das.privacy import noise
from das.privacy.accounting import (
    Measurement,
    PrivacyAccountant,
    draw_noise,
    draw_noise_file,
    noise_digest,
)
from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism
from das.privacy.rng import seeded_rng
from das.runs.folder import RunFolder
from das.runs.noise_store import NoiseDigestError, NoiseStore, seeded_streams

CHUNK = 1 << 17  # the samplers' candidates per round


def _joined(blocks) -> np.ndarray:
    parts = list(blocks)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


@pytest.mark.parametrize("kind", ["gaussian", "geometric"])
def test_secure_blocks_are_drawn_on_several_threads_and_fit_the_pmf(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secure vector's blocks are drawn on worker threads (independent exact draws, laid in
    order): every block has its size, and the whole fits the exact pmf."""
    from scipy import stats

    from das.privacy.distributions import DiscreteGaussian, TwoSidedGeometric

    monkeypatch.setattr(noise, "sampler_threads", lambda: 3)
    threads: set[str] = set()
    fill = noise._fill

    def recording(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return fill(*args, **kwargs)

    monkeypatch.setattr(noise, "_fill", recording)
    size, block = 150_007, 10_000
    if kind == "gaussian":
        blocks = list(noise.discrete_gaussian_blocks("31.4", size, block=block))
        dist = DiscreteGaussian("31.4")
    else:
        blocks = list(noise.geometric_blocks("5.6", size, block=block))
        dist = TwoSidedGeometric("5.6")
    assert [b.size for b in blocks] == [block] * 15 + [7] and all(
        b.dtype == np.int64 for b in blocks
    )
    assert len(threads) > 1 and all(name.startswith("das-noise") for name in threads)
    draws = np.concatenate(blocks)
    values, counts = np.unique(draws, return_counts=True)
    inner = np.abs(values) <= 3 * math.sqrt(dist.variance)  # cells with thousands expected
    expected = np.asarray(dist.pmf(values[inner])) * size
    observed = counts[inner]
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-4
    assert abs(draws.var() / dist.variance - 1) < 0.05


def test_seeded_blocks_stay_one_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded stream is never split over threads: its release stays the same."""
    monkeypatch.setattr(noise, "sampler_threads", lambda: 4)
    blocks = _joined(noise.discrete_gaussian_blocks("2.3", 50_000, seeded_rng(5), block=1_000))
    assert np.array_equal(blocks, noise.discrete_gaussian("2.3", 50_000, rng=seeded_rng(5)))


@pytest.mark.parametrize("size", [0, 1, 17, CHUNK - 1, CHUNK + 1, 3 * CHUNK + 5])
@pytest.mark.parametrize("sigma_squared", [Fraction(1, 3), Fraction(9, 2) / Fraction(159, 1000)])
def test_discrete_gaussian_blocks_are_the_one_shot_draws(size: int, sigma_squared) -> None:
    whole = noise.discrete_gaussian(sigma_squared, size, seeded_rng(4))
    blocks = list(noise.discrete_gaussian_blocks(sigma_squared, size, seeded_rng(4), block=1000))
    assert all(b.dtype == np.int64 and b.size <= 1000 for b in blocks)
    assert np.array_equal(_joined(blocks), whole)


@pytest.mark.parametrize("size", [0, 5, CHUNK + 3, 2 * CHUNK])
@pytest.mark.parametrize("scale", [Fraction(3, 2), Fraction(90)])
def test_geometric_blocks_are_the_one_shot_draws(size: int, scale) -> None:
    whole = noise.geometric(scale, size, seeded_rng(8))
    assert np.array_equal(_joined(noise.geometric_blocks(scale, size, seeded_rng(8), 777)), whole)


def test_reference_paths_and_zero_noise_stream_too() -> None:
    huge = Fraction(2**50 + 1)  # beyond the vectorized range: Python integers
    assert np.array_equal(
        _joined(noise.discrete_gaussian_blocks(huge, 7, seeded_rng(1), 3)),
        noise.discrete_gaussian(huge, 7, seeded_rng(1)),
    )
    zeros = list(DiscreteGaussianMechanism(Fraction(0)).sample_blocks(10, block=4))
    assert [z.size for z in zeros] == [4, 4, 2] and not np.any(np.concatenate(zeros))
    mechanism = GeometricMechanism(Fraction(5))
    assert np.array_equal(
        _joined(mechanism.sample_blocks(CHUNK + 9, seeded_rng(2), block=5000)),
        mechanism.sample(CHUNK + 9, seeded_rng(2)),
    )
    with pytest.raises(ValueError):
        list(noise.geometric_blocks(Fraction(1), 3, seeded_rng(1), block=0))


def _measurement(name: str = "US/TRACT/2/stage-1") -> Measurement:
    return Measurement.create(name, "zcdp", Fraction(1, 10), 3, stage="stage-1", confidence=0.95)


def test_draw_noise_file_draws_and_records_what_draw_noise_would(tmp_path: Path) -> None:
    m = _measurement()
    accountant = PrivacyAccountant("zcdp", 1)
    mapped = draw_noise_file(m, CHUNK + 11, seeded_rng(6), accountant, tmp_path / "n.npy")
    reference = draw_noise(m, CHUNK + 11, seeded_rng(6), PrivacyAccountant("zcdp", 1))
    assert np.array_equal(mapped, reference)
    assert not mapped.flags.writeable
    assert accountant.get(m.name).noise_digest == noise_digest(reference)


def test_store_streamed_draw_is_reused_not_redrawn_and_checked(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path, "run").create()
    m = _measurement()

    def store(seed: int) -> NoiseStore:
        return NoiseStore.open(folder, "US/TRACT/2", "zcdp", Fraction(1), seeded_streams(seed))

    first = store(5)
    drawn = np.array(first.noise_file_for(m, 1000, first.accountant))
    # the in-memory method of a fresh folder with the same seed draws the same vector
    other = NoiseStore.open(
        RunFolder(tmp_path, "other").create(), "US/TRACT/2", "zcdp", 1, seeded_streams(5)
    )
    assert np.array_equal(other.noise_for(m, 1000, other.accountant), drawn)
    again = store(99)  # another seed: only the stored file can give `drawn`
    assert np.array_equal(again.noise_file_for(m, 1000, again.accountant), drawn)
    assert again.reused == [m.name] and again.accountant.spent == Fraction(1, 10)
    assert np.array_equal(again.noise_for(m, 1000, again.accountant), drawn)  # interchangeable
    path = folder.noise_path(m.name)
    tampered = drawn.copy()
    tampered[500] += 1
    np.save(path, tampered)
    with pytest.raises(NoiseDigestError):
        reopened = store(5)
        reopened.noise_file_for(m, 1000, reopened.accountant)
    with pytest.raises(NoiseDigestError):  # a wrong size is refused too
        fresh = store(5)
        fresh.noise_file_for(m, 999, fresh.accountant)


def test_streamed_npy_is_what_np_save_writes(tmp_path: Path) -> None:
    values = np.arange(-500, 1500, dtype=np.int64) * 7
    buffer = io.BytesIO()
    np.save(buffer, values)
    digest = write_npy_blocks(tmp_path / "a.npy", (values[:300], values[300:]), values.size)
    assert (tmp_path / "a.npy").read_bytes() == buffer.getvalue()
    assert (
        digest
        == hashlib.sha256(values.tobytes()).hexdigest()
        == npy_data_digest(tmp_path / "a.npy")
    )
    assert np.array_equal(read_npy_range(tmp_path / "a.npy", 10, 20), values[10:20])
    assert np.array_equal(open_npy(tmp_path / "a.npy"), values)
    with pytest.raises(ValueError):
        write_npy_blocks(tmp_path / "b.npy", (values,), values.size + 1)
    assert not (tmp_path / "b.npy").exists()  # atomic: nothing half-written
    columns = RawColumns(tmp_path / "spill", {"a": np.int32, "b": np.uint8})
    with columns.appender() as appender:
        appender.append({"a": np.arange(5), "b": np.arange(5)})
        appender.append({"a": np.arange(3), "b": np.ones(3)})
    assert columns.rows() == 8
    assert columns.read(4, 7)["a"].tolist() == [4, 0, 1]


PERSON_HEADER = "|".join(PERSON_RECORDS.column_names)


def _person_line(race: str = "1010", qspan: str = "2010", age: str = "007") -> str:
    return f"{age}|2|True|06|001|000100|1001|01|{race}|Null|Null|Null|Null|Null|Null|Null|{qspan}"


def test_typed_fast_path_reads_what_the_string_path_reads(tmp_path: Path) -> None:
    lines = [PERSON_HEADER] + [_person_line(age=f"{a:03d}") for a in range(0, 116)]
    path = tmp_path / "person-records.txt"
    path.write_text("\r\n".join(lines) + "\r\n\r\n")  # CRLF and a trailing blank line
    fast = pd.concat(list(iter_table(path, PERSON_RECORDS, chunk_bytes=1000)))
    raw = pd.concat(list(iter_raw(path, PERSON_RECORDS, chunk_bytes=1000)))
    assert len(fast) == len(raw) == 116
    assert fast["QAGE"].tolist() == [int(v) for v in raw["QAGE"]]
    assert fast["QRACE2"].tolist() == [0] * 116 and fast["HOUSEHOLDER"].all()
    assert str(fast["QRACE1"].dtype) == "int16" and str(fast["QAGE"].dtype) == "uint8"


@pytest.mark.parametrize(
    "line, column",
    [
        (_person_line(race="0000"), "QRACE1"),  # a written zero is not a Null
        (_person_line(qspan="Null"), "QSPAN"),  # Null only where the format allows it
        (_person_line(age="-01"), "QAGE"),
        (_person_line(age="256"), "QAGE"),
        (_person_line().replace("True", "true"), "HOUSEHOLDER"),
    ],
)
def test_values_the_fast_path_must_not_accept_are_reported(
    tmp_path: Path, line: str, column: str
) -> None:
    path = tmp_path / "person-records.txt"
    path.write_text("\n".join([PERSON_HEADER, _person_line(), line, _person_line()]) + "\n")
    with pytest.raises(InputFormatError, match=f"column {column}: 1 value.*data row 2 "):
        read_table(path, PERSON_RECORDS)


def test_quoted_csv_values_read_the_same_in_both_paths(tmp_path: Path) -> None:
    path = tmp_path / "persons.csv"
    path.write_text(",".join(PERSONS.column_names) + '\n3,"100000001",7,1,"01",20\n')
    frame = read_table(path, PERSONS)
    assert frame.iloc[0].tolist() == [3, 100000001, 7, 1, 1, 20]
