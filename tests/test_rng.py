"""Randomness sources: secure default, seeded mode, exact uniform integers, fork safety."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading

import numpy as np
import pytest
from scipy import stats

from das.privacy import rng as rng_mod
from das.privacy.noise import discrete_gaussian
from das.privacy.rng import (
    RandomSource,
    SecureRandomSource,
    default_source,
    randbelow,
    seeded_rng,
    uniform_below,
)

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_seeded_source_is_reproducible_and_not_secure() -> None:
    a, b, c = seeded_rng(7), seeded_rng(7), seeded_rng(8)
    np.testing.assert_array_equal(a.uint64(100), b.uint64(100))
    assert not np.array_equal(seeded_rng(7).uint64(100), c.uint64(100))
    assert a.is_secure is False
    assert "seeded (tests/demos only)" in a.describe() and "seed=7" in a.describe()
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError):
            seeded_rng(bad)  # type: ignore[arg-type]


def test_default_source_is_secure_singleton() -> None:
    src = default_source()
    assert src is default_source()
    assert isinstance(src, RandomSource) and src.is_secure
    assert src.describe().startswith("secure:")
    x, y = src.uint64(4), src.uint64(4)  # buffered path
    big = src.uint64(1 << 14)  # direct path
    assert x.dtype == np.uint64 and big.shape == (1 << 14,)
    assert not np.array_equal(x, y)
    # uniform bits: each of the 64 bit positions is set about half the time
    bits = np.unpackbits(big.view(np.uint8)).reshape(-1, 64).mean(axis=0)
    assert np.abs(bits - 0.5).max() < 0.03


def test_word_views() -> None:
    src = seeded_rng(1)
    assert src.uint32(5).shape == (5,) and src.uint32(5).dtype == np.uint32
    assert src.uint8(13).shape == (13,) and src.uint8(0).shape == (0,)
    with pytest.raises(ValueError):
        src.uint64(-1)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 1000])
def test_uniform_below_is_uniform(n: int) -> None:
    draws = uniform_below(seeded_rng(n), n, 200_000)
    assert draws.dtype == np.int64 and draws.min() >= 0 and draws.max() < n
    if n > 1:
        counts = np.bincount(draws, minlength=n)
        assert stats.chisquare(counts).pvalue > 1e-4


@pytest.mark.parametrize("n", [2**63, 2**62 + 1, 3 * 2**61 + 12345])
def test_uniform_below_huge_bounds(n: int) -> None:
    """Up to 2^63; 2^62+1 rejects ~25% of words and must still be uniform (no modulo bias)."""
    draws = uniform_below(seeded_rng(5), n, 100_000)
    assert draws.min() >= 0 and int(draws.max()) < n
    # deciles of draws/n are uniform
    counts = np.bincount((draws / n * 10).astype(int).clip(0, 9), minlength=10)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_uniform_below_per_lane_bounds() -> None:
    bounds = np.array([1, 2, 7, 2**40 + 3, 2**63] * 2000, dtype=np.uint64)
    draws = uniform_below(seeded_rng(2), bounds)
    assert draws.shape == bounds.shape
    assert (draws.astype(np.uint64) < bounds).all() and (draws >= 0).all()
    assert (draws[bounds == 1] == 0).all()
    sevens = np.bincount(draws[bounds == 7], minlength=7)
    assert stats.chisquare(sevens).pvalue > 1e-4


def test_uniform_below_rejects_bad_bounds() -> None:
    src = seeded_rng(0)
    for bad in (0, -3, 2**63 + 1):
        with pytest.raises(ValueError):
            uniform_below(src, bad, 3)
    with pytest.raises(ValueError):
        uniform_below(src, np.array([3, 0]))
    # A scalar bound without a size is one value, not an array of one, and in [0, 5).
    value = uniform_below(src, 5)
    assert np.ndim(value) == 0 and 0 <= value < 5


def test_randbelow_big_integers() -> None:
    src = seeded_rng(3)
    n = 2**130 + 17
    draws = [randbelow(src, n) for _ in range(4000)]
    assert all(0 <= d < n for d in draws)
    top = np.bincount([d * 8 // n for d in draws], minlength=8)
    assert stats.chisquare(top).pvalue > 1e-4
    assert randbelow(src, 1) == 0
    small = np.bincount([randbelow(src, 3) for _ in range(6000)], minlength=3)
    assert stats.chisquare(small).pvalue > 1e-4
    with pytest.raises(ValueError):
        randbelow(src, 0)


def test_buffer_dropped_when_pid_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    src = SecureRandomSource()
    src.uint64(2)
    pending = src._buffer[src._pos : src._pos + 2].copy()
    assert pending.size == 2  # bytes are waiting in the buffer
    monkeypatch.setattr(rng_mod.os, "getpid", lambda: -12345)
    after = src.uint64(2)
    assert not np.array_equal(after, pending)  # a 'child' never serves the parent's bytes
    assert src._pid == -12345


def test_threads_never_share_words() -> None:
    src = SecureRandomSource()
    results: list[np.ndarray] = []
    lock = threading.Lock()

    def work() -> None:
        local = [src.uint64(3) for _ in range(500)]
        with lock:
            results.extend(local)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    words = np.concatenate(results)
    assert words.size == 6000 and np.unique(words).size == words.size


def _child_draw(queue) -> None:  # top level: picklable for multiprocessing
    queue.put(discrete_gaussian(10**6, 8).tolist())
    queue.close()
    queue.join_thread()
    # Skip the exit handlers inherited from the parent (e.g. a session-wide Prefect test server
    # started by other tests): they belong to the parent, and running them in a forked child
    # fails. What this test checks is the noise above.
    os._exit(0)


def _prime_parent_buffer() -> None:
    """Leave unread bytes in the default source's buffer, as a long-running parent would."""
    src = default_source()
    discrete_gaussian(10**6, 8)
    assert src._pos < src._buffer.size


@pytest.mark.integration  # forked children
@needs_fork
def test_forked_children_draw_different_noise_multiprocessing() -> None:
    _prime_parent_buffer()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child_draw, args=(queue,)) for _ in range(2)]
    for p in procs:
        p.start()
    children = [queue.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    parent = discrete_gaussian(10**6, 8).tolist()
    assert children[0] != children[1]
    assert parent not in children


@pytest.mark.integration  # forked children
@needs_fork
def test_forked_children_draw_different_noise_os_fork() -> None:
    _prime_parent_buffer()
    outputs = []
    for _ in range(2):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: draw, report, leave without running pytest teardown
            try:
                os.close(read_fd)
                data = discrete_gaussian(10**6, 8).astype(np.int64).tobytes()
                os.write(write_fd, data)
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as fh:
            outputs.append(np.frombuffer(fh.read(), dtype=np.int64))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    parent = discrete_gaussian(10**6, 8)
    assert outputs[0].size == 8 and outputs[1].size == 8
    assert not np.array_equal(outputs[0], outputs[1])
    assert not np.array_equal(outputs[0], parent) and not np.array_equal(outputs[1], parent)
