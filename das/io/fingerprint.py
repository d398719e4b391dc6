"""TEMPORARY stand-in until the fingerprint branch lands (same API)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def combine_fingerprints(files: Mapping[str, str]) -> str:
    lines = "".join(f"{name}:{digest}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


class RecordFingerprint:
    def __init__(self, spec) -> None:
        self.spec = spec
        self.rows = 0
        self._sum = 0

    def update_frame(self, frame) -> None:
        import pandas as pd

        values = pd.util.hash_pandas_object(frame[self.spec.column_names], index=False)
        self.rows += len(frame)
        self._sum = (self._sum + int(values.sum())) % (1 << 64)

    def hexdigest(self) -> str:
        return hashlib.sha256(f"{self.spec.name}:{self.rows}:{self._sum}".encode()).hexdigest()
