"""The ``swap`` flow: load → swap → check invariants → write → report artifact.

The Prefect face of ``das swap`` (same engine, same outputs). Parameters mirror the command
line; ``seed`` is for tests and demos only and is written into the report.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import flow, get_run_logger  # noqa: E402

from das.swapping.definitions import DEFAULT_DELTA  # noqa: E402
from das.swapping.run import SwapRequest  # noqa: E402
from das.swapping.swap_report import summary  # noqa: E402
from tasks.swap import (  # noqa: E402
    check_invariants,
    load_unit_files,
    publish_report,
    swap_households,
    write_swapped_units,
)


@flow(name="swap", description="Permutation swapping of unit records with its epsilon")
def swap_flow(
    data_dir: str,
    output: str,
    match: list[str],
    swap: list[str],
    rate: str,
    hold: list[str] | None = None,
    two_way: tuple[list[str], list[str]] | None = None,
    seed: int | None = None,
    overwrite: bool = False,
    delta: float = DEFAULT_DELTA,
) -> dict[str, Any]:
    """Swap the ``swap`` variables within strata of ``match`` at rate ``rate``; returns the
    report summary (b, ε, invariants, MAPE, output folder)."""
    request = SwapRequest(
        match=tuple(match),
        swap=tuple(swap),
        rate=rate,
        hold=tuple(hold) if hold is not None else None,
        two_way=(tuple(two_way[0]), tuple(two_way[1])) if two_way is not None else None,
        seed=seed,
        delta=delta,
    )
    data = load_unit_files(data_dir)
    outcome = swap_households(data, request)
    check_invariants(data, outcome)
    report = write_swapped_units(data, outcome, output, overwrite=overwrite, delta=delta)
    publish_report(report)
    result = summary(report)
    get_run_logger().info(
        "swap written to %s: epsilon %s, invariants exact: %s",
        result["output_dir"],
        "inf" if result["epsilon"] is None else f"{result['epsilon']:.4f}",
        result["invariants_exact"],
    )
    return result
