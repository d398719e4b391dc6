"""The ``safetab-p`` flow: validate → geography → spill persons → true totals per state →
measure levels → cells per state → write → publish.

The Prefect face of ``das run safetab-p``, over the streamed engine (the same release as the
in-memory :func:`das.safetab_p.engine.run_safetab_p`, in memory bounded whatever the size of
the input: :mod:`das.safetab_p.streamed`). Before any record is read,
:func:`tasks.run_context.release_run` seals the parameters and checks the production policy,
the privacy ledger, the run id's binding and the output (a refusal raises ``RunRefused``).
The records are read once: validation's read also prepares the geography and spills the
persons (:class:`tasks.safetab_p.SafeTabPOneRead`), so what is measured is what was validated
and fingerprinted; the run then proves the files did not change while it ran, and the ledger
authorizes its spend, before the first draw.
Groups of states and of levels (a task per group of about equal work: :mod:`das.safetab_p.
streamed.task_groups`) run in parallel through the task runner (:func:`flows.runner.
task_runner_from_env`); tasks exchange paths into the run's work folder, never frames. Every
draw is persisted in ``<state root>/runs/<run-id>/`` with its ledger entry, so rerunning a
failed run with the same run id (by default the Prefect flow-run id: Prefect's Retry) reuses
the noise already drawn and never spends budget twice; completed steps are not redone
(:mod:`das.runs.steps`). The release is built in a staging folder and renamed into ``OUT``
whole, with its audit and manifest. ``seed`` is for tests and demos only (refused under
``DAS_PRODUCTION=1``).
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from typing import Any  # noqa: E402

from prefect import State, flow  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402

from das.privacy.accounting import PrivacyAccountant, summarize  # noqa: E402
from das.refusal import RunRefused  # noqa: E402
from das.runs.records import input_path  # noqa: E402
from das.runs.start import RunInputs  # noqa: E402
from das.safetab_p.parameters import parse_parameters, run_inputs  # noqa: E402
from das.safetab_p.streamed import (  # noqa: E402
    groups_for,
    level_groups,
    noise_files_in_use,
    state_groups,
)
from flows.runner import RunnerChosenAtStart, task_slots  # noqa: E402
from tasks.flow_steps import record_draws, run_once, settled  # noqa: E402
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
from tasks.safetab_p import (  # noqa: E402
    SafeTabPJob,
    SafeTabPOneRead,
    combine_cells_task,
    combine_totals_task,
    count_state_cells_task,
    count_state_totals_task,
    measure_levels_task,
    pass_accountant,
    prepare_geography_task,
    spill_persons_task,
    write_tables,
)
from tasks.validation_gate import validation_gate  # noqa: E402

PRODUCT = "safetab-p"
DEFAULT_DELTA = 1e-10


# Tasks per slot of the task runner in a per-state or per-level stage (das.safetab_p.streamed.
# task_groups): a few groups per slot keep every slot busy to the end; more would cost the
# orchestrator a task run each (a small geography's stages: one per slot, see groups_for).
GROUPS_PER_SLOT = 2


def _slots() -> int:
    """How many tasks this flow run's task runner runs at once."""
    context = FlowRunContext.get()
    return task_slots(context.task_runner if context is not None else None)


def _task_groups(job: SafeTabPJob) -> int:
    """How many groups of states or levels a stage hands the task runner."""
    return groups_for(job.folder, _slots(), GROUPS_PER_SLOT)


def _per_state(
    task_fn: Any, job: SafeTabPJob, states: list[int], run: ReleaseRun, stage: str
) -> list[list[int]]:
    """The states in groups of about equal work (:func:`state_groups`), a task per group, in
    parallel on the task runner; the groups done. Progress counts states."""
    groups = state_groups(job.folder, states, _task_groups(job))
    futures = {task_fn.submit(job, group): len(group) for group in groups}
    return settled(list(futures), lambda future: run.advance(stage, futures[future]))


