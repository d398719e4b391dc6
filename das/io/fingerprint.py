"""Canonical fingerprint of a record file: a dataset's identity that survives re-encoding.

The privacy ledger must recognise the same people however the curator wrote them down: with
CRLF or LF line ends, a BOM, CSV quoting, blank lines, zero padding ("007" or "7"), rows in any
order, or as a Parquet copy. A hash of the file's bytes changes with each of these (and a
careless re-export would then count as a new dataset and spend the budget again), so the
fingerprint is defined on the **engine form** of the records (:mod:`das.io.tables`): every
column of the file's :class:`TableSpec`, in spec order, as the integer the engine reads (UINT:
its value; CODE_OR_NULL: its value, ``Null`` → 0; BOOL: True → 1, False → 0). It is a hash of
the **multiset** of rows: row order and chunking do not matter, a duplicated row counts twice.

Algorithm ``das-records/1`` (fixed forever; :data:`FORMAT_TAG` names it, golden vectors in the
tests freeze it; a change needs a new tag):

1. **Pack** each row into ``W`` little 64-bit words: column ``c`` takes
   ``bits(c) = max(1, maximum(c).bit_length())`` bits (BOOL: 1), columns in spec order are laid
   least significant bit first into word 0, and a column that does not fit in what is left of a
   word starts the next word (never straddles). Values must lie in ``0..maximum``.
2. **Hash** each row in two independent lanes ``l``: ``h = SEED[l]``; for each word ``w`` in
   order, ``h = fmix_l(h XOR w)``, where ``fmix_l`` is a 64-bit finalizer (lane 0: MurmurHash3
   ``fmix64``; lane 1: SplitMix64's finalizer, Stafford's Mix13), each a bijection with full
   avalanche. See :data:`LANES` for the constants.
3. **Combine**: per lane, the sum of the row hashes mod 2^64 (commutative and associative:
   order-free and mergeable); the file digest is SHA-256 (hex) of the UTF-8 text
   ``"das-records/1\\n<spec name>\\n<name:kind:bits,...>\\n<rows>\\n<sum0 hex16><sum1 hex16>\\n"``.
   A dataset's fingerprint (:func:`combine_fingerprints`) is SHA-256 of
   ``"das-dataset/1\\n"`` and one ``"<spec name>=<file digest>\\n"`` line per file, sorted.

Strength: the row hashes are 128 bits of well-mixed output, so any accidental change (a
record altered, added, dropped or duplicated, a different or swapped file) changes the
fingerprint except with probability about 2^-128 per pair of datasets. It is **not** a
cryptographic commitment: the lanes are public, invertible mixers summed linearly, so someone
who sets out to craft a different dataset with the same fingerprint can do so. That needs
deliberate effort; a hostile operator could more simply change one record to make a "new"
dataset, which is a matter for the threat model, not for this hash.

Privacy: the digest and :attr:`RecordFingerprint.rows` (a record count) describe confidential
data: they belong in the curator's local files (validation report, work folder), never in a
log line, exception or artifact a Prefect server sees. Errors here name columns, never values.

Speed: per chunk a fixed number of numpy operations over blocks of :data:`BLOCK_ROWS` rows
(sized to stay in the CPU cache); ``benchmarks/fingerprint.py`` measures the rows per second.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from das.io.atomic import atomic_write_text
from das.io.tables import DEFAULT_CHUNK_BYTES, Kind, TableSpec, iter_table

FORMAT_TAG = "das-records/1"
DATASET_TAG = "das-dataset/1"
BLOCK_ROWS = 1 << 15  # rows hashed per numpy pass: the working set stays in the L2 cache
WORD_BITS = 64
_MOD = 1 << 64
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
RECORD_SUFFIX = ".fingerprint"


@dataclass(frozen=True)
class Lane:
    """One hash lane: start value and the finalizer's multipliers and right shifts."""

    seed: int
    multipliers: tuple[int, int]
    shifts: tuple[int, int, int]


# Distinct published finalizers, so the two lanes share no structure; seeds are the
# fractional parts of the golden ratio and of sqrt(2) (nothing up the sleeve).
LANES: tuple[Lane, ...] = (
    Lane(0x9E3779B97F4A7C15, (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53), (33, 33, 33)),
    Lane(0x6A09E667F3BCC908, (0xBF58476D1CE4E5B9, 0x94D049BB133111EB), (30, 27, 31)),
)


@dataclass(frozen=True)
class Field:
    """Where one column's value sits in a packed row."""

    name: str
    kind: Kind
    maximum: int
    bits: int
    word: int
    shift: int


def field_bits(kind: Kind, maximum: int) -> int:
    """Bits a column takes in a packed row (from the spec's maximum, so ranges stay exact)."""
    if kind is Kind.BOOL:
        return 1
    if kind is Kind.TEXT:
        raise ValueError("text columns have no integer engine form to fingerprint")
    if not 0 <= maximum < 1 << 63:
        raise ValueError("a fingerprinted column's maximum must lie in 0..2^63-1 (int64)")
    return max(1, maximum.bit_length())


