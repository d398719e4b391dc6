"""Randomness for the noise samplers: a secure default and a seeded mode for tests.

A ``RandomSource`` hands out uniformly random 64-bit words as numpy arrays. The samplers
turn words into exact uniform integers by rejection (``uniform_below``), so nothing
downstream depends on how the words were produced, only on their being uniform and
independent.

- ``default_source()``: the process-wide secure source, OpenSSL's CSPRNG
  (``ssl.RAND_bytes``, the AES-CTR DRBG: ~6 GB/s on this machine against ~0.35 GB/s for
  ``os.urandom``, measured with 1 MiB blocks; ``os.urandom`` is the fallback when the ssl
  module is unavailable). Small requests are served from a buffer; that buffer is dropped in
  a forked child (``os.register_at_fork`` plus a pid check on every draw), so a child never
  hands out bytes its parent or a sibling also holds. OpenSSL's own DRBG reseeds after a fork
  (it tracks the pid).
- ``seeded_rng(seed)``: numpy PCG64, reproducible, ``is_secure = False``. For tests and demos
  only: production runs must refuse it, and the audit record shows ``describe()``.
"""

from __future__ import annotations

import abc
import numbers
import os
import threading
import weakref

import numpy as np
from numpy.typing import ArrayLike, NDArray

try:  # pragma: no cover - the ssl module is present in every supported build
    import ssl

    _RAND_BYTES = ssl.RAND_bytes
    _BACKEND = f"{ssl.OPENSSL_VERSION} RAND_bytes"
except ImportError:  # pragma: no cover
    _RAND_BYTES = None
    _BACKEND = "os.urandom"

__all__ = [
    "RandomSource",
    "SecureRandomSource",
    "SeededRandomSource",
    "default_source",
    "randbelow",
    "seeded_rng",
    "uniform_below",
]

_TWO64 = 1 << 64


