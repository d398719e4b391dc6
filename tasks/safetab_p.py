"""Prefect tasks of the SafeTab-P flow, over the streamed engine (:mod:`das.safetab_p.spill`,
:mod:`das.safetab_p.streamed`): geography → spill persons → true totals per state → measure
each level → cells per state → write T1/T2.

Every task takes small records and paths (:class:`SafeTabPJob`: the parameters parsed once from
the run's sealed files, the record files, the work folder) and leaves its output in the run's
work folder, so tasks run as well on a Dask cluster of separate
machines sharing a file system as in this process; none returns a frame or a count of records.
Record counts go to the curator's local run log only (:mod:`das.runs.curator_log`). No task
caches or persists its result: the privacy ledger, not a result cache, guarantees no redraw.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.io.safetab_p import read_grf_c  # noqa: E402
from das.io.writers import file_sha256  # noqa: E402
from das.privacy.accounting import (  # noqa: E402
    Measurement,
    PrivacyAccountant,
    combine_accountants,
    compose,
)
from das.runs.curator_log import curator_log  # noqa: E402
from das.runs.folder import RunFolder  # noqa: E402
from das.runs.noise_store import (  # noqa: E402
    DrawLedger,
    NoiseStore,
    secure_streams,
    seeded_streams,
)
from das.runs.records import read_records_locally  # noqa: E402
from das.runs.release import RunLease  # noqa: E402
from das.safetab_p.parameters import SafeTabPParameters  # noqa: E402
from das.safetab_p.spill import (  # noqa: E402
    PASSES,
    OnePass,
    WorkFolder,
    load_geography,
    prepare_geography,
    spill_persons,
)
from das.safetab_p.streamed import (  # noqa: E402
    combine_cells,
    combine_totals,
    count_state_cells,
    count_state_totals,
    level_spaces,
    measure_level_streamed,
    tabulated_states,
    write_release_tables,
)
from das.specs.config import SafeTabPConfig  # noqa: E402
from das.specs.race_specs import RaceEthnicitySpecs  # noqa: E402
from das.validation.findings import ValidationReport  # noqa: E402
from das.validation.scan import EngineTap  # noqa: E402
from tasks.flow_steps import unless_refused  # noqa: E402

TABLES = ("t1", "t2")


@dataclass(frozen=True)
class SafeTabPJob:
    """What every task of one run needs: the parameters parsed once from the sealed files (and
    their plan), the record files and the work folder. No task reads a parameter file."""

    parameters: SafeTabPParameters
    person_file: str
    grf_c_file: str
    work: str

    @property
    def config(self) -> SafeTabPConfig:
        return self.parameters.config

    @property
    def specs(self) -> RaceEthnicitySpecs:
        return self.parameters.specs

    @property
    def folder(self) -> WorkFolder:
        return WorkFolder(Path(self.work))

    def plan(self) -> tuple[Measurement, ...]:
        return self.parameters.plan

    def partitions(self) -> dict[str, list[str]]:
        """pass → its levels' ledger partitions ("US/COUNTY/2"), in configuration order
        (after :func:`prepare_geography_task`)."""
        result = {}
        for pass_name in PASSES:
            geography = load_geography(self.folder, pass_name)
            if geography is not None:
                spaces = level_spaces(self.config, self.specs, geography)
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


@dataclass
class SafeTabPOneRead:
    """The engine's first steps — the geography from the GRF-C, the person spill — made from
    validation's own read of the two files (:class:`das.safetab_p.spill.OnePass`): the run
    reads its inputs once (a :class:`tasks.validation_gate.OneRead`)."""

    job: SafeTabPJob
    folder: RunFolder
    _pass: OnePass | None = None

    def taps(self) -> dict[str, EngineTap]:
        job = self.job
        self._pass = OnePass(job.config, job.specs, job.folder)
        return self._pass.taps()

    def made(self, report: ValidationReport) -> dict[str, Any]:
        outcome = self._pass.outcome(report) if self._pass is not None else None
        if outcome is None:
            return {}
        geography, summary = outcome
        curator_log(
            self.folder, "read %d person records in %d chunks", summary.rows_read, summary.chunks
        )
        states = tabulated_states(self.job.folder)
        return {
            "geography": geography,
            "spill": {"states": states, "fingerprint": summary.fingerprint},
        }


@task(name="prepare-geography", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def prepare_geography_task(job: SafeTabPJob) -> str:
    """The GRF-C as integer maps per pass (geounits, entities, coterminous sets); the GRF-C's
    canonical fingerprint (compared with the one validation read)."""
    grfc = read_grf_c(job.grf_c_file)
    fingerprint = prepare_geography(job.config, grfc, job.folder)
    get_run_logger().info("geography prepared (%d GRF-C blocks, public)", len(grfc))
    return fingerprint


@task(name="spill-persons", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False, retry_condition_fn=unless_refused)  # fmt: skip
def spill_persons_task(job: SafeTabPJob, folder: RunFolder) -> dict[str, Any]:
    """The person file, read once in chunks, spilled to one compact file per state: the
    states of the enabled passes (public: from the GRF-C) and the person file's canonical
    fingerprint, computed on that same read (never sent to Prefect: a task result stays in
    the flow's process)."""
    with read_records_locally(folder, "the person file"):
        summary = spill_persons(job.config, job.specs, Path(job.person_file), job.folder)
    curator_log(folder, "read %d person records in %d chunks", summary.rows_read, summary.chunks)
    states = tabulated_states(job.folder)
    get_run_logger().info("person file spilled by state (%d states tabulated)", len(states))
    return {"states": states, "fingerprint": summary.fingerprint}


@task(name="count-state-totals", cache_policy=NO_CACHE, persist_result=False)
def count_state_totals_task(job: SafeTabPJob, states: list[int]) -> list[int]:
    """True totals of every group some states' records reach, at every tabulated level (one
    state at a time)."""
    for state in states:
        count_state_totals(job.config, job.specs, job.folder, state)
    return states


@task(name="combine-totals", cache_policy=NO_CACHE, persist_result=False)
def combine_totals_task(job: SafeTabPJob) -> None:
    combine_totals(job.config, job.specs, job.folder)


@task(name="measure-levels", cache_policy=NO_CACHE, persist_result=False)
def measure_levels_task(
    job: SafeTabPJob,
    partitions: list[str],
    folder: RunFolder,
    seed: int | None,
    lease: RunLease | None = None,
    draws: DrawLedger | None = None,
) -> list[LevelResult]:
    """Some levels (:func:`das.safetab_p.streamed.level_groups`), one after the other."""
    return [measure_one_level(job, p, folder, seed, lease, draws) for p in partitions]


def measure_one_level(
    job: SafeTabPJob,
    partition: str,
    folder: RunFolder,
    seed: int | None,
    lease: RunLease | None = None,
    draws: DrawLedger | None = None,
) -> LevelResult:
    """Stage 1, total-only and stage 2 of one level, every draw through the level's persisted
    noise store (streamed to disk, charged and recorded in the privacy ledger, reused on a
    rerun only as the ledger recorded it; checked against the run's lease)."""
    planned = [m for m in job.plan() if m.partition == partition]
    store = NoiseStore.open(
        folder,
        partition,
        job.config.privacy_defn.value,
        compose(planned),
        secure_streams() if seed is None else seeded_streams(seed),
        guard=None if lease is None else lease.check,
        draws=draws,
    )
    summary = measure_level_streamed(
        job.config, job.specs, job.folder, partition, store, store.accountant
    )
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
def count_state_cells_task(job: SafeTabPJob, states: list[int]) -> list[int]:
    """Sex × age counts of the groups whose stage 1 chose a breakdown, some states' share (one
    state at a time)."""
    for state in states:
        count_state_cells(job.config, job.specs, job.folder, state)
    return states


@task(name="combine-cells", cache_policy=NO_CACHE, persist_result=False)
def combine_cells_task(job: SafeTabPJob) -> None:
    combine_cells(job.config, job.specs, job.folder)


@task(name="write-tables", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def write_tables(job: SafeTabPJob, output: str) -> dict[str, dict[str, Any]]:
    """``t1/t1.txt`` and ``t2/t2.txt`` streamed into the staging folder ``output`` (T1/T2,
    suppression, clamp, coterminous fix; each file atomically); rows and hashes."""
    rows = write_release_tables(
        job.config, job.specs, job.folder, output, coterminous_sets=job.parameters.coterminous
    )
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
    plan = [m for m in job.plan() if m.metadata["pass"] == pass_name]
    return combine_accountants(job.config.privacy_defn.value, plan, [r.ledger for r in results])
