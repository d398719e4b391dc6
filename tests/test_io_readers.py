"""Production-format readers: toy Census inputs, format variants, Parquet, chunking, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from das.io import (
    InputFormatError,
    convert_to_parquet,
    iter_raw,
    read_raw,
    read_table,
    resolve_input,
    zero_pad,
)
from das.io.phsafe import GEO, PERSONS, UNITS, input_paths, read_geo, read_persons, read_units
from das.io.safetab_p import (
    GRF_C,
    NULL_RACE_CODE,
    PERSON_RECORDS,
    block_id,
    block_key,
    iter_person_records,
    person_records_path,
    race_code_matrix,
    read_grf_c,
    read_person_records,
)

HEADER = (
    "QAGE|QSEX|HOUSEHOLDER|TABBLKST|TABBLKCOU|TABTRACTCE|TABBLK|CENRACE|"
    "QRACE1|QRACE2|QRACE3|QRACE4|QRACE5|QRACE6|QRACE7|QRACE8|QSPAN"
)
NULLS7 = "|".join(["Null"] * 7)


def person_line(age: str = "028", race1: str = "1000", st: str = "01", qspan: str = "1010") -> str:
    return f"{age}|1|True|{st}|001|000001|0001|01|{race1}|{NULLS7}|{qspan}"


def write_persons(path: Path, lines: list[str], newline: str = "\n", bom: bool = False) -> Path:
    text = newline.join([HEADER, *lines]) + newline
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


@pytest.fixture
def toy(census_specs: Path) -> Path:
    return census_specs / "safetab_p" / "toy"


@pytest.fixture
def phsafe_toy(census_specs: Path) -> Path:
    return census_specs / "phsafe" / "toy"


# ------------------------------------------------------------------------------------------------
# Census toy inputs
# ------------------------------------------------------------------------------------------------


def test_toy_person_records_engine_form(toy: Path) -> None:
    persons = read_person_records(toy / "person-records.txt")
    assert len(persons) == 10
    assert list(persons.columns) == PERSON_RECORDS.column_names
    assert persons["QAGE"].dtype == np.uint8 and persons["QRACE1"].dtype == np.int16
    assert persons["HOUSEHOLDER"].dtype == bool and persons["TABTRACTCE"].dtype == np.uint32
    assert persons["QAGE"].tolist()[:4] == [28, 42, 12, 102]  # zero-padded text "028" ...
    races = race_code_matrix(persons)
    assert races.shape == (10, 8)
    assert races[1].tolist() == [1011, 1012, 1031, 0, 0, 0, 0, 0]  # Null -> 0
    assert NULL_RACE_CODE == 0
    assert persons["QSPAN"].tolist()[-3:] == [7680, 2020, 2020]
    assert persons["TABBLKST"].tolist().count(72) == 2


def test_toy_person_records_raw_form_keeps_the_files_text(toy: Path) -> None:
    raw = read_raw(toy / "person-records.txt", PERSON_RECORDS)
    assert raw.index[0] == 1 and raw.index[-1] == 10 and raw.index.name == "row"
    assert raw.loc[1, "QAGE"] == "028"
    assert raw.loc[1, "QRACE2"] == "Null"
    assert raw.loc[8, "TABTRACTCE"] == "000100"
    assert raw.loc[8, "QRACE3"] == "2322"


def test_toy_grf_c_and_block_ids(toy: Path) -> None:
    grf = read_grf_c(toy / "GRF-C.txt")
    assert len(grf) == 19
    ids = block_id(grf)
    assert ids[0] == "010010000010001" and ids[-1] == "110010001003004"
    assert ids.dtype.kind == "U" and ids.dtype.itemsize // 4 == 15
    assert block_key(grf)[0] == 10010000010001
    pr = grf[grf["TABBLKST"] == 72]
    assert pr["PLACEFP"].tolist() == [99999, 10001]
    assert grf["AIANNHCE"].tolist()[:5] == [1, 1, 1, 1, 2]


def test_toy_phsafe_inputs(phsafe_toy: Path) -> None:
    paths = input_paths(phsafe_toy)
    persons = read_persons(paths["persons"])
    units = read_units(paths["units"])
    geo = read_geo(paths["geo"])
    assert (len(persons), len(units), len(geo)) == (7, 5, 6)
    assert persons["MAFID"].dtype == np.uint32
    assert persons["RELSHIP"].tolist() == [20, 21, 21, 20, 38, 38, 20]
    assert units["HHT2"].tolist() == [2, 9, 0, 0, 0]  # "02", "09", "00"
    assert units.loc[units["RTYPE"] == 4, "FINAL_POP"].tolist() == [2]
    assert geo["AIANNHCE"].tolist()[3] == 1 and geo["TABTRACTCE"].tolist()[0] == 450200
    assert read_raw(paths["units"], UNITS).loc[2, "HHT2"] == "09"


# ------------------------------------------------------------------------------------------------
# Format variants: CRLF, BOM, blank lines, chunking, Parquet
# ------------------------------------------------------------------------------------------------


def test_crlf_bom_and_trailing_blank_line_read_like_plain_lf(toy: Path, tmp_path: Path) -> None:
    text = (toy / "person-records.txt").read_text(encoding="utf-8")
    variant = tmp_path / "person-records.txt"
    variant.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode() + b"\r\n")
    expected = read_person_records(toy / "person-records.txt")
    pd.testing.assert_frame_equal(read_person_records(variant), expected)
    raw = read_raw(variant, PERSON_RECORDS)
    assert raw.loc[10, "QSPAN"] == "2020"  # no stray "\r"
    pd.testing.assert_frame_equal(raw, read_raw(toy / "person-records.txt", PERSON_RECORDS))


def test_blank_lines_are_not_rows(tmp_path: Path) -> None:
    path = tmp_path / "p.txt"
    path.write_text("\n".join([HEADER, person_line("001"), "", person_line("002"), "", ""]))
    raw = read_raw(path, PERSON_RECORDS)
    assert raw.index.tolist() == [1, 2] and raw["QAGE"].tolist() == ["001", "002"]


def test_header_only_file_gives_empty_typed_frames(tmp_path: Path) -> None:
    path = write_persons(tmp_path / "p.txt", [])
    persons = read_person_records(path)
    assert len(persons) == 0 and persons["QRACE1"].dtype == np.int16
    assert len(read_raw(path, PERSON_RECORDS)) == 0


def test_small_chunks_equal_whole_file_and_number_rows_continuously(tmp_path: Path) -> None:
    lines = [person_line(f"{i % 116:03d}", race1=str(1000 + i)) for i in range(500)]
    path = write_persons(tmp_path / "p.txt", lines, newline="\r\n")
    whole = read_person_records(path)
    chunks = list(iter_person_records(path, chunk_bytes=1000))  # cuts lines mid-way
    assert len(chunks) > 20
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), whole)
    assert whole["QRACE1"].tolist() == [1000 + i for i in range(500)]
    assert read_table(path, PERSON_RECORDS, chunk_bytes=1000).equals(whole)
    raw_rows = np.concatenate([f.index.to_numpy() for f in iter_raw(path, PERSON_RECORDS, 777)])
    assert raw_rows.tolist() == list(range(1, 501))


def test_parquet_round_trip_equals_text(toy: Path, tmp_path: Path) -> None:
    for spec, source in ((PERSON_RECORDS, "person-records.txt"), (GRF_C, "GRF-C.txt")):
        parquet = tmp_path / f"{spec.stem}.parquet"
        rows = convert_to_parquet(toy / source, parquet, spec)
        assert rows == len(read_raw(toy / source, spec))
        pd.testing.assert_frame_equal(read_table(parquet, spec), read_table(toy / source, spec))
        pd.testing.assert_frame_equal(read_raw(parquet, spec), read_raw(toy / source, spec))
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_parquet_with_native_types_and_null_race_slots(toy: Path, tmp_path: Path) -> None:
    """Integers, booleans and real nulls in race slots read like the text file."""
    text = read_person_records(toy / "person-records.txt")
    columns: dict[str, pa.Array] = {}
    for name in PERSON_RECORDS.column_names:
        values = text[name].to_numpy()
        if name.startswith("QRACE"):
            columns[name] = pa.array(np.where(values == 0, None, values), pa.int32())
        else:
            columns[name] = pa.array(values)
    parquet = tmp_path / "person-records.parquet"
    pq.write_table(pa.table(columns), parquet, row_group_size=3)
    pd.testing.assert_frame_equal(read_table(parquet, PERSON_RECORDS, chunk_bytes=200), text)
    raw = read_raw(parquet, PERSON_RECORDS)
    assert raw.loc[1, "HOUSEHOLDER"] == "True" and raw.loc[1, "QAGE"] == "28"


def test_csv_with_quoted_header_and_values(tmp_path: Path) -> None:
    path = tmp_path / "persons.csv"
    path.write_text(
        '"RTYPE","MAFID","QAGE","CENHISP","CENRACE","RELSHIP"\r\n3,"100000001",049,1,01,20\r\n'
    )
    persons = read_persons(path)
    assert persons.iloc[0].tolist() == [3, 100000001, 49, 1, 1, 20]


def test_resolve_input_requires_exactly_one_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"person-records\.txt or person-records\.parquet"):
        person_records_path(tmp_path)
    (tmp_path / "person-records.txt").write_text(HEADER + "\n")
    assert person_records_path(tmp_path) == tmp_path / "person-records.txt"
    (tmp_path / "person-records.parquet").write_bytes(b"")
    with pytest.raises(InputFormatError, match="both"):
        person_records_path(tmp_path)
    (tmp_path / "persons.parquet").write_bytes(b"")
    assert resolve_input(tmp_path, PERSONS) == tmp_path / "persons.parquet"
    with pytest.raises(FileNotFoundError, match="geo"):
        resolve_input(tmp_path, GEO)


# ------------------------------------------------------------------------------------------------
# Errors: precise, and never with record values
# ------------------------------------------------------------------------------------------------


def test_conversion_errors_name_file_column_count_and_rows_not_values(tmp_path: Path) -> None:
    lines = [person_line() for _ in range(12)]
    lines[1] = person_line(age="2x7")  # row 2
    lines[4] = person_line(age="-31")  # row 5
    lines[6] = person_line(age="")  # row 7
    lines[8] = person_line(race1="98765")  # row 9: too many digits for a code
    lines[9] = person_line(st="100")  # row 10: state out of range
    path = write_persons(tmp_path / "person-records.txt", lines)
    with pytest.raises(InputFormatError) as caught:
        read_person_records(path)
    message = str(caught.value)
    assert str(path) in message
    assert (
        "column QAGE: 3 value(s) not an integer in 0..255; data rows 2, 5, 7 (the header "
        in message
    )
    assert "column QRACE1: 1 value(s) not an integer in 1..9999 or Null; data row 9 (" in message
    assert "column TABBLKST: 1 value(s) not an integer in 0..99; data row 10 (" in message
    for secret in ("2x7", "-31", "98765"):
        assert secret not in message


def test_more_than_five_failures_are_counted_and_truncated(tmp_path: Path) -> None:
    lines = [person_line(qspan="Null") for _ in range(8)]  # QSPAN may not be Null
    path = write_persons(tmp_path / "p.txt", lines)
    with pytest.raises(
        InputFormatError,
        match=r"QSPAN: 8 value\(s\) .* data rows 1, 2, 3, 4, 5 and 3 more \(the header line",
    ):
        read_person_records(path)


def test_boolean_column_accepts_only_true_false(tmp_path: Path) -> None:
    line = person_line().replace("|True|", "|true|")
    path = write_persons(tmp_path / "p.txt", [person_line(), line])
    with pytest.raises(
        InputFormatError, match=r"HOUSEHOLDER: 1 value\(s\) not True or False; data row 2 "
    ):
        read_person_records(path)
    assert read_raw(path, PERSON_RECORDS).loc[2, "HOUSEHOLDER"] == "true"  # raw keeps it


def test_wrong_field_count_reports_rows_without_the_rows_text(tmp_path: Path) -> None:
    lines = [person_line() for _ in range(6)]
    lines[2] = "073|1|True|11|001|000100|3004|01|3310|5454"  # row 3: 10 fields
    lines[5] = person_line() + "|9999"  # row 6: 18 fields
    path = write_persons(tmp_path / "p.txt", lines, newline="\r\n")
    for reader in (lambda: read_raw(path, PERSON_RECORDS), lambda: read_person_records(path)):
        with pytest.raises(InputFormatError) as caught:
            reader()
        message = str(caught.value)
        assert "2 row(s) with the wrong number of fields" in message
        assert (
            "data rows 3, 6 (the header line is row 0)" in message
            and "expected 17 fields, found 10" in message
        )
        assert "5454" not in message and "3310" not in message


def test_wrong_field_count_rows_are_absolute_across_chunks(tmp_path: Path) -> None:
    lines = [person_line() for _ in range(300)]
    lines[250] = "1|2|3"
    path = write_persons(tmp_path / "p.txt", lines)
    with pytest.raises(InputFormatError, match=r"data row 251 \(the header line is row 0\)$"):
        read_person_records(path, chunk_bytes=2000)


def test_missing_column_and_bad_utf8(tmp_path: Path) -> None:
    path = tmp_path / "GRF-C.txt"
    path.write_text("TABBLKST|TABBLKCOU|TABTRACTCE|TABBLK|PLACEFP\n01|001|000001|0001|22800\n")
    with pytest.raises(InputFormatError, match="missing column\\(s\\) AIANNHCE"):
        read_grf_c(path)
    path.write_bytes(
        b"TABBLKST|TABBLKCOU|TABTRACTCE|TABBLK|PLACEFP|AIANNHCE|NAME\n"
        b"01|001|000001|0001|22800|0001|Caf\xe9\n"
    )
    assert read_grf_c(path)["PLACEFP"].tolist() == [22800]  # bad bytes in an ignored column
    path.write_bytes(
        b"TABBLKST|TABBLKCOU|TABTRACTCE|TABBLK|PLACEFP|AIANNHCE\n01|001|000001|0001|2\xff800|0001\n"
    )
    with pytest.raises(InputFormatError, match="invalid UTF-8 data in column PLACEFP"):
        read_grf_c(path)


def test_zero_pad_never_truncates() -> None:
    assert zero_pad(np.array([1, 22, 333]), 2).tolist() == ["01", "22", "333"]
    assert zero_pad(np.array([], dtype=np.int64), 4).tolist() == []
    with pytest.raises(ValueError):
        zero_pad(np.array([-1]), 3)


@pytest.mark.slow
def test_one_million_rows_read_whole(tmp_path: Path) -> None:
    """1 M rows (~79 MB) come back whole and parsed. Read throughput is
    measured in benchmarks/safetab_p.py, not asserted here (a timing gate is flaky in CI)."""
    line = (person_line() + "\n").encode()
    path = tmp_path / "person-records.txt"
    path.write_bytes((HEADER + "\n").encode() + line * 1_000_000)
    persons = read_person_records(path)
    assert len(persons) == 1_000_000 and int(persons["QRACE1"].sum()) == 1000 * 1_000_000
