"""The safety lifecycle of a release run: the start checks, the privacy ledger's steps, and the
one place where a release is published.

:func:`release_run` is what both product flows open first:

1. every check that needs no record (:func:`das.runs.start.check_start`: production mode,
   regular input files, the sealed parameters and their plan, the production policy, the
   privacy ledger — initialized, intact, the ledger of the releases beside the output —, the
   run id's binding, an open approval in production, no overwrite, no live run);
2. the output lock; the ledger binds the run id to its output, product, sealed parameters,
   budgets and seed mode (a new run) or opens a new attempt (a resume);
3. the run folder, its lease, the sealed copy, the staging folder, the audit, the local log;
   on an existing Dask cluster, every worker must see the records and the run folder.

Then the flow reads the records — once: validation's read also feeds the measurement (the
engine's spill), or, under ``--skip-validation``, the engine reads them alone — and
:meth:`ReleaseRun.authorize` proves no record file changed while the run ran (inode, size,
times, from before the read) and that the records measured are the records validated
(canonical fingerprints; a resume may read again), binds the run to that dataset in the
ledger and counts its spend — under an approval in
production (a deployment run waits for one), or the operator's accepted cumulative total
outside it. :meth:`ReleaseRun.start_drawing` comes after, and every draw is charged and
recorded in the ledger (:class:`das.runs.noise_store.DrawLedger`). :meth:`ReleaseRun.publish`
writes the audit and the manifest — which carries the ledger head — and renames the release
into place. Whatever happens, the attempt's ``audit.json`` is written to its run folder and
posted, and a run that stopped before its first draw returns its reservation.

The lifecycle is the engine's; what it needs from the orchestrator that runs it — a logger,
where it was started, the witness of the ledger's head, the approval wait, artifacts, the
cluster check, progress — is a :class:`RunHost` (Prefect's: :mod:`tasks.run_context`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from das.io.fingerprint import combine_fingerprints
from das.privacy.accounting import PrivacyAccountant
from das.privacy.mechanisms import Budget
from das.refusal import Remedy, RunRefused
from das.runs.audit import AuditRecorder, md_escape
from das.runs.cleanup import forget_records
from das.runs.curator_log import curator_log
from das.runs.faults import InfrastructureFault, explain, resume_hint
from das.runs.folder import RunFolder
from das.runs.noise_store import DrawLedger, describe_streams
from das.runs.policy import marker_banner
from das.runs.progress import RunProgress
from das.runs.release import OutputLock, ReleaseStager, RunLease, new_lease
from das.runs.run_log import run_log_file
from das.runs.seal import SealedParameters
from das.runs.start import (
    Parse,
    RunInputs,
    RunRequest,
    StartCheck,
    approve_command,
    check_start,
)
from das.runs.steps import RunSteps
from das.trust import (
    Approval,
    ApprovalRequired,
    LedgerInfo,
    LedgerRefused,
    LedgerUnavailable,
    PassSpend,
    PrivacyLedger,
    RunSigner,
    RunState,
    approval_statement,
    certify,
    decimal_text,
    parse_total,
)
from das.validation.findings import ValidationFailed


class RunHost(Protocol):
    """What a release run needs from the orchestrator that runs it (see the module docstring).
    Every method but the witness, the approval wait and the cluster check is information: it
    must never stop a run. The approval wait may end the run's process while the run waits for
    people (:meth:`suspended` tells that exit from a failure): the orchestrator runs the flow
    again from its start once they decided."""

    @property
    def logger(self) -> logging.Logger | logging.LoggerAdapter[Any]: ...

    def flow_run_id(self) -> str | None: ...

    def started_from(self, caller: str) -> str: ...

    def api_url(self) -> str | None: ...

    def require_witnessed(
        self, ledger: PrivacyLedger, info: LedgerInfo, production: bool, run_id: str
    ) -> list[str]: ...

    def post_head(self, info: LedgerInfo, moment: str) -> None: ...

    def tag_attempt(self, attempt: int) -> None: ...

    def await_approval(self, run: ReleaseRun, request: Approval) -> None: ...

    def suspended(self, exc: BaseException) -> bool: ...

    def check_cluster(
        self, files: Mapping[str, Path], run_root: Path, ledger: PrivacyLedger
    ) -> None: ...

    def progress(self, product: str, run_id: str) -> RunProgress | None: ...

    def publish_audit(self, product: str, record: Mapping[str, Any], banner: str) -> None: ...

    def publish_privacy(
        self,
        product: str,
        accountants: Mapping[str, PrivacyAccountant],
        delta: float,
        banner: str,
    ) -> None: ...

    def publish_release(self, product: str, markdown: str, description: str) -> None: ...


# The steps that read the records: redone when a record file changed since the run read it.
READING_STEPS = ("validate", "geography", "spill")


class RecordsChanged(ValidationFailed):
    """The records about to be measured are not the records validated (or bound to the run):
    an input changed while the run ran. Nothing was drawn."""


APPROVAL_TIMEOUT_ENV = "DAS_APPROVAL_TIMEOUT_SECONDS"
DEFAULT_APPROVAL_TIMEOUT = 7 * 24 * 3600  # as long as an approval `das ledger approve` makes


def approval_timeout(environ: Mapping[str, str] | None = None) -> dt.timedelta:
    """How long the request a waiting run writes stays open (its expiry; then the run ends
    Refused): ``DAS_APPROVAL_TIMEOUT_SECONDS``, at least 10 s, at most the 90 days an
    approval may last."""
    environ = os.environ if environ is None else environ
    try:
        seconds = int(environ.get(APPROVAL_TIMEOUT_ENV, DEFAULT_APPROVAL_TIMEOUT))
    except ValueError:
        seconds = DEFAULT_APPROVAL_TIMEOUT
    return dt.timedelta(seconds=min(max(10, seconds), 90 * 24 * 3600))


def resolve_path(path: str | Path) -> Path:
    """An absolute path (``~`` expanded): parameters are resolved once, at the edge, so that
    nothing downstream depends on the working directory of a worker or a library."""
    return Path(path).expanduser().resolve()


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
                    "this run has passes " + ", ".join(passes) + ": name each cumulative total, "
                    f"e.g. {passes[0]}=<total>"
                )
            name = passes[0]
        try:
            parsed[name] = parse_total(str(text))
        except ValueError as exc:
            raise RunRefused(f"cumulative total of {name}: {exc}") from None
    return parsed


@dataclass
class ReleaseRun:
    """A run that passed every start check and owns its output; see the module docstring."""

    host: RunHost
    request: RunRequest
    inputs: RunInputs
    check: StartCheck
    folder: RunFolder
    audit: AuditRecorder
    lease: RunLease
    stager: ReleaseStager
    ledger: PrivacyLedger
    info: LedgerInfo
    state: RunState
    steps: RunSteps
    progress: RunProgress | None = None
    validated: dict[str, str] | None = None
    # the record files as they were when the run opened (RunInputs.identities)
    identities: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dataset: str | None = None
    passes: list[PassSpend] = field(default_factory=list)
    drawing: bool = False
    published: dict[str, Any] | None = None

    @property
    def product(self) -> str:
        return self.request.product

    @property
    def run_id(self) -> str:
        return self.folder.run_id

    @property
    def parameters(self) -> Any:
        return self.check.parameters

    @property
    def sealed(self) -> SealedParameters:
        return self.check.sealed

    @property
    def sealed_config(self) -> Path:
        """The run folder's copy of the sealed config (spec files beside it): what validation
        reads."""
        return self.sealed.copy_dir(self.folder.root) / "config.json"

    @property
    def markers(self) -> list[str]:
        return self.check.markers

    @property
    def banner(self) -> str:
        return marker_banner(self.markers)

    @property
    def staging(self) -> Path:
        return self.stager.staging

    @contextlib.contextmanager
    def stage(self, name: str, total: int = 1, skipped: bool = False) -> Iterator[None]:
        """A stage of the run: timed in the audit, shown in the progress (``total`` units;
        ``skipped`` when an earlier attempt completed it)."""
        progress = self.progress
        if progress is not None:
            progress.begin(name, total)
        wall, cpu = time.perf_counter(), time.process_time()
        with self.audit.stage(name):
            yield
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        # both cores busy? (the run's own log: how a stage used the machine, for its operator)
        curator_log(
            self.folder, "stage %s: %.1f s, %.1f CPU-s in the run's process (%.2f cores)",
            name, wall, cpu, cpu / wall if wall > 0 else 0.0,
        )  # fmt: skip
        if progress is not None:
            progress.end(name, skipped=skipped)

    def advance(self, name: str, units: int = 1) -> None:
        """``units`` of stage ``name`` done (states, a level, a bucket or a table)."""
        if self.progress is not None:
            self.progress.advance(name, units)

    @property
    def draws(self) -> DrawLedger:
        """What every noise store of this attempt answers to."""
        return DrawLedger(self.ledger, self.run_id, self.state.attempt, self.signer)

    @property
    def signer(self) -> RunSigner | None:
        """The run key that signs the entries a resume trusts (its spend, its draws)."""
        return None if self.check.run_key is None else RunSigner(self.check.run_key)

    def check_noise(self, files: Mapping[str, str]) -> None:
        """The noise files about to be read (or just read) are the ones the ledger recorded,
        unchanged (:meth:`DrawLedger.check_files`)."""
        self.draws.check_files(self.folder.noise_dir, files)

    @property
    def context(self) -> str:
        return self.host.started_from(self.request.context)

    def records_changed(self, message: str) -> RecordsChanged:
        self.ledger.release_reservation(self.run_id, "records changed")
        return RecordsChanged(message + " Nothing was drawn; the reservation was released.")

    def authorize(self, read: Mapping[str, str]) -> list[PassSpend]:
        """Prove the records read for measurement are the records validated, bind the run to
        their dataset in the ledger and count its spend (see the module docstring)."""
        now = self.inputs.identities()
        moved = sorted(n for n in self.identities if now.get(n) != self.identities[n])
        if moved:  # changed while the run read it (or since): what was read is no file's
            raise self.records_changed(
                f"the records read for measurement are not the records validated: "
                f"{', '.join(moved)} changed while the run ran."
            )
        if self.validated is not None:
            both = set(read) & set(self.validated)
            changed = sorted(name for name in both if read[name] != self.validated[name])
            if changed:
                raise self.records_changed(
                    f"the records read for measurement are not the records validated: "
                    f"{', '.join(changed)} changed while the run ran."
                )
        confidential = sorted(self.inputs.confidential)
        missing = [name for name in confidential if name not in read]
        if missing:
            raise RuntimeError(f"no fingerprint of {', '.join(missing)}")
        dataset = self.ledger.dataset_id(combine_fingerprints({n: read[n] for n in confidential}))
        files = {name: self.ledger.dataset_id(digest) for name, digest in sorted(read.items())}
        self.dataset = dataset
        production = self.check.production
        config_sha = self.sealed.sha256("config.json")
        unvalidated = (
            production
            and self.request.skip_validation
            and not self.state.counting
            and not self.ledger.passing_validation(self.product, dataset, config_sha)
        )
        if unvalidated:
            self.ledger.release_reservation(self.run_id, "skip-validation refused")
            raise LedgerRefused(
                "--skip-validation is refused in production unless the privacy ledger holds "
                "a passing validation of these very records under this config; none is "
                "recorded. Nothing was drawn",
                Remedy(
                    cli="run without --skip-validation (or validate them first: the validate "
                    "deployment, or `das validate` with the ledger configured)",
                    deployment="run with skip_validation = false",
                ),
            )
        totals = self.check.plan.pass_totals() if self.check.plan is not None else {}
        accepted = parse_cumulative(self.request.cumulative_total, list(totals))
        remedy = Remedy(command=approve_command(self.request)) if production else None
        try:
            passes = self._authorize(dataset, files, accepted, remedy)
        except ApprovalRequired as refusal:
            if not (production and self.context == "deployment"):
                raise
            # A deployment run asks its approvers and waits (the host's pause): it goes on
            # only once a quorum's signatures are in the ledger.
            self.host.await_approval(self, self.request_approval(refusal, files))
            passes = self._authorize(dataset, files, accepted, remedy)
        self.passes = passes
        self.host.post_head(self.ledger.info(), f"after run {self.run_id} authorized its spend")
        self.audit.update(
            privacy_ledger={
                **self.audit.record["privacy_ledger"],
                "dataset": dataset,
                "passes": [item.to_dict() for item in passes],
                "approval": (self.ledger.run(self.run_id) or self.state).approval,
                **self.ledger.spend_summary(self.run_id),
            },
            inputs={
                name: {"path": str(path), "id": files.get(name)}
                for name, path in sorted(self.inputs.records().items())
            },
        )
        logger = self.host.logger
        for item in passes:
            logger.info(
                "privacy ledger, dataset %s, pass %s: earlier %s + this run %s = cumulative %s "
                "(%s)", dataset[:16], item.pass_name, decimal_text(item.prior),
                decimal_text(item.this_run), decimal_text(item.cumulative), item.definition,
            )  # fmt: skip
        return passes

    def _reference(self, files: Mapping[str, str]) -> dict[str, str]:
        """The ids of the public files the run read (the GRF-C): an approval names them."""
        return {name: files[name] for name in sorted(self.inputs.reference) if name in files}

    def request_approval(self, refusal: ApprovalRequired, files: Mapping[str, str]) -> Approval:
        """The approval statement this run's approvers are asked to sign: the one it asked for
        in an earlier attempt (:meth:`PrivacyLedger.approval_request`: open, or rejected or
        expired while the run waited — it then ends Refused), else a new one in the ledger
        (unsigned: a request; signatures authorize, not the row), valid for
        ``DAS_APPROVAL_TIMEOUT_SECONDS``."""
        statement_of = self.ledger.approval_request(self.run_id)
        if statement_of is not None:
            return statement_of
        chain = self.ledger.charter_chain()
        plan = self.check.plan
        assert plan is not None
        statement = approval_statement(
            ledger_id=self.info.ledger_id,
            charter=chain.in_force,
            product=self.product,
            dataset=refusal.dataset,
            parameters={"digest": self.sealed.digest, "files": self.sealed.hashes()},
            definition=plan.definition,
            passes=refusal.passes,
            ceiling=refusal.ceilings[plan.definition],
            note=f"requested by run {self.run_id}",
            requested_by=f"flow run {self.host.flow_run_id()}",
            run_id=self.run_id,
            reference=self._reference(files),
            valid_for=approval_timeout(),
        )
        return self.ledger.record_approval(statement)

    def _authorize(
        self,
        dataset: str,
        files: Mapping[str, str],
        accepted: Mapping[str, Budget] | None,
        remedy: Remedy | None,
    ) -> list[PassSpend]:
        try:
            return self.ledger.authorize(
                self.run_id,
                dataset,
                production=self.check.production,
                accepted=accepted,
                files=files,
                input_stats=self.inputs.stats(),
                remedy=remedy,
                signer=self.signer,
                reference=self._reference(files),
            )
        except LedgerRefused as refusal:
            if "read other records" in str(refusal):
                raise self.records_changed(str(refusal)) from None
            raise

    def start_drawing(self) -> None:
        """From here on the run counts as spent in full (the ledger refuses draws before)."""
        if self.dataset is None:
            raise RunRefused("the run's records were never bound to a dataset; refusing to draw")
        self.ledger.start_drawing(self.run_id, self.state.attempt)
        self.drawing = True

    def publish(
        self,
        outputs: Mapping[str, Mapping[str, Any]],
        accountants: Mapping[str, PrivacyAccountant],
        delta: float,
    ) -> dict[str, Any]:
        """Audit and manifest into staging (the manifest carries the ledger head), one rename
        into place, the ledger completed, the privacy artifacts posted."""
        self.audit.update(outputs=dict(outputs))
        replaces = self.stager.replace_target()
        self.audit.update(release={"manifest": "MANIFEST.json", "replaces": replaces})
        record = self.audit.finish("succeeded")
        result = self.stager.publish(
            record,
            outputs,
            self.markers,
            seal=lambda content: self.ledger.seal_release(self.run_id, content),
            certify=self._certify,
        )
        if result["state"] == "published":
            self.ledger.complete(
                self.run_id, result["manifest_sha256"], str(self.folder.release_dir)
            )
        if result.get("replaced"):
            self.ledger.record_event(
                "release-replaced", result["replaced"], self.dataset, self.run_id
            )
        self.audit.update(release={**result, "replaces": replaces})
        self.published = result
        self.host.publish_privacy(self.product, accountants, delta, self.banner)
        self._release_artifact(result)
        return result

    def _certify(self, staging: Path, manifest: Mapping[str, Any]) -> None:
        """The release's certificate (:mod:`das.trust.certificate`), signed with the run key,
        written beside its MANIFEST just before the release is renamed into place."""
        assert self.check.run_key is not None and self.check.plan is not None
        proof = self.ledger.spend_proof(self.run_id)
        predicate = {
            "product": self.product,
            "run_id": self.run_id,
            "private": not self.markers,
            "markers": list(self.markers),
            "ledger": {"id": self.info.ledger_id, "sealed_at": manifest.get("ledger")},
            "charters": proof["charters"],
            "reference": proof["reference"],
            "approvals": proof["approvals"],
            "authorized_at": proof["authorized_at"],
            "production": proof["production"],
            "parameters": {"digest": self.sealed.digest, "files": self.sealed.hashes()},
            "dataset": self.dataset,
            "definition": self.check.plan.definition,
            "spend": [item.exact() for item in self.passes],
            "code_version": self.audit.record.get("code_version"),
        }
        certify(staging, predicate, self.check.run_key, manifest)

    def _release_artifact(self, result: Mapping[str, Any]) -> None:
        """Where the release is and what it is, on the run's page: the release folder, its
        MANIFEST and audit, the ledger entry it carries, and how to verify it."""
        release = self.folder.release_dir
        verdict = (
            "a private release"
            if not self.markers
            else (f"NOT A PRIVATE RELEASE ({', '.join(self.markers)})")
        )
        head = result.get("ledger") or {}
        where = (f"--ledger {self.ledger.store.path.parent}" if self.ledger.store.path
                 else "--url <ledger URL>")  # fmt: skip
        rows = [
            ("verdict", verdict),
            ("release folder", f"`{release}`"),
            ("MANIFEST", f"`{release / 'MANIFEST.json'}`"),
            ("audit", f"`{release / 'audit.json'}`"),
            ("run state (confidential)", f"`{self.folder.root}`"),
            ("privacy ledger", f"{self.info.location}, entry {head.get('seq')} "
             f"({str(head.get('hash'))[:16]}…)"),
            ("check it", f"`das ledger verify {where} --release {release}`"),
            ("attempt", str(self.state.attempt)),
        ]  # fmt: skip
        lines = [f"# {md_escape(self.product)} run {md_escape(self.run_id)}: "
                 f"{md_escape(result.get('state'))}", "", "| | |", "|---|---|"]  # fmt: skip
        lines += [f"| {label} | {value} |" for label, value in rows]
        with contextlib.suppress(Exception):  # the release is published whatever the UI shows
            self.host.publish_release(
                self.product,
                "\n".join(lines),
                f"{self.banner}{self.product}: the release is in {release}",
            )
        if self.progress is not None:
            self.progress.outcome = f"{result.get('state')} — {verdict} in {release}"


def _recorded_draws(ledger: PrivacyLedger, run_id: str, attempt: int) -> dict[str, int]:
    """Draws the ledger holds for the run: made by this attempt, and reused from earlier ones."""
    state = ledger.run(run_id)
    if state is None:
        return {"fresh": 0, "earlier_attempts": 0}
    fresh = sum(1 for d in state.draws.values() if d["attempt"] == attempt)
    return {"fresh": fresh, "earlier_attempts": len(state.draws) - fresh}


def _leave_waiting(run: ReleaseRun) -> None:
    """The run's process ends while the run waits for its approvers (nothing drawn): its run
    folder — the records read, the steps done — stays for the same run to go on from, and its
    audit says it waits (the next attempt writes its own)."""
    run.audit.write("waiting")
    run.host.logger.info(
        "%srun %s waits for its approvers without a process: nothing was drawn, and the run "
        "goes on from its completed steps once they decided", run.banner, run.run_id,
    )  # fmt: skip


def _remove_if_unused(folder: RunFolder, created: bool) -> None:
    """A refused run leaves no lock folder behind when it created the output's work folder."""
    if not created:
        return
    work = folder.work_dir
    leftovers = [p for p in work.iterdir() if p.name != "lock"] if work.is_dir() else []
    if not leftovers:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def release_run(
    host: RunHost, request: RunRequest, inputs: RunInputs, parse: Parse
) -> Iterator[ReleaseRun]:
    """Open, check and own a release run; see the module docstring."""
    run_id = request.run_id or host.flow_run_id()
    if not run_id:
        raise RunRefused("no run id was given and no Prefect flow run is active")
    try:
        check = check_start(request, inputs, parse, run_id)
    except LedgerUnavailable as exc:  # nothing opened yet: one line, no traceback
        fault = explain(exc, resume_hint(request.context, run_id), host.api_url())
        raise InfrastructureFault(fault.line if fault else str(exc)) from None
    opened = check.ledger
    ledger, info = opened.ledger, opened.info
    assert check.folder is not None
    folder = check.folder
    logger = host.logger
    if opened.created:
        logger.warning(
            "created a new privacy ledger at %s (it knows no earlier spend; outside production "
            "every run of this user records its spend there)", info.location,
        )  # fmt: skip
    notices = host.require_witnessed(ledger, info, check.production, run_id)
    for notice in notices:
        logger.warning("%s", notice)
    created_work = not folder.work_dir.exists()
    lock = OutputLock(folder.lock_path).acquire()
    try:
        state = ledger.open_run(check.opening(request, host.flow_run_id()))
        stager = ReleaseStager(folder, replace=request.replace_release)
        stager.check_target()
    except RunRefused:
        lock.release()
        _remove_if_unused(folder, created_work)
        raise
    except BaseException:
        lock.release()
        raise
    try:
        rerun = state.attempt > 1
        host.tag_attempt(state.attempt)
        folder.create()
        check.sealed.write_copy(folder.root)
        lease = new_lease(folder)
        stager.prepare()
        audit = AuditRecorder(request.product, run_id, folder.audit_path)
        steps = RunSteps(folder, audit.record["code_version"])
        if state.input_stats and state.input_stats != inputs.stats():
            steps.forget(*READING_STEPS)
            logger.info("a record file changed since this run read it: reading it again")
        randomness = describe_streams(request.seed)
        audit.update(
            parameters={
                **request.parameters,
                "output": str(folder.release_dir),
                "seed": request.seed,
                "rerun": rerun,
                "attempt": state.attempt,
                "flow_run_id": host.flow_run_id(),
                "run_folder": str(folder.root),
                "replace_release": request.replace_release,
            },
            randomness={**randomness, "release_private": not check.markers},
            markers=check.markers,
            identity={**state.binding, "sealed_files": check.sealed.hashes()},
            config={"sha256": check.sealed.sha256("config.json"), "path": str(request.config_path)},
            inputs={name: {"path": str(path)} for name, path in sorted(inputs.records().items())},
            privacy_ledger={
                "ledger": info.location,
                "ledger_id": info.ledger_id,
                "production": check.production,
                "created_now": opened.created,
                "notices": notices,
                "dataset": state.dataset,
                "passes": [item.to_dict() for item in state.passes],
            },
        )
        run = ReleaseRun(
            host, request, inputs, check, folder, audit, lease, stager, ledger, info, state,
            steps, host.progress(request.product, run_id), identities=inputs.identities(),
        )  # fmt: skip
        with run_log_file(folder.log_path):
            logger.info(
                "%srun %s (%s, attempt %d) of %s; privacy ledger %s", run.banner, run_id,
                "resumed" if rerun else "new run", state.attempt, request.product, info.location,
            )  # fmt: skip
            try:
                # Tasks on an existing Dask cluster read the records and the run folder by path.
                host.check_cluster(inputs.records(), folder.root, ledger)
                yield run
                if run.published is None:
                    raise RuntimeError("the flow ended without publishing its release")
                if run.progress is not None:
                    run.progress.finish(run.progress.outcome)
            except BaseException as exc:
                if host.suspended(exc):
                    _leave_waiting(run)
                    raise
                fault = explain(exc, resume_hint(run.context, run_id), host.api_url())
                with contextlib.suppress(Exception):  # the ledger may be what failed
                    if not run.drawing:
                        ledger.release_reservation(run_id, type(exc).__name__)
                    after = ledger.run(run_id)
                    if after is not None and not after.counting:
                        # it never drew: nothing resumes from its copy of the records
                        forget_records(folder.root)
                    ledger.record_failure(run_id, state.attempt, type(exc).__name__)
                if audit.record["ledger"] is None:
                    with contextlib.suppress(Exception):  # ids need the ledger's key
                        partitions = folder.stored_accountants()
                        audit.update(ledger={"partitions": {
                            name: ledger.public_accountant(item)
                            for name, item in partitions.items()
                        }})  # fmt: skip
                if audit.record["draws"] is None:
                    with contextlib.suppress(Exception):
                        audit.update(draws=_recorded_draws(ledger, run_id, state.attempt))
                refused = isinstance(exc, RunRefused)
                record = audit.write("refused" if refused else "failed", exc)
                if refused:  # a refusal is a decision, not an error: its state says it
                    logger.warning("%srun %s refused: %s", run.banner, run_id, exc)
                else:
                    logger.error("%srun %s failed: %s", run.banner, run_id,
                                 fault.line if fault else type(exc).__name__)  # fmt: skip
                with contextlib.suppress(Exception):
                    host.publish_audit(request.product, record, run.banner)
                with contextlib.suppress(Exception):  # the server may be what failed
                    host.post_head(ledger.info(), f"after run {run_id} ended ({record['status']})")
                if fault is not None and isinstance(exc, Exception):
                    raise InfrastructureFault(fault.line) from exc
                raise
            record = audit.save()
            host.publish_audit(request.product, record, run.banner)
            host.post_head(ledger.info(), f"after run {run_id} published its release")
            logger.info(
                "%srun %s succeeded: release %s (%s)", run.banner, run_id,
                folder.release_dir, run.published["state"],
            )  # fmt: skip
    finally:
        lock.release()
