"""Release integrity, tried as a hostile or careless operator would: no path through the pipeline
releases unprotected counts or spends budget the ledger does not record, and what the run
measures is what it checked (issue 18: each numbered finding has its test here).

Each test drives the real flows (CLI, direct flow calls, separate processes) on the Census
SafeTab-P toy inputs or a small synthetic PHSafe population, against the session's Prefect
server, on Prefect's thread pool. Every test has its own per-user default ledger.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from das.offline import configure_offline

configure_offline()

from chartered import Chartered, make_chartered  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402
from prefect.client.schemas.filters import (  # noqa: E402
    ArtifactFilter,
    ArtifactFilterFlowRunId,
)
from prefect_fixtures import artifacts, server_logs, two_state_phsafe  # noqa: E402

import tasks.safetab_p as safetab_tasks  # noqa: E402
import tasks.validation_gate as gate_tasks  # noqa: E402
from das.cli import main as das_main  # noqa: E402
from das.io.tables import RawSource  # noqa: E402
from das.io.writers import file_sha256  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.trust import LedgerStore, PrivacyLedger, open_ledger  # noqa: E402
from flows.phsafe import phsafe_flow  # noqa: E402
from flows.safetab_p import safetab_p_flow  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOY = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy"

pytestmark = [
    pytest.mark.skipif(not TOY.is_dir(), reason="../shared toy inputs absent"),
    pytest.mark.slow,
    pytest.mark.usefixtures("prefect_server", "thread_runner"),
]


def _params(
    tmp_path: Path, infinite: bool = False, name: str = "params", half: bool = False
) -> Path:
    """The toy zCDP parameters (ρ 6.27: a second spend passes the ceiling of 10); with
    ``half``, every budget halved (ρ 3.135: room for two releases)."""
    folder = tmp_path / name
    if not folder.exists():
        shutil.copytree(TOY / "input_dir_zcdp", folder)
    config = folder / "config.json"
    if infinite or half:
        data = json.loads(config.read_text())
        for key, value in data.items():
            if key.startswith("privacy_budget_p_level_") and value > 0:
                data[key] = math.inf if infinite else value / 2
        config.write_text(json.dumps(data))
    return config


def _data(tmp_path: Path, name: str = "data") -> Path:
    """A private copy of the toy inputs (tests change it)."""
    data = tmp_path / name
    if not data.exists():
        data.mkdir()
        for file in ("person-records.txt", "GRF-C.txt"):
            shutil.copy(TOY / file, data)
    return data


def _run(config: Path, data: Path, output: Path, *extra: str) -> int:
    argv = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output"]
    return das_main([*argv, str(output), *extra])


def _tree(*roots: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``roots``: (mtime_ns, sha256): proves a refusal touched nothing."""
    state = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                state[str(path)] = (path.stat().st_mtime_ns, file_sha256(path))
    return state


def _audit(output: Path) -> dict:
    return json.loads((output / "audit.json").read_text())


CHARTERS: dict[str, Chartered] = {}  # DAS_LEDGER_DIR -> its approvers


