"""How big a run's inputs are, to size its Dask cluster: without Prefect or Dask imported,
so that `das run` can decide before its heavy imports (flows/runner.py uses the same)."""

from __future__ import annotations

import os

# Inputs smaller than this run on one in-process Dask worker with threads even with a Prefect
# server: starting two worker processes (and importing the pipeline in each) cost a 100 k-person
# run ~5 s of its ~10, and below ~1 M persons the threads are as fast (numpy releases the GIL).
IN_PROCESS_BELOW_BYTES = 64 * 2**20


def input_bytes(folder: str | os.PathLike[str]) -> int:
    """The size of the input files in ``folder`` (its regular files, not its subfolders): the
    size the file system shows, which sizes the cluster (never a record count)."""
    total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file():
                total += entry.stat().st_size
    return total
