"""`das runs list` names a refusal Refused (Prefect's own list prints CANCELLED), and `das runs
clean` removes the run state the ledger no longer needs — never what a resume needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from das.cli import main as das_main
from das.runs.cleanup import clean_runs
from das.trust import LedgerStore, PrivacyLedger, RunOpening

REPO = Path(__file__).resolve().parents[1]
TOY = REPO.parent / "shared" / "census_specs" / "safetab_p" / "toy"
US = {"US": 1}


def _run_folder(state: Path, run_id: str) -> Path:
    root = state / "runs" / run_id
    for name in ("work", "noise", "sealed", "validation"):
        (root / name).mkdir(parents=True)
        (root / name / "x.bin").write_bytes(b"0" * 1000)
    (root / "run.log").write_text("log\n")
    return root


def _open(ledger: PrivacyLedger, run_id: str) -> None:
    ledger.open_run(RunOpening(run_id, "safetab-p", f"/r/{run_id}", "c" * 64, "s" * 64,
                               "zcdp", US, "secure", ()))  # fmt: skip


def test_clean_removes_what_no_resume_needs_and_keeps_a_held_spend(tmp_path: Path) -> None:
    ledger = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "ledger"))
    state = tmp_path / "state"
    data = ledger.dataset_id("f" * 64)
    for run_id in ("refused", "held", "published"):
        _run_folder(state, run_id)
        _open(ledger, run_id)
    _run_folder(state, "stranger")  # a run of another ledger
    ledger.release_reservation("refused", "RunRefused")
    ledger.authorize("held", data, production=False)
    ledger.start_drawing("held", 1)
    ledger.charge_draw("held", 1, "m")  # drew: a resume reuses it
    ledger.authorize("published", data, production=False, accepted={"US": 2})
    ledger.start_drawing("published", 1)
    ledger.seal_release("published", "c" * 64)
    ledger.complete("published", "m" * 64, "/r/published")

    dry = {r.run_id: r for r in clean_runs(state, ledger, dry_run=True)}
    assert dry["refused"].action == "removed" and (state / "runs/refused/work").exists()
    results = {r.run_id: r for r in clean_runs(state, ledger)}
    for run_id in ("refused", "published"):
        assert set(results[run_id].removed) == {"work", "noise", "sealed"}
        assert not (state / "runs" / run_id / "work").exists()
        assert (state / "runs" / run_id / "validation" / "x.bin").exists()  # the curator's
        assert (state / "runs" / run_id / "run.log").exists()
    assert results["held"].action == "kept" and (state / "runs/held/noise/x.bin").exists()
    assert results["stranger"].action == "unknown" and (state / "runs/stranger/work").exists()
    assert results["published"].freed == 3000
    assert all(r.removed == () for r in clean_runs(state, ledger, older_than_days=1))


def test_clean_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "ledger"))
    _run_folder(tmp_path / "state", "gone")
    _open(ledger, "gone")
    ledger.release_reservation("gone", "RunRefused")
    argv = ["runs", "clean", "--state", str(tmp_path / "state"), "--ledger",
            str(tmp_path / "ledger"), "--json"]  # fmt: skip
    assert das_main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["runs"][0]["removed"] == ["work", "noise", "sealed"]
    shutil.rmtree(tmp_path / "ledger")
    assert das_main(argv) == 2  # no ledger: refused, nothing removed
    assert "no privacy ledger" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.skipif(not TOY.is_dir(), reason="../shared toy inputs absent")
@pytest.mark.usefixtures("prefect_server", "thread_runner")
def test_list_names_a_refused_run_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.safetab_p import safetab_p_flow

    params = tmp_path / "params"
    shutil.copytree(TOY / "input_dir_zcdp", params)
    data = tmp_path / "data"
    data.mkdir()
    for name in ("person-records.txt", "GRF-C.txt"):
        shutil.copy(TOY / name, data)
    monkeypatch.setenv("DAS_PRODUCTION", "1")  # no ledger set: refused by the flow itself
    state = safetab_p_flow(config=str(params / "config.json"), data=str(data),
                           output=str(tmp_path / "out"), return_state=True)  # fmt: skip
    assert state.name == "Refused" and state.type.value == "CANCELLED"
    capsys.readouterr()
    assert das_main(["runs", "list", "--limit", "50", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    refused = [r for r in rows if r["state"] == "Refused"]
    assert refused and "refused" in refused[0]["tags"]
    assert das_main(["runs", "list", "--limit", "50"]) == 0
    assert "Refused" in capsys.readouterr().out


def test_clean_keeps_a_run_waiting_for_its_approvers_and_says_released_for_no_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suspended deployment run waiting for its approvers never drew, but it goes on from
    its run folder: kept. The dry run's words: a returned reservation is no release."""
    from das.trust import approval_statement

    ledger = PrivacyLedger.initialize(LedgerStore.in_directory(tmp_path / "ledger"))
    state = tmp_path / "state"
    for run_id in ("waiting", "gone"):
        _run_folder(state, run_id)
        _open(ledger, run_id)
    ledger.release_reservation("gone", "RunRefused")
    data = ledger.dataset_id("f" * 64)
    passes, ceiling, chain, _ = ledger.plan_spend("safetab-p", data, "s" * 64, "zcdp", US)
    ledger.record_approval(approval_statement(
        ledger_id=ledger.info().ledger_id, charter=chain.in_force, product="safetab-p",
        dataset=data, parameters={"digest": "s" * 64, "files": {}}, definition="zcdp",
        passes=passes, ceiling=ceiling, note="", requested_by="flow run waiting",
        run_id="waiting",
    ))  # fmt: skip
    argv = ["runs", "clean", "--state", str(state), "--ledger", str(tmp_path / "ledger")]
    assert das_main([*argv, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "run waiting (waits for its approvers): kept" in text
    assert "run gone (never drew, reservation returned): would remove" in text
    assert "(released)" not in text
    assert das_main(argv) == 0
    assert (state / "runs/waiting/work/x.bin").exists()
    assert not (state / "runs/gone/work").exists()


def test_list_puts_what_needs_a_person_first_and_future_scheduled_runs_last() -> None:
    """64 future scheduled runs no longer come before the run waiting for its approvers: the
    order is waiting, crashed, refused, failed, under way, ended, future scheduled (soonest
    first); a Refused run does not read like a Cancelled one; a cancelled run that carried
    the waiting tag is not "waiting for approvers"."""
    from das.cli.runs import listing_rank, state_label

    def row(name: str, type_: str, start: str | None, tags=(), expected=None) -> dict:
        return {"id": name, "state": name.split("-")[0], "type": type_, "tags": list(tags),
                "start": start, "expected": expected}  # fmt: skip

    now = "2026-12-07T12:00:00+00:00"
    rows = [
        *(
            row(f"Scheduled-{i}", "SCHEDULED", None, expected=f"2026-12-08T{i:02d}:00:00+00:00")
            for i in range(3)
        ),
        row("Completed", "COMPLETED", "2026-12-07T11:50:00+00:00"),
        row("Cancelled", "CANCELLED", "2026-12-07T11:40:00+00:00", ["awaiting-approval"]),
        row("Running", "RUNNING", "2026-12-07T11:30:00+00:00"),
        row("Failed", "FAILED", "2026-12-07T11:20:00+00:00"),
        row("Refused", "CANCELLED", "2026-12-07T11:10:00+00:00", ["refused"]),
        row("Crashed", "CRASHED", "2026-12-07T11:00:00+00:00"),
        row("Suspended", "PAUSED", "2026-12-01T10:00:00+00:00", ["awaiting-approval"]),
    ]
    order = [r["id"] for r in sorted(rows, key=lambda r: listing_rank(r, now))]
    assert order == ["Suspended", "Crashed", "Refused", "Failed", "Running", "Completed",
                     "Cancelled", "Scheduled-0", "Scheduled-1", "Scheduled-2"]  # fmt: skip
    labels = {r["id"]: state_label(r) for r in rows}
    assert labels["Suspended"] == "Suspended (waiting for approvers)"
    assert labels["Cancelled"] == "Cancelled (by a person)"
    assert labels["Refused"] == "Refused (nothing drawn)"
