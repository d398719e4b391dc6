"""Pipe-table writer, atomic files and folders, file hashes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from das.io import (
    atomic_open,
    atomic_output_dir,
    atomic_write_bytes,
    atomic_write_text,
    file_sha256,
    read_raw,
    write_pipe_table,
)
from das.io.tables import Column, Kind, TableSpec

T1 = TableSpec(
    name="t1",
    stem="t1",
    text_suffix=".txt",
    delimiter="|",
    columns=tuple(
        Column(name, kind=Kind.TEXT)
        for name in ("REGION_ID", "REGION_TYPE", "ITERATION_CODE", "COUNT")
    ),
    extra_columns="reject",
)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


class Boom(RuntimeError):
    pass


# ------------------------------------------------------------------------------------------------
# write_pipe_table
# ------------------------------------------------------------------------------------------------


def test_pipe_table_exact_text_and_column_order(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "COUNT": np.array([12, -3], dtype=np.int64),
            "REGION_ID": ["01", "01001"],
            "ITERATION_CODE": ["1001", "1002"],
            "REGION_TYPE": ["STATE", "COUNTY"],
        }
    )
    path = tmp_path / "t1" / "t1.txt"
    rows = write_pipe_table(frame, path, ["REGION_ID", "REGION_TYPE", "ITERATION_CODE", "COUNT"])
    assert rows == 2
    assert path.read_bytes() == (
        b"REGION_ID|REGION_TYPE|ITERATION_CODE|COUNT\n01|STATE|1001|12\n01001|COUNTY|1002|-3\n"
    )
    back = read_raw(path, T1)
    assert back.loc[2, "REGION_ID"] == "01001" and back.loc[2, "COUNT"] == "-3"
    assert leftovers(path.parent) == []


def test_pipe_table_from_batches_booleans_and_categoricals(tmp_path: Path) -> None:
    batches = (
        pd.DataFrame({"A": pd.Categorical(["x", "y"]), "B": [True, False]}),
        pd.DataFrame({"A": pd.Categorical(["z"]), "B": [True]}),
    )
    path = tmp_path / "out.txt"
    assert write_pipe_table(iter(batches), path) == 3
    assert path.read_text() == "A|B\nx|True\ny|False\nz|True\n"


def test_pipe_table_empty_gives_header_only(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    assert write_pipe_table([], path, ["A", "B"]) == 0
    assert path.read_text() == "A|B\n"
    write_pipe_table(pd.DataFrame({"A": [], "B": []}), path)
    assert path.read_text() == "A|B\n"


def test_pipe_table_refuses_structural_characters_and_missing_values(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("previous complete output\n")
    with pytest.raises(ValueError, match="contains '\\|'") as caught:
        write_pipe_table(pd.DataFrame({"A": ["ok", "se|cret"]}), path)
    assert "se|cret" not in str(caught.value)
    with pytest.raises(ValueError, match="column A has missing values"):
        write_pipe_table(pd.DataFrame({"A": ["x", None]}), path)
    with pytest.raises(KeyError, match="lacks column"):
        write_pipe_table(pd.DataFrame({"A": ["x"]}), path, ["A", "COUNT"])
    assert path.read_text() == "previous complete output\n"  # untouched by the failures
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# Atomic single files
# ------------------------------------------------------------------------------------------------


def test_atomic_write_text_and_bytes_replace_and_leave_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "audit.json"
    atomic_write_text(target, "{}\n")
    assert target.read_text() == "{}\n"
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert leftovers(target.parent) == []
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_atomic_open_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_text("old")
    with pytest.raises(Boom), atomic_open(target) as handle:
        handle.write(b"half written")
        raise Boom
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# Atomic output folders
# ------------------------------------------------------------------------------------------------


def test_output_dir_appears_only_on_success(tmp_path: Path) -> None:
    final = tmp_path / "run1"
    with atomic_output_dir(final) as work:
        assert work.parent == tmp_path and work != final
        assert not final.exists()
        write_pipe_table(pd.DataFrame({"A": [1]}), work / "t1" / "t1.txt")
    assert (final / "t1" / "t1.txt").read_text() == "A\n1\n"
    assert leftovers(tmp_path) == []
    umask = os.umask(0)
    os.umask(umask)
    assert final.stat().st_mode & 0o777 == 0o777 & ~umask


def test_output_dir_failure_leaves_no_folder_and_no_temp(tmp_path: Path) -> None:
    final = tmp_path / "run2"
    with pytest.raises(Boom), atomic_output_dir(final) as work:
        (work / "t1").mkdir()
        (work / "t1" / "part.txt").write_text("half")
        raise Boom
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_output_dir_refuses_existing_unless_overwrite(tmp_path: Path) -> None:
    final = tmp_path / "run3"
    final.mkdir()
    (final / "old.txt").write_text("old output")
    entered = False
    with pytest.raises(FileExistsError, match="already exists"), atomic_output_dir(final):
        entered = True
    assert not entered and (final / "old.txt").read_text() == "old output"

    with pytest.raises(Boom), atomic_output_dir(final, overwrite=True) as work:
        (work / "new.txt").write_text("new")
        raise Boom
    assert sorted(p.name for p in final.iterdir()) == ["old.txt"]  # failed rerun: old kept

    with atomic_output_dir(final, overwrite=True) as work:
        (work / "new.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert leftovers(tmp_path) == []


def test_output_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a folder")
    with (
        pytest.raises(FileExistsError, match="not a folder"),
        atomic_output_dir(tmp_path / "out", overwrite=True),
    ):
        pass


def test_output_dir_does_not_clobber_a_folder_created_meanwhile(tmp_path: Path) -> None:
    final = tmp_path / "run4"
    with pytest.raises(FileExistsError, match="meanwhile"), atomic_output_dir(final) as work:
        (work / "mine.txt").write_text("x")
        final.mkdir()  # e.g. a concurrent run finished first
    assert list(final.iterdir()) == [] and leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# Hashes
# ------------------------------------------------------------------------------------------------


def test_file_sha256(tmp_path: Path) -> None:
    small = tmp_path / "abc"
    small.write_bytes(b"abc")
    assert file_sha256(small) == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    big = tmp_path / "big"
    data = np.random.default_rng(5).bytes(3_000_001)  # several read blocks
    big.write_bytes(data)
    assert file_sha256(big) == hashlib.sha256(data).hexdigest()
    big.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert file_sha256(big) != hashlib.sha256(data).hexdigest()
