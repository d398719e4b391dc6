"""The release run of a product flow: every check that must pass before anything is touched, and
the one place where a release is published.

:func:`release_run` is what both product flows open first. In order, before validation and
before the output is touched:

1. the production policy (:func:`das.runs.policy.check_release_policy`): no seed, no infinite
   budget and a configured ledger under ``DAS_PRODUCTION=1``, whoever started the flow;
2. the run id: the one given, else the Prefect flow-run id, so that Prefect's Retry of a failed
   or crashed run resumes its run folder;
3. the hashes of every file the run reads, and the output lock (one live run per output);
4. a rerun must present the identity its noise was drawn for (:mod:`das.runs.identity`);
5. an existing release of another run is never overwritten (unless explicitly replaced);
6. the privacy ledger of the dataset reserves this run's spend, or refuses it
   (:mod:`das.runs.ledger`).
7. on an existing Dask cluster (``DAS_DASK_ADDRESS``), every worker sees the inputs and the run
   folder as this process does (:mod:`tasks.cluster`; after the run folder is made, before
   validation: a refusal then leaves an audit and a run folder without noise).

A refusal raises :class:`RunRefused` and leaves the output and its run folders as they were
(the refusal is recorded in the ledger's events). Then the run folder, its lease, the staging
folder, the audit and the local run log are set up, and the flow body runs.
:meth:`ReleaseRun.publish` writes the audit and the manifest into the staging folder and
renames it into place. Whatever happens, the attempt's ``audit.json`` is written to its run
folder and posted as an artifact.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import contextlib  # noqa: E402
from collections.abc import Iterator, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger  # noqa: E402

from das.privacy.accounting import Measurement, PrivacyAccountant, compose  # noqa: E402
from das.privacy.mechanisms import Budget  # noqa: E402
from das.runs.audit import AuditRecorder, file_hashes  # noqa: E402
from das.runs.folder import RunFolder, check_run_id  # noqa: E402
from das.runs.identity import RunIdentity, hash_files, seed_mode  # noqa: E402
from das.runs.ledger import (  # noqa: E402
    PrivacyLedger,
    RunSpend,
    dataset_key,
    decimal_text,
    parse_total,
)
from das.runs.noise_store import describe_streams  # noqa: E402
from das.runs.policy import (  # noqa: E402
    RunRefused,
    check_release_policy,
    ledger_directory,
    marker_banner,
    privacy_markers,
)
from das.runs.release import OutputLock, ReleaseStager, RunLease, new_lease  # noqa: E402
from das.runs.steps import RunSteps  # noqa: E402
from tasks.cluster import check_cluster_shares_run  # noqa: E402
from tasks.common import (  # noqa: E402
    publish_audit_artifact,
    publish_privacy_artifacts,
    run_log_file,
    stored_ledgers,
)


def resolve_path(path: str | Path) -> Path:
    """An absolute path (``~`` expanded): parameters are resolved once, at the edge, so that
    nothing downstream depends on the working directory of a worker or a library."""
    return Path(path).expanduser().resolve()


RUN_ID_FIELD = "{run_id}"


def release_folder(output: Path, run_id: str) -> Path:
    """The release folder of a run: ``output`` with ``{run_id}`` replaced by the run id.

    A deployment whose ``output`` is ``.../releases/{run_id}`` publishes every run (a scheduled
    one included) into a new folder, while Prefect's Retry of a run, which keeps its flow-run
    id, resumes the same one. Any other brace is refused: it is a typo, not a folder name."""
    text = str(output)
    if text.replace(RUN_ID_FIELD, "").count("{") or text.replace(RUN_ID_FIELD, "").count("}"):
        raise RunRefused(f"output {text!r}: the only placeholder allowed is {RUN_ID_FIELD}")
    return Path(text.replace(RUN_ID_FIELD, run_id))


def default_run_id() -> str:
    """The Prefect flow-run id: a Retry of the flow run gets the same run folder."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    if not run_id:
        raise RunRefused("no run id was given and no Prefect flow run is active")
    return str(run_id)


@dataclass(frozen=True)
class RunInputs:
    """Every file a run reads, by role (name → path); missing files are left out here and
    reported by validation or the loader."""

    config: Path
    specs: Mapping[str, Path] = field(default_factory=dict)
    confidential: Mapping[str, Path] = field(default_factory=dict)
    reference: Mapping[str, Path] = field(default_factory=dict)

    def all_files(self) -> dict[str, Path]:
        return {
            "config.json": self.config,
            **self.specs,
            **self.reference,
            **self.confidential,
        }


