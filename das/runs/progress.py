"""Progress of a release run, wherever it is watched: the Prefect UI, the logs, a terminal.

A national SafeTab-P run takes about 18 minutes; an operator needs to see the stage, the units
done of the total (states, levels, MAFID buckets, tables), the time spent and an estimate of
the time left. :class:`RunProgress` is told what each stage of the run will do and, as each
unit completes, that it did; it then

- keeps the orchestrator's **progress display** up to date (``show``: Prefect's progress
  artifact, :mod:`tasks.progress`) with its percentage and a one-line description: stage,
  units, elapsed, estimate;
- writes a **progress line** to the run's logs (``log``) when a stage starts or ends and at
  most every :data:`LOG_EVERY` seconds in between;
- hands every change to the **listeners** of this process: ``das run`` shows a live display on
  a terminal, and periodic lines otherwise (:mod:`das.cli.progress`).

The overall percentage weighs each stage by its share of a national run (measured: validation
and reading the records dominate); the estimate of the time left is the current stage's own
rate, then the weights. Nothing here counts records: units are states, levels, buckets and
tables, all public.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

LOG_EVERY = 30.0  # seconds between progress lines within a stage
SHOW_EVERY = 2.0  # seconds between updates of the UI's progress display

# Each stage's share of a whole run (national runs:
# docs/explanation/performance.md#national-scale), and its unit.
STAGES: dict[str, dict[str, tuple[float, str]]] = {
    "safetab-p": {
        "validate": (0.34, "check"),
        "geography": (0.02, "step"),
        "spill": (0.27, "step"),
        "totals": (0.12, "state"),
        "measure": (0.05, "level"),
        "cells": (0.13, "state"),
        "write": (0.05, "step"),
        "publish": (0.02, "step"),
    },
    "phsafe": {
        "validate": (0.52, "check"),
        "spill": (0.16, "step"),
        "counts": (0.18, "bucket"),
        "measure": (0.05, "table"),
        "postprocess": (0.05, "step"),
        "write": (0.02, "step"),
        "publish": (0.02, "step"),
    },
}


@dataclass
class StageProgress:
    """One stage: its units done of the total, and when it started and ended."""

    name: str
    unit: str
    weight: float
    total: int = 1
    done: int = 0
    started: float | None = None
    ended: float | None = None
    skipped: bool = False  # done by an earlier attempt of the run

    @property
    def fraction(self) -> float:
        if self.ended is not None:
            return 1.0
        return min(1.0, self.done / self.total) if self.total else 0.0

    def units(self) -> str:
        plural = "" if self.total == 1 else "s"
        return f"{self.done}/{self.total} {self.unit}{plural}"


@dataclass(frozen=True)
class Snapshot:
    """What a listener shows: the stages, the current one, the overall percentage, times."""

    product: str
    run_id: str
    stages: tuple[StageProgress, ...]
    current: str | None
    percent: float
    elapsed: float
    remaining: float | None
    finished: bool = False

    def line(self) -> str:
        """One line for logs and non-terminal output."""
        stage = next((s for s in self.stages if s.name == self.current), None)
        where = (
            f"{stage.name} {stage.units()}"
            if stage is not None
            else ("done" if self.finished else "finishing")
        )
        eta = "" if self.remaining is None else f", about {duration_text(self.remaining)} left"
        return f"progress {self.percent:.0f}%: {where} (elapsed {duration_text(self.elapsed)}{eta})"


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: ``42s``, ``3m05s``, ``1h02m``."""
    seconds = max(0, round(seconds))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


Listener = Callable[[Snapshot], None]
_LISTENERS: list[Listener] = []