def _production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Production mode with a chartered ledger (one approver, quorum 1); the ledger folder."""
    chartered = make_chartered(tmp_path, monkeypatch)
    CHARTERS[str(chartered.ledger)] = chartered
    return chartered.ledger


def _ledger_id(folder: Path) -> str:
    return PrivacyLedger(LedgerStore.in_directory(folder)).info().ledger_id


def _approve(config: Path, data: Path, product: str = "safetab-p", *extra: str) -> None:
    """The spend approved (signed) by the approver of the ledger DAS_LEDGER_DIR names."""
    where = os.environ["DAS_LEDGER_DIR"]
    replace(CHARTERS[where], ledger=Path(where)).approve(config, data, product, None, *extra)


def _ledger() -> PrivacyLedger:
    return open_ledger().ledger


def _exact_counts(tmp_path: Path, data: Path) -> bytes:
    """T1 of an Infinity-budget run of ``data`` (exact counts), in a ledger of its own."""
    out = tmp_path / "exact" / "out"
    extra = ("--skip-validation", "--seed", "1", "--ledger", str(tmp_path / "exact" / "ledger"))
    assert _run(_params(tmp_path, infinite=True, name="exact-params"), data, out, *extra) == 0
    return (out / "t1" / "t1.txt").read_bytes()


# --- 1: an absurd finite budget is refused everywhere -------------------------------------------


def test_a_budget_of_1e300_or_1e_minus_300_is_refused_before_anything_is_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    _production(tmp_path, monkeypatch)
    config, data = two_state_phsafe(tmp_path)
    for value in (1e300, 1e-300):
        settings = json.loads(config.read_text())
        for levels in settings["privacy_budget"].values():
            for key in levels:
                levels[key] = value
        absurd = tmp_path / f"absurd-{value}.json"
        absurd.write_text(json.dumps(settings))
        out = tmp_path / f"out-{value}"
        argv = ["run", "phsafe", "--config", str(absurd), "--data", str(data), "--output"]
        assert das_main([*argv, str(out)]) == 2
        err = capfd.readouterr().err
        reason = "above the largest" if value > 1 else "below"
        assert "REFUSED" in err and reason in err, err
        assert das_main(["ledger", "approve", "--product", "phsafe", "--config", str(absurd),
                         "--data", str(data)]) == 2  # fmt: skip
        state = phsafe_flow(config=str(absurd), data=str(data), output=str(out),
                            return_state=True)  # fmt: skip
        assert not state.is_completed() and not out.exists()
    assert count_samples == []
    assert all(run.dataset is None or not run.draws for run in _ledger().runs())


# --- 1, 4 (earlier issue): production mode holds whatever starts the flow ---------------------


def test_infinite_budget_and_seeds_are_refused_in_production_by_cli_and_direct_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    _production(tmp_path, monkeypatch)
    config, data, out = _params(tmp_path, infinite=True), _data(tmp_path), tmp_path / "out"
    assert _run(config, data, out) == 2
    assert "infinite budget, i.e. no noise" in capfd.readouterr().err
    state = safetab_p_flow(config=str(config), data=str(data), output=str(out), return_state=True)
    assert state.name == "Refused" and "infinite budget" in state.message
    finite = _params(tmp_path, name="finite")
    state = safetab_p_flow(
        config=str(finite), data=str(data), output=str(out), seed=3, return_state=True
    )
    assert state.name == "Refused" and "a seed was given" in state.message
    assert count_samples == [] and not out.exists() and not (tmp_path / "out.das").exists()


# --- approvals: production spends only what a person approved -----------------------------------


def test_production_draws_only_under_an_approval_and_names_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    ledger = _production(tmp_path, monkeypatch)
    config, data = _params(tmp_path), _data(tmp_path)
    started = time.monotonic()
    assert _run(config, data, tmp_path / "one") == 2
    err = capfd.readouterr().err
    assert time.monotonic() - started < 15  # refused before a Prefect API is started
    command = re.search(r"Next step: .*(das ledger approve .*)$", err.strip()).group(1)
    assert f"--config {config}" in command and f"--ledger {ledger}" in command
    assert "Traceback" not in err and count_samples == []
    assert not (tmp_path / "one.das").exists()  # no leftover lock folder
    _approve(config, data)
    assert _run(config, data, tmp_path / "one") == 0
    drawn = len(count_samples)
    assert drawn > 0
    audit = _audit(tmp_path / "one")
    assert audit["privacy_ledger"]["approval"] and audit["markers"] == []
    # The approval is spent: the same records again need another one.
    assert _run(config, data, tmp_path / "two") == 2
    assert "das ledger approve" in capfd.readouterr().err and len(count_samples) == drawn


def test_skip_validation_in_production_needs_a_recorded_passing_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    _production(tmp_path, monkeypatch)
    config, data = _params(tmp_path), _data(tmp_path)
    _approve(config, data)
    assert _run(config, data, tmp_path / "out", "--skip-validation") == 2
    assert "--skip-validation is refused in production" in capfd.readouterr().err
    assert count_samples == []
    # `das validate` with the ledger configured records the verdict of these very records ...
    assert das_main(["validate", "safetab-p", "--config", str(config), "--data", str(data),
                     "--report", str(tmp_path / "report")]) == 0  # fmt: skip
    assert "recorded in the privacy ledger" in capfd.readouterr().out
    assert _run(config, data, tmp_path / "out", "--skip-validation") == 0
    # ... and a re-encoded copy of them is the same dataset: its validation counts too.
    assert _audit(tmp_path / "out")["validation"] == {"skipped": True}


def test_das_production_true_is_production_and_an_unknown_value_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    monkeypatch.setenv("DAS_PRODUCTION", "true")
    assert _run(config, data, tmp_path / "out", "--seed", "3") == 2
    assert "a seed was given" in capfd.readouterr().err
    monkeypatch.setenv("DAS_PRODUCTION", "prod")
    assert _run(config, data, tmp_path / "out") == 2
    assert "refusing to guess" in capfd.readouterr().err


# --- 2: files swapped after the start checks are not what is measured -----------------------


def test_a_config_swapped_for_infinity_while_the_run_validates_is_not_what_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    exact = _exact_counts(tmp_path, data)
    infinite = json.loads(_params(tmp_path, infinite=True, name="swap").read_text())
    original = config.read_bytes()
    validate = gate_tasks.validate_inputs

    def swapping(*args, **kwargs):
        config.write_text(json.dumps(infinite))  # the operator's Infinity copy lands now
        return validate(*args, **kwargs)

    monkeypatch.setattr(gate_tasks, "validate_inputs", swapping)
    assert _run(config, data, out) == 0
    audit = _audit(out)
    assert audit["config"]["sha256"] == file_sha256_bytes(original)
    assert audit["markers"] == [] and audit["totals"]["US"]["rho"] == pytest.approx(6.27)
    assert (out / "t1" / "t1.txt").read_bytes() != exact  # noisy, as the sealed config says


def file_sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_records_swapped_after_validation_stop_the_run_before_any_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    people = data / "person-records.txt"
    validate = gate_tasks.validate_inputs

    def swapping(*args, **kwargs):
        outcome = validate(*args, **kwargs)
        lines = people.read_text().splitlines(keepends=True)
        people.write_text("".join(lines[:-1]))  # one person fewer, after validation read it
        return outcome

    monkeypatch.setattr(gate_tasks, "validate_inputs", swapping)
    assert _run(config, data, out, "--run-id", "swap") == 1
    err = capfd.readouterr().err
    assert "not the records validated: person-records changed" in err
    assert count_samples == [] and not out.exists()
    state = _ledger().run("swap")
    assert state.status == "released" and state.dataset is None  # the reservation came back


def test_records_changed_while_validation_reads_them_stop_the_run_before_any_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    """The one read of the records (validation's, which the engine's spill comes from) must not
    measure a file that changed under it: a person dropped while the read is under way."""
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    people = data / "person-records.txt"
    pieces = RawSource.pieces

    def changing(self, *args, **kwargs):
        for piece in pieces(self, *args, **kwargs):
            yield piece
            if self.path == people:
                lines = people.read_text().splitlines(keepends=True)
                people.write_text("".join(lines[:-1]))

    monkeypatch.setattr(RawSource, "pieces", changing)
    assert _run(config, data, out, "--run-id", "mid-read") == 1
    err = capfd.readouterr().err
    assert "not the records validated: person-records changed while the run ran" in err
    assert count_samples == [] and not out.exists()
    state = _ledger().run("mid-read")
    assert state.status == "released" and state.dataset is None  # the reservation came back
    assert not (RunFolder(out, "mid-read").root / "work").exists()  # the spill went with it


# --- 3: a run id is bound to its output -----------------------------------------------------------


def test_a_run_id_reused_for_another_output_is_refused(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    assert _run(config, data, tmp_path / "outA", "--skip-validation", "--run-id", "X") == 0
    drawn = len(count_samples)
    assert _run(config, data, tmp_path / "outB", "--skip-validation", "--run-id", "X") == 2
    assert "bound in the ledger to another run (output" in capfd.readouterr().err
    assert len(count_samples) == drawn and not (tmp_path / "outB").exists()
    assert [r.run_id for r in _ledger().runs()] == ["X"]


# --- 4: a forged run folder is not resumed -------------------------------------------------


def _zero_noise(folder: RunFolder) -> None:
    """The hostile edit: every noise file replaced by zeros, and the digests the run folder
    keeps beside them updated to match."""
    from das.privacy.accounting import noise_digest

    digests = {}
    for path in folder.noise_dir.glob("*.npy"):
        zeros = np.zeros_like(np.load(path))
        np.save(path, zeros)
        digests[path.name.split(".")[0]] = noise_digest(zeros)
    for path in folder.accountants_dir.glob("*.json"):
        ledger = json.loads(path.read_text())
        for item in ledger["measurements"]:
            from das.runs.folder import safe_name

            item["noise_digest"] = digests.get(safe_name(item["name"]), item["noise_digest"])
        path.write_text(json.dumps(ledger))


def test_a_forged_run_folder_with_zero_noise_is_never_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"

    def killed(*_args, **_kwargs):
        raise RuntimeError("killed after the draws")

    with monkeypatch.context() as patch:
        patch.setattr(safetab_tasks, "write_release_tables", killed)
        assert _run(config, data, out, "--skip-validation", "--run-id", "F") == 1
    drawn = len(count_samples)
    _zero_noise(RunFolder(out, "F"))
    # The same run id resumes: the ledger's records, not the folder's, decide what is reused.
    assert _run(config, data, out, "--skip-validation", "--run-id", "F") == 1
    assert "NoiseDigestError" in capfd.readouterr().err
    assert len(count_samples) == drawn and not out.exists()
    # A copy of the folder under another output is another run id's business: refused there.
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "out.das", tmp_path / "copy.das")
    assert _run(config, data, copy, "--skip-validation", "--run-id", "F") == 2
    assert not copy.exists() and len(count_samples) == drawn


def _zero_in_place(folder: RunFolder) -> None:
    """The hostile edit during a run: zeros written into every noise file, in place."""
    for path in folder.noise_dir.glob("*.npy"):
        noise = np.lib.format.open_memmap(path, mode="r+")
        noise[:] = 0
        noise.flush()
        del noise


def _point_levels_at_zeros(folder: RunFolder) -> None:
    """The other hostile edit: the levels' work files pointed at zero-filled copies."""
    for listed in (folder.root / "work").rglob("noise.json"):
        files = json.loads(listed.read_text())
        for stage, name in files.items():
            zeros = Path(name).with_name(f"zeros-{Path(name).name}")
            np.save(zeros, np.zeros_like(np.load(name)))
            files[stage] = str(zeros)
        listed.write_text(json.dumps(files))


