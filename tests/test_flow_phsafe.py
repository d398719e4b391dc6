"""`das run phsafe` end to end: the flow, estimates, audit, artifacts, rerun without redraw.

The Census toy inputs are used in place (by path, never copied into the repository); they are
deliberately inconsistent, so validation rejects them and they run with --skip-validation.
Synthetic inputs come from `das synth phsafe` (the shipped demo config, or the 2020 PR config).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from das.offline import configure_offline

configure_offline()

from prefect_fixtures import artifacts, assert_rejected_before_noise  # noqa: E402
from toy_configs import phsafe_toy_config  # noqa: E402

import tasks.phsafe as phsafe_tasks  # noqa: E402
from das.cli import main as das_main  # noqa: E402
from das.io.phsafe import input_paths, read_geo, read_persons, read_units  # noqa: E402
from das.io.writers import file_sha256  # noqa: E402
from das.phsafe.engine import run_phsafe, write_release  # noqa: E402
from das.phsafe.plan import plan_phsafe  # noqa: E402
from das.runs.audit import AUDIT_KEYS  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.specs.config import load_phsafe_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TOY = SHARED / "census_specs" / "phsafe" / "toy"
PRODUCTION = SHARED / "census_specs" / "phsafe" / "production_2020"
NOISY = ("PH1_num", "PH1_denom", "PH2", "PH3", "PH4", "PH5_denom", "PH6", "PH7", "PH8_denom")
DERIVED = ("PH5_num", "PH8_num")
ESTIMATED = ("PH1", "PH2", "PH3", "PH4", "PH5", "PH6", "PH7", "PH8")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_server", "thread_runner")]
needs_toy = pytest.mark.skipif(not TOY.is_dir(), reason="/work/shared toy inputs absent")


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded synthetic population under the shipped demo config (all 51 US states)."""
    folder = tmp_path_factory.mktemp("phsafe") / "demo"
    assert das_main(["synth", "phsafe", "--output", str(folder), "--persons", "20000",
                     "--seed", "11"]) == 0  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo config cut to three states (40 average groups: quick postprocessing)."""
    root = tmp_path_factory.mktemp("phsafe-small")
    config = json.loads((REPO / "data_specs" / "phsafe" / "demo" / "config.json").read_text())
    config["state_filter"] = ["11", "44", "50"]
    (root / "config.json").write_text(json.dumps(config))
    folder = root / "data"
    assert das_main(["synth", "phsafe", "--output", str(folder), "--persons", "5000",
                     "--seed", "12", "--config", str(root / "config.json")]) == 0  # fmt: skip
    return folder


def _run(config: Path, data: Path, output: Path, *extra: str) -> int:
    argv = ["run", "phsafe", "--config", str(config), "--data", str(data), "--output"]
    return das_main([*argv, str(output), *extra])


def _infinite(config: Path, target: Path) -> Path:
    """``config`` with every positive budget replaced by Infinity (JSON extension)."""
    data = json.loads(config.read_text())
    for levels in data["privacy_budget"].values():
        for key, value in levels.items():
            if value > 0:
                levels[key] = math.inf
    target.write_text(json.dumps(data))
    return target


def _read(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / name / f"{name}.txt", sep="|", dtype={"REGION_ID": str})


def _release_bytes(out: Path) -> dict[str, bytes]:
    return {
        path.relative_to(out).as_posix(): path.read_bytes()
        for path in sorted(out.glob("PH*/*.txt"))
    }


@needs_toy
def test_toy_inputs_are_rejected_by_validation_before_any_noise(
    tmp_path: Path, count_samples: list[str]
) -> None:
    out = tmp_path / "out"
    config = phsafe_toy_config("zcdp", tmp_path)  # the toy's budgets within the limits
    assert _run(config, TOY, out, "--seed", "1", "--run-id", "v") == 1
    audit = assert_rejected_before_noise(out, "v", count_samples)
    assert audit["ledger"] == {"partitions": {}} and audit["outputs"] is None
    assert not list(out.glob("PH*"))


@needs_toy
def test_infinite_budget_run_equals_the_engine_exact_counts(tmp_path: Path) -> None:
    config = _infinite(TOY / "config_zcdp.json", tmp_path / "config.json")
    out = tmp_path / "out"
    assert _run(config, TOY, out, "--skip-validation", "--seed", "1") == 0
    # The engine alone with infinite budgets gives the exact counts (checked against an
    # independent per-record reference in test_phsafe_engine.py).
    paths = input_paths(TOY)
    release = run_phsafe(
        load_phsafe_config(config),
        read_persons(paths["persons"]),
        read_units(paths["units"]),
        read_geo(paths["geo"]),
    )
    write_release(release, tmp_path / "engine")
    for table in (*NOISY, *DERIVED):
        name = f"{table}/{table}.txt"
        assert (out / name).read_bytes() == (tmp_path / "engine" / name).read_bytes(), name
    # Zero variance: every count estimate is the exact count, its interval a point.
    for table in ("PH2", "PH3", "PH4", "PH6", "PH7"):
        estimates = _read(out, f"{table}_estimates")
        noisy = _read(out, table)
        keys = [c for c in noisy.columns if c not in ("COUNT", "NOISE_DISTRIBUTION", "VARIANCE")]
        basis = noisy.merge(estimates, on=keys, how="left", validate="one_to_one")
        assert (basis["ESTIMATE"] == basis["COUNT"]).all(), table
        assert (basis["CI_LOWER_90"] == basis["COUNT"]).all() and (
            basis["CI_UPPER_90"] == basis["COUNT"]
        ).all()
    audit = json.loads((out / "audit.json").read_text())
    assert audit["totals"]["US"]["rho"] is None  # ∞ is written as null


def test_seeded_demo_run_writes_tables_estimates_audit_and_artifacts(
    tmp_path: Path, demo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAS_TASK_RUNNER")  # the default: a small input's tables on threads
    config = demo_data / "config.json"
    out = tmp_path / "out"
    assert _run(config, demo_data, out, "--seed", "5", "--run-id", "demo-1") == 0
    audit = json.loads((out / "audit.json").read_text())
    assert set(AUDIT_KEYS) <= set(audit)
    assert audit["status"] == "succeeded" and audit["error_type"] is None
    assert audit["validation"]["ok"] is True and audit["validation"]["skipped"] is False
    assert audit["randomness"]["secure"] is False and audit["parameters"]["seed"] == 5
    assert audit["config"]["sha256"] == file_sha256(config)
    assert set(audit["inputs"]) == {"persons", "units", "geo"}
    assert audit["identity"]["sealed_files"] == {"config.json": file_sha256(config)}

    written = {name.split("/")[0] for name in audit["outputs"]}
    expected = {*NOISY, *DERIVED, *(f"{t}_estimates" for t in ESTIMATED)}
    assert written == expected == {p.name for p in out.glob("PH*")}
    for name, info in audit["outputs"].items():
        lines = (out / name).read_text().splitlines()
        assert info["rows"] == len(lines) - 1 > 0 and info["sha256"] == file_sha256(out / name)

    plan = plan_phsafe(load_phsafe_config(config))
    ledger = audit["ledger"]["US"]["measurements"]
    assert [m["name"] for m in ledger] == [m.name for m in plan]
    # Each noise vector by a keyed id: its digest stays in the enclave (a short vector's
    # digest can be inverted by trying small values).
    assert all(len(m["noise_id"]) == 64 and "noise_digest" not in m for m in ledger)
    assert '"noise_digest"' not in (out / "audit.json").read_text()
    assert audit["draws"] == {"fresh": len(plan), "reused": 0}
    folder = RunFolder(out, "demo-1")
    assert len(list(folder.noise_dir.glob("*.npy"))) == len(plan)
    # The audit's totals are the budget report's.
    report = tmp_path / "budget.json"
    with report.open("w") as handle:
        import contextlib

        with contextlib.redirect_stdout(handle):
            assert das_main(["budget", "report", "--config", str(config), "--json"]) == 0
    budget = json.loads(report.read_text())["passes"]["US"]
    assert audit["totals"]["US"]["rho"] == pytest.approx(budget["rho"])
    assert audit["totals"]["US"]["bounded_rho"] == pytest.approx(2 * budget["rho"])

    post = audit["postprocessing"]
    assert post["seed"] == 5 and set(post["tables"]) == set(ESTIMATED)
    for name in ("PH1", "PH5", "PH8"):
        assert post["tables"][name]["converged"] is True
        assert post["tables"][name]["min_ess"] >= post["tables"][name]["target_ess"]
    stages = {"validate", "spill", "counts", "measure", "postprocess", "write"}
    assert set(audit["timings"]) >= stages
    assert "measured" in folder.log_path.read_text()

    # Estimates: nonnegative counts, intervals around them, averages within [1, τ].
    ph3 = _read(out, "PH3_estimates")
    assert (ph3["CI_LOWER_90"] <= ph3["ESTIMATE"]).all()
    assert (ph3["ESTIMATE"] <= ph3["CI_UPPER_90"]).all() and (ph3["CI_LOWER_90"] >= 0).all()
    ph1 = _read(out, "PH1_estimates")
    total = ph1[ph1["PH1_DATA_CELL"] == 1]
    tau = load_phsafe_config(config).tau["PH1_num"]
    assert total["ESTIMATE"].between(1, tau).all()
    assert (total["CI_LOWER_90"] <= total["ESTIMATE"]).all()

    run = audit["parameters"]["flow_run_id"]
    (table,) = artifacts("phsafe-privacy-us", run)
    assert "MOE 90%" in table.data and "[SEEDED]" in table.description
    (totals,) = artifacts("phsafe-privacy-totals", run)
    assert "ρ, bounded (change one person: 2ρ)" in totals.data
    (summary,) = artifacts("phsafe-audit", run)
    assert "run demo-1: succeeded" in summary.data


def test_killed_run_reruns_without_redrawing(
    tmp_path: Path,
    small_data: Path,
    monkeypatch: pytest.MonkeyPatch,
    count_samples: list[str],
) -> None:
    config = small_data / "config.json"
    args = ("--skip-validation", "--seed", "9")
    clean = tmp_path / "reference" / "clean"  # its own ledger: a comparison, not a release
    reference = ("--ledger", str(tmp_path / "reference-ledger"))
    assert _run(config, small_data, clean, *args, *reference, "--run-id", "clean") == 0
    drawn = len(count_samples)
    assert drawn == len(plan_phsafe(load_phsafe_config(config)))

    def killed(*_args, **_kwargs):
        raise RuntimeError("killed after the draws")

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(phsafe_tasks, "postprocess_phsafe", killed)
        assert _run(config, small_data, out, *args, "--run-id", "r1") == 1
    assert len(count_samples) == 2 * drawn
    failed = json.loads(RunFolder(out, "r1").audit_path.read_text())
    assert failed["status"] == "failed" and failed["error_type"] == "RuntimeError"
    assert len(failed["ledger"]["US"]["measurements"]) == drawn
    assert not out.exists()  # nothing released by the failed attempt

    assert _run(config, small_data, out, *args, "--run-id", "r1") == 0
    assert len(count_samples) == 2 * drawn  # not one sampler call on the rerun
    audit = json.loads((out / "audit.json").read_text())
    assert audit["status"] == "succeeded" and audit["parameters"]["rerun"] is True
    assert audit["draws"] == {"fresh": 0, "reused": drawn}
    assert _release_bytes(out) == _release_bytes(clean)

    # A stored vector that no longer matches its ledger digest is neither reused nor redrawn.
    stored = sorted(RunFolder(out, "r1").noise_dir.glob("*.npy"))[0]
    np.save(stored, np.load(stored) + 1)
    assert _run(config, small_data, out, *args, "--run-id", "r1") == 1
    assert len(count_samples) == 2 * drawn
    audit = json.loads(RunFolder(out, "r1").audit_path.read_text())
    assert audit["status"] == "failed" and audit["error_type"] == "NoiseDigestError"


def test_secure_rerun_reuses_noise_and_postprocessing_seed(
    tmp_path: Path, small_data: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str]
) -> None:
    config = small_data / "config.json"
    out = tmp_path / "out"

    def killed(*_args, **_kwargs):
        raise RuntimeError("killed while writing")

    with monkeypatch.context() as patch:
        patch.setattr(phsafe_tasks, "write_table_folder", killed)
        assert _run(config, small_data, out, "--skip-validation", "--run-id", "s1") == 1
    drawn = len(count_samples)
    failed = json.loads(RunFolder(out, "s1").audit_path.read_text())
    assert failed["randomness"]["secure"] is True and failed["postprocessing"]["seed"] >= 0
    assert _run(config, small_data, out, "--skip-validation", "--run-id", "s1") == 0
    first = _release_bytes(out)
    assert _run(config, small_data, out, "--skip-validation", "--run-id", "s1") == 0
    assert len(count_samples) == drawn  # the reruns drew nothing
    assert _release_bytes(out) == first  # same noise, same postprocessing seed
    audit = json.loads((out / "audit.json").read_text())
    assert audit["postprocessing"]["seed"] == failed["postprocessing"]["seed"]
    assert audit["parameters"]["seed"] is None


def test_hpd_intervals_are_chosen_on_the_command_line(tmp_path: Path, small_data: Path) -> None:
    out = tmp_path / "out"
    config = small_data / "config.json"
    args = ("--skip-validation", "--seed", "4", "--credible-interval", "hpd")
    assert _run(config, small_data, out, *args) == 0
    audit = json.loads((out / "audit.json").read_text())
    assert audit["parameters"]["credible_interval"] == "hpd"
    assert audit["postprocessing"]["credible_interval"] == "hpd"
    assert audit["postprocessing"]["tables"]["PH3"]["interval"] == "hpd"
    # A basis cell released at or below 0: its shortest interval starts at 0.
    noisy, estimates = _read(out, "PH3"), _read(out, "PH3_estimates")
    keys = ["REGION_ID", "REGION_TYPE", "ITERATION_CODE", "PH3_DATA_CELL"]
    cells = noisy.merge(estimates, on=keys, validate="one_to_one")
    low = cells[cells["COUNT"] <= 0]
    assert len(low) > 0 and (low["CI_LOWER_90"] == 0).all()


@pytest.mark.skipif(not PRODUCTION.is_dir(), reason="/work/shared 2020 configs absent")
@pytest.mark.parametrize("pass_name", ["US", "PR"])
def test_2020_production_configs_run(tmp_path: Path, pass_name: str) -> None:
    production = PRODUCTION / pass_name.lower() / "config.json"
    data = tmp_path / "data"
    assert das_main(["synth", "phsafe", "--output", str(data), "--persons", "5000", "--seed",
                     "3", "--config", str(production)]) == 0  # fmt: skip
    out = tmp_path / "out"
    assert _run(production, data, out, "--seed", "2") == 0
    audit = json.loads((out / "audit.json").read_text())
    assert audit["status"] == "succeeded" and audit["validation"]["ok"] is True
    assert set(audit["ledger"]) == {pass_name}
    # The 2020 totals (PHSafe Table 10 / budget report): US 1.257281, PR 1.226649.
    expected = {"US": 1.257281, "PR": 1.226649}[pass_name]
    assert audit["totals"][pass_name]["rho"] == pytest.approx(expected)
    written = {name.split("/")[0] for name in audit["outputs"]}
    assert written == {*NOISY, *DERIVED, *(f"{t}_estimates" for t in ESTIMATED)}
    states = json.loads(production.read_text())["state_filter"]
    for table in NOISY:
        frame = _read(out, table)
        if pass_name == "PR":
            assert set(frame["REGION_TYPE"]) == {"STATE"} and set(frame["REGION_ID"]) == {"72"}
        else:
            assert set(frame["REGION_ID"]) == {"1", *states}
    assert not list(out.glob(".*.tmp-*"))


def test_worker_processes_release_what_threads_release(
    tmp_path: Path, small_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Production mode: with a Prefect API configured, the tables run on two Dask worker
    processes that get the records from the cluster (read there by the load task); the
    release is byte-identical to the in-process thread run with the same seed."""
    import prefect.settings

    config = small_data / "config.json"
    args = ("--skip-validation", "--seed", "6")
    threads = tmp_path / "threads" / "out"  # its own ledger: a comparison, not a release
    assert _run(config, small_data, threads, *args, "--ledger", str(tmp_path / "ref")) == 0
    monkeypatch.delenv("DAS_TASK_RUNNER")
    monkeypatch.setenv("PREFECT_API_URL", str(prefect.settings.PREFECT_API_URL.value()))
    import flows.runner

    # As if the input were large: a small one runs on the thread pool (flows.runner).
    monkeypatch.setattr(flows.runner, "IN_PROCESS_BELOW_BYTES", 0)
    assert flows.runner.task_runner_from_env(inputs=1).cluster_kwargs["processes"] is True
    out = tmp_path / "processes" / "out"
    assert _run(config, small_data, out, *args) == 0
    audit = json.loads((out / "audit.json").read_text())
    assert audit["status"] == "succeeded"
    assert audit["draws"] == {"fresh": len(plan_phsafe(load_phsafe_config(config))), "reused": 0}
    assert _release_bytes(out) == _release_bytes(threads)


