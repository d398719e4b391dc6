"""Synthetic SafeTab-P input folder: ``person-records``, ``GRF-C``, the four spec files, config.

The folder doubles as the parameters directory (spec files and ``config.json`` copied byte for
byte from ``specs_dir``) and as the data directory, and is written atomically. The states are
those the config runs (``state_filter_us`` when ``run_us``, plus Puerto Rico when ``run_pr``);
each person carries at most ``max_race_codes`` race codes.

Measured on this machine (2 shared cores, text format, ``benchmarks/synth.py``): 1 M persons
in 2.8 s (peak RSS 194 MiB), 10 M in 31 s (peak 590 MiB), 80 bytes per person. Extrapolated:
100 M persons take about 5 minutes and 8.0 GB of disk; 300 M about 16 minutes and 24 GB.
Memory stays bounded (one chunk of at most 1 M persons, plus the block table: about 0.5 GiB
to build the 7.5 M blocks of a 300 M run), so peak RSS stays near 1 GiB at any size.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Literal

import numpy as np

from das.io.atomic import atomic_output_dir
from das.io.safetab_p import GRF_C, PERSON_RECORDS
from das.specs.config import load_safetab_p_config
from das.specs.race_specs import SPEC_FILES, load_race_specs
from das.synth import encode
from das.synth.geography import Geography
from das.synth.population import (
    CHUNK_PERSONS,
    PUERTO_RICO,
    PopulationChunk,
    SynthSummary,
    iter_population,
    plan_geography,
)
from das.synth.race import CENRACE_OF_MASK, RaceCodePools, sample_qspan, sample_race_codes
from das.synth.states import US_STATE_FIPS

CONFIG_FILE = "config.json"
GRF_CHUNK_BLOCKS = 1_000_000


def safetab_p_states(specs_dir: Path) -> tuple[tuple[str, ...], int]:
    """The states a SafeTab-P config runs, and its ``max_race_codes``."""
    config = load_safetab_p_config(Path(specs_dir) / CONFIG_FILE)
    states: list[str] = []
    if config.run_us:
        states.extend(fips for fips in US_STATE_FIPS if fips in config.state_filter_us)
    if config.run_pr:
        states.append(PUERTO_RICO)
    if not states:
        raise ValueError(f"{specs_dir}/{CONFIG_FILE}: the config runs no state (run_us/run_pr)")
    return tuple(states), config.max_race_codes


def write_grf_c(geography: Geography, writer: encode.TableWriter) -> None:
    """The block table as GRF-C rows, in chunks of blocks."""
    for start in range(0, geography.n_blocks, GRF_CHUNK_BLOCKS):
        part = slice(start, start + GRF_CHUNK_BLOCKS)
        writer.write(
            [
                encode.digits(geography.state[part], 2),
                encode.digits(geography.county[part], 3),
                encode.digits(geography.tract[part], 6),
                encode.digits(geography.block[part], 4),
                encode.digits(geography.place[part], 5),
                encode.digits(geography.aiannh[part], 4),
            ]
        )


def generate_safetab_p(
    output: str | Path,
    n_persons: int,
    seed: int,
    specs_dir: str | Path,
    file_format: Literal["text", "parquet"] = "text",
    overwrite: bool = False,
    chunk_persons: int = CHUNK_PERSONS,
) -> SynthSummary:
    """Write a complete SafeTab-P input folder with exactly ``n_persons`` person records."""
    started = time.perf_counter()
    specs_dir = Path(specs_dir)
    states, max_codes = safetab_p_states(specs_dir)
    pools = RaceCodePools.from_specs(load_race_specs(specs_dir))
    geography, by_state = plan_geography(n_persons, states, seed)
    parquet = file_format == "parquet"
    suffix = ".parquet" if parquet else PERSON_RECORDS.text_suffix
    units = 0
    with atomic_output_dir(output, overwrite=overwrite) as folder:
        with encode.TableWriter(
            folder / f"{GRF_C.stem}{suffix}", GRF_C.column_names, GRF_C.delimiter, parquet
        ) as grf:
            write_grf_c(geography, grf)
        with encode.TableWriter(
            folder / f"{PERSON_RECORDS.stem}{suffix}",
            PERSON_RECORDS.column_names,
            PERSON_RECORDS.delimiter,
            parquet,
        ) as persons:
            for chunk in iter_population(
                geography, by_state, seed, pools.available_groups, max_codes, chunk_persons
            ):
                units += int((chunk.units.unit_size > 0).sum())
                persons.write(_person_fields(chunk, geography, pools, max_codes))
        for name in (*SPEC_FILES, CONFIG_FILE):
            shutil.copyfile(specs_dir / name, folder / name)
    return SynthSummary(
        product="safetab-p",
        output=Path(output),
        seed=seed,
        persons=n_persons,
        blocks=geography.n_blocks,
        units=units,
        seconds=time.perf_counter() - started,
    )


def _person_fields(
    chunk: PopulationChunk, geography: Geography, pools: RaceCodePools, max_codes: int
) -> list[np.ndarray]:
    """Rendered columns of one chunk, in PERSON_RECORDS order."""
    rng = chunk.rng
    hispanic = chunk.hispanic
    if pools.hispanic_codes.size == 0:
        hispanic = np.zeros_like(hispanic)
    elif pools.not_hispanic_codes.size == 0:
        hispanic = np.ones_like(hispanic)
    codes = sample_race_codes(chunk.race_mask, pools, rng, max_codes)
    qspan = sample_qspan(hispanic, pools, rng)
    people = chunk.units
    block = people.unit_block[people.person_unit]
    return [
        encode.digits(people.person_age, 3),
        encode.digits(people.person_sex, 1),
        encode.choice(people.person_relship == 20, ("False", "True")),
        encode.digits(geography.state[block], 2),
        encode.digits(geography.county[block], 3),
        encode.digits(geography.tract[block], 6),
        encode.digits(geography.block[block], 4),
        encode.digits(CENRACE_OF_MASK[chunk.race_mask], 2),
        *(encode.code_or_null(codes[:, k]) for k in range(codes.shape[1])),
        encode.digits(qspan, 4),
    ]