@pytest.mark.parametrize(
    ("when", "edit"),
    [("before", _zero_in_place), ("while", _zero_in_place), ("while", _point_levels_at_zeros)],
)
def test_noise_changed_in_the_run_folder_while_the_run_writes_is_never_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd, when: str, edit
) -> None:
    """After the draws, before or while the tables are written, the noise they add is zeroed
    (in place, or by pointing the work files elsewhere): the release would be exact counts
    labelled private. The run checks the files against the ledger before and after the write
    and publishes nothing."""
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    folder = RunFolder(out, "Z")
    write, cells = safetab_tasks.write_release_tables, safetab_tasks.combine_cells

    def combine_then_edit(*args, **kwargs):
        cells(*args, **kwargs)
        edit(folder)

    def edit_then_write(*args, **kwargs):
        edit(folder)
        return write(*args, **kwargs)

    if when == "before":
        monkeypatch.setattr(safetab_tasks, "combine_cells", combine_then_edit)
    else:
        monkeypatch.setattr(safetab_tasks, "write_release_tables", edit_then_write)
    assert _run(config, data, out, "--skip-validation", "--run-id", "Z") == 1
    err = capfd.readouterr().err
    assert "NoiseDigestError" in err and "the release is not published" in err
    assert "it cannot be resumed" in err and "resume with" not in err
    assert not out.exists()
    spent = _ledger().run("Z")
    assert spent is not None and spent.counting  # the spend stays recorded


# --- 5: the same people re-encoded are the same dataset ------------------------------------------


def _reencode(source: Path, target: Path, how: str) -> None:
    target.mkdir()
    shutil.copy(source / "GRF-C.txt", target)
    text = (source / "person-records.txt").read_text()
    header, *rows = [line for line in text.splitlines() if line]
    if how == "crlf":
        crlf = "\r\n".join([header, *rows]) + "\r\n"
        (target / "person-records.txt").write_bytes(crlf.encode())
    elif how == "reversed":
        (target / "person-records.txt").write_text("\n".join([header, *rows[::-1]]) + "\n")
    elif how == "bom":
        (target / "person-records.txt").write_text("\ufeff" + "\n".join([header, *rows]) + "\n")
    else:
        table = pa_csv.read_csv(
            source / "person-records.txt",
            parse_options=pa_csv.ParseOptions(delimiter="|"),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in header.split("|")}
            ),
        )
        pq.write_table(table, target / "person-records.parquet")


