"""The ``safetab-p`` flow: validate → load → measure levels (in parallel) → postprocess →
coterminous → write → audit.

The Prefect face of ``das run safetab-p`` (same engine, same outputs). Levels run in parallel
through the task runner: a Dask cluster (:func:`task_runner_from_env`: an existing scheduler at
``DAS_DASK_ADDRESS``, else a local cluster). Every draw is persisted in the run folder
``<output>/.run/<run-id>/`` with its ledger entry, so rerunning a failed run with the same run
id reuses the noise already drawn and never spends budget twice. ``audit.json`` is written at
the end of every run, failed ones included. ``seed`` is for tests and demos only.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow, get_run_logger  # noqa: E402
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner  # noqa: E402
from prefect_dask import DaskTaskRunner  # noqa: E402

from das.io.writers import file_sha256  # noqa: E402
from das.privacy.accounting import PrivacyAccountant, summarize  # noqa: E402
from das.runs.audit import AuditRecorder, file_hashes  # noqa: E402
from das.runs.folder import RunFolder, new_run_id  # noqa: E402
from das.runs.noise_store import describe_streams  # noqa: E402
from das.validation.report import ValidationFailed  # noqa: E402
from tasks.common import publish_audit_artifact, publish_privacy_artifacts, run_log_file  # noqa: E402
from tasks.safetab_p import (  # noqa: E402
    PASSES,
    fix_coterminous,
    input_paths,
    load_inputs,
    measure_level_task,
    pass_accountant,
    postprocess_level,
    prepare_pass,
    validate_inputs,
    write_tables,
)

PRODUCT = "safetab-p"
DEFAULT_DELTA = 1e-10
AUDIT_HEADLINE = ("status", "error_type", "code_version", "randomness", "seconds")


def task_runner_from_env(workers: int = 2) -> TaskRunner:
    """The Dask task runner: ``DAS_DASK_ADDRESS`` when set, else a local cluster.

    ``DAS_TASK_RUNNER=threads`` runs the tasks on Prefect's thread pool instead (tests and
    small runs: no cluster start-up, about 5 s less per run on the toy inputs).

    The local cluster uses worker *processes* only when a Prefect API server is configured
    (``PREFECT_API_URL``): without one each worker process would start its own temporary
    server (DESIGN §8), so the ephemeral/offline mode uses threads (numpy releases the GIL in
    the counting and sampling kernels).
    """
    address = os.environ.get("DAS_DASK_ADDRESS")
    if not address and os.environ.get("DAS_TASK_RUNNER") == "threads":
        return ThreadPoolTaskRunner(max_workers=workers)
    if address:
        return DaskTaskRunner(address=address)
    processes = bool(os.environ.get("PREFECT_API_URL"))
    kwargs: dict[str, Any] = {
        "n_workers": workers if processes else 1,
        "threads_per_worker": 1 if processes else workers,
        "processes": processes,
        "dashboard_address": ":0",
    }
    if processes:
        kwargs["memory_limit"] = "2GiB"
    return DaskTaskRunner(cluster_kwargs=kwargs)


def _stored_ledgers(folder: RunFolder) -> dict[str, Any]:
    """Level ledgers persisted so far (digests and budgets only): the audit of a failed run."""
    if not folder.ledger_dir.is_dir():
        return {}
    return {
        path.stem: json.loads(path.read_text()) for path in sorted(folder.ledger_dir.glob("*.json"))
    }


@flow(name="safetab-p", description="SafeTab-P (Detailed DHC-A) with audit and rerun-safe noise")
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
    folder = RunFolder(output, run_id or new_run_id())
    rerun = folder.exists()
    folder.create()
    audit = AuditRecorder(PRODUCT, folder.run_id, folder.audit_path)
    audit.update(
        parameters={
            "config": str(config),
            "data": str(data),
            "output": str(output),
            "seed": seed,
            "skip_validation": skip_validation,
            "rerun": rerun,
            "delta": delta,
            "coterminous": coterminous,
            "run_folder": str(folder.root),
        },
        randomness=describe_streams(seed),
    )
    with run_log_file(folder.log_path):
        logger = get_run_logger()
        logger.info("run %s (%s) of %s", folder.run_id, "rerun" if rerun else "new run", PRODUCT)
        try:
            with audit.stage("hash-inputs"):
                audit.update(
                    config={"path": str(config), "sha256": file_sha256(config)},
                    inputs=file_hashes(
                        {
                            **input_paths(config, data),
                            **({Path(coterminous).name: Path(coterminous)} if coterminous else {}),
                        }
                    ),
                )
            with audit.stage("validate"):
                if skip_validation:
                    audit.update(validation={"skipped": True})
                    logger.info("validation skipped (--skip-validation)")
                else:
                    summary = validate_inputs(str(config), str(data), str(folder.validation_dir))
                    audit.update(validation=summary)
                    if not summary["ok"]:
                        raise ValidationFailed(
                            f"inputs are not valid: {summary['errors']} error(s) in checks "
                            f"{', '.join(summary['failed_checks'])}; report in "
                            f"{summary['report_dir']}; no noise was drawn"
                        )
            with audit.stage("load"):
                inputs = load_inputs(str(config), str(data))
                contexts = {name: prepare_pass(inputs, name, coterminous) for name in PASSES}
                contexts = {name: ctx for name, ctx in contexts.items() if ctx is not None}
            with audit.stage("measure"):
                futures = {
                    name: [
                        measure_level_task.submit(inputs, ctx, level, folder, seed)
                        for level in ctx.levels
                    ]
                    for name, ctx in contexts.items()
                }
                results = {name: [f.result() for f in fs] for name, fs in futures.items()}
                fresh = sum(len(r.fresh) for rs in results.values() for r in rs)
                reused = sum(len(r.reused) for rs in results.values() for r in rs)
                audit.update(draws={"fresh": fresh, "reused": reused})
                logger.info("measured %d levels: %d draws, %d reused from the run folder",
                            sum(map(len, results.values())), fresh, reused)  # fmt: skip
            accountants: dict[str, PrivacyAccountant] = {
                name: pass_accountant(inputs.config, contexts[name], results[name])
                for name in contexts
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
        except BaseException as exc:
            if audit.record["ledger"] is None:
                audit.update(ledger={"levels": _stored_ledgers(folder)})
            record = audit.write("failed", exc)
            logger.error("run %s failed: %s", folder.run_id, type(exc).__name__)
            publish_audit_artifact(PRODUCT, record, AUDIT_HEADLINE)
            raise
        record = audit.write("succeeded")
        publish_audit_artifact(PRODUCT, record, AUDIT_HEADLINE)
        logger.info("run %s succeeded: audit in %s", folder.run_id, folder.audit_path)
        return record


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run the safetab-p flow once, locally.")
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--run-id")
    parser.add_argument("--skip-validation", action="store_true")
    args = parser.parse_args()
    safetab_p_flow.with_options(task_runner=task_runner_from_env())(
        config=str(Path(args.config)),
        data=args.data,
        output=args.output,
        seed=args.seed,
        run_id=args.run_id,
        skip_validation=args.skip_validation,
    )