# The task runner is chosen from the environment when a run starts (a deployment's worker sets
# it); `das run` gives the flow the runner sized to its inputs with ``with_options``.
@flow(
    name="safetab-p",
    description="SafeTab-P (Detailed DHC-A) with audit and rerun-safe noise",
    task_runner=RunnerChosenAtStart(),
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
    started_from: str = "python",
) -> dict[str, Any] | State:
    """Run SafeTab-P on ``data`` with ``config`` into ``output``; returns the audit record, or
    ends in the state Refused (nothing drawn, the next step in its artifact and message).

    ``coterminous``: a reviewed ``coterminous-geographies.txt`` (``das coterminous derive``);
    without it the sets are derived from the GRF-C in the run. ``cumulative_total``: pass →
    the new cumulative total the operator accepts when the dataset already has recorded spend
    (outside production; in production spend is approved in the privacy ledger).
    ``replace_release``: move an existing release of another run aside (recorded).
    ``started_from``: ``cli`` when `das run` calls it (refusals then name its flags).

    Raises ``ValidationFailed`` (invalid inputs: before any noise is drawn).
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
        skip_validation=skip_validation,
        context=run_started_from(started_from),
        config_path=config_path,
        data_dir=data_dir,
    )
    try:
        inputs = run_inputs(config_path, data_dir, coterminous_path)
        return released(_release(request, inputs, delta))
    except RunRefused as refusal:
        return refused(PRODUCT, refusal, request_context(request), request.run_id or flow_run_id())


def _one_read(run: ReleaseRun, inputs: RunInputs) -> SafeTabPOneRead | None:
    """Validation's read of the records, made to also prepare the geography and spill the
    persons (None when the parameters or a record file are missing: validation says so)."""
    records = inputs.records()
    if run.parameters is None or not {"person-records", "GRF-C"} <= set(records):
        return None
    job = SafeTabPJob(
        run.parameters,
        str(records["person-records"]),
        str(records["GRF-C"]),
        str(run.folder.root / "work"),
    )
    return SafeTabPOneRead(job, run.folder)


def _release(request: RunRequest, inputs: RunInputs, delta: float) -> dict[str, Any]:
    """The run itself (see the module docstring); the audit record."""
    seed = request.seed
    with release_run(request, inputs, parse_parameters) as run:
        folder, audit, steps = run.folder, run.audit, run.steps
        made = validation_gate(run, _one_read(run, inputs))
        if run.parameters is None:
            raise RuntimeError("the parameters passed validation but could not be parsed")
        job = SafeTabPJob(
            run.parameters,
            str(input_path(inputs, "person-records")),
            str(input_path(inputs, "GRF-C")),
            str(folder.root / "work"),
        )

        def earlier(step: str) -> bool:  # done by an earlier attempt (not by this one's read)
            return steps.done(step) is not None and step not in made

        with run.stage("geography", skipped=earlier("geography")):
            grf_c = run_once(steps, "geography", lambda: prepare_geography_task(job), made)
        with run.stage("spill", skipped=earlier("spill")):
            spilled = run_once(steps, "spill", lambda: spill_persons_task(job, folder), made)
        run.authorize({"person-records": spilled["fingerprint"], "GRF-C": grf_c})
        states = spilled["states"]
        with run.stage("totals", len(states), skipped=steps.done("combine-totals") is not None):
            run_once(
                steps, "totals",
                lambda: _per_state(count_state_totals_task, job, states, run, "totals"),
            )  # fmt: skip
            run_once(steps, "combine-totals", lambda: combine_totals_task(job))
        run.start_drawing()
        partitions = job.partitions()
        groups = level_groups(job.config, job.specs, job.folder, _task_groups(job))
        with run.stage("measure", sum(len(group) for group in groups)):
            futures = {
                measure_levels_task.submit(job, group, folder, seed, run.lease, run.draws): group
                for group in groups
            }
            # All done (or the failure, once every level stopped); levels counted as groups end.
            done = settled(
                list(futures), lambda future: run.advance("measure", len(futures[future]))
            )
            measured = {result.partition: result for results in done for result in results}
            results = {name: [measured[p] for p in levels] for name, levels in partitions.items()}
            record_draws(audit, [r for rs in results.values() for r in rs], "levels")
        accountants: dict[str, PrivacyAccountant] = {
            name: pass_accountant(job, name, levels) for name, levels in results.items()
        }
        audit.update(
            ledger={
                name: run.ledger.public_accountant(acc.to_dict())
                for name, acc in accountants.items()
            },
            totals={name: summarize(acc, delta).to_dict() for name, acc in accountants.items()},
        )
        with run.stage("cells", len(states), skipped=steps.done("combine-cells") is not None):
            run_once(
                steps, "cells",
                lambda: _per_state(count_state_cells_task, job, states, run, "cells"),
            )  # fmt: skip
            run_once(steps, "combine-cells", lambda: combine_cells_task(job))
        with run.stage("write"):
            # the noise the tables add is what the ledger recorded: before and after they read it
            in_use = noise_files_in_use(job.config, job.specs, job.folder)
            run.check_noise(in_use)
            outputs = write_tables(job, str(run.staging))
            after = noise_files_in_use(job.config, job.specs, job.folder)
            run.check_noise(in_use if after == in_use else after)  # a changed name fails it
        with run.stage("publish"):
            run.publish(outputs, accountants, delta)
    return audit.record
