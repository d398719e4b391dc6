"""Reading a run's record files past validation: the file of a role, and errors said safely.

A record file that cannot be read past validation (changed since, or never validated under
``--skip-validation``) is invalid input, not a fault; its details (row numbers, counts) reach
the curator's local log only, and the message that the orchestrator keeps names no value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from das.io.tables import InputFormatError
from das.runs.curator_log import curator_log
from das.runs.folder import RunFolder
from das.validation.findings import ValidationFailed

if TYPE_CHECKING:
    from das.runs.start import RunInputs


def input_path(inputs: RunInputs, name: str) -> Path:
    """The record file ``name`` of the run (a run with ``--skip-validation`` meets a missing one
    here, before anything is drawn)."""
    path = inputs.records().get(name)
    if path is None:
        present = sorted(p.name for p in inputs.candidates if p.stem == name and p.is_file())
        if len(present) > 1:
            raise ValidationFailed(
                f"both {' and '.join(present)} exist in {inputs.data_dir}: keep only one {name} "
                "input (which one is meant would be a guess); nothing was drawn"
            )
        raise ValidationFailed(
            f"no {name} input in {inputs.data_dir} (.txt/.csv or .parquet); nothing was drawn"
        )
    return Path(path)


class InputUnreadable(InputFormatError):
    """A record file the run could not read past validation (changed since, or never validated
    under ``--skip-validation``): invalid input, exit 1. Nothing was drawn: reading precedes
    every draw. Its message names no value of the records (it is shareable)."""

    shareable = True


@contextlib.contextmanager
def read_records_locally(folder: RunFolder, what: str) -> Iterator[None]:
    """Run a task's read of the record files so that a format error's details (row numbers,
    row counts) reach the curator's local log only: the task's state message, which the Prefect
    server keeps, says what failed and where the details are."""
    try:
        yield
    except InputFormatError as exc:
        if exc.shareable:
            raise InputUnreadable(f"{exc}.") from None
        curator_log(folder, "%s could not be read: %s", what, exc)
        raise InputUnreadable(
            f"{what} could not be read ({type(exc).__name__}): the file changed since it was "
            "validated, or was never validated (--skip-validation). The details are in the "
            f"run's local log {folder.log_path}; nothing was drawn."
        ) from None