def test_the_same_records_re_encoded_are_one_dataset_in_the_ledger(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    assert _run(config, data, tmp_path / "first", "--skip-validation") == 0
    drawn = len(count_samples)
    dataset = _audit(tmp_path / "first")["privacy_ledger"]["dataset"]
    for how in ("crlf", "reversed", "bom", "parquet"):
        copy = tmp_path / f"data-{how}"
        _reencode(data, copy, how)
        assert _run(config, copy, tmp_path / f"out-{how}", "--skip-validation") == 2, how
        err = capfd.readouterr().err
        assert f"dataset {dataset[:16]}" in err and "earlier 6.27" in err, how
    assert len(count_samples) == drawn
    (spent,) = [r for r in _ledger().runs() if r.counting]
    assert spent.dataset == dataset


# --- 6: the history cannot be reset without a sign ----------------------------------------------


def test_a_new_emptied_or_swapped_ledger_is_refused_not_read_as_no_spend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    ledger = _production(tmp_path, monkeypatch)
    config, data = _params(tmp_path), _data(tmp_path)
    releases = tmp_path / "releases"
    _approve(config, data)
    assert _run(config, data, releases / "{run_id}", "--run-id", "r1") == 0
    drawn = len(count_samples)
    # A mistyped DAS_LEDGER_DIR: nothing there.
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "ledgr"))
    assert _run(config, data, releases / "{run_id}", "--run-id", "r2") == 2
    assert "never creates one implicitly" in capfd.readouterr().err
    assert not (tmp_path / "ledgr").exists()
    # A fresh ledger made for the occasion, without a charter: no production ledger at all ...
    monkeypatch.setenv("DAS_LEDGER_DIR", str(tmp_path / "fresh"))
    assert das_main(["ledger", "init", "--ledger", str(tmp_path / "fresh")]) == 0
    assert _run(config, data, releases / "{run_id}", "--run-id", "r2") == 2
    assert "has no charter" in capfd.readouterr().err
    # ... and one chartered by the same approvers (who were told it is a second ledger): not
    # the pinned ledger ...
    shutil.rmtree(tmp_path / "fresh")
    chartered = CHARTERS[str(ledger)]
    assert das_main(["ledger", "init", "--ledger", str(tmp_path / "fresh"), "--approvers",
                     str(chartered.public), "--quorum", "1", "--key",
                     str(chartered.approvers[0]), "--new-history"]) == 0  # fmt: skip
    CHARTERS[str(tmp_path / "fresh")] = chartered
    _approve(config, data, "safetab-p", "--new-history")  # told: approved in another ledger
    assert _run(config, data, releases / "{run_id}", "--run-id", "r2") == 2
    assert "points at another ledger" in capfd.readouterr().err
    # ... and with DAS_LEDGER_ID changed too, the trust root pinned beside the run key refuses
    # it; with that pin moved aside and the fresh ledger's own root pinned in its place, the
    # release beside the output was still recorded elsewhere.
    monkeypatch.setenv("DAS_LEDGER_ID", _ledger_id(tmp_path / "fresh"))
    assert _run(config, data, releases / "{run_id}", "--run-id", "r2") == 2
    assert "does not extend the trust root" in capfd.readouterr().err
    pin = CHARTERS[str(ledger)].run_key.parent / "trust-root.json"
    pin.rename(pin.with_name("agency-trust-root.json"))
    fresh_root = tmp_path / "fresh-trust-root.json"
    assert das_main(["ledger", "trust-root", "--ledger", str(tmp_path / "fresh"), "--output",
                     str(fresh_root)]) == 0  # fmt: skip
    monkeypatch.setenv("DAS_TRUST_ROOT", str(fresh_root))
    assert _run(config, data, releases / "{run_id}", "--run-id", "r2") == 2
    assert "was recorded in ledger" in capfd.readouterr().err
    monkeypatch.delenv("DAS_TRUST_ROOT")
    pin.with_name("agency-trust-root.json").rename(pin)
    monkeypatch.setenv("DAS_LEDGER_ID", json.loads(
        (releases / "r1" / "MANIFEST.json").read_text())["ledger"]["id"])  # fmt: skip
    # The real ledger truncated to 0 bytes.
    monkeypatch.setenv("DAS_LEDGER_DIR", str(ledger))
    (ledger / "ledger.sqlite").write_bytes(b"")
    assert _run(config, data, releases / "{run_id}", "--run-id", "r2") == 2
    assert "emptied or truncated" in capfd.readouterr().err
    assert len(count_samples) == drawn and not (releases / "r2").exists()


# the test posts heads the way any API user can, outside a flow: Prefect warns about that
@pytest.mark.filterwarnings("ignore:Artifact creation outside:FutureWarning")
def test_a_ledger_restored_from_an_old_copy_or_cut_back_is_refused_wherever_the_output_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    """The hash chain of a ledger cut back to an earlier entry is still valid, and a new output
    folder has no release beside it to compare with: the Prefect server's record of the heads
    the runs saw is what shows the ledger lost its history."""
    import sqlite3

    ledger = _production(tmp_path, monkeypatch)
    config, data = _params(tmp_path, half=True), _data(tmp_path)
    backup = tmp_path / "ledger-backup.sqlite"
    _approve(config, data)
    shutil.copy(ledger / "ledger.sqlite", backup)  # the approved state, before any spend
    assert _run(config, data, tmp_path / "first") == 0
    drawn = len(count_samples)
    shutil.copy(backup, ledger / "ledger.sqlite")  # the spend forgotten, the approval kept
    # Any API user can post artifacts: sixty heads the restored ledger holds, posted last,
    # do not hide the ones it lost (every head is read, not the newest fifty).
    from prefect.artifacts import create_table_artifact

    from tasks.ledger_witness import witness_key

    info = PrivacyLedger(LedgerStore.in_directory(ledger)).info()
    forged = {"ledger": info.ledger_id, "location": info.location, "entry": info.head_seq,
              "hash": info.head_hash, "moment": "forged"}  # fmt: skip
    for _ in range(60):
        create_table_artifact(table=[forged], key=witness_key(info))
    assert das_main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    assert "not the ledger the Prefect server saw" in capfd.readouterr().out
    # An approver asked to sign against it is refused before being shown any history.
    key = CHARTERS[str(ledger)].approvers[0]
    approve = ["ledger", "approve", "--ledger", str(ledger), "--product", "safetab-p", "--config",
               str(config), "--data", str(data), "--key", str(key)]  # fmt: skip
    assert das_main(approve) == 2
    shown = capfd.readouterr()
    assert "not the ledger the Prefect server saw" in shown.out + shown.err
    assert "earlier 0" not in shown.out  # no (false) history shown
    assert _run(config, data, tmp_path / "elsewhere" / "second") == 2
    err = capfd.readouterr().err
    assert "heads the Prefect server recorded (entry " in err
    assert "cut or rewritten" in err
    assert len(count_samples) == drawn and not (tmp_path / "elsewhere" / "second").exists()
    # Cut back by SQL instead (the file kept, the tail deleted): the same.
    with sqlite3.connect(ledger / "ledger.sqlite") as db:
        db.execute("DELETE FROM das_ledger_entries WHERE seq > 2")
    assert _run(config, data, tmp_path / "third") == 2
    assert "cut or rewritten" in capfd.readouterr().err
    assert len(count_samples) == drawn


