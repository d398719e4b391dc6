"""SSH wire encoding (RFC 4251 §5): the strings and integers that public keys, signatures and
SSHSIG blobs are made of. Private to the package; strict, so that a short or padded blob is a
clear error instead of a silently ignored tail."""

from __future__ import annotations

import struct


class WireError(ValueError):
    """A blob that does not follow the SSH wire encoding (truncated, trailing bytes...)."""


class Reader:
    """Reads SSH wire fields from a byte string, refusing to run past its end."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, count: int) -> bytes:
        """The next ``count`` raw bytes."""
        end = self._pos + count
        if end > len(self._data):
            raise WireError("it ends too early (truncated)")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def uint32(self) -> int:
        (value,) = struct.unpack(">I", self.take(4))
        return value

    def byte(self) -> int:
        return self.take(1)[0]

    def string(self) -> bytes:
        return self.take(self.uint32())

    def mpint(self) -> int:
        raw = self.string()
        if raw and raw[0] & 0x80:
            raise WireError("it holds a negative integer where a positive one belongs")
        return int.from_bytes(raw, "big")

    def end(self) -> None:
        """Refuse bytes left over after the last field."""
        if self._pos != len(self._data):
            raise WireError(f"{len(self._data) - self._pos} unexpected bytes follow its last field")


def string(data: bytes) -> bytes:
    """An SSH ``string``: uint32 length, then the bytes."""
    return struct.pack(">I", len(data)) + data


def uint32(value: int) -> bytes:
    return struct.pack(">I", value)


def mpint(value: int) -> bytes:
    """An SSH ``mpint`` of a non-negative integer (a leading zero byte when the high bit is set)."""
    if value < 0:
        raise ValueError("negative mpint")
    if value == 0:
        return string(b"")
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    if raw[0] & 0x80:
        raw = b"\x00" + raw
    return string(raw)