class RandomSource(abc.ABC):
    """Protocol of a source of uniform random 64-bit words.

    Implementations give ``uint64(n)``; ``uint32``/``uint8`` are views of the same words.
    ``is_secure`` says whether the source may be used for a production release;
    ``describe()`` is the line written into the audit record.
    """

    is_secure: bool = False

    @abc.abstractmethod
    def uint64(self, n: int) -> NDArray[np.uint64]:
        """``n`` independent uniform 64-bit words (the array may be read-only)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Human-readable description for the audit record."""

    def uint32(self, n: int) -> NDArray[np.uint32]:
        """``n`` independent uniform 32-bit words (halves of 64-bit words)."""
        n = _check_count(n)
        return self.uint64((n + 1) // 2).view(np.uint32)[:n]

    def uint8(self, n: int) -> NDArray[np.uint8]:
        """``n`` independent uniform bytes."""
        n = _check_count(n)
        return self.uint64((n + 7) // 8).view(np.uint8)[:n]


def _check_count(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 0:
        raise ValueError(f"count must be a non-negative integer, got {n!r}")
    return int(n)


# Every live secure source, so that one fork handler can drop all their buffers.
_SECURE_SOURCES: weakref.WeakSet[SecureRandomSource] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for source in list(_SECURE_SOURCES):
        source._drop_buffer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class SecureRandomSource(RandomSource):
    """The OS/OpenSSL CSPRNG, read in large blocks, fork-safe.

    Requests of at least ``direct_bytes`` go straight to the generator; smaller ones are
    cut from a ``buffer_bytes`` block. A changed pid (a fork the handler did not see) also
    drops the buffer before anything is served.
    """

    is_secure = True

    def __init__(self, *, buffer_bytes: int = 1 << 20, direct_bytes: int = 1 << 16) -> None:
        if buffer_bytes < 8 or direct_bytes < 8:
            raise ValueError("buffer_bytes and direct_bytes must be at least 8")
        self._buffer_bytes = int(buffer_bytes) // 8 * 8
        self._direct_bytes = int(direct_bytes)
        self._lock = threading.Lock()
        self._drop_buffer()
        _SECURE_SOURCES.add(self)

    def _drop_buffer(self) -> None:
        # A fresh lock too: a lock held by another parent thread at fork time stays held.
        self._lock = threading.Lock()
        self._buffer = np.empty(0, dtype=np.uint64)
        self._pos = 0
        self._pid = os.getpid()

    @staticmethod
    def _read(nbytes: int) -> bytes:
        if _RAND_BYTES is None:  # pragma: no cover
            return os.urandom(nbytes)
        chunk = 1 << 28  # RAND_bytes takes a C int
        if nbytes <= chunk:
            return _RAND_BYTES(nbytes)
        return b"".join(_RAND_BYTES(min(chunk, nbytes - i)) for i in range(0, nbytes, chunk))

    def uint64(self, n: int) -> NDArray[np.uint64]:
        n = _check_count(n)
        if os.getpid() != self._pid:
            self._drop_buffer()
        if 8 * n >= self._direct_bytes:
            return np.frombuffer(self._read(8 * n), dtype=np.uint64)
        with self._lock:
            if self._pos + n > self._buffer.size:
                self._buffer = np.frombuffer(self._read(self._buffer_bytes), dtype=np.uint64)
                self._pos = 0
            out = self._buffer[self._pos : self._pos + n].copy()
            self._pos += n
        return out

    def describe(self) -> str:
        return f"secure: {_BACKEND} (OS-seeded CSPRNG, fork-safe buffering)"


class SeededRandomSource(RandomSource):
    """Reproducible words from numpy's PCG64 — tests and demos only, never production."""

    is_secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)
        self._bitgen = np.random.PCG64(self.seed)

    def uint64(self, n: int) -> NDArray[np.uint64]:
        n = _check_count(n)
        return np.asarray(self._bitgen.random_raw(n), dtype=np.uint64).reshape(n)

    def describe(self) -> str:
        return f"seeded (tests/demos only): numpy PCG64, seed={self.seed}"


_DEFAULT: SecureRandomSource | None = None
_DEFAULT_LOCK = threading.Lock()


def default_source() -> SecureRandomSource:
    """The process-wide secure source (created on first use; fork-safe)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = SecureRandomSource()
    return _DEFAULT


def seeded_rng(seed: int) -> SeededRandomSource:
    """A reproducible source (``is_secure = False``; describe() says tests/demos only)."""
    return SeededRandomSource(seed)


def uniform_below(source: RandomSource, n: ArrayLike, size: int | None = None) -> NDArray:
    """Exact uniform integers in [0, n), for 1 <= n <= 2^63, as int64.

    ``n`` a scalar (then ``size`` values) or an array (one value per entry). Rejection, no
    modulo bias: with M = floor(2^64/n), a word w < M·n maps to floor(w/M), and each value in
    [0, n) has exactly M preimages; words >= M·n are redrawn.
    """
    if np.ndim(n) == 0:
        bound = int(n)  # type: ignore[arg-type]
        if not 1 <= bound <= 1 << 63:
            raise ValueError("n must be between 1 and 2^63")
        count = _check_count(1 if size is None else size)
        if bound == 1:
            out = np.zeros(count, dtype=np.int64)
            return out if size is not None else out[0]
        mult = _TWO64 // bound
        limit = mult * bound
        words = source.uint64(count)
        if limit < _TWO64:
            lim = np.uint64(limit)
            bad = np.flatnonzero(words >= lim)
            if bad.size:
                words = words.copy()
            while bad.size:
                words[bad] = source.uint64(bad.size)
                bad = bad[words[bad] >= lim]
        out = (words // np.uint64(mult)).astype(np.int64)
        return out if size is not None else out[0]
    bounds = np.asarray(n)
    if bounds.dtype == object or bounds.dtype.kind not in "iu":
        raise ValueError("n must be an integer array")
    if bounds.size and (bounds.min() < 1 or int(bounds.max()) > 1 << 63):
        raise ValueError("every n must be between 1 and 2^63")
    b = bounds.astype(np.uint64).ravel()
    # M = floor((2^64-1)/n): equals floor(2^64/n) unless n divides 2^64, and then M·n < 2^64
    # still holds, so every word < M·n is accepted with exactly M preimages per value.
    mult = np.uint64(_TWO64 - 1) // b
    limit = mult * b
    words = source.uint64(b.size).copy()
    bad = np.flatnonzero(words >= limit)
    while bad.size:
        words[bad] = source.uint64(bad.size)
        bad = bad[words[bad] >= limit[bad]]
    return (words // mult).astype(np.int64).reshape(bounds.shape)


def randbelow(source: RandomSource, n: int) -> int:
    """One exact uniform integer in [0, n) for any positive Python int (the exact
    fallback for rare values beyond 64-bit arithmetic): rejection on ceil(bits/64) words."""
    if n < 1:
        raise ValueError("n must be >= 1")
    if n == 1:
        return 0
    bits = (n - 1).bit_length()
    words = (bits + 63) // 64
    mask = (1 << bits) - 1
    while True:
        value = 0
        for w in source.uint64(words).tolist():
            value = (value << 64) | int(w)
        value &= mask  # uniform on [0, 2^bits), 2^bits < 2n: acceptance > 1/2
        if value < n:
            return value