def row_layout(spec: TableSpec) -> tuple[tuple[Field, ...], int]:
    """The packing of one row of ``spec``: its fields and the number of 64-bit words."""
    fields: list[Field] = []
    word = used = 0
    for column in spec.columns:
        try:
            bits = field_bits(column.kind, column.maximum)
        except ValueError as exc:
            raise ValueError(f"{spec.name} column {column.name}: {exc}") from None
        maximum = 1 if column.kind is Kind.BOOL else column.maximum
        if used + bits > WORD_BITS:
            word, used = word + 1, 0
        fields.append(Field(column.name, column.kind, maximum, bits, word, used))
        used += bits
    return tuple(fields), (word + 1 if fields else 0)


def _layout_text(spec: TableSpec, fields: Sequence[Field]) -> str:
    columns = ",".join(f"{f.name}:{f.kind.value}:{f.bits}" for f in fields)
    return f"{FORMAT_TAG}\n{spec.name}\n{columns}\n"


class RecordFingerprint:
    """Accumulates the fingerprint of one record file, chunk by chunk, in any order.

    Feed it engine-form frames (:meth:`update_frame`) or canonical integer columns
    (:meth:`update_columns`); :meth:`merge` (or ``+``) adds another accumulator of the same
    spec, for per-bucket or parallel accumulation. ``rows`` is a record count: keep it local.
    """

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.fields, self.words = row_layout(spec)
        self._header = _layout_text(spec, self.fields)
        self.rows = 0
        self.sums = [0] * len(LANES)

    # ---------------------------------------------------------------- feeding

    def update_frame(self, frame: pd.DataFrame) -> None:
        """Add an engine-form chunk (compact dtypes, as :func:`das.io.tables.iter_table`
        yields); columns the spec does not list are ignored."""
        missing = [f.name for f in self.fields if f.name not in frame.columns]
        if missing:
            raise ValueError(f"{self.spec.name}: frame lacks column(s) {', '.join(missing)}")
        self._update([frame[f.name].to_numpy() for f in self.fields])

    def update_columns(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add a chunk given as one integer (or bool) array per spec column, canonical values
        (what validation converts: ``Null`` → 0, True → 1); extra keys are ignored."""
        missing = [f.name for f in self.fields if f.name not in columns]
        if missing:
            raise ValueError(f"{self.spec.name}: missing column(s) {', '.join(missing)}")
        self._update([np.asarray(columns[f.name]) for f in self.fields])

    def _update(self, arrays: list[np.ndarray]) -> None:
        n = arrays[0].shape[0] if arrays else 0
        for field, values in zip(self.fields, arrays, strict=True):
            self._check(field, values, n)
        if n == 0:
            return
        block = min(n, BLOCK_ROWS)
        words = np.empty((self.words, block), dtype=np.uint64)
        scratch = np.empty(block, dtype=np.uint64)
        hashed = np.empty(block, dtype=np.uint64)
        lanes = [_numpy_lane(lane) for lane in LANES]
        sums = list(self.sums)
        for start in range(0, n, block):  # blocks of rows, not rows: each pass is vectorized
            stop = min(n, start + block)
            m = stop - start
            packed = words[:, :m]
            tmp = scratch[:m]
            _pack(self.fields, arrays, start, stop, packed, tmp)
            h = hashed[:m]
            for index, (seed, m1, m2, s1, s2, s3) in enumerate(lanes):
                h.fill(seed)
                for word in packed:
                    np.bitwise_xor(h, word, out=h)
                    _fmix(h, tmp, m1, m2, s1, s2, s3)
                sums[index] = (sums[index] + int(h.sum(dtype=np.uint64))) % _MOD
        self.sums = sums
        self.rows += n

    def _check(self, field: Field, values: np.ndarray, n: int) -> None:
        """Shape, integer type and 0..maximum (else fields would overlap); names, no values."""
        where = f"{self.spec.name} column {field.name}"
        if values.ndim != 1 or values.shape[0] != n:
            raise ValueError(f"{where}: expected a 1-D array of the chunk's length")
        if values.dtype == np.bool_:
            return
        if not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"{where}: expected integers, got dtype {values.dtype}")
        if not n:
            return
        limits = np.iinfo(values.dtype)  # a bound the dtype already enforces costs no pass
        below = limits.min < 0 and values.min() < 0
        if below or (limits.max > field.maximum and values.max() > field.maximum):
            raise ValueError(f"{where}: values outside 0..{field.maximum} cannot be fingerprinted")

    # ---------------------------------------------------------------- combining

    def merge(self, other: RecordFingerprint) -> RecordFingerprint:
        """Add ``other``'s rows into this accumulator (same spec layout); returns self."""
        if other._header != self._header:
            raise ValueError(
                f"cannot merge fingerprints of different layouts ({self.spec.name}, "
                f"{other.spec.name})"
            )
        self.rows += other.rows
        self.sums = [(a + b) % _MOD for a, b in zip(self.sums, other.sums, strict=True)]
        return self

    def copy(self) -> RecordFingerprint:
        twin = RecordFingerprint(self.spec)
        twin.rows, twin.sums = self.rows, list(self.sums)
        return twin

    def __add__(self, other: RecordFingerprint) -> RecordFingerprint:
        return self.copy().merge(other)

    def hexdigest(self) -> str:
        """The file's fingerprint: 64 hex characters (layout, row count and lane sums)."""
        sums = "".join(f"{value:016x}" for value in self.sums)
        text = f"{self._header}{self.rows}\n{sums}\n"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def __repr__(self) -> str:  # no digest, no count: a repr can end up in a log
        return f"RecordFingerprint({self.spec.name})"


def _numpy_lane(lane: Lane) -> tuple[np.uint64, ...]:
    return (
        np.uint64(lane.seed),
        *(np.uint64(m) for m in lane.multipliers),
        *(np.uint64(s) for s in lane.shifts),
    )


def _fmix(h: np.ndarray, tmp: np.ndarray, m1, m2, s1, s2, s3) -> None:
    """In place: h ^= h >> s1; h *= m1; h ^= h >> s2; h *= m2; h ^= h >> s3 (mod 2^64)."""
    np.right_shift(h, s1, out=tmp)
    np.bitwise_xor(h, tmp, out=h)
    np.multiply(h, m1, out=h)
    np.right_shift(h, s2, out=tmp)
    np.bitwise_xor(h, tmp, out=h)
    np.multiply(h, m2, out=h)
    np.right_shift(h, s3, out=tmp)
    np.bitwise_xor(h, tmp, out=h)


def _pack(
    fields: Sequence[Field],
    arrays: Sequence[np.ndarray],
    start: int,
    stop: int,
    words: np.ndarray,
    tmp: np.ndarray,
) -> None:
    """Rows ``start:stop`` into ``words`` (one row of the matrix per packed word)."""
    for field, values in zip(fields, arrays, strict=True):
        part = values[start:stop]
        word = words[field.word]
        if field.shift == 0:  # the word's first field: plain (widening) copy
            np.copyto(word, part, casting="unsafe")
            continue
        np.left_shift(part, np.uint64(field.shift), out=tmp, dtype=np.uint64, casting="unsafe")
        np.bitwise_or(word, tmp, out=word)


def fingerprint_file(
    path: str | Path, spec: TableSpec, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> str:
    """The fingerprint of one text or Parquet input, in one read (engine-form chunks).

    Raises :class:`das.io.tables.InputFormatError` (no values) when the engine cannot read it.
    """
    fingerprint = RecordFingerprint(spec)
    for frame in iter_table(path, spec, chunk_bytes):
        fingerprint.update_frame(frame)
    return fingerprint.hexdigest()


def combine_fingerprints(files: Mapping[str, str]) -> str:
    """A dataset's fingerprint from its files' (spec name → file digest); the mapping's order
    does not matter, every name and digest does."""
    if not files:
        raise ValueError("a dataset fingerprint needs at least one file")
    lines = []
    for name in sorted(files):
        _check_digest(name, files[name])
        lines.append(f"{name}={files[name]}\n")
    text = f"{DATASET_TAG}\n" + "".join(lines)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_digest(name: str, digest: str) -> None:
    if not name or any(c in name for c in "=/\\\n\r") or name.startswith("."):
        raise ValueError(f"invalid spec name for a fingerprint: {name!r}")
    if not isinstance(digest, str) or not _HEX_DIGEST.match(digest):
        raise ValueError(f"{name}: not a file fingerprint (64 lowercase hex characters)")


def record_fingerprint(folder: str | Path, name: str, digest: str) -> Path:
    """Keep a file's fingerprint as ``<folder>/<spec name>.fingerprint`` (atomically), so an
    engine pass run as a separate task leaves it for the run to read (:func:`read_fingerprints`)
    without passing it through the orchestrator."""
    _check_digest(name, digest)
    path = Path(folder) / f"{name}{RECORD_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, digest + "\n")
    return path


def forget_fingerprint(folder: str | Path, name: str) -> None:
    """Remove a kept fingerprint (a pass starting again must not leave an earlier input's)."""
    (Path(folder) / f"{name}{RECORD_SUFFIX}").unlink(missing_ok=True)


def read_fingerprints(folder: str | Path) -> dict[str, str]:
    """Spec name → fingerprint of every file :func:`record_fingerprint` kept in ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.glob(f"*{RECORD_SUFFIX}")):
        name, digest = path.name[: -len(RECORD_SUFFIX)], path.read_text().strip()
        _check_digest(name, digest)
        found[name] = digest
    return found
