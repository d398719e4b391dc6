"""`das run safetab-p` end to end on the Census toy inputs: the flow, audit, rerun without redraw.

The toy inputs are used in place (by path, never copied into the repository); their parameter
folder is copied to tmp_path so budgets can be changed.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from das.offline import configure_offline

configure_offline()

from prefect_fixtures import artifacts, assert_rejected_before_noise  # noqa: E402

import tasks.safetab_p as safetab_tasks  # noqa: E402
from das.cli.run import main  # noqa: E402
from das.io.safetab_p import read_grf_c, read_person_records  # noqa: E402
from das.io.writers import file_sha256  # noqa: E402
from das.runs.audit import AUDIT_KEYS  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.safetab_p.engine import run_safetab_p, write_release  # noqa: E402
from das.specs.config import load_safetab_p_config  # noqa: E402
from das.specs.race_specs import load_race_specs  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY = SHARED / "census_specs" / "safetab_p" / "toy"

# Each test runs the whole flow (1–3 s per run on the thread pool, ~7 s on a Dask cluster).
pytestmark = [
    pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent"),
    pytest.mark.slow,
    pytest.mark.usefixtures("prefect_server", "thread_runner"),
]


def _params(tmp_path: Path, infinite: bool = False) -> Path:
    """The zCDP parameter folder copied to tmp_path; budgets → Infinity when asked."""
    folder = tmp_path / "params"
    shutil.copytree(TOY / "input_dir_zcdp", folder)
    config = folder / "config.json"
    if infinite:
        data = json.loads(config.read_text())
        for key, value in data.items():
            if key.startswith("privacy_budget_p_level_") and value > 0:
                data[key] = math.inf
        config.write_text(json.dumps(data))  # json writes the JSON extension `Infinity`
    return config


def _run(config: Path, output: Path, *extra: str) -> int:
    argv = ["run", "safetab-p", "--config", str(config), "--data", str(TOY), "--output"]
    return main([*argv, str(output), *extra])


def test_infinite_budget_run_equals_the_engine_exact_counts(tmp_path: Path) -> None:
    config = _params(tmp_path, infinite=True)
    assert _run(config, tmp_path / "out", "--skip-validation", "--seed", "1") == 0
    # The engine alone, same inputs: with infinite budgets its counts are the exact counts
    # (checked against a brute-force reference in test_safetab_engine.py).
    release = run_safetab_p(
        load_safetab_p_config(config),
        load_race_specs(config.parent),
        read_person_records(TOY / "person-records.txt"),
        read_grf_c(TOY / "GRF-C.txt"),
    )
    write_release(release, tmp_path / "engine")
    for name in ("t1/t1.txt", "t2/t2.txt"):
        ours = (tmp_path / "out" / name).read_bytes()
        assert ours == (tmp_path / "engine" / name).read_bytes(), name
    assert len(release.t1) > 0
    audit = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert audit["totals"]["US"]["rho"] is None  # ∞ is written as null
    # Exact counts are released: the release says so, everywhere.
    assert audit["markers"] == ["NOT-PRIVATE", "SEEDED"]
    assert audit["randomness"]["release_private"] is False
    assert (tmp_path / "out" / "NOT-PRIVATE").is_file()


def test_seeded_run_writes_tables_audit_and_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAS_TASK_RUNNER")  # the default: a small input's levels on threads
    config = _params(tmp_path)
    out = tmp_path / "out"
    assert _run(config, out, "--skip-validation", "--seed", "5", "--run-id", "seeded-1") == 0
    assert (out / "t1" / "t1.txt").is_file() and (out / "t2" / "t2.txt").is_file()
    audit = json.loads((out / "audit.json").read_text())
    assert set(AUDIT_KEYS) <= set(audit)
    assert audit["status"] == "succeeded" and audit["error_type"] is None
    assert audit["run_id"] == "seeded-1" and audit["parameters"]["seed"] == 5
    assert audit["randomness"]["secure"] is False and "seed=5" in audit["randomness"]["source"]
    assert audit["validation"] == {"skipped": True}
    assert audit["config"]["sha256"] == file_sha256(config)
    # The records by their ledger id (a keyed hash of their fingerprint), never a file hash.
    records = audit["inputs"]["person-records"]
    assert records["path"] == str(TOY / "person-records.txt") and len(records["id"]) == 64
    assert audit["privacy_ledger"]["dataset"] and "sha256" not in records
    sealed = audit["identity"]["sealed_files"]
    assert sealed["race-and-ethnicity-codes.txt"] == file_sha256(
        config.parent / "race-and-ethnicity-codes.txt"
    )
    ledger = audit["ledger"]["US"]["measurements"]
    assert ledger
    # Each noise vector by a keyed id: its digest stays in the enclave (a short vector's
    # digest can be inverted by trying small values).
    assert all(len(m["noise_id"]) == 64 and "noise_digest" not in m for m in ledger)
    assert '"noise_digest"' not in (out / "audit.json").read_text()
    assert audit["draws"] == {"fresh": len(ledger), "reused": 0}
    # toy config: US levels sum to ρ = 0.008·3 + 0.534·2 + 0.159·2 + 2.43·2 (zCDP, per level)
    assert audit["totals"]["US"]["rho"] == pytest.approx(6.27)
    assert audit["totals"]["US"]["bounded_rho"] == pytest.approx(12.54)
    for name, info in audit["outputs"].items():
        lines = (out / name).read_text().splitlines()
        assert info["rows"] == len(lines) - 1 and info["sha256"] == file_sha256(out / name)
    assert set(audit["timings"]) >= {"validate", "spill", "totals", "measure", "cells", "write"}
    folder = RunFolder(out, "seeded-1")
    assert len(list(folder.noise_dir.glob("*.npy"))) == len(ledger)
    assert "measured" in folder.log_path.read_text()
    assert (out / "SEEDED").is_file() and audit["markers"] == ["SEEDED"]
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["run_id"] == "seeded-1" and manifest["markers"] == ["SEEDED"]
    assert manifest["files"]["t1/t1.txt"]["sha256"] == file_sha256(out / "t1/t1.txt")
    assert manifest["files"]["audit.json"]["sha256"] == file_sha256(out / "audit.json")
    run = audit["parameters"]["flow_run_id"]
    (table,) = artifacts("safetab-p-privacy-us", run)
    assert "MOE 95%" in table.data and "[SEEDED]" in table.description
    (totals,) = artifacts("safetab-p-privacy-totals", run)
    assert "ρ, bounded (change one person: 2ρ)" in totals.data
    (summary,) = (a.data for a in artifacts("safetab-p-audit", run))
    assert "seeded-1: succeeded" in summary and "SEEDED" in summary
    assert file_sha256(config) in summary  # the config hash, shown to the reviewer


def test_killed_run_reruns_without_redrawing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str]
) -> None:
    config = _params(tmp_path)
    args = ("--skip-validation", "--seed", "9")
    # Reference: the same seed, one uninterrupted run (its own ledger: a comparison, not a
    # second release of the data).
    clean = tmp_path / "reference" / "clean"
    reference = ("--ledger", str(tmp_path / "reference-ledger"))
    assert _run(config, clean, *args, *reference, "--run-id", "clean") == 0
    drawn = len(count_samples)
    assert drawn > 0

    def killed(*_args, **_kwargs):
        raise RuntimeError("killed after the draws")

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(safetab_tasks, "write_release_tables", killed)
        assert _run(config, out, *args, "--run-id", "r1") == 1
    assert len(count_samples) == 2 * drawn
    failed = json.loads(RunFolder(out, "r1").audit_path.read_text())
    assert failed["status"] == "failed" and failed["error_type"] == "RuntimeError"
    assert len(failed["ledger"]["US"]["measurements"]) == drawn and not out.exists()

    assert _run(config, out, *args, "--run-id", "r1") == 0
    assert len(count_samples) == 2 * drawn  # not one sampler call on the rerun
    audit = json.loads((out / "audit.json").read_text())
    assert audit["status"] == "succeeded" and audit["parameters"]["rerun"] is True
    assert audit["draws"]["fresh"] == 0 and audit["draws"]["reused"] == drawn
    for name in ("t1/t1.txt", "t2/t2.txt"):
        assert (out / name).read_bytes() == (clean / name).read_bytes()

    # A stored vector that no longer matches its ledger digest is neither reused nor redrawn;
    # the published release stays as it was.
    published = (out / "t1/t1.txt").read_bytes()
    stored = sorted(RunFolder(out, "r1").noise_dir.glob("*.npy"))[0]
    np.save(stored, np.load(stored) + 1)
    assert _run(config, out, *args, "--run-id", "r1") == 1
    assert len(count_samples) == 2 * drawn
    audit = json.loads(RunFolder(out, "r1").audit_path.read_text())
    assert audit["status"] == "failed" and audit["error_type"] == "NoiseDigestError"
    assert (out / "t1/t1.txt").read_bytes() == published


def test_invalid_inputs_exit_1_before_any_noise(tmp_path: Path, count_samples: list[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TOY / "GRF-C.txt", data)
    lines = (TOY / "person-records.txt").read_text().splitlines(keepends=True)
    fields = lines[2].split("|")
    fields[1] = "7"  # QSEX must be 1 or 2
    lines[2] = "|".join(fields)
    (data / "person-records.txt").write_text("".join(lines))
    out = tmp_path / "out"
    argv = ["run", "safetab-p", "--config", str(_params(tmp_path)), "--data", str(data)]
    assert main([*argv, "--output", str(out), "--seed", "1", "--run-id", "v"]) == 1
    assert_rejected_before_noise(out, "v", count_samples)


def test_reviewed_coterminous_file_is_used_and_hashed(tmp_path: Path) -> None:
    config = _params(tmp_path)
    sets_file = tmp_path / "coterminous-geographies.txt"
    from das.cli import main as das_main

    assert das_main(["coterminous", "derive", "--data", str(TOY), "--output", str(sets_file)]) == 0
    args = ("--skip-validation", "--seed", "9")
    # Three comparisons of the same data: each has its own ledger (tmp_path/<case>/ledger).
    derived, reviewed, none = (tmp_path / case / "out" for case in ("derived", "file", "none"))

    def ledger(out: Path) -> tuple[str, str]:
        return "--ledger", str(out.parent / "ledger")

    assert _run(config, derived, *args, *ledger(derived)) == 0
    assert _run(config, reviewed, *args, *ledger(reviewed), "--coterminous", str(sets_file)) == 0
    for name in ("t1/t1.txt", "t2/t2.txt"):
        assert (reviewed / name).read_bytes() == (derived / name).read_bytes(), name
    audit = json.loads((reviewed / "audit.json").read_text())
    sealed = audit["identity"]["sealed_files"]
    assert sealed["coterminous-geographies.txt"] == file_sha256(sets_file)
    # An empty set list (header only) turns the fix off: DC's state and county then differ.
    sets_file.write_text("SET_ID|REGION_TYPE|REGION_ID\n")
    assert _run(config, none, *args, *ledger(none), "--coterminous", str(sets_file)) == 0
    assert (none / "t1/t1.txt").read_bytes() != (derived / "t1/t1.txt").read_bytes()
