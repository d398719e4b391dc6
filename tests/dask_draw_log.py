"""``dask worker --preload tests/dask_draw_log.py``: what a worker of the cluster tests did.

Loaded into every worker process of :mod:`tests.test_dask_cluster`. It appends one JSON line
per event to ``DAS_TEST_DRAW_LOG`` (pid, event, name): every measurement drawn (``fresh``) or
taken from the run folder (``reused``) through the persisted noise store, and every
per-state, per-level, per-bucket and per-table unit of work the worker ran. When the file
``DAS_TEST_DRAW_CONTROL`` names a measurement (``{"pause_after": NAME, "seconds": S}``), a fresh
draw of it is logged and then the worker sleeps, so that the test can kill it there: after the
draw is persisted, before its task ends.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import das.phsafe.streamed as phsafe
import das.safetab_p.streamed as safetab_p
from das.runs.noise_store import NoiseStore

LOG = Path(os.environ["DAS_TEST_DRAW_LOG"])
CONTROL = Path(os.environ["DAS_TEST_DRAW_CONTROL"])


def _log(event: str, name: str) -> None:
    line = json.dumps({"pid": os.getpid(), "event": event, "name": name, "t": time.time()})
    with LOG.open("a", encoding="utf-8") as handle:  # one short append per line
        handle.write(line + "\n")


def _pause_after(name: str) -> float:
    try:
        control = json.loads(CONTROL.read_text())
    except (OSError, ValueError):
        return 0.0
    return float(control.get("seconds", 0)) if control.get("pause_after") == name else 0.0


def _logged_draws(method: Any) -> Any:
    if getattr(method, "logged", False):  # the worker may load a preload module twice
        return method

    @functools.wraps(method)
    def draw(self: NoiseStore, measurement: Any, size: int, accountant: Any) -> Any:
        drawn_before = len(self.fresh)
        noise = method(self, measurement, size, accountant)
        fresh = len(self.fresh) > drawn_before
        _log("fresh" if fresh else "reused", measurement.name)
        if fresh and (seconds := _pause_after(measurement.name)):
            time.sleep(seconds)
        return noise

    draw.logged = True
    return draw


def _logged_work(module: Any, function: str, label: Any) -> None:
    original = getattr(module, function)
    if getattr(original, "logged", False):
        return

    @functools.wraps(original)
    def work(*args: Any, **kwargs: Any) -> Any:
        _log(function, str(label(*args)))
        return original(*args, **kwargs)

    work.logged = True
    # Replaced in the package's face and in the module that defines it: a pickled reference
    # names the defining module (``__module__``), an import of the task module the face.
    for home in {module, sys.modules[original.__module__]}:
        setattr(home, function, work)


NoiseStore.noise_for = _logged_draws(NoiseStore.noise_for)
NoiseStore.noise_file_for = _logged_draws(NoiseStore.noise_file_for)
# The engine functions the tasks call. A task's function reaches a worker pickled by value,
# its engine functions by reference (module and name), so the worker calls these wrappers.
_logged_work(safetab_p, "count_state_totals", lambda config, specs, work, state: state)
_logged_work(safetab_p, "count_state_cells", lambda config, specs, work, state: state)
_logged_work(safetab_p, "measure_level_streamed", lambda c, s, w, partition, *a: partition)
_logged_work(phsafe, "count_bucket", lambda config, work, bucket: bucket)
_logged_work(phsafe, "measure_table_streamed", lambda config, work, table, *a: table)
