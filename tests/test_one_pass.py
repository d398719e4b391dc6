"""One read of the inputs (issue 39): validation's read of the records also makes the engine's
first steps (SafeTab-P: the geography and the person spill; PHSafe: the spill by household
bucket). What it makes must be what the engine's own reads make, byte for byte, with the
fingerprints of the old two passes; an invalid row, even the last one, leaves nothing behind;
chunks checked on several threads are spilled in file order."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pandas as pd
import pytest

import das.validation.scan as scan
from das.io.fingerprint import fingerprint_file
from das.io.phsafe import GEO, PERSONS, UNITS, input_paths
from das.io.safetab_p import GRF_C, PERSON_RECORDS, read_grf_c
from das.io.tables import convert_to_parquet
from das.phsafe import streamed as phsafe_streamed
from das.safetab_p import spill as safetab_spill
from das.specs.config import load_phsafe_config, load_safetab_p_config
from das.specs.race_specs import load_race_specs
from das.synth import generate_phsafe, generate_safetab_p
from das.validation import validate_phsafe, validate_safetab_p

REPO = Path(__file__).resolve().parents[1]
STP_DEMO = REPO / "data_specs" / "safetab_p" / "demo"
PH_DEMO_CONFIG = REPO / "data_specs" / "phsafe" / "demo" / "config.json"
CHUNK_BYTES = 16_384  # a few hundred rows a chunk: dozens of chunks on four threads


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root``: its sha256."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def safetab_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("one_pass") / "safetab-p"
    generate_safetab_p(root, 8_000, 11, STP_DEMO)
    return root


@pytest.fixture(scope="module")
def phsafe_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("one_pass") / "phsafe"
    generate_phsafe(root, 6_000, 12, PH_DEMO_CONFIG)
    return root


def _safetab_one_pass(data: Path, work: Path, report: Path):
    config = load_safetab_p_config(data / "config.json")
    one = safetab_spill.OnePass(config, load_race_specs(data), safetab_spill.WorkFolder(work))
    result = validate_safetab_p(
        data / "config.json", data, report, run_gx=False, chunk_bytes=CHUNK_BYTES, taps=one.taps()
    )
    return result, one.outcome(result)


@pytest.mark.parametrize("parquet", [False, True])
def test_safetab_p_one_read_makes_the_engines_geography_and_spill_byte_for_byte(
    safetab_inputs: Path, tmp_path: Path, parquet: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "scan_workers", lambda: 4)
    data = safetab_inputs
    if parquet:
        data = tmp_path / "parquet"
        shutil.copytree(safetab_inputs, data)
        for spec in (PERSON_RECORDS, GRF_C):
            text = data / f"{spec.stem}.txt"
            convert_to_parquet(text, data / f"{spec.stem}.parquet", spec)
            text.unlink()
    report, made = _safetab_one_pass(data, tmp_path / "one", tmp_path / "report")
    assert report.ok and made is not None
    geography, spilled = made

    config = load_safetab_p_config(data / "config.json")
    two = safetab_spill.WorkFolder(tmp_path / "two")
    suffix = ".parquet" if parquet else ".txt"
    grfc = data / f"GRF-C{suffix}"
    persons = data / f"person-records{suffix}"
    engine_grf_c = safetab_spill.prepare_geography(config, read_grf_c(grfc), two)
    engine_spill = safetab_spill.spill_persons(config, load_race_specs(data), persons, two)

    assert _files(tmp_path / "one") == _files(tmp_path / "two")  # maps, spill, fingerprints
    assert len([name for name in _files(tmp_path / "one") if name.startswith("spill/")]) > 8
    # the fingerprints of the old two passes: validation's alone, and the engine's read
    assert geography == engine_grf_c == fingerprint_file(grfc, GRF_C)
    assert (
        spilled.fingerprint == engine_spill.fingerprint == fingerprint_file(persons, PERSON_RECORDS)
    )
    assert report.fingerprints == {GRF_C.name: geography, PERSON_RECORDS.name: spilled.fingerprint}
    assert (spilled.rows_read, spilled.states) == (engine_spill.rows_read, engine_spill.states)


def test_an_invalid_last_row_leaves_no_geography_and_no_spill(
    safetab_inputs: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(safetab_inputs, data)
    people = pd.read_csv(data / "person-records.txt", sep="|", dtype=str, keep_default_na=False)
    people.loc[people.index[-1], "QAGE"] = "116"  # converts, breaks the suite: found last
    people.to_csv(data / "person-records.txt", sep="|", index=False)
    work = tmp_path / "work"
    report, made = _safetab_one_pass(data, work, tmp_path / "report")
    assert not report.ok and made is None
    assert [f.check for f in report.errors] == ["expect_column_values_to_match_regex"]
    assert _files(work) == {}  # nothing from which anything could be drawn


def test_records_beyond_the_race_code_bound_are_never_spilled(
    safetab_inputs: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(safetab_inputs, data)
    config = data / "config.json"
    config.write_text(config.read_text().replace('"max_race_codes": 8', '"max_race_codes": 1'))
    assert '"max_race_codes": 1' in config.read_text()
    work = tmp_path / "work"
    report, made = _safetab_one_pass(data, work, tmp_path / "report")
    assert made is None and report.find("race_codes_within_max")
    assert _files(work) == {}


def test_phsafe_one_read_makes_the_engines_bucket_spill_byte_for_byte(
    phsafe_inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "scan_workers", lambda: 4)
    config = load_phsafe_config(phsafe_inputs / "config.json")
    paths = input_paths(phsafe_inputs)
    one = phsafe_streamed.OnePass(phsafe_streamed.PHSafeWork(tmp_path / "one"), 3)
    report = validate_phsafe(
        phsafe_inputs / "config.json", phsafe_inputs, tmp_path / "report", run_gx=False,
        chunk_bytes=CHUNK_BYTES, taps=one.taps(),
    )  # fmt: skip
    made = one.outcome(report)
    engine = phsafe_streamed.spill_phsafe(
        config, paths, phsafe_streamed.PHSafeWork(tmp_path / "two"), buckets=3
    )
    assert report.ok and made == engine
    assert made.fingerprints == {
        spec.name: fingerprint_file(paths[spec.name], spec) for spec in (PERSONS, UNITS, GEO)
    }
    assert _files(tmp_path / "one") == _files(tmp_path / "two")


def test_a_failed_phsafe_validation_leaves_no_spill(phsafe_inputs: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(phsafe_inputs, data)
    units = pd.read_csv(data / "units.csv", dtype=str, keep_default_na=False)
    units.loc[units.index[-1], "TEN"] = "9"  # the last unit breaks its suite
    units.to_csv(data / "units.csv", index=False)
    one = phsafe_streamed.OnePass(phsafe_streamed.PHSafeWork(tmp_path / "work"), 2)
    report = validate_phsafe(data / "config.json", data, tmp_path / "report", run_gx=False,
                             taps=one.taps())  # fmt: skip
    assert not report.ok and one.outcome(report) is None
    assert _files(tmp_path / "work") == {}


def test_a_step_made_by_the_one_read_is_not_said_to_be_an_earlier_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow takes the geography and the spill that validation's read made: the run log
    says so, not "done by an earlier attempt" (which a first attempt's operator would read as
    a resume); a step an earlier attempt made still says that."""
    import logging
    from types import SimpleNamespace

    import tasks.flow_steps as flow_steps
    from das.runs.steps import RunSteps

    said: list[str] = []
    logger = logging.getLogger("test-run-once")
    monkeypatch.setattr(logger, "info", lambda message, *args: said.append(message % args))
    monkeypatch.setattr(flow_steps, "get_run_logger", lambda: logger)
    steps = RunSteps(SimpleNamespace(root=tmp_path), "code")
    steps.mark("spill", result={"states": [1]})
    steps.mark("geography", result="maps")

    def never() -> None:
        raise AssertionError("a completed step is not made again")

    assert flow_steps.run_once(steps, "spill", never, {"spill"}) == {"states": [1]}
    assert flow_steps.run_once(steps, "geography", never) == "maps"
    assert flow_steps.run_once(steps, "totals", lambda: 7, {"spill"}) == 7
    assert said == [
        "step spill: made by validation's read of the records",
        "step geography: done by an earlier attempt, not repeated",
    ]
    assert steps.done("totals")["result"] == 7
