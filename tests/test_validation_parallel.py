"""Validation checks chunks on several threads (das.validation.scan.scan_file): the report must
be the one a single thread writes, whatever order the threads finish in — failures in the same
order, the same first rows and values, the same counts, the same fingerprints."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import das.validation.phsafe as phsafe_validation
import das.validation.safetab_p as safetab_validation
import das.validation.scan as scan
from das.synth import generate_phsafe, generate_safetab_p
from das.validation import validate_phsafe, validate_safetab_p
from das.validation.findings import FailureCollector

REPO = Path(__file__).resolve().parents[1]
STP_DEMO = REPO / "data_specs" / "safetab_p" / "demo"
PH_DEMO_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"
CHUNK_BYTES = 8_192  # about 150 person rows a chunk: dozens of chunks


def _text(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="|", dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def broken_safetab_p(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic SafeTab-P inputs with failures of several checks in many chunks."""
    root = tmp_path_factory.mktemp("parallel") / "safetab-p"
    generate_safetab_p(root, 6_000, 5, STP_DEMO)
    persons = _text(root / "person-records.txt")
    persons.loc[persons.index[7::97], "QAGE"] = "200"  # regex rule, value converts
    persons.loc[persons.index[11::89], "QRACE2"] = "9999"  # not in the code list
    persons.loc[persons.index[13::83], "TABBLK"] = "99x9"  # digits rule, no fingerprint
    persons.loc[persons.index[17::79], "QSEX"] = "3"  # set rule
    persons.loc[persons.index[19::101], ["QRACE1", "QRACE2"]] = ["Null", "1000"]  # Null order
    persons.to_csv(root / "person-records.txt", sep="|", index=False)
    return root


@pytest.fixture(scope="module")
def broken_phsafe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parallel") / "phsafe"
    generate_phsafe(root, 3_000, 4, PH_DEMO_CONFIG)
    persons = pd.read_csv(root / "persons.csv", dtype=str, keep_default_na=False)
    persons.loc[persons.index[5::41], "RELSHIP"] = "37"  # relship_matches_rtype
    persons.loc[persons.index[9::53], "QAGE"] = "x"
    persons.to_csv(root / "persons.csv", index=False)
    return root


def _finishing_out_of_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other chunk's checks take longer, so later chunks finish first."""
    analyze_hook = safetab_validation._PersonChecks.__call__

    def slow(self, frame, columns):
        if (frame.first_row // 100) % 2 == 0:
            time.sleep(0.01)
        return analyze_hook(self, frame, columns)

    relship = phsafe_validation._RelshipChecks.__call__

    def slow_relship(self, frame, columns):
        if (frame.first_row // 100) % 2 == 0:
            time.sleep(0.01)
        return relship(self, frame, columns)

    monkeypatch.setattr(safetab_validation._PersonChecks, "__call__", slow)
    monkeypatch.setattr(phsafe_validation._RelshipChecks, "__call__", slow_relship)


def _report(product: str, data: Path, report: Path, workers: int, monkeypatch) -> dict:
    monkeypatch.setattr(scan, "scan_workers", lambda: workers)
    validate = validate_safetab_p if product == "safetab-p" else validate_phsafe
    result = validate(data / "config.json", data, report, run_gx=False, chunk_bytes=CHUNK_BYTES)
    as_dict = result.to_dict()
    for volatile in ("seconds", "started", "report_dir"):
        as_dict.pop(volatile)
    return {**as_dict, "fingerprints": dict(result.fingerprints)}


@pytest.mark.parametrize("product", ["safetab-p", "phsafe"])
def test_the_report_of_four_threads_is_the_report_of_one(
    product: str,
    broken_safetab_p: Path,
    broken_phsafe: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = broken_safetab_p if product == "safetab-p" else broken_phsafe
    _finishing_out_of_order(monkeypatch)
    one = _report(product, data, tmp_path / "one", 1, monkeypatch)
    four = _report(product, data, tmp_path / "four", 4, monkeypatch)
    assert four == one
    failing = [f for f in one["failures"] if f["count"] > 1]
    assert len(failing) >= 2  # several checks failed, each in several chunks
    for failure in failing:
        assert failure["rows"] == sorted(failure["rows"])  # the file's first rows, in order


def test_a_worker_threads_failures_wait_for_their_turn() -> None:
    collector = FailureCollector()
    with collector.recording() as later:
        collector.add("f", "c", "check", "second chunk", rows=[900, 901], values=["x", "y"])
    collector.add("f", "c", "check", "first chunk", rows=[3], values=["z"])
    assert [f.rows for f in collector.failures()] == [[3]]
    collector.replay(later)
    (failure,) = collector.failures()
    assert failure.rows == [3, 900, 901] and failure.values == ["z", "x", "y"]
    assert failure.message == "first chunk" and failure.count == 3


def test_phsafe_bucket_copies_are_appended_in_file_order_not_by_the_worker(
    tmp_path: Path,
) -> None:
    """The integer copies of the cross-file checks are split by bucket on a worker thread and
    appended only when the chunk's turn comes (file order), never by the worker itself."""
    import numpy as np

    from das.validation.scan import RawChunk

    def chunk(first_row: int, mafids: list[int]) -> tuple[RawChunk, dict[str, np.ndarray]]:
        table = pa.table({"MAFID": [str(m) for m in mafids]})
        columns = {name: np.asarray(mafids, dtype=np.int64) for name in ("MAFID", "RTYPE")}
        return RawChunk(table, first_row), columns

    with phsafe_validation._BucketSpill(tmp_path, "geo", 2) as spill:
        later = spill(*chunk(3, [10, 11]))  # the second chunk, checked first
        assert not list(tmp_path.rglob("*.bin")) or spill.columns(0).rows() == 0
        earlier = spill(*chunk(1, [20, 21]))
        earlier()
        later()
    assert spill.columns(0).read()["row"].tolist() == [1, 3]  # MAFIDs 20, 10: file order
    assert spill.columns(1).read()["row"].tolist() == [2, 4]
