"""The ``phsafe`` flow: validate → spill records by household bucket → true counts per bucket
→ measure tables (in parallel) → derived tables → statistical postprocessing → write → publish.

The Prefect face of ``das run phsafe`` (one pass per config: ``state_filter ["72"]`` is Puerto
Rico, else the US), over the bucketed engine (the same release as the in-memory
:func:`das.phsafe.engine.run_phsafe`, in memory bounded whatever the input size:
:mod:`das.phsafe.streamed`). :func:`tasks.run_context.release_run` first seals the config and
checks the production policy, the privacy ledger, the run id's binding and the output. The
records are read once: validation's read also spills them by household bucket
(:class:`tasks.phsafe.PHSafeOneRead`), so what is counted is what was validated and
fingerprinted; the run then proves the files did not change while it ran, and the ledger
authorizes its spend, before the first draw. Buckets
and tables run in parallel on the task runner; tasks exchange paths into the run's work folder.
Every draw is persisted in ``<state root>/runs/<run-id>/`` with its ledger entry, so a rerun
with the same run id (by default the Prefect flow-run id: Prefect's Retry) reuses the noise
already drawn and never spends budget twice; completed steps are not redone; the
postprocessing seed is persisted too, so the resumed release equals an uninterrupted one. The
release is built in a staging folder and renamed into ``OUT`` whole. ``seed`` is for tests and
demos only (refused in production).
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import State, flow  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402

from das.phsafe.parameters import parse_parameters, run_inputs  # noqa: E402
from das.postprocess.phsafe import estimates_diagnostics  # noqa: E402
from das.privacy.accounting import summarize  # noqa: E402
from das.refusal import RunRefused  # noqa: E402
from das.runs.records import input_path  # noqa: E402
from das.runs.start import RunInputs  # noqa: E402
from flows.runner import RunnerChosenAtStart, task_slots  # noqa: E402
from tasks.flow_steps import record_draws, run_once, settled  # noqa: E402
from tasks.phsafe import (  # noqa: E402
    PHSafeOneRead,
    count_bucket_task,
    derived_tables,
    measure_tables_task,
    pass_accountant,
    postprocess_task,
    spill_records,
    table_groups,
    write_outputs,
)
from tasks.refusal import refused, released  # noqa: E402
from tasks.run_context import (  # noqa: E402
    ReleaseRun,
    RunRequest,
    flow_run_id,
    release_run,
    request_context,
    resolve_path,
)
from tasks.run_context import started_from as run_started_from  # noqa: E402
from tasks.validation_gate import validation_gate  # noqa: E402

PRODUCT = "phsafe"
DEFAULT_DELTA = 1e-10
RECORD_FILES = ("persons", "units", "geo")


# The task runner is chosen from the environment when a run starts (a deployment's worker sets
# it); `das run` gives the flow the runner sized to its inputs with ``with_options``.
@flow(
    name="phsafe",
    description="PHSafe (S-DHC) with estimates, audit and rerun-safe noise",
    task_runner=RunnerChosenAtStart(),
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
    cumulative_total: dict[str, str] | None = None,
    replace_release: bool = False,
    started_from: str = "python",
) -> dict[str, Any] | State:
    """Run PHSafe on ``data`` with ``config`` into ``output``; returns the audit record, or ends
    in the state Refused (nothing drawn, the next step in its artifact and message).

    ``credible_interval``: ``"equal-tailed"`` (default) or ``"hpd"`` (shortest; calibrated
    near zero) for the count tables' 90% intervals (:mod:`das.postprocess.counts`).
    ``cumulative_total``: pass → the new cumulative total the operator accepts when the
    dataset already has recorded spend (outside production; in production spend is approved in
    the privacy ledger). ``replace_release``: move an existing release of another run aside
    (recorded). ``started_from``: ``cli`` when `das run` calls it.

    Raises ``ValidationFailed`` (invalid inputs: before any noise is drawn).
    """
    config_path, data_dir = resolve_path(config), resolve_path(data)
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
            "credible_interval": credible_interval,
        },
        cumulative_total=cumulative_total,
        replace_release=replace_release,
        skip_validation=skip_validation,
        context=run_started_from(started_from),
        config_path=config_path,
        data_dir=data_dir,
    )
    try:
        inputs = run_inputs(config_path, data_dir)
        return released(_release(request, inputs, delta, credible_interval))
    except RunRefused as refusal:
        return refused(PRODUCT, refusal, request_context(request), request.run_id or flow_run_id())


def _slots() -> int:
    """How many tasks this flow run's task runner runs at once."""
    context = FlowRunContext.get()
    return task_slots(context.task_runner if context is not None else None)


def _one_read(run: ReleaseRun, inputs: RunInputs) -> PHSafeOneRead | None:
    """Validation's read of the records, made to also spill them by household bucket (None
    when the parameters or a record file are missing: validation says so)."""
    records = inputs.records()
    if run.parameters is None or not set(RECORD_FILES) <= set(records):
        return None
    paths = {name: str(records[name]) for name in RECORD_FILES}
    return PHSafeOneRead(run.parameters.config, paths, str(run.folder.root / "work"), run.folder)


def _release(
    request: RunRequest, inputs: RunInputs, delta: float, credible_interval: str
) -> dict[str, Any]:
    """The run itself (see the module docstring); the audit record."""
    seed = request.seed
    with release_run(request, inputs, parse_parameters) as run:
        folder, audit, steps = run.folder, run.audit, run.steps
        made = validation_gate(run, _one_read(run, inputs))
        plan = run.parameters
        if plan is None:
            raise RuntimeError("the parameters passed validation but could not be parsed")
        paths = {name: str(input_path(inputs, name)) for name in RECORD_FILES}
        work = str(folder.root / "work")
        earlier = steps.done("spill") is not None and "spill" not in made  # by an earlier attempt
        with run.stage("spill", skipped=earlier):
            spilled = run_once(
                steps, "spill", lambda: spill_records(plan.config, paths, work, folder), made
            )
        run.authorize(spilled["fingerprints"])
        buckets = spilled["buckets"]
        with run.stage("counts", buckets, skipped=steps.done("counts") is not None):
            run_once(
                steps,
                "counts",
                lambda: settled(
                    [count_bucket_task.submit(plan.config, work, b) for b in range(buckets)],
                    lambda _: run.advance("counts"),
                ),
            )
        run.start_drawing()
        with run.stage("measure", len(plan.queries)):
            groups = table_groups(plan.queries, _slots())
            futures = {
                measure_tables_task.submit(
                    plan.config,
                    [(table, plan.queries[table]) for table in group],
                    work, folder, seed, run.lease, run.draws,
                ): group
                for group in groups
            }  # fmt: skip
            done = settled(list(futures), lambda f: run.advance("measure", len(futures[f])))
            measured = {result.table: result for results in done for result in results}
            results = [measured[table] for table in plan.queries]
            record_draws(audit, results, "tables")
        pass_name = plan.config.pass_name
        accountant = pass_accountant(plan, results)
        audit.update(
            ledger={pass_name: run.ledger.public_accountant(accountant.to_dict())},
            totals={pass_name: summarize(accountant, delta).to_dict()},
        )
        with run.stage("postprocess"):
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
        with run.stage("write"):
            outputs = write_outputs(tables, estimates, str(run.staging))
        with run.stage("publish"):
            run.publish(outputs, {pass_name: accountant}, delta)
    return audit.record
