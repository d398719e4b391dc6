"""Progress of a release run, wherever it is watched: the Prefect UI, the logs, a terminal.

A national SafeTab-P run takes about 18 minutes; an operator needs to see the stage, the units
done of the total (states, levels, MAFID buckets, tables), the time spent and an estimate of
the time left. :class:`RunProgress` is told what each stage of the run will do and, as each
unit completes, that it did; it then

- keeps the orchestrator's **progress display** up to date (``show``: Prefect's progress
  artifact, :mod:`tasks.progress`) with a :class:`Snapshot`;
- writes a **progress line** to the run's logs (``log``) when a stage starts or ends and at
  most every :data:`LOG_EVERY` seconds in between;
- hands every change to the **listeners** of this process: ``das run`` shows a live display on
  a terminal, and periodic lines otherwise (:mod:`das.cli.progress`).

**Elapsed time counts work, not waiting.** A run that waits for a person (the approval of its
privacy spend) says so with :meth:`RunProgress.paused`; the clock of the run and of its stages
stops meanwhile, and the time paused is shown apart ("paused 2m49s for approval").

The overall percentage weighs each stage by its share of a national run (:data:`STAGES`, from
the measured stage times in :data:`NATIONAL_SECONDS`). **The estimate of the time left**
(:func:`estimate_remaining`) follows one written rule:

1. The run's rate is the work time of the stages timed in this attempt (ended, not skipped as
   done by an earlier attempt) plus the current stage's time so far, divided by their weight
   done (the current stage's weight × its units done of the total). The time left is that
   rate × the weight not done (every stage not ended, the current one's remainder).
2. No estimate until there is evidence that the weights describe *this* run: at least
   :data:`EVIDENCE_STAGES` stages that each weigh at least :data:`EVIDENCE_WEIGHT` have been
   timed in this attempt, and their own rates (seconds per unit of weight) agree within a
   factor :data:`AGREEMENT`. The weights are a national run's; a small run spends its time
   differently (fixed start-up costs per stage), and then shows no estimate rather than a
   wrong one (the line then says nothing of the time left). No estimate either while the run
   waits for a person.
3. An estimate is shown rounded up (:func:`estimate_text`: to 10 s below two minutes, to the
   minute above), so it never reads "0s left" while a stage has not ended.

Nothing here counts records: units are states, levels, buckets and tables, all public.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field, replace

LOG_EVERY = 30.0  # seconds between progress lines within a stage
SHOW_EVERY = 2.0  # seconds between updates of the UI's progress display

# Seconds each stage took in the national runs through `das run`
# (docs/explanation/performance.md#national-scale, "Through `das run`", measured 2026-11-24:
# SafeTab-P 334.7 M persons from the attempt that was killed after `combine-cells` and its
# resume, which wrote T1/T2; PHSafe the US pass, 331.4 M persons, and its resume), and each
# stage's unit. Publishing was not timed on its own (a manifest over the release: seconds), nor
# was PHSafe's write in the flow (0.1 s in the engine): they are given a few seconds. The
# weights of the stages are their shares.
NATIONAL_SECONDS: dict[str, dict[str, tuple[float, str]]] = {
    "safetab-p": {
        "validate": (384.0, "check"),  # 6.4 min
        "geography": (7.0, "step"),
        "spill": (306.0, "step"),  # 5.1 min
        "totals": (132.0, "state"),  # 2.2 min
        "measure": (54.0, "level"),  # 0.9 min
        "cells": (144.0, "state"),  # 2.4 min
        "write": (23.0, "step"),
        "publish": (5.0, "step"),
    },
    "phsafe": {
        "validate": (414.0, "check"),  # 6.9 min
        "spill": (126.0, "step"),  # 2.1 min
        "counts": (138.0, "bucket"),  # 2.3 min
        "measure": (4.8, "table"),
        "postprocess": (7.4, "step"),
        "write": (2.0, "step"),
        "publish": (5.0, "step"),
    },
}


def _shares(seconds: Mapping[str, tuple[float, str]]) -> dict[str, tuple[float, str]]:
    total = sum(value for value, _ in seconds.values())
    return {name: (value / total, unit) for name, (value, unit) in seconds.items()}


# Each stage's share of a whole run, and its unit: the one table of the stages' weights.
STAGES: dict[str, dict[str, tuple[float, str]]] = {
    product: _shares(seconds) for product, seconds in NATIONAL_SECONDS.items()
}

EVIDENCE_WEIGHT = 0.05  # a stage this heavy, timed, is evidence of the run's rate
EVIDENCE_STAGES = 2  # that many agreeing stages before any estimate
AGREEMENT = 2.0  # their rates within this factor of each other

Clock = Callable[[], float]


@dataclass
class StageProgress:
    """One stage: its units done of the total, and when it started and ended (seconds of
    work since the run's progress began: pauses are not counted)."""

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
    """What a listener shows: the stages, the current one, the overall percentage, the work
    time (``elapsed``), the time paused by reason (an ongoing pause's reason is ``waiting``),
    the estimate of the time left (None: no estimate) and, at the end, the outcome."""

    product: str
    run_id: str
    stages: tuple[StageProgress, ...]
    current: str | None
    percent: float
    elapsed: float
    remaining: float | None
    finished: bool = False
    pauses: Mapping[str, float] = field(default_factory=dict)
    waiting: str | None = None
    outcome: str | None = None

    def where(self) -> str:
        """The stage and its units, or what the run waits for."""
        if self.waiting is not None:
            return f"waiting for {self.waiting}"
        stage = next((s for s in self.stages if s.name == self.current), None)
        if stage is not None:
            return f"{stage.name} {stage.units()}"
        return "done" if self.finished else "finishing"

    def times(self) -> str:
        """``elapsed 7m41s, paused 2m49s for approval, about 6m left``."""
        parts = [f"elapsed {duration_text(self.elapsed)}"]
        for reason, seconds in self.pauses.items():
            so_far = " so far" if reason == self.waiting else ""
            parts.append(f"paused {duration_text(seconds)} for {reason}{so_far}")
        # No estimate, no words about it: a small run may never have one (rule 2), and "no
        # estimate yet" on every line of it read as noise.
        if not self.finished and self.waiting is None and self.remaining is not None:
            parts.append(f"about {estimate_text(self.remaining)} left")
        return ", ".join(parts)

    def line(self, still: bool = False) -> str:
        """One line for logs and non-terminal output; ``still``: the same stage and units as
        the line before, its clock moved on (not a line printed twice)."""
        where = f"still {self.where()}" if still else self.where()
        return f"progress {self.percent:.0f}%: {where} ({self.times()})"

    def later(self, seconds: float) -> Snapshot:
        """This snapshot ``seconds`` later with nothing reported meanwhile: a display that
        redraws between reports shows the clock moving (the pause's, while waiting)."""
        if self.finished or seconds <= 0:
            return self
        if self.waiting is not None:
            pauses = dict(self.pauses)
            pauses[self.waiting] = pauses.get(self.waiting, 0.0) + seconds
            return replace(self, pauses=pauses)
        now = self.elapsed + seconds
        remaining = estimate_remaining(self.stages, self.current, now)
        return replace(self, elapsed=now, remaining=remaining)


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: ``42s``, ``3m05s``, ``1h02m``."""
    seconds = max(0, round(seconds))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def estimate_text(seconds: float) -> str:
    """An estimate rounded up, as precise as it is: ``10s`` at least, tens of seconds below
    two minutes (``1m40s``), whole minutes above (``7m``, ``1h05m``)."""
    tens = max(10, math.ceil(seconds / 10) * 10)
    if tens < 120:
        return duration_text(tens)
    minutes = math.ceil(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def estimate_remaining(
    stages: tuple[StageProgress, ...], current: str | None, now: float
) -> float | None:
    """Seconds of work left by the rule of the module docstring, or None (no evidence yet).
    ``now`` is the work time, on the clock of the stages' ``started``/``ended``."""
    timed = [s for s in stages if s.ended is not None and s.started is not None and not s.skipped]
    rates = [(s.ended - s.started) / s.weight for s in timed if s.weight >= EVIDENCE_WEIGHT]
    if len(rates) < EVIDENCE_STAGES or min(rates) <= 0 or max(rates) > AGREEMENT * min(rates):
        return None
    spent = sum(s.ended - s.started for s in timed)
    weight = sum(s.weight for s in timed)
    stage = next((s for s in stages if s.name == current and s.ended is None), None)
    if stage is not None and stage.started is not None:
        spent += max(0.0, now - stage.started)
        weight += stage.weight * stage.fraction
    left = sum(s.weight * (1.0 - s.fraction) for s in stages if s.ended is None)
    if left <= 0 or weight <= 0:
        return None
    return spent / weight * left


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
    """The progress of one run attempt (see the module docstring).

    ``clock`` is monotonic seconds (a test gives a fake one); every time kept here is work
    time, read from :meth:`work_time`, so a pause moves no stage's clock.
    """

    product: str
    run_id: str
    stages: dict[str, StageProgress] = field(default_factory=dict)
    current: str | None = None
    outcome: str | None = None
    log: Callable[[str], None] | None = None  # a progress line into the run's logs
    show: Callable[[Snapshot], None] | None = None  # the UI's progress display
    clock: Clock = time.monotonic
    _origin: float = 0.0
    _paused: dict[str, float] = field(default_factory=dict)  # reason -> seconds, ended pauses
    _pause: tuple[str, float] | None = None  # the ongoing pause: reason, since (clock)
    _shown_at: float = -math.inf
    _logged_at: float = -math.inf
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self._origin = self.clock()
        if not self.stages:
            self.stages = {
                name: StageProgress(name, unit, weight)
                for name, (weight, unit) in STAGES[self.product].items()
            }

    # -- the clock ------------------------------------------------------------------------------

    def work_time(self) -> float:
        """Seconds since the progress began, less every pause (the ongoing one too)."""
        with self._lock:
            now = self.clock()
            waiting = now - self._pause[1] if self._pause is not None else 0.0
            return now - self._origin - sum(self._paused.values()) - waiting

    def pause(self, reason: str) -> None:
        """The run waits (for ``reason``: e.g. "approval"); its clock stops until
        :meth:`resume`. A pause within a pause changes nothing."""
        with self._lock:
            if self._pause is not None:
                return
            self._pause = (reason, self.clock())
        self._publish(log=True)

    def resume(self) -> None:
        """The wait is over: the clock runs again, the time waited is shown apart."""
        with self._lock:
            if self._pause is None:
                return
            reason, since = self._pause
            self._paused[reason] = self._paused.get(reason, 0.0) + self.clock() - since
            self._pause = None
        self._publish(log=True)

    @contextmanager
    def paused(self, reason: str) -> Iterator[None]:
        """``with progress.paused("approval"): wait()``: the wait is not work."""
        self.pause(reason)
        try:
            yield
        finally:
            self.resume()

    # -- what the run reports -------------------------------------------------------------------

    def begin(self, name: str, total: int = 1) -> None:
        with self._lock:
            stage = self.stages[name]
            stage.total, stage.done = max(1, total), 0
            stage.started, stage.ended = self.work_time(), None
            self.current = name
        self._publish(log=True)

    def advance(self, name: str, units: int = 1) -> None:
        with self._lock:
            self.stages[name].done += units
        self._publish()

    def end(self, name: str, skipped: bool = False) -> None:
        with self._lock:
            stage = self.stages[name]
            stage.done, stage.ended, stage.skipped = stage.total, self.work_time(), skipped
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
        display."""
        with self._lock:
            self.current = None
            self.outcome = outcome
        self._publish(log=True, finished=True)

    # -- what is shown --------------------------------------------------------------------------

    def snapshot(self, finished: bool = False) -> Snapshot:
        with self._lock:
            stages = tuple(StageProgress(**vars(s)) for s in self.stages.values())
            current, outcome = self.current, self.outcome
            now = self.work_time()
            pauses = dict(self._paused)
            waiting = None
            if self._pause is not None:
                waiting, since = self._pause
                pauses[waiting] = pauses.get(waiting, 0.0) + self.clock() - since
        weights = sum(s.weight for s in stages) or 1.0
        percent = 100.0 * sum(s.weight * s.fraction for s in stages) / weights
        remaining = None
        if not finished and waiting is None:
            remaining = estimate_remaining(stages, current, now)
        return Snapshot(
            self.product, self.run_id, stages, current, 100.0 if finished else percent, now,
            remaining, finished, pauses, waiting, outcome,
        )  # fmt: skip

    def _publish(self, log: bool = False, finished: bool = False) -> None:
        snapshot = self.snapshot(finished)
        now = self.clock()
        for listener in list(_LISTENERS):
            with suppress(Exception):  # a display must never stop a run
                listener(snapshot)
        if self.log is not None and (log or now - self._logged_at >= LOG_EVERY):
            self._logged_at = now
            with suppress(Exception):
                self.log(snapshot.line())
        if self.show is not None and (log or finished or now - self._shown_at >= SHOW_EVERY):
            self._shown_at = now
            with suppress(Exception):  # the UI's progress bar is information, not the run
                self.show(snapshot)


def paused(progress: RunProgress | None, reason: str) -> AbstractContextManager[None]:
    """``with paused(run.progress, "approval"): ...``: the run's clock stops while it waits
    (nothing happens when the run shows no progress)."""
    return nullcontext() if progress is None else progress.paused(reason)
