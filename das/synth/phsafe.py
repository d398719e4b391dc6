"""Synthetic PHSafe input folder: ``persons``, ``units``, ``geo`` (CSV or Parquet) and config.

The states are the config's ``state_filter`` (one pass: US, or ``["72"]`` for Puerto Rico).
Units are occupied housing units (one householder each, HHRACE/HHSPAN = the householder's
CENRACE/CENHISP), vacant housing units (FINAL_POP 0, every code 0 = not in universe) and
group-quarters units (RTYPE 4, FINAL_POP = residents, codes 0); persons are RTYPE 3 (in a
housing unit) or 5 (in group quarters, RELSHIP 37/38). MAFIDs are unique 9-digit numbers and
``geo.csv`` has one row per unit with its block, block group, region, division, place and
AIANNH area. Codes: see :mod:`das.synth.households`.

Measured on this machine (2 shared cores, CSV, ``benchmarks/synth.py``): 1 M persons in 1.8 s
(peak RSS 164 MiB), 10 M in 20 s (peak 444 MiB); 57 bytes of disk per person over the three
files (about 2.3 persons and 0.26 vacant units per housing unit). Extrapolated: 100 M persons
take about 3.5 minutes and 5.7 GB; 300 M about 10 minutes and 17 GB, memory bounded as for
SafeTab-P.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Literal

import numpy as np

from das.io.atomic import atomic_output_dir
from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.tables import TableSpec
from das.specs.config import load_phsafe_config
from das.synth import encode
from das.synth.geography import Geography
from das.synth.households import UNIT_GQ, UNIT_OCCUPIED, UnitsAndPersons
from das.synth.population import CHUNK_PERSONS, SynthSummary, iter_population, plan_geography
from das.synth.race import CENRACE_OF_MASK
from das.synth.states import STATES

FIRST_MAFID = 100_000_001
LAST_MAFID = 999_999_999
CONFIG_FILE = "config.json"


def phsafe_states(config_file: Path) -> tuple[str, ...]:
    """The states of a PHSafe config's pass (its ``state_filter``), in FIPS order."""
    config = load_phsafe_config(config_file)
    states = tuple(fips for fips in STATES if fips in config.state_filter)
    if not states:
        raise ValueError(f"{config_file}: state_filter names no known state")
    return states


def _lookup(values: dict[str, int]) -> np.ndarray:
    table = np.zeros(100, dtype=np.int64)
    for fips, value in values.items():
        table[int(fips)] = value
    return table


_REGION = _lookup({fips: facts.region for fips, facts in STATES.items()})
_DIVISION = _lookup({fips: facts.division for fips, facts in STATES.items()})


def generate_phsafe(
    output: str | Path,
    n_persons: int,
    seed: int,
    config_file: str | Path,
    file_format: Literal["text", "parquet"] = "text",
    overwrite: bool = False,
    chunk_persons: int = CHUNK_PERSONS,
) -> SynthSummary:
    """Write a complete PHSafe input folder with exactly ``n_persons`` person records."""
    started = time.perf_counter()
    config_file = Path(config_file)
    states = phsafe_states(config_file)
    geography, by_state = plan_geography(n_persons, states, seed)
    parquet = file_format == "parquet"

    def writer(spec: TableSpec) -> encode.TableWriter:
        suffix = ".parquet" if parquet else spec.text_suffix
        return encode.TableWriter(
            folder / f"{spec.stem}{suffix}", spec.column_names, spec.delimiter, parquet
        )

    next_mafid = FIRST_MAFID
    with atomic_output_dir(output, overwrite=overwrite) as folder:
        with writer(PERSONS) as persons, writer(UNITS) as units, writer(GEO) as geo:
            for chunk in iter_population(geography, by_state, seed, chunk_persons=chunk_persons):
                people = chunk.units
                if next_mafid + people.n_units - 1 > LAST_MAFID:
                    raise ValueError("too many units for 9-digit MAFIDs")
                mafid = np.arange(next_mafid, next_mafid + people.n_units, dtype=np.int64)
                next_mafid += people.n_units
                cenrace = CENRACE_OF_MASK[chunk.race_mask].astype(np.int64)
                cenhisp = 1 + chunk.hispanic.astype(np.int64)
                persons.write(
                    [
                        encode.digits(np.where(people.person_in_gq, 5, 3), 1),
                        encode.digits(mafid[people.person_unit], 9),
                        encode.digits(people.person_age, 3, pad=False),
                        encode.digits(cenhisp, 1),
                        encode.digits(cenrace, 2),
                        encode.digits(people.person_relship, 2),
                    ]
                )
                units.write(_unit_fields(people, mafid, cenrace, cenhisp))
                geo.write(_geo_fields(people, mafid, geography))
        shutil.copyfile(config_file, folder / CONFIG_FILE)
    return SynthSummary(
        product="phsafe",
        output=Path(output),
        seed=seed,
        persons=n_persons,
        blocks=geography.n_blocks,
        units=next_mafid - FIRST_MAFID,
        seconds=time.perf_counter() - started,
    )


def _unit_fields(
    people: UnitsAndPersons, mafid: np.ndarray, cenrace: np.ndarray, cenhisp: np.ndarray
) -> list[np.ndarray]:
    """units.csv columns; HHRACE/HHSPAN copy the householder (first person) of occupied units."""
    occupied = people.unit_kind == UNIT_OCCUPIED
    # A chunk always has persons; vacant units may point one past the last, hence the clip.
    householder = np.minimum(people.unit_first_person, people.n_persons - 1)
    hhrace = np.where(occupied, cenrace[householder], 0)
    hhspan = np.where(occupied, cenhisp[householder], 0)
    return [
        encode.digits(np.where(people.unit_kind == UNIT_GQ, 4, 2), 1),
        encode.digits(mafid, 9),
        encode.digits(people.unit_size, 6, pad=False),
        encode.digits(people.unit_npf, 3, pad=False),
        encode.digits(hhspan, 1),
        encode.digits(hhrace, 2),
        encode.digits(people.unit_ten, 1),
        encode.digits(people.unit_hht, 1),
        encode.digits(people.unit_hht2, 2),
        encode.digits(people.unit_cplt, 1),
    ]


def _geo_fields(
    people: UnitsAndPersons, mafid: np.ndarray, geography: Geography
) -> list[np.ndarray]:
    """geo.csv columns: one row per unit with its block's codes."""
    block = people.unit_block
    state = geography.state[block].astype(np.int64)
    return [
        encode.digits(np.where(people.unit_kind == UNIT_GQ, 4, 2), 1),
        encode.digits(mafid, 9),
        encode.digits(state, 2),
        encode.digits(geography.county[block], 3),
        encode.digits(geography.tract[block], 6),
        encode.digits(geography.block[block], 4),
        encode.digits(geography.block[block] // 1000, 1),
        encode.digits(_REGION[state], 1),
        encode.digits(_DIVISION[state], 1),
        encode.digits(geography.place[block], 5),
        encode.digits(geography.aiannh[block], 4),
    ]