@dataclass(frozen=True)
class RunPlan:
    """The run's planned measurements (public: from config and specs only) and its passes."""

    definition: str
    measurements: tuple[Measurement, ...]

    def pass_totals(self) -> dict[str, Budget]:
        passes = sorted({str(m.metadata["pass"]) for m in self.measurements})
        return {
            name: compose(m for m in self.measurements if m.metadata["pass"] == name)
            for name in passes
        }


@dataclass(frozen=True)
class RunRequest:
    """What the operator asked for: the flow's parameters, paths already resolved."""

    product: str
    output: Path
    seed: int | None
    run_id: str | None
    parameters: Mapping[str, Any]
    cumulative_total: Mapping[str, str] | None = None
    replace_release: bool = False


def parse_cumulative(
    values: Mapping[str, str] | None, passes: Sequence[str]
) -> dict[str, Budget] | None:
    """``{"US": "9.888"}`` (or ``{"*": "9.888"}`` for a one-pass run) as exact budgets."""
    if not values:
        return None
    parsed: dict[str, Budget] = {}
    for name, text in values.items():
        if name == "*":
            if len(passes) != 1:
                raise RunRefused(
                    "this run has passes " + ", ".join(passes) + ": name each, e.g. "
                    f"--cumulative-total {passes[0]}=<total>"
                )
            name = passes[0]
        try:
            parsed[name] = parse_total(str(text))
        except ValueError as exc:
            raise RunRefused(f"--cumulative-total {name}: {exc}") from None
    return parsed


@dataclass
class ReleaseRun:
    """A run that passed every start check and owns its output; see the module docstring."""

    product: str
    folder: RunFolder
    audit: AuditRecorder
    lease: RunLease
    stager: ReleaseStager
    ledger: PrivacyLedger
    dataset: str
    markers: list[str]
    reserved: bool
    steps: RunSteps
    drawing: bool = False
    published: dict[str, Any] | None = None

    @property
    def banner(self) -> str:
        return marker_banner(self.markers)

    @property
    def staging(self) -> Path:
        return self.stager.staging

    def start_drawing(self) -> None:
        """Mark the ledger spend as drawing (from here on the run counts as spent in full)."""
        if not self.reserved:
            raise RunRefused("no privacy budget was reserved for this run; refusing to draw")
        self.ledger.set_status(self.dataset, self.folder.run_id, "drawing")
        self.drawing = True

    def publish(
        self,
        outputs: Mapping[str, Mapping[str, Any]],
        accountants: Mapping[str, PrivacyAccountant],
        delta: float,
    ) -> dict[str, Any]:
        """Audit and manifest into staging, one rename into place, the ledger completed, the
        privacy artifacts posted."""
        self.audit.update(outputs=dict(outputs))
        replaces = self.stager.replace_target()
        self.audit.update(release={"manifest": "MANIFEST.json", "replaces": replaces})
        record = self.audit.finish("succeeded")
        result = self.stager.publish(record, outputs, self.markers)
        self.ledger.set_status(self.dataset, self.folder.run_id, "completed")
        if result.get("replaced"):
            self.ledger.record_event(
                "release-replaced", result["replaced"], self.dataset, self.folder.run_id
            )
        self.audit.update(release={**result, "replaces": replaces})
        self.published = result
        publish_privacy_artifacts(self.product, accountants, delta, self.banner)
        return result


def _refuse(
    ledger: PrivacyLedger, dataset: str, run_id: str, product: str, exc: RunRefused
) -> None:
    """Keep the trail of a refusal in the ledger's events (no data values: names, hashes)."""
    ledger.record_event("refused", {"product": product, "reason": str(exc)}, dataset, run_id)


def _check_identity(folder: RunFolder, identity: RunIdentity) -> None:
    """A rerun reuses noise only when it presents the identity the noise was drawn for."""
    if not folder.exists():
        return
    stored = RunIdentity.read(folder.identity_path)
    if stored is None:
        drawn = any(folder.noise_dir.glob("*")) or any(folder.ledger_dir.glob("*"))
        if drawn:
            raise RunRefused(
                f"run folder {folder.root} holds noise but no identity record: what it was "
                "drawn for cannot be checked; use a new run id"
            )
        return
    changes = identity.differences(stored)
    if changes:
        raise RunRefused(
            f"run {folder.run_id} cannot resume: its noise was drawn for other inputs ("
            + "; ".join(changes)
            + "). Reusing it would release the exact change in the true counts. Nothing was "
            "touched; start a new run (new run id) to draw fresh noise"
        )


