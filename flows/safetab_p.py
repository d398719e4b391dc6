"""The ``safetab-p`` flow: validate → load → measure levels (in parallel) → postprocess →
coterminous → write → publish.

The Prefect face of ``das run safetab-p`` (same engine, same outputs). Before anything is read or
touched, :func:`tasks.run_context.release_run` checks the production policy, the output lock, the
identity of a resumed run and the dataset's privacy ledger (a refusal raises ``RunRefused``).
Levels run in parallel through the task runner (:func:`flows.runner.task_runner_from_env`).
Every draw is persisted in the run folder ``OUT.das/runs/<run-id>/`` with its ledger entry, so
rerunning a failed run with the same run id (by default the Prefect flow-run id: Prefect's Retry)
reuses the noise already drawn and never spends budget twice. The release is built in a staging
folder and renamed into ``OUT`` whole, with its audit and manifest. ``seed`` is for tests and
demos only (refused under ``DAS_PRODUCTION=1``).
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import flow  # noqa: E402

from das.privacy.accounting import PrivacyAccountant, summarize  # noqa: E402
from flows.runner import task_runner_from_env  # noqa: E402
from tasks.common import record_draws, validation_gate  # noqa: E402
from tasks.run_context import RunRequest, release_run, resolve_path  # noqa: E402
from tasks.safetab_p import (  # noqa: E402
    PASSES,
    fix_coterminous,
    load_inputs,
    measure_level_task,
    pass_accountant,
    plan_run,
    postprocess_level,
    prepare_pass,
    run_inputs,
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
    cumulative_total: dict[str, str] | None = None,
    replace_release: bool = False,
) -> dict[str, Any]:
    """Run SafeTab-P on ``data`` with ``config`` into ``output``; returns the audit record.

    ``coterminous``: a reviewed ``coterminous-geographies.txt`` (``das coterminous derive``);
    without it the sets are derived from the GRF-C in the run. ``cumulative_total``: pass →
    the new cumulative total the operator accepts when the dataset already has recorded spend.
    ``replace_release``: move an existing release of another run aside (recorded).

    Raises ``RunRefused`` (nothing touched) or ``ValidationFailed`` (before any noise is drawn).
    """
    config_path, data_dir = resolve_path(config), resolve_path(data)
    coterminous_path = resolve_path(coterminous) if coterminous else None
    request = RunRequest(
        product=PRODUCT,
        output=resolve_path(output),
        seed=seed,
        run_id=run_id,
        parameters={
            "config": str(config_path),
            "data": str(data_dir),
            "skip_validation": skip_validation,
            "delta": delta,
            "coterminous": None if coterminous_path is None else str(coterminous_path),
        },
        cumulative_total=cumulative_total,
        replace_release=replace_release,
    )
    inputs = run_inputs(config_path, data_dir, coterminous_path)
    with release_run(request, inputs, plan_run(config_path)) as run:
        folder, audit = run.folder, run.audit
        validation_gate(PRODUCT, audit, str(config_path), str(data_dir), folder, skip_validation)
        with audit.stage("load"):
            loaded = load_inputs(str(config_path), str(data_dir), folder)
            cot = None if coterminous_path is None else str(coterminous_path)
            contexts = {name: prepare_pass(loaded, name, folder, cot) for name in PASSES}
            contexts = {name: ctx for name, ctx in contexts.items() if ctx is not None}
        run.start_drawing()
        with audit.stage("measure"):
            futures = {
                name: [
                    measure_level_task.submit(
                        loaded.config, loaded.specs, ctx, level, folder, seed, run.lease
                    )
                    for level in ctx.levels
                ]
                for name, ctx in contexts.items()
            }
            results = {name: [f.result() for f in fs] for name, fs in futures.items()}
            record_draws(audit, [r for rs in results.values() for r in rs], "levels")
        accountants: dict[str, PrivacyAccountant] = {
            name: pass_accountant(loaded.config, contexts[name], results[name])
            for name in contexts
        }
        audit.update(
            ledger={name: acc.to_dict() for name, acc in accountants.items()},
            totals={name: summarize(acc, delta).to_dict() for name, acc in accountants.items()},
        )
        with audit.stage("postprocess"):
            parts = {
                name: [
                    postprocess_level.submit(loaded.config, contexts[name], result)
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
            outputs = write_tables(tables, str(run.staging))
        with audit.stage("publish"):
            run.publish(outputs, accountants, delta)
    return audit.record