@contextmanager
def watching(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with every change of a run's progress in this process."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


@dataclass
class RunProgress:
    """The progress of one run attempt (see the module docstring)."""

    product: str
    run_id: str
    stages: dict[str, StageProgress] = field(default_factory=dict)
    current: str | None = None
    started: float = field(default_factory=time.monotonic)
    outcome: str | None = None
    log: Callable[[str], None] | None = None  # a progress line into the run's logs
    show: Callable[[float, str], None] | None = None  # (percent, description) for the UI
    _shown_at: float = 0.0
    _logged_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not self.stages:
            self.stages = {
                name: StageProgress(name, unit, weight)
                for name, (weight, unit) in STAGES[self.product].items()
            }

    def begin(self, name: str, total: int = 1) -> None:
        with self._lock:
            stage = self.stages[name]
            stage.total, stage.done = max(1, total), 0
            stage.started, stage.ended = time.monotonic(), None
            self.current = name
        self._publish(log=True)

    def advance(self, name: str, units: int = 1) -> None:
        with self._lock:
            self.stages[name].done += units
        self._publish()

    def end(self, name: str, skipped: bool = False) -> None:
        with self._lock:
            stage = self.stages[name]
            stage.done, stage.ended, stage.skipped = stage.total, time.monotonic(), skipped
            if stage.started is None:
                stage.started = stage.ended
        self._publish(log=True)

    @contextmanager
    def stage(self, name: str, total: int = 1) -> Iterator[None]:
        self.begin(name, total)
        yield
        self.end(name)

    def finish(self, outcome: str | None = None) -> None:
        """The run is over; ``outcome`` (e.g. where the release is) ends the UI's progress
        line."""
        with self._lock:
            self.current = None
            self.outcome = outcome
        self._publish(log=True, finished=True)

    # -- what is shown --------------------------------------------------------------------------

    def snapshot(self, finished: bool = False) -> Snapshot:
        with self._lock:
            stages = tuple(StageProgress(**vars(s)) for s in self.stages.values())
            current = self.current
        weights = sum(s.weight for s in stages) or 1.0
        percent = 100.0 * sum(s.weight * s.fraction for s in stages) / weights
        elapsed = time.monotonic() - self.started
        return Snapshot(
            self.product, self.run_id, stages, current,
            100.0 if finished else percent, elapsed,
            None if finished else _remaining(stages, current, percent, elapsed), finished,
        )  # fmt: skip

    def _publish(self, log: bool = False, finished: bool = False) -> None:
        snapshot = self.snapshot(finished)
        now = time.monotonic()
        for listener in list(_LISTENERS):
            with suppress(Exception):  # a display must never stop a run
                listener(snapshot)
        if self.log is not None and (log or now - self._logged_at >= LOG_EVERY):
            self._logged_at = now
            with suppress(Exception):
                self.log(snapshot.line())
        if self.show is not None and (log or finished or now - self._shown_at >= SHOW_EVERY):
            self._shown_at = now
            description = f"{self.product} run {self.run_id}: {self.outcome or snapshot.line()}"
            with suppress(Exception):  # the UI's progress bar is information, not the run
                self.show(snapshot.percent, description)


def _remaining(
    stages: tuple[StageProgress, ...], current: str | None, percent: float, elapsed: float
) -> float | None:
    """Seconds left: the current stage at its own rate, the rest by their weights at the
    run's rate so far; None until there is a rate to go by."""
    by_name: Mapping[str, StageProgress] = {s.name: s for s in stages}
    stage = by_name.get(current) if current else None
    now = time.monotonic()
    left = 0.0
    if stage is not None and stage.started is not None and 0 < stage.done < stage.total:
        spent = now - stage.started
        left += spent / stage.done * (stage.total - stage.done)
    done_weight = sum(s.weight for s in stages if s.ended is not None and not s.skipped)
    spent_done = sum(
        (s.ended or now) - (s.started or now) for s in stages if s.ended and not s.skipped
    )
    todo = [s for s in stages if s.ended is None and s.name != current]
    if todo:
        if done_weight <= 0 or spent_done <= 0:
            return None if left == 0 else left
        left += spent_done / done_weight * sum(s.weight for s in todo)
    return left
