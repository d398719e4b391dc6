"""A run's local log file: every record of the flow, its tasks and the engine, as the run goes.

The file is written as the run goes, so a failed or killed run still leaves its log; it lives
in the run folder (the curator's), beside :mod:`das.runs.curator_log`'s lines that only it gets.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

# Loggers whose records go to the run's log file: the flow and task run loggers, the engine.
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "das")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RunLogHandler(logging.FileHandler):
    """The run log file; a write it cannot make (a full disk) is dropped quietly: the run
    itself then fails on its own write, and says so in one line."""

    def handleError(self, record: logging.LogRecord) -> None:
        self.failed = True


@contextlib.contextmanager
def run_log_file(path: str | Path) -> Iterator[Path]:
    """Copy the run's log records into ``path`` (appending: a rerun continues the same log).

    The file is written as the run goes, so a failed or killed run still leaves its log.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _RunLogHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield path
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()