@contextlib.contextmanager
def release_run(
    request: RunRequest, inputs: RunInputs, plan: RunPlan | None
) -> Iterator[ReleaseRun]:
    """Open, check and own a release run; see the module docstring. ``plan`` is None only when
    the config cannot be planned (then validation reports why, and nothing can be drawn)."""
    measurements = plan.measurements if plan is not None else ()
    check_release_policy(request.seed, measurements)
    run_id = check_run_id(request.run_id) if request.run_id else default_run_id()
    output = release_folder(request.output, run_id)
    folder = RunFolder(output, run_id)
    files = inputs.all_files()
    digests = hash_files(files)
    identity = RunIdentity(
        product=request.product,
        config=digests["config.json"],
        specs={name: digests[name] for name in inputs.specs},
        inputs={name: digests[name] for name in inputs.confidential},
        reference={name: digests[name] for name in inputs.reference},
        seed_mode=seed_mode(request.seed),
    )
    ledger = PrivacyLedger(ledger_directory(output))
    dataset = dataset_key(identity.inputs)
    markers = privacy_markers(request.seed, measurements)
    try:
        lock = OutputLock(folder.lock_path).acquire()
    except RunRefused as exc:
        _refuse(ledger, dataset, run_id, request.product, exc)
        raise
    try:
        _check_identity(folder, identity)
        stager = ReleaseStager(folder, replace=request.replace_release)
        stager.check_target()
        reservation = []
        if plan is not None:
            totals = plan.pass_totals()
            spend = RunSpend(
                dataset=dataset,
                run_id=run_id,
                product=request.product,
                definition=plan.definition,
                budgets=totals,
                seed_mode=identity.seed_mode,
                not_private=bool(markers),
                config_sha256=identity.config,
                inputs=identity.inputs,
                output=str(folder.release_dir),
            )
            expected = parse_cumulative(request.cumulative_total, list(totals))
            reservation = ledger.reserve(spend, expected)
    except RunRefused as exc:
        lock.release()
        _refuse(ledger, dataset, run_id, request.product, exc)
        raise
    except BaseException:
        lock.release()
        raise
    try:
        rerun = folder.exists()
        folder.create()
        if not folder.identity_path.is_file():
            identity.write(folder.identity_path)
        lease = new_lease(folder)
        stager.prepare()
        audit = AuditRecorder(request.product, run_id, folder.audit_path)
        randomness = describe_streams(request.seed)
        audit.update(
            parameters={
                **request.parameters,
                "output": str(folder.release_dir),
                "seed": request.seed,
                "rerun": rerun,
                "run_folder": str(folder.root),
                "replace_release": request.replace_release,
            },
            randomness={**randomness, "release_private": not markers},
            markers=markers,
            identity=identity.to_dict(),
            config={"path": str(inputs.config), "sha256": identity.config},
            inputs=file_hashes(files, digests),
            privacy_ledger={
                "ledger": str(ledger.path),
                "dataset": dataset,
                "passes": [item.to_dict() for item in reservation],
            },
        )
        run = ReleaseRun(
            request.product,
            folder,
            audit,
            lease,
            stager,
            ledger,
            dataset,
            markers,
            reserved=plan is not None,
            steps=RunSteps(folder, audit.record["code_version"]),
        )
        with run_log_file(folder.log_path):
            logger = get_run_logger()
            logger.info(
                "%srun %s (%s) of %s", run.banner, run_id,
                "rerun" if rerun else "new run", request.product,
            )  # fmt: skip
            for item in reservation:
                logger.info(
                    "privacy ledger, pass %s: earlier %s + this run %s = cumulative %s (%s)",
                    item.pass_name, decimal_text(item.prior), decimal_text(item.this_run),
                    decimal_text(item.cumulative), item.definition,
                )  # fmt: skip
            try:
                # Tasks on an existing Dask cluster read the inputs and the run folder by path.
                check_cluster_shares_run(files, folder.root)
                yield run
                if run.published is None:
                    raise RuntimeError("the flow ended without publishing its release")
            except BaseException as exc:
                if not run.drawing:
                    ledger.set_status(dataset, run_id, "released")
                if audit.record["ledger"] is None:
                    audit.update(ledger={"partitions": stored_ledgers(folder)})
                record = audit.write("failed", exc)
                logger.error("%srun %s failed: %s", run.banner, run_id, type(exc).__name__)
                publish_audit_artifact(request.product, record, run.banner)
                raise
            record = audit.save()
            publish_audit_artifact(request.product, record, run.banner)
            logger.info(
                "%srun %s succeeded: release %s (%s)", run.banner, run_id,
                folder.release_dir, run.published["state"],
            )  # fmt: skip
    finally:
        lock.release()
