"""Workarounds for bugs of the Python interpreter the pipeline runs on, each applied only where
the bug is.

**Building ASTs in two threads at once** (CPython gh-106905, fixed in 3.11.8 and 3.12.2). Up to
3.11.7 the recursion counter that turns a parsed tree into ``ast`` objects is one per
interpreter, not one per call. When a garbage collection lets another thread run while a tree is
being built, and that thread parses too, the first parse fails with ``SystemError: AST
constructor recursion depth mismatch``. The pipeline's task threads parse all the time: numpy
reads every ``.npy`` header with ``ast.literal_eval``, and Prefect's ``inspect.signature`` of a
builtin parses its text signature. A seeded demo run failed this way in a Dask worker thread
(CI, 2026-11-28). Both callers go through ``ast.parse``; one lock around it makes the trees
one at a time. A header is a few dozen characters, so nobody waits for long.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

#: The first 3.11 release whose AST constructor keeps its recursion count per call.
AST_THREAD_SAFE_SINCE = (3, 11, 8)

_ast_lock = threading.RLock()  # re-entrant: a finalizer run by the GC mid-parse may parse


def ast_parse_is_thread_safe(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this interpreter builds ASTs in several threads without the gh-106905 race."""
    return version >= AST_THREAD_SAFE_SINCE


def serialize_ast_parsing() -> None:
    """Make ``ast.parse`` (and so ``ast.literal_eval`` and ``inspect.signature``, which look it
    up at each call) take a process-wide lock, on interpreters with the race. Idempotent."""
    if ast_parse_is_thread_safe() or getattr(ast.parse, "_das_serialized", False):
        return
    ast.parse = _serialized(ast.parse)


def _serialized(parse: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(parse)
    def locked_parse(*args: Any, **kwargs: Any) -> Any:
        with _ast_lock:
            return parse(*args, **kwargs)

    locked_parse._das_serialized = True  # type: ignore[attr-defined]
    return locked_parse
