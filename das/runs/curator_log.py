"""The curator's local log: statistics of the confidential data that are not differentially
private (record counts, distinct record rows) may be written here, and only here.

The run log (``run.log`` in the run folder) stays on the curator's machine inside the enclave.
Prefect's run loggers send every record to the Prefect server, whose UI and database operators
and reviewers see; so tasks write such numbers with :func:`curator_log`, never through
``get_run_logger()``. It appends a line to the file directly, so it works the same in the flow
process, a thread, or a Dask worker process.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from das.runs.folder import RunFolder


def curator_log(folder: RunFolder, message: str, *args: Any) -> None:
    """Append one line to the run's local log (never sent to the Prefect server)."""
    stamp = dt.datetime.now().isoformat(sep=" ", timespec="milliseconds")
    line = f"{stamp} INFO das.curator: {message % args if args else message}\n"
    folder.log_path.parent.mkdir(parents=True, exist_ok=True)
    with folder.log_path.open("a", encoding="utf-8") as handle:
        handle.write(line)
