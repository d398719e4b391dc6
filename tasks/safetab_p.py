"""Prefect tasks of the SafeTab-P flow, over the streamed engine (:mod:`das.safetab_p.spill`,
:mod:`das.safetab_p.streamed`): geography → spill persons → true totals per state → measure
each level → cells per state → write T1/T2.

Every task takes small records and paths (:class:`SafeTabPJob`: config, data, work folder) and
leaves its output in the run's work folder, so tasks run as well on a Dask cluster of separate
machines sharing a file system as in this process; none returns a frame or a count of records.
Record counts go to the curator's local run log only (:mod:`das.runs.curator_log`). No task
caches or persists its result: the privacy ledger, not a result cache, guarantees no redraw.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import functools  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.io.safetab_p import grf_c_path, person_records_path, read_grf_c  # noqa: E402
from das.io.writers import file_sha256  # noqa: E402
from das.privacy.accounting import Measurement, PrivacyAccountant, compose  # noqa: E402
from das.runs.curator_log import curator_log  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.runs.noise_store import NoiseStore, secure_streams, seeded_streams  # noqa: E402
from das.runs.release import RunLease  # noqa: E402
from das.safetab_p.plan import plan_safetab_p  # noqa: E402
from das.safetab_p.spill import (  # noqa: E402
    WorkFolder,
    load_geography,
    prepare_geography,
    spill_persons,
)
from das.safetab_p.stability import detailed_only_levels, stability  # noqa: E402
from das.safetab_p.streamed import (  # noqa: E402
    PASSES,
    combine_cells,
    combine_totals,
    count_state_cells,
    count_state_totals,
    level_spaces,
    measure_level_streamed,
    tabulated_states,
    write_release_tables,
)
from das.specs.config import ConfigError, SafeTabPConfig, load_safetab_p_config  # noqa: E402
from das.specs.race_specs import RaceEthnicitySpecs, load_race_specs  # noqa: E402
from tasks.common import combine_ledgers, found_inputs  # noqa: E402
from tasks.run_context import RunInputs, RunPlan  # noqa: E402

TABLES = ("t1", "t2")


@functools.lru_cache(maxsize=4)
def _parameters(config_path: str, mtime_ns: int) -> tuple[SafeTabPConfig, RaceEthnicitySpecs]:
    config = load_safetab_p_config(config_path)
    return config, load_race_specs(Path(config_path).parent)


@dataclass(frozen=True)
class SafeTabPJob:
    """What every task of one run needs: its parameters, inputs and work folder (paths)."""

    config: str
    data: str
    work: str
    coterminous: str | None = None

    def parameters(self) -> tuple[SafeTabPConfig, RaceEthnicitySpecs]:
        """Config and race/ethnicity specs (read once per process)."""
        return _parameters(self.config, Path(self.config).stat().st_mtime_ns)

    @property
    def folder(self) -> WorkFolder:
        return WorkFolder(Path(self.work))

    def plan(self) -> tuple[Measurement, ...]:
        config, specs = self.parameters()
        return tuple(
            plan_safetab_p(
                config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
            )
        )

    def partitions(self) -> dict[str, list[str]]:
        """pass → its levels' ledger partitions ("US/COUNTY/2"), in configuration order
        (after :func:`prepare_geography_task`)."""
        config, specs = self.parameters()
        result = {}
        for pass_name in PASSES:
            geography = load_geography(self.folder, pass_name)
            if geography is not None:
                spaces = level_spaces(config, specs, geography)
                result[pass_name] = [space.partition for space in spaces]
        return result


@dataclass(frozen=True)
class LevelResult:
    """One level's measurement: its persisted ledger, the groups measured, and the noise
    store's fresh and reused draws (names only)."""

    partition: str
    groups: int
    ledger: dict[str, Any]
    fresh: tuple[str, ...]
    reused: tuple[str, ...]


def run_inputs(
    config_path: str | Path, data_dir: str | Path, coterminous: str | Path | None = None
) -> RunInputs:
    """Every file a SafeTab-P run reads, by role: config, the spec files beside it (and a
    reviewed coterminous file), the person records (confidential), the GRF-C (reference)."""
    config_path = Path(config_path)
    specs = {spec.name: spec for spec in sorted(config_path.parent.glob("*.txt"))}
    if coterminous is not None:
        specs[Path(coterminous).name] = Path(coterminous)
    return RunInputs(
        config=config_path,
        specs=specs,
        confidential=found_inputs(data_dir, (person_records_path,)),
        reference=found_inputs(data_dir, (grf_c_path,)),
    )


