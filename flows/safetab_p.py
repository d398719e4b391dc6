"""The ``safetab-p`` flow: validate → load → measure levels (in parallel) → postprocess →
coterminous → write → audit.

The Prefect face of ``das run safetab-p`` (same engine, same outputs). Levels run in parallel
through the task runner: a Dask cluster (:func:`flows.runner.task_runner_from_env`: an existing
scheduler at ``DAS_DASK_ADDRESS``, else a local cluster). Every draw is persisted in the run
folder ``<output>/.run/<run-id>/`` with its ledger entry, so rerunning a failed run with the
same run id reuses the noise already drawn and never spends budget twice. ``audit.json`` is
written at the end of every run, failed ones included. ``seed`` is for tests and demos only.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow  # noqa: E402

from das.privacy.accounting import PrivacyAccountant, summarize  # noqa: E402
from flows.runner import task_runner_from_env  # noqa: E402
from tasks.common import (  # noqa: E402
    audited_run,
    hash_inputs,
    publish_privacy_artifacts,
    record_draws,
    start_run,
    validation_gate,
)
from tasks.safetab_p import (  # noqa: E402
    PASSES,
    fix_coterminous,
    input_paths,
    load_inputs,
    measure_level_task,
    pass_accountant,
    postprocess_level,
    prepare_pass,
    write_tables,
)

PRODUCT = "safetab-p"
DEFAULT_DELTA = 1e-10


# The task runner is read from the environment at import (deployment workers); `das run`
# re-reads it per run with ``with_options``.
@flow(
    name="safetab-p",
    description="SafeTab-P (Detailed DHC-A) with audit and rerun-safe noise",
    task_runner=task_runner_from_env(),
)
def safetab_p_flow(
    config: str,
    data: str,
    output: str,
    seed: int | None = None,
    run_id: str | None = None,
    skip_validation: bool = False,
    delta: float = DEFAULT_DELTA,
    coterminous: str | None = None,
) -> dict[str, Any]:
    """Run SafeTab-P on ``data`` with ``config`` into ``output``; returns the audit record.

    ``coterminous``: a reviewed ``coterminous-geographies.txt`` (``das coterminous derive``);
    without it the sets are derived from the GRF-C in the run.

    Raises :class:`ValidationFailed` (before any noise is drawn) when the inputs are invalid.
    """
    parameters = {
        "config": str(config),
        "data": str(data),
        "skip_validation": skip_validation,
        "delta": delta,
        "coterminous": coterminous,
    }
    folder, audit = start_run(PRODUCT, output, run_id, seed, parameters)
    with audited_run(PRODUCT, folder, audit):
        with audit.stage("hash-inputs"):
            extra = {Path(coterminous).name: Path(coterminous)} if coterminous else {}
            hash_inputs(audit, config, {**input_paths(config, data), **extra})
        validation_gate(PRODUCT, audit, config, data, folder, skip_validation)
        with audit.stage("load"):
            inputs = load_inputs(str(config), str(data))
            contexts = {name: prepare_pass(inputs, name, coterminous) for name in PASSES}
            contexts = {name: ctx for name, ctx in contexts.items() if ctx is not None}
        with audit.stage("measure"):
            futures = {
                name: [
                    measure_level_task.submit(inputs.config, inputs.specs, ctx, level, folder, seed)
                    for level in ctx.levels
                ]
                for name, ctx in contexts.items()
            }
            results = {name: [f.result() for f in fs] for name, fs in futures.items()}
            record_draws(audit, [r for rs in results.values() for r in rs], "levels")
        accountants: dict[str, PrivacyAccountant] = {
            name: pass_accountant(inputs.config, contexts[name], results[name]) for name in contexts
        }
        audit.update(
            ledger={name: acc.to_dict() for name, acc in accountants.items()},
            totals={name: summarize(acc, delta).to_dict() for name, acc in accountants.items()},
        )
        with audit.stage("postprocess"):
            parts = {
                name: [
                    postprocess_level.submit(inputs.config, contexts[name], result)
                    for result in results[name]
                ]
                for name in contexts
            }
            parts = {name: [f.result() for f in fs] for name, fs in parts.items()}
        with audit.stage("coterminous"):
            tables: dict[str, list] = {"t1": [], "t2": []}
            for name in contexts:
                t1, t2 = fix_coterminous(contexts[name], parts[name])
                tables["t1"].append(t1)
                tables["t2"].append(t2)
        with audit.stage("write"):
            audit.update(outputs=write_tables(tables, str(output)))
        with audit.stage("artifacts"):
            publish_privacy_artifacts(PRODUCT, accountants, delta)
    return audit.record

