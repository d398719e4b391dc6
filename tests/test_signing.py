"""das.signing: canonical statements, OpenSSH keys, SSHSIG signatures and DSSE envelopes.

``ssh-keygen`` is the oracle wherever OpenSSH defines the format (fingerprints, key files,
signatures); those tests start it and are marked ``integration``. The rest is pure and fast.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from das.signing import canonical_json, sha256_hex, statement_digest

REPO = Path(__file__).resolve().parents[1]


# -- canonical_json --------------------------------------------------------------------------------


def test_canonical_json_is_sorted_compact_utf8() -> None:
    value = {"b": 1, "a": [True, None, "café"], "c": {"z": -3, "y": ("x",)}}
    assert canonical_json(value) == '{"a":[true,null,"café"],"b":1,"c":{"y":["x"],"z":-3}}'.encode()


def test_canonical_json_does_not_depend_on_key_order_or_layout() -> None:
    first = {"passes": {"US": {"this_run": "1/3", "total": "2/3"}}, "ledger": "L1"}
    second = json.loads(
        json.dumps(
            {"ledger": "L1", "passes": {"US": {"total": "2/3", "this_run": "1/3"}}}, indent=4
        )
    )
    assert canonical_json(first) == canonical_json(second)
    assert statement_digest(first) == statement_digest(second)


def test_canonical_json_keeps_non_ascii_as_utf8() -> None:
    encoded = canonical_json({"name": "Nuñez 北京 😀"})
    assert "Nuñez 北京 😀".encode() in encoded
    assert b"\\u" not in encoded


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"passes": {"US": {"this_run": 0.5}}}, "passes.US.this_run"),
        ({"passes": {"US": {"this_run": math.nan}}}, "passes.US.this_run"),
        ({"ceiling": math.inf}, "ceiling"),
        ({"subjects": ["a", {"n": 1.0}]}, "subjects[1].n"),
        (2.5, "the top level"),
    ],
)
def test_canonical_json_refuses_floats_with_their_path(value: object, path: str) -> None:
    with pytest.raises(TypeError, match="float") as caught:
        canonical_json(value)
    assert f"{path} is a float" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"passes": {3: "x"}}, "passes has a key 3 of type int"),
        ({"a": [{None: 1}]}, "a[0] has a key None"),
        ({"a": {"b": Fraction(1, 3)}}, "a.b is a Fraction"),
        ({"a": b"bytes"}, "a is a bytes"),
        ({"a": {1, 2}}, "a is a set"),
        ({"a": "\ud800"}, "a is not valid Unicode"),
    ],
)
def test_canonical_json_refuses_what_has_no_canonical_form(value: object, fragment: str) -> None:
    with pytest.raises(TypeError) as caught:
        canonical_json(value)
    assert fragment in str(caught.value)


def test_canonical_json_refuses_a_value_that_contains_itself() -> None:
    value: dict = {"a": []}
    value["a"].append(value)
    with pytest.raises(TypeError, match="circular"):
        canonical_json(value)


def test_a_repeated_value_is_not_circular() -> None:
    shared = ["x"]
    assert canonical_json({"a": shared, "b": shared}) == b'{"a":["x"],"b":["x"]}'


def test_digests_are_sha256_hex_of_the_canonical_bytes() -> None:
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert statement_digest({"b": 1, "a": 2}) == sha256_hex(b'{"a":2,"b":1}')


_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_JSON_LIKE)
def test_canonical_json_is_a_fixed_point_of_parsing(value: object) -> None:
    encoded = canonical_json(value)
    assert canonical_json(json.loads(encoded)) == encoded
