"""The one byte form of a statement: what a person signs, and what is verified later.

``json.dumps`` with sorted keys, no whitespace, UTF-8 (not ``\\u`` escapes) and no NaN, over a
value that may hold only strings, integers, booleans, ``None``, lists, tuples and dicts with
string keys. Floats are refused: exact budgets travel as strings (``"1/3"``), and a float's text
form is not a promise two programs keep. Keys sort by code point (Python's ``sort_keys``), which is
RFC 8785's order except for keys with characters outside the Basic Multilingual Plane.

:func:`strict_loads` is the one reader of a signed document (a certificate, its payload, a
trust root, a statement from the ledger): JSON with a key repeated in one object is refused,
since two readers (ours keeps the last, another may keep the first) would see two documents,
and so are ``NaN`` and ``Infinity``, which are not JSON.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["StrictJSONError", "canonical_json", "sha256_hex", "statement_digest", "strict_loads"]


def canonical_json(obj: Any) -> bytes:
    """The canonical UTF-8 JSON bytes of ``obj``; TypeError naming the path of the first value
    (or key) that has no canonical form (``passes.US.this_run``, ``subject[0].digest``)."""
    _check(obj, "", set())
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data`` (the digest form in-toto subjects carry)."""
    return hashlib.sha256(data).hexdigest()


def statement_digest(obj: Any) -> str:
    """SHA-256 hex of ``canonical_json(obj)``: names a statement independently of its layout."""
    return sha256_hex(canonical_json(obj))


class StrictJSONError(ValueError):
    """A document that is not strict JSON: not JSON, a repeated key, ``NaN``/``Infinity``."""


def strict_loads(text: str | bytes) -> Any:
    """The value of the JSON document ``text``; StrictJSONError when it is not JSON, or an
    object in it repeats a key, or it holds ``NaN`` or ``Infinity``."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except StrictJSONError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise StrictJSONError(str(exc)) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise StrictJSONError(
                f"the key {key[:80]!r} appears twice in one object (two readers could read two "
                "documents)"
            )
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not JSON")


def _where(path: str) -> str:
    return path or "the top level"


def _check_text(text: str, path: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise TypeError(
            f"canonical_json: {what} at {_where(path)} is not valid Unicode (a lone surrogate)"
        ) from None


def _check(value: Any, path: str, open_containers: set[int]) -> None:
    """Walk ``value`` and refuse what ``canonical_json`` cannot represent exactly."""
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        _check_text(value, path, "a string")
        return
    if isinstance(value, float):
        raise TypeError(
            f"canonical_json: {_where(path)} is a float ({value!r}); floats are not allowed in "
            "signed statements: carry exact numbers as strings or integers"
        )
    if not isinstance(value, list | tuple | dict):
        raise TypeError(
            f"canonical_json: {_where(path)} is a {type(value).__name__}; only str, int, bool, "
            "None, list, tuple and dict are allowed"
        )
    if id(value) in open_containers:
        raise TypeError(f"canonical_json: {_where(path)} contains itself (a circular reference)")
    open_containers.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"canonical_json: {_where(path)} has a key {key!r} of type "
                    f"{type(key).__name__}; dict keys must be strings"
                )
            child = f"{path}.{key}" if path else key
            _check_text(key, child, "a key")
            _check(item, child, open_containers)
    else:
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", open_containers)
    open_containers.discard(id(value))
