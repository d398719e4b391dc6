"""The ``phsafe`` flow: validate → load → measure tables (in parallel) → derived tables →
statistical postprocessing → write → audit.

The Prefect face of ``das run phsafe`` (one pass per config: ``state_filter ["72"]`` is Puerto
Rico, else the US). The records are read by a task on the cluster and stay there; each table
(truncate-and-join once, then its queries) is a task, run in parallel on the task runner
(:func:`flows.runner.task_runner_from_env`), that gets the records from the cluster. Every
draw is persisted in ``<output>/.run/<run-id>/`` with its ledger entry, so a rerun with the
same run id reuses the noise already drawn and never spends budget twice; the
postprocessing seed is persisted too, so the resumed release equals an uninterrupted one.
``audit.json`` is written at the end of every run, failed ones included. ``seed`` is for
tests and demos only.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import flow  # noqa: E402

from das.postprocess.phsafe import estimates_diagnostics  # noqa: E402
from das.privacy.accounting import summarize  # noqa: E402
from flows.runner import task_runner_from_env  # noqa: E402
from tasks.common import (  # noqa: E402
    audited_run,
    hash_inputs,
    publish_privacy_artifacts,
    record_draws,
    start_run,
    validation_gate,
    wait_in_cluster,
)
from tasks.phsafe import (  # noqa: E402
    derived_tables,
    input_paths,
    load_records,
    measure_table_task,
    pass_accountant,
    plan_pass,
    postprocess_task,
    write_outputs,
)

PRODUCT = "phsafe"
DEFAULT_DELTA = 1e-10


# The task runner is read from the environment at import (deployment workers); `das run`
# re-reads it per run with ``with_options``.
@flow(
    name="phsafe",
    description="PHSafe (S-DHC) with estimates, audit and rerun-safe noise",
    task_runner=task_runner_from_env(),
)
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
    with audited_run(PRODUCT, folder, audit):
        with audit.stage("hash-inputs"):
            hash_inputs(audit, config, input_paths(config, data))
        validation_gate(PRODUCT, audit, config, data, folder, skip_validation)
        with audit.stage("load"):
            plan = plan_pass(str(config))
            records = load_records.submit(plan.config, str(data))
            wait_in_cluster(records)
        with audit.stage("measure"):
            futures = [
                measure_table_task.submit(plan.config, table, queries, records, folder, seed)
                for table, queries in plan.queries.items()
            ]
            results = [future.result() for future in futures]
            record_draws(audit, results, "tables")
        pass_name = plan.config.pass_name
        accountant = pass_accountant(plan, results)
        audit.update(
            ledger={pass_name: accountant.to_dict()},
            totals={pass_name: summarize(accountant, delta).to_dict()},
        )
        with audit.stage("postprocess"):
            tables = derived_tables(results)
            postprocess_seed = seed if seed is not None else folder.persistent_seed("postprocess")
            estimates = postprocess_task(tables, plan.config, postprocess_seed, credible_interval)
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
