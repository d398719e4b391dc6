"""glibc's allocator, told to reuse the memory of the engine's large arrays instead of asking
the kernel for new pages each time.

The engine allocates and frees arrays of megabytes by the thousand (noise blocks, per-state
counts, chunks of spilled records). glibc serves a block of at least its *mmap threshold*
with fresh pages from the kernel, each page zeroed by a fault, and returns it on ``free``;
its own heuristic raises the threshold (up to 32 MiB) as such blocks come and go, so that
they are reused instead. Dask turns that heuristic off in every worker process it spawns: its
``distributed.nanny.pre-spawn-environ`` sets ``MALLOC_TRIM_THRESHOLD_=65536`` (to give memory
back soon), and any such setting fixes the mmap threshold at 128 KiB. Then every array is
fresh pages: a SafeTab-P run of 20 M persons spent 51 of its 132 CPU-seconds in the kernel.

:data:`SETTINGS` fixes both where glibc's heuristic would take them: large blocks below
32 MiB come from the heap and are reused, and free memory above 64 MiB at the heap's top
still goes back to the kernel. Measured: 20 M secure Gaussian draws 0.93 → 0.19 system CPU-s
(Dask's setting: 4.6); the 20 M-person run 51.1 → 18.5 system CPU-s, and 172 → 100 CPU-s in
all in `benchmarks/das_run.py` at load 9-12 (docs/explanation/performance.md#allocator).

Applied three ways: :func:`tune` in this process (``mallopt``, glibc only: elsewhere a
no-op); the variables of :data:`SETTINGS` in the environment of the worker processes a local
cluster spawns (``flows.dask_runner``: glibc reads them when a process starts); and ``dask worker
--preload das.prefect_auth`` calls :func:`tune` in a worker of an existing cluster.
"""

from __future__ import annotations

import ctypes
import functools

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own upper bound for it on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # glibc's heuristic keeps it at twice the threshold
SETTINGS = {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "MALLOC_TRIM_THRESHOLD_": TRIM_THRESHOLD}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)


@functools.cache
def tune() -> bool:
    """:data:`SETTINGS` in this process (once); False where the C library is not glibc. The
    process's own symbols, not ``ctypes.util.find_library``, which runs ``ldconfig -p``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
