"""A SafeTab-P run's parameters, parsed once from its sealed files (:mod:`das.runs.seal`).

The files are found by role: ``config.json``, the four spec files by their names (never "every
``*.txt`` beside the config"), and an optional reviewed coterminous file. The parsed config,
specs, coterminous sets and the plan travel to every task as objects: no task reads a
parameter file again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from das.io.safetab_p import GRF_C, PERSON_RECORDS, grf_c_path, person_records_path
from das.io.tables import InputFormatError
from das.privacy.accounting import Measurement
from das.runs.seal import CONFIG, ParameterError, SealedParameters
from das.runs.start import RunInputs, RunPlan, found_inputs
from das.safetab_p.coterminous import CoterminousFileError, read_coterminous_file
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import ConfigError, SafeTabPConfig, load_safetab_p_config
from das.specs.race_specs import SPEC_FILES, RaceEthnicitySpecs, SpecFileError, load_race_specs

COTERMINOUS = "coterminous-geographies.txt"
# The confidential records (they key the privacy ledger) and the public reference file.
CONFIDENTIAL = (PERSON_RECORDS.name,)
REFERENCE = (GRF_C.name,)


@dataclass(frozen=True)
class SafeTabPParameters:
    """Config, race/ethnicity specs, reviewed coterminous sets (or None) and the plan."""

    config: SafeTabPConfig
    specs: RaceEthnicitySpecs
    coterminous: pd.DataFrame | None
    plan: tuple[Measurement, ...]

    def run_plan(self) -> RunPlan:
        return RunPlan(self.config.privacy_defn.value, self.plan)


def run_inputs(config_path: Path, data_dir: Path, coterminous: Path | None = None) -> RunInputs:
    """Every file a SafeTab-P run reads, by role."""
    parameters = {CONFIG: config_path}
    parameters.update({name: config_path.parent / name for name in SPEC_FILES})
    if coterminous is not None:
        parameters[COTERMINOUS] = coterminous
    candidates = tuple(
        data_dir / f"{spec.stem}{suffix}"
        for spec in (PERSON_RECORDS, GRF_C)
        for suffix in (spec.text_suffix, ".parquet")
    )
    return RunInputs(
        data_dir=data_dir,
        parameters=parameters,
        confidential=_named(found_inputs(data_dir, (person_records_path,)), PERSON_RECORDS.name),
        reference=_named(found_inputs(data_dir, (grf_c_path,)), GRF_C.name),
        candidates=candidates,
    )


def _named(found: dict[str, Path], name: str) -> dict[str, Path]:
    """Inputs by their table name (``person-records``), whatever their suffix."""
    return dict.fromkeys([name], next(iter(found.values()))) if found else {}


def parse_parameters(sealed: SealedParameters) -> SafeTabPParameters | None:
    """The parsed parameters; :class:`ParameterError` listing every problem of a file (the
    parameters are public: the problems may quote them)."""
    folder = None
    try:
        with sealed.materialized() as folder:
            config = load_safetab_p_config(folder / CONFIG)
            specs = load_race_specs(folder)
            coterminous = (
                read_coterminous_file(folder / COTERMINOUS)
                if COTERMINOUS in sealed.names()
                else None
            )
    except (ConfigError, SpecFileError, CoterminousFileError, InputFormatError) as exc:
        raise ParameterError.of(exc, folder) from None
    try:
        plan = plan_safetab_p(
            config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
        )
    except ValueError as exc:  # e.g. a budget whose noise the samplers cannot draw
        raise ParameterError.of(exc) from None
    return SafeTabPParameters(config, specs, coterminous, tuple(plan))


def load_parameters(
    config_path: Path, coterminous: Path | None = None
) -> SafeTabPParameters | None:
    """The parameters of a config (and the spec files beside it) on disk, sealed and parsed as
    a run does (for `das ledger approve`, tools and tests)."""
    from das.runs.seal import seal_files

    inputs = run_inputs(Path(config_path), Path(), coterminous)
    return parse_parameters(seal_files(inputs.parameters))