def test_a_prefect_server_that_never_saw_the_ledger_vouches_for_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    """A run pointed at another Prefect server (or a fresh temporary one) finds no head of a
    ledger that runs spent against: a restored ledger would pass unseen, so production
    refuses, outside production it is a notice, and verify fails."""
    import tasks.ledger_witness as witness

    witness_recorded = witness._recorded
    ledger = _production(tmp_path, monkeypatch)
    config, data = _params(tmp_path, half=True), _data(tmp_path)
    _approve(config, data)
    assert _run(config, data, tmp_path / "first") == 0
    drawn = len(count_samples)
    _approve(config, data)  # a second approval, while the right server answers
    monkeypatch.setattr(witness, "_recorded", lambda like: iter(()))  # the other server
    key = CHARTERS[str(ledger)].approvers[0]
    approve = ["ledger", "approve", "--ledger", str(ledger), "--product", "safetab-p", "--config",
               str(config), "--data", str(data), "--key", str(key)]  # fmt: skip
    assert das_main(approve) == 2  # an approver asked there is refused too
    shown = capfd.readouterr()
    assert "holds no head of ledger" in shown.out + shown.err
    assert _run(config, data, tmp_path / "second") == 2
    assert "holds no head of ledger" in capfd.readouterr().err
    assert len(count_samples) == drawn and not (tmp_path / "second").exists()
    assert das_main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    assert "holds no head of ledger" in capfd.readouterr().out
    # DAS_PRODUCTION unset changes nothing: a chartered ledger is production by itself.
    monkeypatch.delenv("DAS_PRODUCTION")
    assert _run(config, data, tmp_path / "third", "--cumulative-total", "US=6.27") == 2
    assert "refused under a chartered (production) ledger" in capfd.readouterr().err
    # Outside production (a ledger without a charter) it is a notice, in the audit.
    plain = tmp_path / "plain"
    monkeypatch.setattr(witness, "_recorded", witness_recorded)
    monkeypatch.setenv("DAS_LEDGER_DIR", str(plain))
    monkeypatch.delenv("DAS_LEDGER_ID")
    monkeypatch.delenv("DAS_RUN_KEY")  # the operator's own key: the service account's is pinned
    assert das_main(["ledger", "init", "--ledger", str(plain)]) == 0
    assert _run(config, data, tmp_path / "elsewhere" / "fourth") == 0
    monkeypatch.setattr(witness, "_recorded", lambda like: iter(()))  # the other server
    fifth = tmp_path / "elsewhere" / "fifth"
    assert _run(config, data, fifth, "--cumulative-total", "US=6.27") == 0
    (notice,) = _audit(fifth)["privacy_ledger"]["notices"]
    assert "holds no head of ledger" in notice
    # A run outside production needs no approval: its audit and ledger entry say so.
    assert _audit(tmp_path / "first")["privacy_ledger"]["production"] is True
    assert _audit(fifth)["privacy_ledger"]["production"] is False
    with _ledger().store.transaction() as db:
        (entry,) = db.entries(run_id=_audit(fifth)["run_id"], kinds=("spend-authorized",))
    assert entry.payload["production"] is False


def test_outside_production_a_re_created_ledger_is_announced_as_a_new_history(
    tmp_path: Path, capfd
) -> None:
    """A user may start a new ledger where the old one was; the run says that the Prefect
    server saw another ledger there, whose spend this one does not count."""
    config, data, ledger = _params(tmp_path), _data(tmp_path), tmp_path / "ledger"
    extra = ("--skip-validation", "--seed", "1", "--ledger", str(ledger))
    assert _run(config, data, tmp_path / "a" / "out", *extra) == 0
    shutil.rmtree(ledger)
    assert _run(config, data, tmp_path / "b" / "out", *extra) == 0
    assert "created a new privacy ledger" in capfd.readouterr().err
    (notice,) = _audit(tmp_path / "b" / "out")["privacy_ledger"]["notices"]
    assert "the Prefect server recorded another privacy ledger at" in notice
    assert _audit(tmp_path / "a" / "out")["privacy_ledger"]["notices"] == []


def test_a_ledger_rewritten_after_a_release_fails_verification_of_that_release(
    tmp_path: Path, capfd
) -> None:
    import sqlite3

    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    ledger_dir = tmp_path / "ledger"
    assert _run(config, data, out, "--skip-validation", "--ledger", str(ledger_dir)) == 0
    verify = ["ledger", "verify", "--ledger", str(ledger_dir), "--release", str(out)]
    assert das_main(verify) == 0
    assert "as recorded" in capfd.readouterr().out
    # A hostile rewrite: the spend divided by ten and every hash after it recomputed.
    store = LedgerStore.in_directory(ledger_dir)
    with sqlite3.connect(store.path) as db:
        rows = db.execute("SELECT seq, at, kind, run_id, dataset, payload FROM "
                          "das_ledger_entries ORDER BY seq").fetchall()  # fmt: skip
        from das.trust.ledger.store import GENESIS_PREV, entry_hash

        prev = GENESIS_PREV
        for seq, at, kind, run_id, dataset, payload in rows:
            payload = payload.replace("627/100", "627/1000")
            digest = entry_hash(seq, at, kind, run_id, dataset, payload, prev)
            db.execute("UPDATE das_ledger_entries SET payload=?, prev=?, hash=? WHERE seq=?",
                       (payload, prev, digest, seq))  # fmt: skip
            prev = digest
    assert das_main(verify) == 1
    report = capfd.readouterr().out
    assert "chain intact" in report  # a consistent rewrite ...
    assert "does not hold entry" in report  # ... that the release's anchor exposes
    assert "per-pass spend differs" in report


