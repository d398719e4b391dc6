"""What validation's read holds in memory (das.validation.scan): a chunk waiting for its turn in
file order keeps only what is applied to the report (its text, its commits), code columns keep
Arrow's int32 indices, and free memory goes back to the kernel during and after each file
(das.allocator.release) — the one read of a national PHSafe input peaked at 3.49 GiB without
these (docs/explanation/performance.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import das.validation.scan as scan
from das import allocator
from das.synth import generate_phsafe
from das.validation import validate_phsafe

REPO = Path(__file__).resolve().parents[1]
PH_DEMO_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"
CHUNK_BYTES = 8_192  # dozens of chunks per file


@pytest.fixture(scope="module")
def phsafe_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scan-memory") / "phsafe"
    generate_phsafe(root, 3_000, 4, PH_DEMO_CONFIG)
    return root


def _validate(data: Path, report: Path) -> None:
    result = validate_phsafe(
        data / "config.json", data, report, run_gx=False, chunk_bytes=CHUNK_BYTES
    )
    assert result.ok, result.summary_lines()


def test_a_chunk_waiting_for_its_turn_holds_no_views_or_conversions(
    phsafe_inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "scan_workers", lambda: 2)
    waiting: list[scan._Chunk] = []
    made = scan._Chunk

    def recorded(*args, **kwargs) -> scan._Chunk:
        chunk = made(*args, **kwargs)
        waiting.append(chunk)
        return chunk

    monkeypatch.setattr(scan, "_Chunk", recorded)
    _validate(phsafe_inputs, tmp_path / "report")
    assert len(waiting) > 20
    assert all(not chunk.frame._views for chunk in waiting)  # encodings, conversions: dropped
    assert all(chunk.converted == {} for chunk in waiting)  # nothing retained asked for them


def test_code_columns_keep_arrows_indices_without_an_int64_copy() -> None:
    column = pa.chunked_array([pa.array(["01", "02", "03", "04"] * 5_000)])
    indices, values = scan.ColumnView(column, encode=True).distinct_values()
    assert indices.dtype == np.int32
    assert values.to_pylist() == ["01", "02", "03", "04"]
    found = scan.ColumnView(column).ints(None)
    assert found.tolist() == [1, 2, 3, 4] * 5_000


def test_the_read_gives_free_memory_back_during_and_after_each_file(
    phsafe_inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(scan.allocator, "release", lambda: calls.append("release"))
    monkeypatch.setattr(scan, "RELEASE_EVERY_CHUNKS", 4)
    chunks: list[int] = []
    made = scan._Chunk
    monkeypatch.setattr(scan, "_Chunk", lambda *a, **k: chunks.append(1) or made(*a, **k))
    _validate(phsafe_inputs, tmp_path / "report")
    files = 3  # units, geo, persons; and the PHSafe household checks after them
    assert len(calls) >= len(chunks) // 4 + files + 1


def test_release_trims_every_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    trimmed: list[int] = []
    monkeypatch.setattr(allocator, "_malloc_trim", lambda: trimmed.append)
    allocator.release()
    assert trimmed == [0]
