"""What a SafeTab-P task derives from the run's public parameters, derived once per process.

A task counts or measures many states and levels one after the other, and each used to derive
again what depends on the public specs and config alone (the code → iteration matrices of
every level, the plan) and to read the pass's geography maps again: at 100 k persons that was
most of the totals, measure and cells stages' time. :func:`of_specs` keeps such values with
the specs object (gone with it); :func:`geography_of` keeps the last geographies read, keyed by
their files' identity (a geography prepared again, by a rerun, is read again). Everything
kept is public (specs, config, GRF-C-derived maps) and read-only.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from das.specs.race_specs import RaceEthnicitySpecs

T = TypeVar("T")
# Geographies kept: both passes of a run and of the run before it in a process (tests).
GEOGRAPHIES_KEPT = 4

_lock = threading.Lock()
_by_specs: weakref.WeakKeyDictionary[RaceEthnicitySpecs, dict[Hashable, Any]] = (
    weakref.WeakKeyDictionary()
)
_geographies: OrderedDict[Hashable, Any] = OrderedDict()


def of_specs(specs: RaceEthnicitySpecs, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()`` once per specs object and ``key`` (the specs compare by identity); the
    value must not be changed by its users. Threads may compute it at once: the first kept."""
    with _lock:
        values = _by_specs.setdefault(specs, {})
        if key in values:
            return values[key]
    value = compute()
    with _lock:
        return values.setdefault(key, value)


def file_identity(*paths: Path) -> tuple[tuple[int, int, int, int], ...]:
    """(device, inode, size, modification ns) of each file: a file written again differs."""
    identity = []
    for path in paths:
        status = path.stat()
        identity.append((status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(identity)


def geography_of(key: Hashable, load: Callable[[], T]) -> T:
    """The geography ``load()`` reads, kept under ``key`` (its folder and files' identity) among
    the :data:`GEOGRAPHIES_KEPT` last ones."""
    with _lock:
        if key in _geographies:
            _geographies.move_to_end(key)
            return _geographies[key]
    value = load()
    with _lock:
        value = _geographies.setdefault(key, value)
        _geographies.move_to_end(key)
        while len(_geographies) > GEOGRAPHIES_KEPT:
            _geographies.popitem(last=False)
    return value
