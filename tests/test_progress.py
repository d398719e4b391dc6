"""A run's progress tells the truth (issue 26): elapsed time counts work, not the wait for an
approval; the estimate of the time left is shown only on evidence and never reads "0s left"
with a stage to come; a piped `das run` prints each progress line once and none of Prefect's
per-task chatter (checked on the piped `das run` that starts the local API in
tests/test_local_api.py: a run of its own here started a second local API, 27 CPU-s). The model
is driven by a fake clock: no test here sleeps.
"""

from __future__ import annotations

import logging

import pytest

from das.cli import progress as cli_progress
from das.runs.progress import (
    NATIONAL_SECONDS,
    STAGES,
    RunProgress,
    Snapshot,
    estimate_text,
    paused,
    watching,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _progress(product: str = "safetab-p") -> tuple[RunProgress, FakeClock, list[str]]:
    clock = FakeClock()
    lines: list[str] = []
    return RunProgress(product, "r1", clock=clock, log=lines.append), clock, lines


# A stage as a run reports it: (name, units, seconds to its first unit, seconds per later unit).
Script = list[tuple[str, int, float, float]]


def _play(product: str, script: Script) -> list[tuple[float, float | None, str]]:
    """Run ``script``; at every report, (true seconds left, estimate, the line shown)."""
    progress, clock, _ = _progress(product)
    total = sum(first + per * (units - 1) for _, units, first, per in script)
    spent = 0.0
    seen: list[tuple[float, float | None, str]] = []

    def record() -> None:
        snapshot = progress.snapshot()
        seen.append((total - spent, snapshot.remaining, snapshot.line()))

    for name, units, first, per in script:
        progress.begin(name, units)
        record()
        for unit in range(units):
            step = first if unit == 0 else per
            clock.advance(step)
            spent += step
            progress.advance(name)
            record()
        progress.end(name)
        record()
    return seen


def _national(product: str) -> Script:
    """The national run's stages with their measured times (a level, state or bucket each
    taking its share)."""
    units = {"totals": 52, "cells": 52, "measure": 19, "counts": 64}
    script = []
    for name, (seconds, _) in NATIONAL_SECONDS[product].items():
        count = units.get(name, 1)
        script.append((name, count, seconds / count, seconds / count))
    return script


# The 20,000-person SafeTab-P run of the issue, stage by stage as its audit timed them
# (seconds): the first state of `totals` and of `cells` waited on the task runner.
SMALL_RUN: Script = [
    ("validate", 1, 25.7, 0.0),
    ("geography", 1, 0.7, 0.0),
    ("spill", 1, 1.5, 0.0),
    ("totals", 52, 60.5, 0.44),
    ("measure", 19, 2.3, 0.93),
    ("cells", 52, 48.5, 0.35),
    ("write", 1, 3.2, 0.0),
    ("publish", 1, 1.3, 0.0),
]


def test_the_weights_are_the_measured_national_stage_times() -> None:
    for product, stages in STAGES.items():
        assert list(stages) == list(NATIONAL_SECONDS[product])
        assert sum(weight for weight, _ in stages.values()) == pytest.approx(1.0)
    assert STAGES["safetab-p"]["validate"][0] == pytest.approx(384 / 1055)
    assert STAGES["phsafe"]["counts"][1] == "bucket"


def test_a_small_run_shows_no_estimate_rather_than_a_wrong_one() -> None:
    """The issue's cases: "about 0s left" with 15 s of work to come, "about 3s left" with 2.5
    minutes: the small run's stages do not follow the national weights, so no estimate."""
    seen = _play("safetab-p", SMALL_RUN)
    assert all(estimate is None for _, estimate, _ in seen)
    assert not any("left" in line or "estimate" in line for _, _, line in seen)
    assert not any("about 0s" in line for _, _, line in seen)


@pytest.mark.parametrize("product", ["safetab-p", "phsafe"])
def test_a_national_run_is_estimated_once_two_stages_agree(product: str) -> None:
    seen = _play(product, _national(product))
    first = next(i for i, (_, estimate, _) in enumerate(seen) if estimate is not None)
    assert "spill" in seen[first - 1][2] or "spill" in seen[first][2]  # after validate + spill
    for truth, estimate, line in seen[first:]:
        if truth > 1:  # (at a stage's last unit, before its end, nothing is left to estimate)
            assert estimate is not None and estimate == pytest.approx(truth, rel=0.1), line
            assert "about 0s" not in line


def test_one_timed_stage_is_no_evidence_and_skipped_stages_are_none() -> None:
    progress, clock, _ = _progress()
    with progress.stage("validate"):
        clock.advance(384)
    assert progress.snapshot().remaining is None  # one stage: agreement cannot be seen
    progress.end("geography", skipped=True)  # done by an earlier attempt: not timed now
    progress.end("spill", skipped=True)
    assert progress.snapshot().remaining is None
    with progress.stage("totals", 52):
        clock.advance(132)
        progress.advance("totals", 52)
    # the rate of the two timed stages (1055 s per unit of weight) × the weight to come
    assert progress.snapshot().remaining == pytest.approx(54 + 144 + 23 + 5)


def test_an_estimate_that_stalls_grows_and_never_reads_zero() -> None:
    progress, clock, _ = _progress()
    for name in ("validate", "geography", "spill"):
        with progress.stage(name):
            clock.advance(NATIONAL_SECONDS["safetab-p"][name][0])
    progress.begin("totals", 52)
    before = progress.snapshot().remaining
    clock.advance(600)  # no state done in ten minutes: the rate so far slows
    after = progress.snapshot().remaining
    assert before is not None and after is not None and after > before
    progress.end("totals")  # 4.5 times its weight: the run no longer follows the weights
    assert progress.snapshot().remaining is None
    progress, clock, _ = _progress()
    for name, (seconds, _) in list(NATIONAL_SECONDS["safetab-p"].items())[:-1]:
        with progress.stage(name):
            clock.advance(seconds)
    progress.begin("publish")
    estimates = []
    for _ in range(60):  # the last stage far beyond its weight: an estimate that grows
        clock.advance(60)
        estimates.append(progress.snapshot().remaining)
        assert "left)" in progress.snapshot().line()
    assert all(e is not None for e in estimates) and estimates == sorted(estimates)
    assert [estimate_text(s) for s in (0, 0.4, 11, 95, 119, 120, 421, 3900)] == [
        "10s", "10s", "20s", "1m40s", "2m", "2m", "8m", "1h05m",
    ]  # fmt: skip


def test_the_wait_for_an_approval_is_not_work_and_is_shown_apart() -> None:
    """The issue's run: 2 min 45 s of work shown as 5 min 34 s with the wait in it."""
    progress, clock, lines = _progress()
    with progress.stage("validate"):
        clock.advance(60)
    with progress.stage("spill"):
        clock.advance(45)
    with progress.paused("approval"):
        clock.advance(100)
        waiting = progress.snapshot()
        assert waiting.waiting == "approval" and waiting.elapsed == 105
        assert waiting.line().endswith("(elapsed 1m45s, paused 1m40s for approval so far)")
        assert waiting.later(69).pauses == {"approval": 169}  # the pause's clock moves on
        clock.advance(69)
    assert any("waiting for approval" in line for line in lines)  # in the run's logs
    with progress.stage("totals", 2):
        clock.advance(60)
        progress.advance("totals", 2)
    progress.finish("published")
    done = progress.snapshot(finished=True)
    assert done.elapsed == 165  # 2m45s of work; 4m54s since it began
    assert lines[-1] == "progress 100%: done (elapsed 2m45s, paused 2m49s for approval)"
    assert progress.stages["totals"].ended - progress.stages["totals"].started == 60
    assert progress.stages["spill"].ended == 105  # stage times are work times too


def test_a_pause_inside_a_stage_stops_its_clock_and_paused_accepts_none() -> None:
    progress, clock, _ = _progress()
    progress.begin("validate")
    clock.advance(10)
    with paused(progress, "approval"), paused(progress, "nested"):  # the inner one: no-op
        clock.advance(500)
    clock.advance(10)
    progress.end("validate")
    assert progress.stages["validate"].ended - progress.stages["validate"].started == 20
    assert progress.snapshot().pauses == {"approval": 500}
    with paused(None, "approval"):  # a run without progress shown
        pass


def test_a_display_between_reports_moves_the_clock() -> None:
    progress, clock, _ = _progress()
    with progress.stage("validate"):
        clock.advance(384)
    progress.begin("spill")
    snapshot = progress.snapshot()
    later = snapshot.later(306)
    assert later.elapsed == snapshot.elapsed + 306
    assert later.remaining is None  # still one timed stage
    assert snapshot.later(0) is snapshot


def test_the_artifact_description_is_a_bar_and_one_short_line() -> None:
    from tasks.progress import progress_description

    progress, clock, _ = _progress()
    shown: list[Snapshot] = []
    progress.show = shown.append
    progress.begin("totals", 52)
    clock.advance(30)
    progress.advance("totals", 12)
    text = progress_description(shown[-1])
    assert text.startswith('<progress value="') and 'max="100"></progress> ' in text
    assert text.endswith("% · totals 12/52 states · elapsed 30s")
    progress.finish("published — a private release in /secure/das/safetab-p/releases/r1")
    assert "published — a private release in /secure/das/safetab-p/releases/r1 · " in (
        progress_description(shown[-1])
    )


# -- `das run`'s console ---------------------------------------------------------------------


def test_piped_lines_are_printed_once_and_between_reports(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    wall = FakeClock()
    monkeypatch.setattr(cli_progress.time, "monotonic", wall)
    progress, clock, _ = _progress()
    lines = cli_progress._Lines("das run safetab-p")
    with watching(lines):
        progress.begin("validate")
        progress.begin("validate")  # the same report twice: one line
        lines.tick()  # nothing new yet
        clock.advance(20)
        wall.advance(20)
        lines.tick()  # 20 s without a report: the clock moved on
        progress.end("validate")
        progress.begin("spill")
        progress.finish()
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "das run safetab-p: progress 0%: validate 0/1 check (elapsed 0s)",
        "das run safetab-p: progress 0%: still validate 0/1 check (elapsed 20s)",
        "das run safetab-p: progress 36%: spill 0/1 step (elapsed 20s)",
        "das run safetab-p: progress 100%: done (elapsed 20s)",
    ]


def test_the_console_leaves_out_progress_records_and_task_chatter() -> None:
    from tasks.progress import PROGRESS_RECORD

    chatter = cli_progress._Chatter()

    def record(name: str, level: int, message: str, **extra: object) -> logging.LogRecord:
        item = logging.LogRecord(name, level, __file__, 1, message, None, None)
        item.__dict__.update(extra)
        return item

    info = logging.INFO
    assert not chatter.filter(record("prefect.task_runs", info, "Finished in state Completed()"))
    assert not chatter.filter(record("prefect.task_runs", info, "level US/USA/1 measured"))
    assert not chatter.filter(record("prefect.flow_runs", info, "Finished in state Completed()"))
    progress_line = record("prefect.flow_runs", info, "progress 3%", **{PROGRESS_RECORD: True})
    assert not chatter.filter(progress_line)
    assert chatter.filter(record("prefect.flow_runs", info, "privacy ledger, dataset ab: ..."))
    assert chatter.filter(record("prefect.task_runs", logging.WARNING, "a warning of a task"))
    assert chatter.filter(record("prefect.flow_runs", logging.ERROR, "Finished in state Failed"))
