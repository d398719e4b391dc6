"""What `das run` shows while its flow runs: a live display on a terminal, lines otherwise.

On a terminal (stderr is a TTY) a `rich` display shows every stage of the run — done, running
with its units (states, levels, buckets, tables) done of the total, or to come — and the
overall percentage, the work time, the time paused (waiting for an approval) and the estimate
of the time left, its clock moving between reports. Elsewhere (a pipe, a file, CI), one
progress line at each change of stage and, within a long one, every :data:`LINE_EVERY`
seconds (saying *still*, its clock moved on), each line printed once. The numbers come from
:mod:`das.runs.progress`.

Either way the console leaves out what the display already says or what is per-task chatter:
Prefect's console log is held back to warnings on a terminal; elsewhere the flow's own
progress lines (printed here instead), the task runs' INFO lines ("Finished in state
Completed()", one per task) and the flow's closing "Finished in state" are left out. The run
log and the Prefect server keep them all. ``verbose`` (``das run --verbose``) shows
everything Prefect logs, and then no display of its own: the flow's progress lines are there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

LINE_EVERY = 15.0
# The console level of processes the run starts (a Dask cluster's workers when a Prefect
# server is configured): their task lines would reach this terminal past the filters here.
CHILD_CONSOLE_LEVEL_ENV = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"


def _console_handlers() -> list[logging.Handler]:
    """Prefect's console handlers, wherever its logging configuration attached them."""
    names = ("", "prefect", "prefect.flow_runs", "prefect.task_runs", "das")
    found: list[logging.Handler] = []
    for name in names:
        for handler in logging.getLogger(name).handlers:
            is_stream = isinstance(handler, logging.StreamHandler)
            if is_stream and not isinstance(handler, logging.FileHandler) and handler not in found:
                found.append(handler)
    return found


class _Chatter(logging.Filter):
    """The console without the lines :class:`_Lines` prints itself and Prefect's per-task
    chatter (warnings and errors always pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from tasks.progress import PROGRESS_RECORD

        if getattr(record, PROGRESS_RECORD, False):
            return False
        if record.levelno >= logging.WARNING:
            return True
        if record.name.startswith("prefect.task_runs"):
            return False
        flow_run = record.name.startswith("prefect.flow_runs")
        return not (flow_run and record.getMessage().startswith("Finished in state"))


class _Lines:
    """Non-terminal output: a line at each change of stage (or of waiting), else at most every
    LINE_EVERY s (:meth:`tick`), never the same line twice."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.key: tuple[Any, ...] | None = None
        self.last: Any = None  # the latest snapshot, and when it came
        self.received = 0.0
        self.printed_at = -LINE_EVERY
        self.printed: str | None = None
        self.lock = threading.Lock()

    def __call__(self, snapshot: Any) -> None:
        with self.lock:
            now = time.monotonic()
            self.last, self.received = snapshot, now
            key = (snapshot.current, snapshot.waiting, snapshot.finished)
            if key != self.key or now - self.printed_at >= LINE_EVERY:
                self.key = key
                self._print(snapshot, now)

    def tick(self) -> None:
        """Between reports: the latest snapshot, its clock moved on, every LINE_EVERY s."""
        with self.lock:
            now = time.monotonic()
            if self.last is None or self.last.finished or now - self.printed_at < LINE_EVERY:
                return
            self._print(self.last.later(now - self.received), now, still=True)

    def _print(self, snapshot: Any, now: float, still: bool = False) -> None:
        line = f"{self.prefix}: {snapshot.line(still)}"
        if line != self.printed:
            print(line, file=sys.stderr, flush=True)
            self.printed, self.printed_at = line, now


class _Live:
    """A terminal: one row per stage, and the run's overall bar; redrawn four times a second
    from the latest report, its clock moved on."""

    def __init__(self, title: str) -> None:
        from rich.console import Console
        from rich.live import Live

        self.title = title
        self.snapshot: Any = None
        self.received = 0.0
        self.console = Console(stderr=True)
        self.live = Live(
            console=self.console,
            refresh_per_second=4,
            transient=False,
            get_renderable=self.render,
        )

    def __enter__(self) -> _Live:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(*exc)

    def __call__(self, snapshot: Any) -> None:
        self.snapshot, self.received = snapshot, time.monotonic()
        self.live.refresh()

    def render(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        if self.snapshot is None:
            return Text(f"{self.title}: starting the flow run (start checks, task runner) …")
        snapshot = self.snapshot.later(time.monotonic() - self.received)
        table = Table.grid(padding=(0, 2))
        table.add_column()
        table.add_column(min_width=30)
        table.add_column(justify="right")
        table.add_column()
        for stage in snapshot.stages:
            if stage.ended is not None:
                state = "skipped (earlier attempt)" if stage.skipped else "done"
                mark, style = "✓", "green"
            elif stage.name == snapshot.current:
                state, mark, style = stage.units(), "▶", "bold"
            else:
                state, mark, style = "", "·", "dim"
            bar = ProgressBar(total=100, completed=100 * stage.fraction, width=30)
            table.add_row(f"[{style}]{mark} {stage.name}", bar, f"[{style}]{state}", "")
        if snapshot.waiting is not None:
            table.add_row(f"[yellow]‖ waiting for {snapshot.waiting}", "", "", "")
        table.add_row(
            f"[bold]{self.title}",
            ProgressBar(total=100, completed=snapshot.percent, width=30),
            f"[bold]{snapshot.percent:.0f}%",
            snapshot.times(),
        )
        return table


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """``name=value`` for the processes started meanwhile (None: left as it is)."""
    saved = os.environ.get(name)
    if value is not None and saved is None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None and saved is None:
            os.environ.pop(name, None)


@contextlib.contextmanager
def _filtered(handlers: list[logging.Handler], level: int | None) -> Iterator[None]:
    """Prefect's console handlers with the chatter filter (and at least ``level``)."""
    chatter = _Chatter()
    levels = [handler.level for handler in handlers]
    for handler in handlers:
        handler.addFilter(chatter)
        if level is not None:
            handler.setLevel(max(handler.level, level))
    try:
        yield
    finally:
        for handler, saved in zip(handlers, levels, strict=True):
            handler.removeFilter(chatter)
            handler.setLevel(saved)


@contextlib.contextmanager
def _ticking(lines: _Lines) -> Iterator[None]:
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(1.0):
            with contextlib.suppress(Exception):  # a display must never stop a run
                lines.tick()

    thread = threading.Thread(target=run, name="das-progress-lines", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def shown(product: str, verbose: bool = False) -> Iterator[None]:
    """Show the progress of the run ``das run <product>`` starts in this process."""
    from das.runs.progress import watching

    title = f"das run {product}"
    if verbose:  # everything Prefect logs, its progress lines included
        yield
        return
    handlers = _console_handlers()
    terminal = sys.stderr.isatty()
    with (
        _env(CHILD_CONSOLE_LEVEL_ENV, "WARNING"),
        _filtered(handlers, logging.WARNING if terminal else None),
    ):
        if terminal:
            with _Live(title) as live, watching(live):
                yield
            return
        lines = _Lines(title)
        with watching(lines), _ticking(lines):
            yield
