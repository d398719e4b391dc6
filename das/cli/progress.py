"""What `das run` shows while its flow runs: a live display on a terminal, lines otherwise.

On a terminal (stderr is a TTY) a `rich` display shows every stage of the run — done, running
with its units (states, levels, buckets, tables) done of the total, or to come — and the
overall percentage, the time spent and an estimate of the time left; Prefect's console log
lines are held back to warnings meanwhile (the run log and the Prefect server keep them all).
Elsewhere (a pipe, a file, CI), one progress line at each stage change and at most every
:data:`LINE_EVERY` seconds. The numbers come from :mod:`tasks.progress`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

LINE_EVERY = 15.0


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


class _Lines:
    """Non-terminal output: a line at each stage change, else at most every LINE_EVERY s."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.stage: str | None = None
        self.at = 0.0

    def __call__(self, snapshot: Any) -> None:
        now = time.monotonic()
        if snapshot.current != self.stage or now - self.at >= LINE_EVERY or snapshot.finished:
            self.stage, self.at = snapshot.current, now
            print(f"{self.prefix}: {snapshot.line()}", file=sys.stderr, flush=True)


class _Live:
    """A terminal: one row per stage, and the run's overall bar."""

    def __init__(self, title: str) -> None:
        from rich.console import Console
        from rich.live import Live

        self.title = title
        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)

    def __enter__(self) -> _Live:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(*exc)

    def __call__(self, snapshot: Any) -> None:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        from das.runs.progress import duration_text

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
        eta = (
            ""
            if snapshot.remaining is None
            else f", about {duration_text(snapshot.remaining)} left"
        )
        table.add_row(
            f"[bold]{self.title}",
            ProgressBar(total=100, completed=snapshot.percent, width=30),
            f"[bold]{snapshot.percent:.0f}%",
            f"elapsed {duration_text(snapshot.elapsed)}{eta}",
        )
        self.live.update(table)


@contextlib.contextmanager
def shown(product: str) -> Iterator[None]:
    """Show the progress of the run ``das run <product>`` starts in this process."""
    from das.runs.progress import watching

    title = f"das run {product}"
    if not sys.stderr.isatty():
        with watching(_Lines(title)):
            yield
        return
    handlers = _console_handlers()
    levels = [handler.level for handler in handlers]
    for handler in handlers:
        handler.setLevel(max(handler.level, logging.WARNING))
    try:
        with _Live(title) as live, watching(live):
            yield
    finally:
        for handler, level in zip(handlers, levels, strict=True):
            handler.setLevel(level)
