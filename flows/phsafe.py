"""The ``phsafe`` flow: validate → load → measure tables (in parallel) → derived tables →
statistical postprocessing → write → audit.

The Prefect face of ``das run phsafe`` (one pass per config: ``state_filter ["72"]`` is Puerto
Rico, else the US). Each table (truncate-and-join once, then its queries) is a task, run in
parallel on the task runner (:func:`flows.runner.task_runner_from_env`). Every draw is persisted
in ``<output>/.run/<run-id>/`` with its ledger entry, so a rerun with the same run id reuses
the noise already drawn and never spends budget twice; the postprocessing seed is persisted
too, so the resumed release equals an uninterrupted one. ``audit.json`` is written at the end
of every run, failed ones included. ``seed`` is for tests and demos only.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow  # noqa: E402

from das.postprocess.counts import INTERVALS  # noqa: E402
from das.postprocess.phsafe import estimates_diagnostics  # noqa: E402
from das.privacy.accounting import summarize  # noqa: E402
from flows.runner import task_runner_from_env  # noqa: E402
from tasks.common import (  # noqa: E402
    audited_run,
    hash_inputs,
    publish_privacy_artifacts,
    start_run,
    validation_gate,
)
from tasks.phsafe import (  # noqa: E402
    derived_tables,
    input_paths,
    load_inputs,
    measure_table_task,
    pass_accountant,
    postprocess_task,
    write_outputs,
)

PRODUCT = "phsafe"
DEFAULT_DELTA = 1e-10


@flow(name="phsafe", description="PHSafe (S-DHC) with estimates, audit and rerun-safe noise")
def phsafe_flow(
    config: str,
    data: str,
    output: str,
    seed: int | None = None,
    run_id: str | None = None,
    skip_validation: bool = False,
    delta: float = DEFAULT_DELTA,
    credible_interval: str = "equal-tailed",
) -> dict[str, Any]:
    """Run PHSafe on ``data`` with ``config`` into ``output``; returns the audit record.

    ``credible_interval``: ``"equal-tailed"`` (default) or ``"hpd"`` (shortest; calibrated
    near zero) for the count tables' 90% intervals (:mod:`das.postprocess.counts`).

    Raises :class:`ValidationFailed` (before any noise is drawn) when the inputs are invalid.
    """
    parameters = {
        "config": str(config),
        "data": str(data),
        "skip_validation": skip_validation,
        "delta": delta,
        "credible_interval": credible_interval,
    }
    folder, audit = start_run(PRODUCT, output, run_id, seed, parameters)
    with audited_run(PRODUCT, folder, audit) as logger:
        with audit.stage("hash-inputs"):
            hash_inputs(audit, config, input_paths(config, data))
        validation_gate(PRODUCT, audit, config, data, folder, skip_validation)
        with audit.stage("load"):
            inputs = load_inputs(str(config), str(data))
        with audit.stage("measure"):
            futures = [
                measure_table_task.submit(inputs, table, folder, seed) for table in inputs.queries
            ]
            results = [future.result() for future in futures]
            fresh = sum(len(result.fresh) for result in results)
            reused = sum(len(result.reused) for result in results)
            audit.update(draws={"fresh": fresh, "reused": reused})
            logger.info("measured %d tables: %d draws, %d reused from the run folder",
                        len(results), fresh, reused)  # fmt: skip
        pass_name = inputs.config.pass_name
        accountant = pass_accountant(inputs, results)
        audit.update(
            ledger={pass_name: accountant.to_dict()},
            totals={pass_name: summarize(accountant, delta).to_dict()},
        )
        with audit.stage("postprocess"):
            tables = derived_tables(results)
            postprocess_seed = seed if seed is not None else folder.persistent_seed("postprocess")
            estimates = postprocess_task(
                tables, inputs.config, postprocess_seed, credible_interval
            )
            audit.update(
                postprocessing={
                    "seed": postprocess_seed,
                    "credible_interval": credible_interval,
                    "tables": estimates_diagnostics(estimates),
                }
            )
        with audit.stage("write"):
            audit.update(outputs=write_outputs(tables, estimates, str(output)))
        with audit.stage("artifacts"):
            publish_privacy_artifacts(PRODUCT, {pass_name: accountant}, delta)
    return audit.record


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run the phsafe flow once, locally.")
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--run-id")
    parser.add_argument("--skip-validation", action="store_true")
    parser.add_argument("--credible-interval", choices=INTERVALS, default="equal-tailed")
    args = parser.parse_args()
    phsafe_flow.with_options(task_runner=task_runner_from_env())(
        config=str(Path(args.config)),
        data=args.data,
        output=args.output,
        seed=args.seed,
        run_id=args.run_id,
        skip_validation=args.skip_validation,
        credible_interval=args.credible_interval,
    )