def test_outside_production_every_output_meets_the_same_per_user_ledger(
    tmp_path: Path, private_default_ledger: Path, capfd
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    assert _run(config, data, tmp_path / "a" / "out", "--skip-validation", "--seed", "1") == 0
    assert f"created a new privacy ledger at {private_default_ledger}" in capfd.readouterr().err
    assert _run(config, data, tmp_path / "b" / "out", "--skip-validation", "--seed", "1") == 2
    err = capfd.readouterr().err
    assert "already has recorded spend" in err and "--cumulative-total US=12.54" in err


# --- flow-level ledger semantics -------------------------------------------------------------


def test_a_run_that_fails_after_its_first_draw_stays_charged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_samples: list[str], capfd
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    original = safetab_tasks.measure_level_streamed
    calls = []

    def dies_after_one_level(*args, **kwargs):
        if calls:
            raise RuntimeError("worker lost")
        calls.append(1)
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(safetab_tasks, "measure_level_streamed", dies_after_one_level)
        assert _run(config, data, out, "--skip-validation", "--run-id", "A") == 1
    assert count_samples  # it drew
    state = _ledger().run("A")
    assert state.status == "drawing" and state.draws
    failed = json.loads(RunFolder(out, "A").audit_path.read_text())
    assert failed["draws"]["fresh"] == len(state.draws)  # the audit lists what it persisted
    assert _run(config, data, tmp_path / "other", "--skip-validation", "--run-id", "B") == 2
    assert "earlier 6.27 + this run 6.27" in capfd.readouterr().err


def test_a_run_that_fails_before_any_draw_returns_its_reservation(
    tmp_path: Path, count_samples: list[str]
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    lines = (data / "person-records.txt").read_text().splitlines(keepends=True)
    fields = lines[2].split("|")
    fields[1] = "7"  # QSEX must be 1 or 2
    bad = _data(tmp_path, "bad")
    (bad / "person-records.txt").write_text("".join([*lines[:2], "|".join(fields), *lines[3:]]))
    assert _run(config, bad, tmp_path / "invalid", "--run-id", "V") == 1
    assert _ledger().run("V").status == "released" and count_samples == []
    # Nothing was spent: a run on valid records needs no cumulative total.
    assert _run(config, data, tmp_path / "valid", "--skip-validation") == 0


def test_an_infinity_run_leaves_no_room_for_a_finite_private_one(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    data = _data(tmp_path)
    infinite = _params(tmp_path, infinite=True, name="inf")
    assert _run(infinite, data, tmp_path / "exact", "--skip-validation", "--seed", "1") == 0
    drawn = len(count_samples)
    finite = _params(tmp_path)
    extra = ("--skip-validation", "--cumulative-total", "US=Infinity")
    assert _run(finite, data, tmp_path / "private", *extra) == 2
    assert "ceiling" in capfd.readouterr().err and len(count_samples) == drawn


# --- 6 (earlier issue), 7: overwrite, concurrency, kill while writing --------------------------


def test_an_existing_release_is_replaced_only_explicitly_and_kept_aside(
    tmp_path: Path, capfd
) -> None:
    config, data, out = _params(tmp_path, half=True), _data(tmp_path), tmp_path / "out"
    assert _run(config, data, out, "--run-id", "A", "--skip-validation") == 0
    original = (out / "t1" / "t1.txt").read_bytes()
    total = ("--cumulative-total", "6.27", "--skip-validation")  # a one-pass total alone
    capfd.readouterr()
    assert _run(config, data, out, "--run-id", "B", *total) == 2
    assert "holds the release of run A" in capfd.readouterr().err
    assert (out / "t1" / "t1.txt").read_bytes() == original
    assert _run(config, data, out, "--run-id", "B", *total, "--replace-release") == 0
    audit = _audit(out)
    assert audit["run_id"] == "B" and audit["release"]["replaces"] == "A"
    (aside,) = (tmp_path / "out.das" / "replaced").iterdir()
    assert aside.name.startswith("A-") and (aside / "t1" / "t1.txt").read_bytes() == original
    kinds = [e.kind for e in _ledger().entries()]
    assert kinds.count("release-replaced") == 1


def _das_process(*args: str, env_extra: dict[str, str] | None = None, patch: str = ""):
    """``das`` in a separate process against the session's Prefect server; ``patch`` is Python
    run first (to slow a stage down so that it can be raced or killed)."""
    import prefect.settings

    env = {
        **os.environ,
        "PREFECT_API_URL": str(prefect.settings.PREFECT_API_URL.value()),
        "DAS_TASK_RUNNER": "threads",
        **(env_extra or {}),
    }
    code = f"import sys\n{patch}\nfrom das.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# A run that reaches its first measurement says so (a file named by its process id in the
# folder DAS_TEST_GATE) and waits there until the test creates ``go``: the test holds one run
# mid-measurement while the other meets it, so the two really overlap.
GATED_MEASURE = """
import os, pathlib, time, tasks.safetab_p as t
_measure = t.measure_level_streamed
_gate = pathlib.Path(os.environ["DAS_TEST_GATE"])
def measure_level_streamed(*args, **kwargs):
    (_gate / f"measuring-{os.getpid()}").touch()
    deadline = time.monotonic() + 300
    while not (_gate / "go").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the test never opened the gate")
        time.sleep(0.05)
    return _measure(*args, **kwargs)
t.measure_level_streamed = measure_level_streamed
"""


def _race(tmp_path: Path, *argvs: list[str]) -> tuple[list[subprocess.Popen], list[tuple]]:
    """Start one ``das`` process per argv (GATED_MEASURE), wait until the first one ends, and
    check that it ended while another was still running and then reached its measurement (the
    overlap happened, and the one that ended never measured: on a loaded machine the first can
    be refused before the other gets that far); then open the gate. The processes (the one that
    ended first last) and their (stdout, stderr)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {"DAS_TEST_GATE": str(gate)}
    processes = [_das_process(*argv, patch=GATED_MEASURE, env_extra=env) for argv in argvs]
    try:
        deadline = time.monotonic() + 300
        while not (ended := [p for p in processes if p.poll() is not None]):
            measuring = sorted(path.name for path in gate.glob("measuring-*"))
            assert len(measuring) < 2, f"both runs reached their measurements: {measuring}"
            assert time.monotonic() < deadline, "neither run ended while the other was held"
            time.sleep(0.1)
        (first,) = ended
        (held,) = [p for p in processes if p is not first]
        while not (gate / f"measuring-{held.pid}").exists():
            assert held.poll() is None, "the other run ended without reaching its measurement"
            assert time.monotonic() < deadline, "the other run never reached its measurement"
            time.sleep(0.1)
        assert [path.name for path in gate.iterdir()] == [f"measuring-{held.pid}"]
    finally:
        (gate / "go").touch()
    results = [p.communicate(timeout=300) for p in processes]
    order = [processes.index(held), processes.index(first)]
    return [processes[i] for i in order], [results[i] for i in order]


# The tables are in the staging folder, the release not yet published: the kill lands there.
SLOW_WRITE = """
import time, tasks.safetab_p as t
_write = t.write_release_tables
def write_release_tables(*args, **kwargs):
    rows = _write(*args, **kwargs)
    time.sleep(30)
    return rows
t.write_release_tables = write_release_tables
"""


def test_two_concurrent_runs_on_one_output_one_wins_and_one_spend_is_recorded(
    tmp_path: Path,
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    common = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output",
              str(out), "--skip-validation"]  # fmt: skip
    (winner, loser), results = _race(tmp_path, common, common)
    assert [winner.returncode, loser.returncode] == [0, 2], results
    refused = results[1][1]
    assert "REFUSED" in refused and "Traceback" not in refused
    # ... while the other was writing the output (held mid-measurement), not for the ledger
    # both created at once (tests/test_ledger.py)
    assert "another run is writing this output" in refused, refused
    spent = [r for r in _ledger().runs() if r.counting]
    assert [r.status for r in spent] == ["completed"]
    assert json.loads((out / "MANIFEST.json").read_text())["run_id"] == spent[0].run_id


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_two_runs_on_the_same_records_at_once_in_two_processes_spend_once(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """Two flow processes race to spend on the same records, with the ledger a SQLite file or
    a PostgreSQL database (``DAS_LEDGER_URL``, as hosts of one enclave share it)."""
    if store == "postgresql":
        url = request.getfixturevalue("postgres_cluster").sync_url
        ledger = PrivacyLedger(LedgerStore(url))
        with ledger.store.engine.begin() as db:
            db.exec_driver_sql("DROP TABLE IF EXISTS das_ledger_entries, das_ledger_key")
        PrivacyLedger.initialize(ledger.store)
        monkeypatch.setenv("DAS_LEDGER_URL", url)
    config, data = _params(tmp_path), _data(tmp_path)
    argvs = [
        ["run", "safetab-p", "--config", str(config), "--data", str(data),
         "--output", str(tmp_path / name), "--skip-validation"]
        for name in ("a", "b")
    ]  # fmt: skip
    (winner, loser), results = _race(tmp_path, *argvs)
    assert [winner.returncode, loser.returncode] == [0, 2], results
    assert "REFUSED" in results[1][1] and "Traceback" not in results[1][1], results[1][1]
    ledger = _ledger()
    assert len([r for r in ledger.runs() if r.counting]) == 1 and ledger.verify() == []
    if store == "postgresql":
        assert ledger.store.path is None  # the runs really used the database


class _ReleaseWatcher(threading.Thread):
    """Polls the output folder: at every look it is absent or a complete release."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out, self.looks, self.problems = out, 0, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.looks += 1
            if self.out.exists():
                try:
                    manifest = json.loads((self.out / "MANIFEST.json").read_text())
                    missing = [n for n in manifest["files"] if not (self.out / n).is_file()]
                    if missing:
                        self.problems.append(f"missing {missing}")
                except (OSError, ValueError) as exc:
                    self.problems.append(f"incomplete release: {exc!r}")
            time.sleep(0.005)


def test_kill_9_while_writing_then_resume_never_shows_a_partial_release(
    tmp_path: Path,
) -> None:
    config, data, out = _params(tmp_path), _data(tmp_path), tmp_path / "out"
    folder = RunFolder(out, "k1")
    watcher = _ReleaseWatcher(out)
    watcher.start()
    args = ["run", "safetab-p", "--config", str(config), "--data", str(data), "--output",
            str(out), "--skip-validation", "--seed", "4", "--run-id", "k1"]  # fmt: skip
    process = _das_process(*args, patch=SLOW_WRITE)
    deadline = time.monotonic() + 120
    while not (folder.staging_dir / "t1" / "t1.txt").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the write never started"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert not out.exists() and folder.staging_dir.is_dir()  # the half-built release is hidden
    assert _run(config, data, out, "--seed", "4", "--run-id", "k1", "--skip-validation") == 0
    watcher.stop.set()
    watcher.join()
    assert watcher.problems == [] and watcher.looks > 100
    audit = _audit(out)
    assert audit["draws"]["fresh"] == 0 and audit["parameters"]["rerun"] is True
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert {name for name in manifest["files"]} >= {"t1/t1.txt", "t2/t2.txt", "audit.json"}
    assert manifest["ledger"]["id"] == _ledger().info().ledger_id
    assert list((tmp_path / "out.das" / "staging").iterdir()) == []  # cleaned up
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


# --- 7: smaller findings ------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["fifo", "directory", "dangling"])
def test_a_non_regular_input_or_spec_file_is_refused_by_name_at_once(
    tmp_path: Path, what: str, capfd
) -> None:
    config, data = _params(tmp_path), _data(tmp_path)
    for target in (data / "person-records.txt", config.parent / "race-and-ethnicity-codes.txt"):
        saved = target.read_bytes()
        target.unlink()
        if what == "fifo":
            os.mkfifo(target)
        elif what == "directory":
            target.mkdir()
        else:
            target.symlink_to(tmp_path / "nowhere")
        started = time.monotonic()
        assert _run(config, data, tmp_path / "out", "--skip-validation") == 2
        err = capfd.readouterr().err
        assert target.name in err and "Traceback" not in err
        assert time.monotonic() - started < 20  # never blocks on a pipe
        if target.is_dir() and not target.is_symlink():
            target.rmdir()
        else:
            target.unlink()
        target.write_bytes(saved)


def test_only_the_four_named_spec_files_are_parameters(tmp_path: Path) -> None:
    """Any other ``*.txt`` beside config.json (notes, a person file put there by mistake) is
    neither sealed nor read."""
    config, data = _params(tmp_path), _data(tmp_path)
    os.mkfifo(config.parent / "notes.txt")  # would hang anything that read it
    assert _run(config, data, tmp_path / "out", "--skip-validation") == 0
    sealed = _audit(tmp_path / "out")["identity"]["sealed_files"]
    assert sorted(sealed) == sorted(
        ["config.json", "race-and-ethnicity-codes.txt", "race-characteristic-iterations.txt",
         "ethnicity-characteristic-iterations.txt", "race-and-ethnicity-code-to-iteration.txt"]
    )  # fmt: skip


# --- the Prefect server sees no non-private statistic of the records -----------------------


def test_the_prefect_server_sees_no_record_counts(tmp_path: Path) -> None:
    config, data = two_state_phsafe(tmp_path)
    counts = {
        name: sum(1 for line in (data / name).read_text().splitlines()[1:] if line)
        for name in ("persons.csv", "units.csv", "geo.csv")
    }
    out = tmp_path / "out"
    argv = ["run", "phsafe", "--config", str(config), "--data", str(data), "--output", str(out)]
    assert das_main([*argv, "--seed", "2"]) == 0
    flow_run_id = _audit(out)["parameters"]["flow_run_id"]
    logs = server_logs(flow_run_id)
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    seen = "\n".join([log.message for log in logs] + [str(a.data) for a in found])
    assert len(logs) > 10 and len(found) >= 3
    for name, count in counts.items():
        assert not re.search(rf"(?<![\d.]){count}(?![\d.])", seen), (name, count)
    assert "read" not in " ".join(log.message for log in logs if "persons" in log.message)
    local = RunFolder(out, _audit(out)["run_id"]).log_path.read_text()
    assert f"read {counts['persons.csv']} persons" in local  # the curator's log has them
    # No hash of the confidential files either: only the ledger's keyed ids.
    for name in ("persons.csv", "units.csv", "geo.csv"):
        assert file_sha256(data / name) not in seen
    assert artifacts("phsafe-audit", flow_run_id)


def test_an_output_template_gives_each_run_its_own_release_folder(tmp_path: Path, capfd) -> None:
    """Deployments publish into releases/{run_id}: a new folder per run, the same on resume."""
    config, data = _params(tmp_path), _data(tmp_path)
    template = tmp_path / "releases" / "{run_id}"
    extra = ("--seed", "1", "--skip-validation")
    assert _run(config, data, template, *extra, "--run-id", "r1") == 0
    assert (tmp_path / "releases" / "r1" / "MANIFEST.json").is_file()
    assert "release in " + str(tmp_path / "releases" / "r1") in capfd.readouterr().out
    assert _run(config, data, template, *extra, "--run-id", "r1") == 0  # resumes r1
    names = sorted(p.name for p in (tmp_path / "releases").iterdir())
    assert names == ["r1", "r1.das"]
    assert _run(config, data, tmp_path / "releases" / "{runid}", *extra) == 2
    assert "the only placeholder allowed is {run_id}" in capfd.readouterr().err


# --- the engine holds its own assumptions; format errors stay with the curator ---------------


def _flow_run_text(flow_run_id: str) -> str:
    """Everything the Prefect server holds of a flow run: its logs, artifacts, and the state
    messages of the run and its tasks."""
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId

    logs = server_logs(flow_run_id)
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
        tasks = client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[flow_run_id]))
        )
        flow_run = client.read_flow_run(flow_run_id)
    states = [flow_run.state] + [task.state for task in tasks]
    return "\n".join(
        [log.message for log in logs]
        + [str(a.data) for a in found]
        + [state.message or "" for state in states if state is not None]
    )


