"""A PHSafe run's parameters, parsed once from its sealed ``config.json`` (:mod:`das.runs.seal`):
the pass's config and its planned queries by table, handed to every task as objects."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from das.io.phsafe import PHSAFE_INPUTS
from das.io.tables import resolve_input
from das.phsafe.engine import queries_by_table
from das.phsafe.plan import plan_phsafe
from das.privacy.accounting import Measurement
from das.runs.seal import CONFIG, ParameterError, SealedParameters
from das.runs.start import RunInputs, RunPlan, found_inputs
from das.specs.config import ConfigError, PHSafeConfig, load_phsafe_config

# The confidential records (all three key the privacy ledger).
CONFIDENTIAL = tuple(spec.name for spec in PHSAFE_INPUTS)


@dataclass(frozen=True)
class PHSafeParameters:
    """The pass's config and its planned queries by table (public: no record is read)."""

    config: PHSafeConfig
    queries: dict[str, tuple[Measurement, ...]]

    @property
    def plan(self) -> tuple[Measurement, ...]:
        return tuple(m for measurements in self.queries.values() for m in measurements)

    def run_plan(self) -> RunPlan:
        return RunPlan(self.config.privacy_defn.value, self.plan)


def run_inputs(config_path: Path, data_dir: Path) -> RunInputs:
    """Every file a PHSafe run reads: the config and the three record files (persons, units
    and geo, all confidential: they key the privacy ledger)."""
    found: dict[str, Path] = {}
    for spec in PHSAFE_INPUTS:
        for path in found_inputs(data_dir, [partial(resolve_input, spec=spec)]).values():
            found[spec.name] = path
    candidates = tuple(
        data_dir / f"{spec.stem}{suffix}"
        for spec in PHSAFE_INPUTS
        for suffix in (spec.text_suffix, ".parquet")
    )
    return RunInputs(
        data_dir=data_dir,
        parameters={CONFIG: config_path},
        confidential=found,
        candidates=candidates,
    )


def parse_parameters(sealed: SealedParameters) -> PHSafeParameters | None:
    """The parsed parameters; :class:`ParameterError` listing every problem of the config."""
    folder = None
    try:
        with sealed.materialized() as folder:
            config = load_phsafe_config(folder / CONFIG)
    except ConfigError as exc:
        raise ParameterError.of(exc, folder) from None
    try:
        plan = plan_phsafe(config)
    except ValueError as exc:  # e.g. a τ whose sensitivity puts the noise out of range
        raise ParameterError.of(exc) from None
    queries = {t: tuple(ms) for t, ms in queries_by_table(plan).items()}
    return PHSafeParameters(config, queries)


def load_parameters(config_path: Path) -> PHSafeParameters | None:
    """The parameters of a config on disk, sealed and parsed as a run does."""
    from das.runs.seal import seal_files

    return parse_parameters(seal_files(run_inputs(Path(config_path), Path()).parameters))
