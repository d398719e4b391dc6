"""Prefect tasks of the swap flow: thin wrappers around the engine steps of das.swapping.run.

The tasks hand in-memory unit frames to each other, so none of them caches or persists its
result (``NO_CACHE``, ``persist_result=False``): a cached frame would be a copy of confidential
records in the result store, and a rerun must not reuse a stale swap either. Only reading the
files is retried; a failed swap or write is rerun by rerunning the flow, which is safe because
nothing is released until the output folder appears in one atomic rename.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from das.swapping import run as engine  # noqa: E402
from das.swapping.files import UnitData  # noqa: E402
from das.swapping.swap_report import render_markdown  # noqa: E402

REPORT_ARTIFACT_KEY = "swap-report"


@task(
    name="load-unit-files",
    retries=2,
    retry_delay_seconds=5,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def load_unit_files(data_dir: str | Path) -> UnitData:
    """Read ``units`` and ``geo`` and join them on MAFID (validated 1:1)."""
    return engine.load(data_dir)


@task(name="swap-households", cache_policy=NO_CACHE, persist_result=False)
def swap_households(data: UnitData, request: engine.SwapRequest) -> engine.SwapOutcome:
    """Algorithm 5.1 on the unit records, with b and ε of this data and rate."""
    return engine.swap(data, request)


@task(name="check-invariants", cache_policy=NO_CACHE, persist_result=False)
def check_invariants(data: UnitData, outcome: engine.SwapOutcome) -> dict[str, Any]:
    """The invariant margins compared exactly (fails the run on any difference) and the MAPE."""
    invariants = engine.check(data, outcome)
    get_run_logger().info(
        "invariants exact over %d margin(s); %d interior cells changed",
        len(invariants.margins),
        invariants.interior_cells_changed,
    )
    return invariants.as_dict()


@task(name="write-swapped-units", cache_policy=NO_CACHE, persist_result=False)
def write_swapped_units(
    data: UnitData,
    outcome: engine.SwapOutcome,
    output: str | Path,
    overwrite: bool = False,
    delta: float = engine.DEFAULT_DELTA,
) -> dict[str, Any]:
    """Write the swapped files, H(Z), report.json and report.md atomically; return the report."""
    return engine.write(data, outcome, output, overwrite=overwrite, delta=delta)


@task(name="swap-report-artifact", cache_policy=NO_CACHE, persist_result=False)
def publish_report(report: dict[str, Any]) -> str:
    """The report as a Markdown artifact in the Prefect UI (aggregates only, no records)."""
    artifact_id = create_markdown_artifact(
        markdown=render_markdown(report),
        key=REPORT_ARTIFACT_KEY,
        description="Permutation swapping: b, epsilon, invariants, MAPE, privacy definitions",
    )
    return str(artifact_id)
