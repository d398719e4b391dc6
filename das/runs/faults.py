"""Infrastructure faults, explained in one line: what failed, and what to do.

A run that fails because its infrastructure did — the Dask task runner lost its workers, the
Prefect API or the privacy ledger could not be reached, or answered "busy", the disk filled up —
is not a problem of its inputs, and it is resumable: the same run id (Prefect's Retry of the
flow run, or `das run --run-id`) reuses every draw the privacy ledger recorded and redoes
nothing that was done.
Such failures arrive as library internals (``UnboundLocalError: cannot access local variable
'result'`` from distributed, ``RuntimeError: Timed out while attempting to connect to ephemeral
Prefect API server``, ``PrefectHTTPStatusError``...); :func:`explain` recognizes them anywhere in
an exception's chain and says, in one line, the cause and the next step. `das run` exits with
:data:`EXIT_INFRASTRUCTURE` for them, distinct from invalid inputs (1) and refusals (2).

Recognition goes by type names and modules along the chain, so this module imports neither
Prefect nor Dask (the engine never does).
"""

from __future__ import annotations

import errno
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

EXIT_OK, EXIT_INVALID, EXIT_REFUSED, EXIT_INFRASTRUCTURE, EXIT_FAILED = 0, 1, 2, 3, 4

# The exit codes of a release run (`das run`), what each means and what to do: the
# documentation's exit-code page is generated from this (each command's own codes are in its
# `--help`). Exit codes 0, 2 and 3 mean the same for `das ledger`.
EXIT_MEANINGS: dict[int, tuple[str, str]] = {
    EXIT_OK: ("released: the release is published, whole", "—"),
    EXIT_INVALID: (
        "the run failed: invalid inputs, or records that changed under the run (nothing was "
        "drawn; the validation report is in the run's state folder, "
        "`<state root>/runs/<run-id>/validation/`), or another error (the attempt's audit and "
        "run log are in `<state root>/runs/<run-id>/`)",
        "fix the inputs and start a new run; after another error, resume with `--run-id`",
    ),
    EXIT_REFUSED: (
        "refused, or a usage error: nothing was drawn, and the message names the next step (a "
        "flag, the `das ledger approve` command, another output, a run to resume)",
        "do what the message says (see *Respond to a refusal*)",
    ),
    EXIT_INFRASTRUCTURE: (
        "an infrastructure fault, named in one line: the Dask workers lost, the Prefect API "
        "unreachable, busy or too slow to start, the privacy ledger's database or folder "
        "unreachable, a full disk",
        "fix it, then run the same command with `--run-id`: every draw the ledger recorded is "
        "reused",
    ),
}

DASK = "the Dask task runner lost its workers"
PREFECT = "the Prefect API"
DISK = "the disk is full"
LEDGER = "the privacy ledger could not be reached"


class InfrastructureFault(RuntimeError):
    """A run stopped by its infrastructure (:func:`explain`); its message is the one line."""


def resume_hint(context: str, run_id: str) -> str:
    """How to resume run ``run_id`` in the syntax of where it was started."""
    if context == "deployment":
        return "Retry the flow run (its page in the Prefect UI, top right)"
    if context == "cli":
        return f"run the same `das run` command with --run-id {run_id}"
    return f"call the flow again with run_id={run_id!r}"


@dataclass(frozen=True)
class Fault:
    """A recognized infrastructure fault: its kind and the operator's one line."""

    kind: str
    line: str


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and the members of exception groups."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        item = todo.pop(0)
        if id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += list(getattr(item, "exceptions", ()) or ())
        todo += [e for e in (item.__cause__, item.__context__) if e is not None]


def _names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _raised_in(error: BaseException, package: str) -> bool:
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    return any(f"/{package}/" in frame.filename for frame in frames)


def _kind(error: BaseException) -> str | None:
    names = _names(error)
    text = str(error)
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return DISK
    if "database or disk is full" in text:  # SQLite's word for it (the privacy ledger)
        return DISK
    if "LedgerUnavailable" in names:
        return LEDGER
    if names & {"KilledWorker", "CommClosedError", "FutureCancelledError", "StreamClosedError"}:
        return DASK
    if isinstance(error, UnboundLocalError) and _raised_in(error, "distributed"):
        return DASK  # distributed's utils after its scheduler lost every worker
    if "Lost all workers" in text or "lost its workers" in text:
        return DASK
    if "ephemeral Prefect API" in text:
        return PREFECT
    if names & {"PrefectHTTPStatusError"}:
        status = getattr(getattr(error, "response", None), "status_code", 0) or 0
        return PREFECT if status >= 500 or status in (408, 429) else None
    if names & {"ConnectError", "ConnectTimeout", "ReadTimeout", "RemoteProtocolError",
                "PoolTimeout"} and _raised_in(error, "httpx"):  # fmt: skip
        return PREFECT
    return None


def explain(error: BaseException, resume: str, api_url: str | None = None) -> Fault | None:
    """The one-line explanation of ``error`` when it is an infrastructure fault, else None.
    ``resume`` says how to resume the run where it was started (a command or "Retry")."""
    for item in _chain(error):
        kind = _kind(item)
        if kind is None:
            continue
        if kind == DISK:
            where = getattr(item, "filename", None)
            place = f" writing {where}" if where else ""
            line = (
                f"{DISK}{place}: free space there (the run folder holds the spilled records, "
                f"true counts and noise), then resume: {resume}; every draw already made is "
                "reused"
            )
        elif kind == LEDGER:
            line = (
                f"{str(item).rstrip('.')}: check the ledger's database or folder "
                f"(DAS_LEDGER_URL / DAS_LEDGER_DIR), then resume: {resume}; no draw goes "
                "unrecorded (the ledger records each before it is made)"
            )
        elif kind == DASK:
            line = (
                f"{DASK} (a worker process died, was killed or ran out of memory): start or "
                f"check the workers (DAS_DASK_ADDRESS), then resume: {resume}; the draws the "
                "privacy ledger recorded are reused, nothing is drawn twice"
            )
        else:
            where = f" at {api_url}" if api_url else ""
            line = (
                f"{PREFECT}{where} could not be reached or was too busy to answer: check the "
                "server (PREFECT_API_URL; without it `das run` starts a temporary one, which "
                "waits up to PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS), then resume: "
                f"{resume}; nothing recorded is lost"
            )
        return Fault(kind, line)
    return None