def plan_run(config_path: str | Path) -> RunPlan | None:
    """The run's planned measurements from config and spec files alone (no record is read);
    None when they cannot be read (validation then says why, and nothing is drawn)."""
    try:
        config = load_safetab_p_config(config_path)
        specs = load_race_specs(Path(config_path).parent)
        plan = plan_safetab_p(
            config, stability(specs, config.max_race_codes), detailed_only_levels(specs)
        )
    except (ConfigError, OSError, ValueError):
        return None
    return RunPlan(config.privacy_defn.value, tuple(plan))


@task(name="prepare-geography", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def prepare_geography_task(job: SafeTabPJob) -> None:
    """The GRF-C as integer maps per pass (geounits, entities, coterminous sets)."""
    config, _ = job.parameters()
    grfc = read_grf_c(grf_c_path(job.data))
    prepare_geography(config, grfc, job.folder)
    get_run_logger().info("geography prepared (%d GRF-C blocks, public)", len(grfc))


@task(name="spill-persons", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def spill_persons_task(job: SafeTabPJob, folder: RunFolder) -> list[int]:
    """The person file, read once in chunks, spilled to one compact file per state; the
    states of the enabled passes (public: from the GRF-C)."""
    config, specs = job.parameters()
    summary = spill_persons(config, specs, person_records_path(job.data), job.folder)
    curator_log(folder, "read %d person records in %d chunks", summary.rows_read, summary.chunks)
    states = tabulated_states(job.folder)
    get_run_logger().info("person file spilled by state (%d states tabulated)", len(states))
    return states


@task(name="count-state-totals", cache_policy=NO_CACHE, persist_result=False)
def count_state_totals_task(job: SafeTabPJob, state: int) -> int:
    """True totals of every group one state's records reach, at every tabulated level."""
    config, specs = job.parameters()
    count_state_totals(config, specs, job.folder, state)
    return state


@task(name="combine-totals", cache_policy=NO_CACHE, persist_result=False)
def combine_totals_task(job: SafeTabPJob) -> None:
    config, specs = job.parameters()
    combine_totals(config, specs, job.folder)


@task(name="measure-level", cache_policy=NO_CACHE, persist_result=False)
def measure_level_task(
    job: SafeTabPJob,
    partition: str,
    folder: RunFolder,
    seed: int | None,
    lease: RunLease | None = None,
) -> LevelResult:
    """Stage 1, total-only and stage 2 of one level, every draw through the level's persisted
    noise store (streamed to disk, reused on a rerun; checked against the run's lease)."""
    config, specs = job.parameters()
    planned = [m for m in job.plan() if m.partition == partition]
    store = NoiseStore.open(
        folder,
        partition,
        config.privacy_defn.value,
        compose(planned),
        secure_streams() if seed is None else seeded_streams(seed),
        guard=None if lease is None else lease.check,
    )
    summary = measure_level_streamed(config, specs, job.folder, partition, store, store.accountant)
    get_run_logger().info(
        "level %s measured: %d groups, %d measurements drawn now, %d reused",
        partition, summary.groups, len(store.fresh), len(store.reused),
    )  # fmt: skip
    return LevelResult(
        partition,
        summary.groups,
        store.accountant.to_dict(),
        tuple(store.fresh),
        tuple(store.reused),
    )


@task(name="count-state-cells", cache_policy=NO_CACHE, persist_result=False)
def count_state_cells_task(job: SafeTabPJob, state: int) -> int:
    """Sex × age counts of the groups whose stage 1 chose a breakdown, one state's share."""
    config, specs = job.parameters()
    count_state_cells(config, specs, job.folder, state)
    return state


@task(name="combine-cells", cache_policy=NO_CACHE, persist_result=False)
def combine_cells_task(job: SafeTabPJob) -> None:
    config, specs = job.parameters()
    combine_cells(config, specs, job.folder)


@task(name="write-tables", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def write_tables(job: SafeTabPJob, output: str) -> dict[str, dict[str, Any]]:
    """``t1/t1.txt`` and ``t2/t2.txt`` streamed into the staging folder ``output`` (T1/T2,
    suppression, clamp, coterminous fix; each file atomically); rows and hashes."""
    config, specs = job.parameters()
    cot = None if job.coterminous is None else Path(job.coterminous)
    rows = write_release_tables(config, specs, job.folder, output, cot)
    written = {}
    for name in TABLES:
        relative = f"{name}/{name}.txt"
        written[relative] = {"rows": rows[name], "sha256": file_sha256(Path(output) / relative)}
        get_run_logger().info("wrote %s: %d rows", relative, rows[name])
    return written


def pass_accountant(
    job: SafeTabPJob, pass_name: str, results: list[LevelResult]
) -> PrivacyAccountant:
    """The pass's ledger: every level's entries under the pass total (parallel with the other
    pass: disjoint people)."""
    config, _ = job.parameters()
    plan = [m for m in job.plan() if m.metadata["pass"] == pass_name]
    return combine_ledgers(config.privacy_defn.value, plan, [r.ledger for r in results])
