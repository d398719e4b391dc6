"""PHSafe table shells, cell rules and iterations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from das.phsafe.tables import SHELLS, cell_codes
from das.phsafe.universes import ITERATIONS, iteration_index
from das.specs.config import PHSAFE_MEASURED_TABLES, PHSafeIterationLevel

BASIS = {
    "PH1_num": [2, 3],
    "PH1_denom": [1],
    "PH2": [3, 4, 6, 7, 9, 10, 12, 13],
    "PH3": [2, 4, 5, 6, 7, 9, 10],
    "PH4": [2, 3],
    "PH5_num": [2, 3],
    "PH5_denom": [1],
    "PH6": [3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15, 16, 18, 19, 20, 21],
    "PH7": [2, 3, 4],
    "PH8_num": [2, 3],
    "PH8_denom": [2, 3],
}


def test_every_table_has_its_basis_cells() -> None:
    assert set(PHSAFE_MEASURED_TABLES) | {"PH5_num", "PH8_num"} == set(SHELLS)
    for name, codes in BASIS.items():
        assert SHELLS[name].basis_codes.tolist() == codes, name
        assert SHELLS[name].cells[0].code == 1
    assert SHELLS["PH3"].iterates_on == "person"
    assert SHELLS["PH2"].total_only and SHELLS["PH6"].total_only and not SHELLS["PH7"].total_only
    assert SHELLS["PH7"].joined and not SHELLS["PH8_denom"].joined


def _all_codes(size: int = 40_000) -> pd.DataFrame:
    gen = np.random.default_rng(11)
    return pd.DataFrame(
        {
            "QAGE": gen.integers(0, 116, size),
            "RELSHIP": gen.integers(0, 40, size),
            "HHT": gen.integers(0, 9, size),
            "HHT2": gen.integers(0, 14, size),
            "CPLT": gen.integers(0, 7, size),
            "TEN": gen.integers(0, 6, size),
        }
    )


@pytest.mark.parametrize("table", PHSAFE_MEASURED_TABLES)
def test_cell_rules_give_only_basis_cells(table: str) -> None:
    codes = cell_codes(table, _all_codes())
    allowed = set(BASIS[table]) | {0}
    assert set(np.unique(codes)) <= allowed
    assert set(BASIS[table]) <= set(np.unique(codes))  # every basis cell is reachable


def test_specific_cells() -> None:
    frame = pd.DataFrame(
        {
            "QAGE": [5, 5, 17, 3, 40, 10],
            "RELSHIP": [25, 30, 22, 26, 20, 25],
            "HHT": [1, 1, 5, 3, 4, 2],
            "HHT2": [1, 1, 3, 6, 9, 11],
            "CPLT": [1, 2, 3, 5, 5, 5],
            "TEN": [1, 2, 3, 4, 0, 2],
        }
    )
    assert cell_codes("PH3", frame).tolist() == [4, 9, 2, 7, 0, 6]
    assert cell_codes("PH6", frame).tolist() == [4, 0, 0, 18, 0, 15]
    assert cell_codes("PH2", frame).tolist() == [3, 4, 6, 13, 9, 10]
    assert cell_codes("PH7", frame).tolist() == [2, 3, 4, 4, 0, 3]
    assert cell_codes("PH8_denom", frame).tolist() == [2, 2, 3, 3, 0, 2]


def test_iterations() -> None:
    race = np.array([1, 2, 6, 7, 63, 1, 5, 0])
    hisp = np.array([1, 2, 1, 1, 2, 2, 1, 1])
    level = PHSafeIterationLevel
    assert iteration_index(level.TOTAL, race, hisp).tolist() == [0] * 8
    codes = ITERATIONS[level.RACE]
    assert [codes[i] if i >= 0 else None for i in iteration_index(level.RACE, race, hisp)] == [
        "A",
        "B",
        "F",
        "G",
        "G",
        "A",
        "E",
        None,
    ]
    ethnic = ITERATIONS[level.ETHNICITY]
    got = [ethnic[i] if i >= 0 else None for i in iteration_index(level.ETHNICITY, race, hisp)]
    assert got == ["I", "H", None, None, "H", "H", None, None]