def test_records_with_more_race_codes_than_the_config_allows_are_never_measured(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    """Δ assumes at most max_race_codes codes per person; validation checks it, but a run
    with --skip-validation (or a config sealed after validation) still must not measure such
    records with noise that does not cover them: the engine refuses them itself."""
    config, data = _params(tmp_path), _data(tmp_path)
    settings = json.loads(config.read_text())
    config.write_text(json.dumps({**settings, "max_race_codes": 1}))  # the toy has 3-code people
    out = tmp_path / "out"
    assert _run(config, data, out, "--skip-validation", "--run-id", "bound") == 1
    err = capfd.readouterr().err
    assert "more than max_race_codes = 1 race codes" in err and "Traceback" not in err
    assert count_samples == [] and not out.exists()
    assert _ledger().run("bound").status == "released"  # nothing spent


def test_a_format_error_past_validation_reaches_the_curator_log_only(
    tmp_path: Path, count_samples: list[str], capfd
) -> None:
    """A record file that fails to parse after validation was skipped: the row numbers and
    counts of the reader's message describe the confidential file, so the Prefect server gets
    what failed and where the details are; the curator's local log gets the details."""
    config, data = _params(tmp_path), _data(tmp_path)
    people = data / "person-records.txt"
    lines = people.read_text().splitlines(keepends=True)
    lines[7] = lines[7].replace("|1|", "|x|", 1)  # a QSEX no reader accepts
    people.write_text("".join(lines))
    out = tmp_path / "out"
    assert _run(config, data, out, "--skip-validation", "--run-id", "unreadable") == 1
    err = capfd.readouterr().err
    assert "the person file could not be read (InputFormatError)" in err
    assert count_samples == [] and not out.exists()
    folder = RunFolder(out, "unreadable")
    local = folder.log_path.read_text()
    assert "the person file could not be read: " in local and "row" in local
    audit = json.loads(folder.audit_path.read_text())
    seen = _flow_run_text(audit["parameters"]["flow_run_id"])
    assert "could not be read (InputFormatError)" in seen
    assert not re.search(r"\brows?\b \d", seen), seen  # no row number, no row count
