"""Vectorized rendering of records to delimited text and Arrow strings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from das.synth import encode


def test_digits_padded_and_unpadded() -> None:
    values = np.array([0, 7, 42, 115])
    assert [bytes(row).decode() for row in encode.digits(values, 3)] == ["000", "007", "042", "115"]
    unpadded = encode.digits(values, 3, pad=False)
    assert [bytes(row[row != 0]).decode() for row in unpadded] == ["0", "7", "42", "115"]
    with pytest.raises(ValueError):
        encode.digits(np.array([1000]), 3)
    with pytest.raises(ValueError):
        encode.digits(np.array([-1]), 3)


def test_rows_with_variable_width_fields() -> None:
    flags = encode.choice(np.array([1, 0]), ("False", "True"))
    codes = encode.code_or_null(np.array([1010, 0]))
    ages = encode.digits(np.array([5, 100]), 3, pad=False)
    text = encode.text_rows([ages, flags, codes], "|").decode()
    assert text == "5|True|1010\n100|False|Null\n"
    fixed = encode.text_rows([encode.digits(np.array([1, 2]), 2)], ",").decode()
    assert fixed == "01\n02\n"


def test_arrow_strings_and_writer(tmp_path: Path) -> None:
    field = encode.choice(np.array([0, 1, 1]), ("ab", "c"))
    assert encode.arrow_strings(field).to_pylist() == ["ab", "c", "c"]
    with encode.TableWriter(tmp_path / "t.parquet", ["A", "B"], ",", parquet=True) as writer:
        writer.write([field, encode.digits(np.array([1, 2, 3]), 2)])
        writer.write([field[:1], encode.digits(np.array([9]), 2)])
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.column("B").to_pylist() == ["01", "02", "03", "09"]
    with encode.TableWriter(tmp_path / "t.csv", ["A", "B"], ",", parquet=False) as writer:
        writer.write([field, encode.digits(np.array([1, 2, 3]), 2)])
        assert writer.rows == 3
        with pytest.raises(ValueError):
            writer.write([field])
    assert (tmp_path / "t.csv").read_text() == "A,B\nab,01\nc,02\nc,03\n"
