"""A run whose process is gone is marked Crashed: the heartbeat settings every `das` process
applies (das.heartbeats) and the server's automation (flows.crash_detection), created once and
kept in step with the settings. A real lost host (a killed worker and flow process, a killed
`das run`) is caused in tests/test_e2e_prefect.py."""

from __future__ import annotations

import pytest

from das.cli import main as das
from das.heartbeats import HeartbeatSettingError, Liveness, configure_heartbeats, liveness


def test_defaults_crash_a_lost_host_within_three_minutes() -> None:
    settings = liveness({})
    assert settings == Liveness(heartbeat_seconds=30, crash_after_seconds=90)
    # The last beat came at most one interval before the death; the server looks every 5 s.
    assert settings.crash_after_seconds + 5 <= 180
    assert settings.crash_after_seconds >= 3 * settings.heartbeat_seconds  # 2 late beats pass


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"DAS_HEARTBEAT_SECONDS": "10"}, "at most every 30 s"),
        ({"DAS_HEARTBEAT_SECONDS": "half a minute"}, "whole seconds"),
        ({"DAS_CRASH_AFTER_SECONDS": "45"}, "at least 60"),
        ({"DAS_HEARTBEAT_SECONDS": "60", "DAS_CRASH_AFTER_SECONDS": "90"}, "at least 120"),
    ],
)
def test_settings_that_would_miss_or_invent_a_crash_are_refused(
    environ: dict[str, str], problem: str
) -> None:
    with pytest.raises(HeartbeatSettingError, match=problem):
        liveness(environ)


def test_the_heartbeat_setting_reaches_prefect_over_an_inherited_one() -> None:
    environ = {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "180", "DAS_HEARTBEAT_SECONDS": "45",
               "DAS_CRASH_AFTER_SECONDS": "135"}  # fmt: skip
    assert configure_heartbeats(environ) == Liveness(45, 135)
    assert environ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "45"


def test_das_refuses_a_bad_setting_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("DAS_CRASH_AFTER_SECONDS", "40")
    assert das(["deploy", "--local"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("das: error: DAS_CRASH_AFTER_SECONDS=40")


def test_the_automation_watches_every_das_flow_and_ends_on_every_final_state() -> None:
    import deploy.das_entrypoints as entrypoints
    from flows.crash_detection import DAS_FLOWS, ENDING_STATES, crash_automation
    from tasks.refusal import REFUSED

    flows = {getattr(entrypoints, name).name for name in entrypoints.__all__}
    assert set(DAS_FLOWS) == flows
    assert REFUSED in ENDING_STATES  # a refused run is Cancelled by type, "Refused" by name
    automation = crash_automation(Liveness(30, 90))
    trigger = automation.trigger
    assert trigger.posture == "Proactive" and trigger.within.total_seconds() == 90
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    assert "prefect.flow-run.heartbeat" in trigger.expect
    assert "prefect.flow-run.Paused" not in trigger.expect  # a paused process still beats
    # a run waiting for its approvers is suspended: no process, no heartbeat, not a crash
    assert "prefect.flow-run.Suspended" in trigger.expect
    (action,) = automation.actions
    assert action.state == "CRASHED" and not action.force  # the server keeps a finished run
    assert action.message.startswith("no heartbeat for 90 s") and "Retry" in action.message


@pytest.mark.usefixtures("prefect_server")
def test_the_automation_is_created_once_and_kept_in_step() -> None:
    """`das deploy` (update) makes the server's automation match its settings and removes
    duplicates; `das run` (no update) creates it only when missing."""
    from prefect.client.orchestration import get_client

    from flows.crash_detection import AUTOMATION_NAME, crash_automation, ensure_crash_automation

    defaults, slower = Liveness(30, 90), Liveness(30, 120)
    with get_client(sync_client=True) as client:
        for automation in client.read_automations_by_name(AUTOMATION_NAME):
            client.delete_automation(automation.id)
        created = ensure_crash_automation(client, defaults, update=False)
        assert created.outcome == "created"
        assert ensure_crash_automation(client, defaults).outcome == "unchanged"
        kept = ensure_crash_automation(client, slower, update=False)
        assert (kept.outcome, kept.crash_after_seconds) == ("kept", 90)
        client.create_automation(crash_automation(defaults))  # e.g. two first `das run`s
        assert ensure_crash_automation(client, slower).outcome == "updated"
        (automation,) = client.read_automations_by_name(AUTOMATION_NAME)  # duplicate removed
        assert automation.trigger.within.total_seconds() == 120
        client.delete_automation(automation.id)
