"""Prefect tasks of the PHSafe flow, over the bucketed engine (:mod:`das.phsafe.streamed`):
plan → spill the records by household bucket → true counts per bucket → measure the tables (a
group per slot) → statistical postprocessing → write.

Tasks exchange paths into the run's work folder and small records (the measured tables are
states × iterations × cells), never the records: they run as well on a Dask cluster of separate
machines sharing a file system. Record counts go to the curator's local run log only. As in the
SafeTab-P tasks, no result is cached or persisted: the ledger, not a result cache, prevents
redraws.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pandas as pd  # noqa: E402
from prefect import get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.io.writers import file_sha256  # noqa: E402
from das.phsafe.engine import add_derived_tables, write_table_folder  # noqa: E402
from das.phsafe.measure import output_columns  # noqa: E402
from das.phsafe.parameters import PHSafeParameters  # noqa: E402
from das.phsafe.streamed import (  # noqa: E402
    OnePass,
    PHSafeWork,
    count_bucket,
    default_buckets,
    measure_table_streamed,
    spill_phsafe,
)
from das.phsafe.tables import SHELLS  # noqa: E402
from das.postprocess.phsafe import (  # noqa: E402
    estimates_name,
    format_estimates,
    postprocess_phsafe,
)
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
from das.specs.config import PHSafeConfig  # noqa: E402
from das.validation.findings import ValidationReport  # noqa: E402
from das.validation.scan import EngineTap  # noqa: E402
from tasks.flow_steps import unless_refused  # noqa: E402


@dataclass(frozen=True)
class TableResult:
    """One measured table, its persisted ledger and the store's fresh and reused draws."""

    table: str
    frame: pd.DataFrame
    ledger: dict[str, Any]
    fresh: tuple[str, ...]
    reused: tuple[str, ...]


def table_partition(pass_name: str, table: str) -> str:
    """The ledger partition of one table's queries ("US/PH3")."""
    return f"{pass_name}/{table}"


@dataclass
class PHSafeOneRead:
    """The engine's spill by household bucket made from validation's own read of persons, units
    and geo (:class:`das.phsafe.streamed.OnePass`): the run reads its inputs once (a
    :class:`tasks.validation_gate.OneRead`)."""

    config: PHSafeConfig
    paths: dict[str, str]
    work: str
    folder: RunFolder
    _pass: OnePass | None = None

    def taps(self) -> dict[str, EngineTap]:
        buckets = default_buckets(Path(self.paths["persons"]))
        self._pass = OnePass(PHSafeWork(Path(self.work)), buckets)
        return self._pass.taps()

    def made(self, report: ValidationReport) -> dict[str, Any]:
        spilled = self._pass.outcome(report) if self._pass is not None else None
        if spilled is None:
            return {}
        _log_rows(self.folder, self.config, spilled.rows_read)
        return {"spill": {"buckets": spilled.buckets, "fingerprints": dict(spilled.fingerprints)}}


def _log_rows(folder: RunFolder, config: PHSafeConfig, rows: dict[str, int]) -> None:
    """File row counts to the curator's local log only (never the Prefect server)."""
    curator_log(
        folder, "pass %s: read %d persons, %d units, %d geo rows",
        config.pass_name, rows["persons"], rows["units"], rows["geo"],
    )  # fmt: skip


@task(name="spill-records", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False, retry_condition_fn=unless_refused)  # fmt: skip
def spill_records(
    config: PHSafeConfig, paths: dict[str, str], work: str, folder: RunFolder
) -> dict[str, Any]:
    """Read the three input files once, in chunks, and partition the records each table can use
    by household bucket (``MAFID mod B``) into the work folder: the number of buckets and the
    files' canonical fingerprints, computed on that same read (never sent to Prefect).

    File row counts go to the curator's local log only (never the Prefect server); the
    in-universe counts (occupied units, persons in them) are true counts of released tables
    and are logged nowhere."""
    with read_records_locally(folder, "the record files"):
        spilled = spill_phsafe(
            config, {name: Path(path) for name, path in paths.items()}, PHSafeWork(Path(work))
        )
    _log_rows(folder, config, spilled.rows_read)
    get_run_logger().info("pass %s: records spilled into household buckets", config.pass_name)
    return {"buckets": spilled.buckets, "fingerprints": dict(spilled.fingerprints)}


@task(name="count-bucket", cache_policy=NO_CACHE, persist_result=False)
def count_bucket_task(config: PHSafeConfig, work: str, bucket: int) -> int:
    """True counts of every planned query from one bucket's households (to the work folder)."""
    count_bucket(config, PHSafeWork(Path(work)), bucket)
    return bucket


def table_groups(queries: dict[str, tuple[Measurement, ...]], groups: int) -> list[list[str]]:
    """The tables in at most ``groups`` groups of about equal queries (most queries first into
    the group with fewest), each group and the groups in the plan's order."""
    if groups < 1:
        raise ValueError(f"groups must be at least 1, not {groups}")
    order = list(queries)
    members: list[list[str]] = [[] for _ in range(min(groups, len(order)))]
    loads = [0] * len(members)
    for table in sorted(order, key=lambda t: (-len(queries[t]), order.index(t))):
        lightest = loads.index(min(loads))
        members[lightest].append(table)
        loads[lightest] += len(queries[table])
    grouped = [sorted(group, key=order.index) for group in members if group]
    return sorted(grouped, key=lambda group: order.index(group[0]))