@pytest.mark.parametrize("runner", ["threads", "dask"])
def test_a_load_failure_stops_the_run_with_its_own_error(
    tmp_path: Path,
    small_data: Path,
    count_samples: list[str],
    monkeypatch: pytest.MonkeyPatch,
    runner: str,
) -> None:
    """When reading the records fails (a units.csv value the engine cannot read, validation
    skipped), the run fails with that task's own error, in the spill stage, before any draw, on
    either task runner. (A missing file stops it earlier: no units input, nothing drawn.)"""
    if runner == "dask":  # worker processes, as for a large input (flows.runner)
        import prefect.settings

        import flows.runner

        monkeypatch.delenv("DAS_TASK_RUNNER")
        monkeypatch.setenv("PREFECT_API_URL", str(prefect.settings.PREFECT_API_URL.value()))
        monkeypatch.setattr(flows.runner, "IN_PROCESS_BELOW_BYTES", 0)
    data = tmp_path / "data"
    data.mkdir()
    for name in ("persons.csv", "geo.csv", "units.csv"):
        (data / name).write_bytes((small_data / name).read_bytes())
    units = (data / "units.csv").read_text().splitlines(keepends=True)
    units[1] = units[1].replace(",", ",x", 1)  # the first unit's MAFID is not a number
    (data / "units.csv").write_text("".join(units))
    out = tmp_path / "out"
    assert _run(small_data / "config.json", data, out, "--skip-validation", "--run-id", "f") == 1
    audit = json.loads(RunFolder(out, "f").audit_path.read_text())
    assert audit["status"] == "failed" and audit["error_type"] == "InputUnreadable"
    assert "spill" in audit["timings"] and "measure" not in audit["timings"]
    assert count_samples == [] and not list(RunFolder(out, "f").noise_dir.glob("*"))


def test_two_copies_of_one_input_are_named_not_called_missing(
    tmp_path: Path, small_data: Path, count_samples: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    """units.csv and units.parquet side by side (validation skipped): the run says both exist
    and which to keep, instead of "no units input"; nothing is drawn."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("persons.csv", "geo.csv", "units.csv"):
        (data / name).write_bytes((small_data / name).read_bytes())
    pd.read_csv(data / "units.csv", dtype=str).to_parquet(data / "units.parquet")
    out = tmp_path / "out"
    assert _run(small_data / "config.json", data, out, "--skip-validation", "--run-id", "a") == 1
    err = capfd.readouterr().err
    assert "both units.csv and units.parquet exist" in err and "no units input" not in err
    assert count_samples == [] and not out.exists()
