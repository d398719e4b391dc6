"""The interpreter workarounds: threads that parse at once (numpy's ``.npy`` headers in a run's
task threads) no longer break each other's AST on CPython before 3.11.8 (gh-106905)."""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import das  # noqa: F401  (importing the package applies the workarounds)
from das.cpython_workarounds import ast_parse_is_thread_safe, serialize_ast_parsing

AFFECTED = not ast_parse_is_thread_safe()

# About what numpy reads from a .npy header, larger so that building it allocates enough for
# the garbage collector to run mid-tree.
LITERAL = repr({f"k{i}": ({"descr": "<i8", "fortran_order": False}, (i, i + 1)) for i in range(40)})


@contextmanager
def collections_that_switch_threads() -> Iterator[None]:
    """Run the GC every 50 allocations and switch threads in each of its callbacks: the moment
    the race needs (a collection mid-tree letting another thread parse), made frequent."""
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    callback = lambda phase, info: sum(range(20))  # noqa: E731  (Python code: a switch point)
    gc.callbacks.append(callback)
    gc.set_threshold(50)
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)


def errors_of_threads_parsing(parse: Callable[[], object], seconds: float) -> list[BaseException]:
    """Four threads call ``parse`` for ``seconds`` (or until one fails); what they raised."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                parse()
            except Exception as error:  # the test reports whatever it is
                errors.append(error)
                stop.set()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    with collections_that_switch_threads():
        for thread in threads:
            thread.start()
        stop.wait(seconds)
        stop.set()
        for thread in threads:
            thread.join()
    return errors


def test_the_fix_is_for_the_interpreters_with_the_race() -> None:
    assert not ast_parse_is_thread_safe((3, 11, 7))
    assert ast_parse_is_thread_safe((3, 11, 8))
    assert getattr(ast.parse, "_das_serialized", False) is AFFECTED


@pytest.mark.skipif(not AFFECTED, reason="this interpreter has CPython's fix (3.11.8+)")
def test_unlocked_threads_break_each_others_trees_on_this_interpreter() -> None:
    """The race is real here: the test below would fail without the lock."""
    unlocked = ast.parse.__wrapped__  # type: ignore[attr-defined]
    errors = errors_of_threads_parsing(lambda: unlocked(LITERAL, mode="eval"), seconds=10)
    assert errors, "no race in 10 s: this test no longer shows the bug it guards against"
    assert "AST constructor recursion depth mismatch" in str(errors[0])


def test_threads_reading_npy_headers_and_literals_at_once_all_succeed(tmp_path) -> None:
    """What a run's task threads do: numpy's ``.npy`` headers and ``ast.literal_eval``."""
    path = tmp_path / "a.npy"
    np.save(path, np.arange(12, dtype=np.int64).reshape(3, 4))

    def parse() -> None:
        assert np.load(path, mmap_mode="r").shape == (3, 4)
        assert len(ast.literal_eval(LITERAL)) == 40

    assert errors_of_threads_parsing(parse, seconds=1.5) == []


def test_serializing_twice_wraps_once() -> None:
    before = ast.parse
    serialize_ast_parsing()
    assert ast.parse is before