@task(name="measure-tables", cache_policy=NO_CACHE, persist_result=False)
def measure_tables_task(
    config: PHSafeConfig,
    tables: list[tuple[str, tuple[Measurement, ...]]],
    work: str,
    folder: RunFolder,
    seed: int | None,
    lease: RunLease | None = None,
    draws: DrawLedger | None = None,
) -> list[TableResult]:
    """Some tables (:func:`table_groups`), one after the other. A table's draws are its
    states × iterations × cells whatever the persons: less work than a task run costs the
    orchestrator, so the flow runs a group of tables per slot, not a task per table."""
    return [
        measure_one_table(config, table, measurements, work, folder, seed, lease, draws)
        for table, measurements in tables
    ]


def measure_one_table(
    config: PHSafeConfig,
    table: str,
    measurements: tuple[Measurement, ...],
    work: str,
    folder: RunFolder,
    seed: int | None,
    lease: RunLease | None = None,
    draws: DrawLedger | None = None,
) -> TableResult:
    """Every query of one table on the buckets' summed counts, each drawn through the table's
    persisted noise store (charged and recorded in the privacy ledger, reused on a rerun only as
    the ledger recorded it; checked against the run's lease)."""
    partition = table_partition(config.pass_name, table)
    store = NoiseStore.open(
        folder,
        partition,
        config.privacy_defn.value,
        compose(measurements),
        secure_streams() if seed is None else seeded_streams(seed),
        guard=None if lease is None else lease.check,
        draws=draws,
    )
    frame = measure_table_streamed(config, PHSafeWork(Path(work)), table, store, store.accountant)
    get_run_logger().info(
        "table %s measured: %d queries, %d rows; %d draws now, %d reused",
        partition, len(measurements), len(frame), len(store.fresh), len(store.reused),
    )  # fmt: skip
    return TableResult(
        table, frame, store.accountant.to_dict(), tuple(store.fresh), tuple(store.reused)
    )


def pass_accountant(plan: PHSafeParameters, results: list[TableResult]) -> PrivacyAccountant:
    """The pass's ledger: every table's queries composed sequentially under the pass total."""
    return combine_accountants(
        plan.config.privacy_defn.value, plan.plan, [result.ledger for result in results]
    )


@task(name="postprocess", cache_policy=NO_CACHE, persist_result=False)
def postprocess_task(
    tables: dict[str, pd.DataFrame], config: PHSafeConfig, seed: int, interval: str
) -> dict[str, pd.DataFrame]:
    """Estimates and 90% credible intervals of every count and average table (released values
    only: no budget is spent); the convergence of the averages is logged."""
    estimates = postprocess_phsafe(tables, config, seed=seed, interval=interval)
    logger = get_run_logger()
    for name, frame in estimates.items():
        diagnostics = frame.attrs.get("diagnostics", {})
        if "min_ess" in diagnostics:
            logger.info(
                "%s: %d groups, min ESS %.0f (target %.0f), converged %s",
                name, diagnostics["groups"], diagnostics["min_ess"],
                diagnostics["target_ess"], diagnostics["converged"],
            )  # fmt: skip
        else:
            logger.info("%s: %d estimate rows", name, len(frame))
    return estimates


@task(name="write-tables", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE,
      persist_result=False)  # fmt: skip
def write_outputs(
    tables: dict[str, pd.DataFrame], estimates: dict[str, pd.DataFrame], output: str
) -> dict[str, dict[str, Any]]:
    """One folder per noisy table and per estimates table in the staging folder ``output``,
    each written atomically (a retried write replaces a partial one); rows and hashes."""
    folders: list[tuple[str, pd.DataFrame, list[str]]] = [
        (table, frame, output_columns(SHELLS[table])) for table, frame in tables.items()
    ]
    folders += [
        (estimates_name(table), format_estimates(frame), [str(c) for c in frame.columns])
        for table, frame in estimates.items()
    ]
    written: dict[str, dict[str, Any]] = {}
    for name, frame, columns in folders:
        rows = write_table_folder(frame, output, name, columns, overwrite=True)
        relative = f"{name}/{name}.txt"
        written[relative] = {"rows": rows, "sha256": file_sha256(Path(output) / relative)}
    get_run_logger().info(
        "wrote %d noisy tables and %d estimate tables (%d rows)",
        len(tables), len(estimates), sum(info["rows"] for info in written.values()),
    )  # fmt: skip
    return written


def derived_tables(results: list[TableResult]) -> dict[str, pd.DataFrame]:
    """The measured tables in plan order, plus PH5_num and PH8_num where their sources exist."""
    return add_derived_tables({result.table: result.frame for result in results})
