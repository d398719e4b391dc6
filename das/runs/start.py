"""The start of a release run: every check that needs no record, in one place.

:func:`check_start` is what a run passes before it takes its output, before a Prefect API or a
Dask cluster is started by ``das run``, and again (authoritatively) inside the flow, whatever
started it. In order, none reading a confidential record:

1. ``DAS_PRODUCTION`` (an unknown value refuses) and what it refuses by itself (a seed);
2. the inputs are regular files (a named pipe, a device, a directory or a dangling link is
   refused by name at once: a reader would block or fail late);
3. the parameters are sealed (:mod:`das.runs.seal`) and parsed once; the plan is built from them;
4. the privacy ledger: configured, initialized and intact (:mod:`das.trust`). A chartered
   ledger makes the run a production run, whatever ``DAS_PRODUCTION`` says; its charter must be
   in force, and the run's signing key (:mod:`das.trust.run_keys`) one of the charter's runners;
5. the production policy (no seed, no infinite budget, no command-line cumulative total);
6. the output's place: never inside a release, a run's work folder or the state root, and the
   releases beside it were recorded in this ledger;
7. the run id: when it names an existing run, the ledger's binding (output, product, sealed
   parameters, budgets, seed mode) must match;
8. in production, outside a deployment run (which waits for approvers instead), an approval of
   these sealed parameters signed by a quorum must be open — the check of the dataset's own
   totals needs the records and comes after they are read;
9. an existing release is never overwritten, and the output has no live run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from das.io.tables import not_a_regular_file
from das.privacy.accounting import Measurement, compose
from das.privacy.mechanisms import Budget
from das.production import production_mode
from das.refusal import Remedy, RunRefused
from das.runs.folder import RunFolder, check_output_place, check_run_id
from das.runs.policy import check_release_policy, privacy_markers
from das.runs.release import OutputLock, ReleaseStager
from das.runs.seal import SealedParameters, seal_files
from das.trust import (
    LEDGER_ENV,
    RUN_KEY_ENV,
    ApprovalRequired,
    LedgerRefused,
    OpenedLedger,
    PublicKey,
    RunOpening,
    RunState,
    anchor_remedy,
    check_pinned_roots,
    configured_store,
    open_ledger,
    release_anchor_problems,
    run_key,
)

RUN_ID_FIELD = "{run_id}"
PREFLIGHT_RUN_ID = "preflight"  # stands for the run id a flow run will get
CONTEXTS = ("cli", "deployment", "python")


def seed_mode(seed: int | None) -> str:
    """``"secure"`` or ``"seeded:<seed>"``: a seeded draw must never be relabelled secure."""
    return "secure" if seed is None else f"seeded:{seed}"


def release_folder(output: Path, run_id: str) -> Path:
    """The release folder of a run: ``output`` with ``{run_id}`` replaced by the run id.

    A deployment whose ``output`` is ``.../releases/{run_id}`` publishes every run (a scheduled
    one included) into a new folder, while Prefect's Retry of a run, which keeps its flow-run
    id, resumes the same one. Any other brace is refused: it is a typo, not a folder name."""
    text = str(output)
    if text.replace(RUN_ID_FIELD, "").count("{") or text.replace(RUN_ID_FIELD, "").count("}"):
        raise RunRefused(f"output {text!r}: the only placeholder allowed is {RUN_ID_FIELD}")
    return Path(text.replace(RUN_ID_FIELD, run_id))


def found_inputs(
    data_dir: str | Path, resolvers: Iterable[Callable[[str | Path], Path]]
) -> dict[str, Path]:
    """name → path of each input file a resolver finds in ``data_dir``; a missing or ambiguous
    one is left out here (validation and the loader report it)."""
    paths: dict[str, Path] = {}
    for resolve in resolvers:
        try:
            path = resolve(data_dir)
        except (FileNotFoundError, ValueError):
            continue
        paths[path.name] = path
    return paths


@dataclass(frozen=True)
class RunInputs:
    """Every file a run reads, by role. ``parameters`` (name → path) are sealed at the start;
    ``confidential`` records key the privacy ledger (by their canonical fingerprint);
    ``reference`` files (the GRF-C) are public. ``candidates`` are every path where an input
    could be (``.txt`` / ``.csv`` / ``.parquet``), checked to be regular files at once."""

    data_dir: Path
    parameters: Mapping[str, Path]
    confidential: Mapping[str, Path] = field(default_factory=dict)
    reference: Mapping[str, Path] = field(default_factory=dict)
    candidates: tuple[Path, ...] = ()

    def records(self) -> dict[str, Path]:
        return {**self.reference, **self.confidential}

    def stats(self) -> dict[str, list[int]]:
        """(size, mtime_ns, inode) of each record file: a resume compares them, and re-reads
        (re-fingerprints) a file that changed since the run read it."""
        result = {}
        for name, path in sorted(self.records().items()):
            info = Path(path).stat()
            result[name] = [info.st_size, info.st_mtime_ns, info.st_ino]
        return result

    def identities(self) -> dict[str, tuple[int, ...]]:
        """(device, inode, size, mtime_ns, ctime_ns) of each record file that exists.

        A file changed in place changes its times (its ctime even when the mtime is set
        back), one renamed over it has another inode: a run takes them before it reads the
        records and compares them before it authorizes its spend, so records that changed
        while it read them, or after, are never measured (:meth:`das.runs.lifecycle.
        ReleaseRun.authorize`)."""
        result = {}
        for name, path in sorted(self.records().items()):
            try:
                info = Path(path).stat()
            except OSError:
                continue
            result[name] = (
                info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
            )  # fmt: skip
        return result


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
    """What the operator asked for: the flow's parameters, paths already resolved.
    ``context`` says where the run was started (``cli``, ``deployment``, ``python``): a
    refusal tells the next step in that syntax."""

    product: str
    output: Path
    seed: int | None
    run_id: str | None
    parameters: Mapping[str, Any]
    cumulative_total: Mapping[str, str] | None = None
    replace_release: bool = False
    skip_validation: bool = False
    context: str = "python"
    config_path: Path | None = None
    data_dir: Path | None = None


Parse = Callable[[SealedParameters], Any]  # sealed files -> the product's parsed parameters


def approve_command(request: RunRequest) -> str:
    """The exact ``das ledger approve`` command an approver runs for this run's config, spec
    files, coterminous file and records."""
    store = configured_store()
    where = ""
    if store is not None and store.path is not None and os.environ.get(LEDGER_ENV):
        where = f" --ledger {store.path.parent}"
    elif store is not None and store.path is None:
        where = ' --url "$DAS_LEDGER_URL"'
    coterminous = request.parameters.get("coterminous")
    extra = f" --coterminous {coterminous}" if coterminous else ""
    return (
        f"each approver (a quorum of the charter) runs: das ledger approve --product "
        f"{request.product} --config {request.config_path} --data {request.data_dir}{extra}"
        f'{where} --key <their approver key> --note "why this release"'
    )


@dataclass
class StartCheck:
    """What the start checks found: everything a run needs before it reads a record."""

    production: bool
    sealed: SealedParameters
    parameters: Any | None
    plan: RunPlan | None
    markers: list[str]
    ledger: OpenedLedger
    run_id: str | None
    folder: RunFolder | None
    existing: RunState | None
    run_key: Path | None = None  # the file of the key that signs the release's certificate

    def opening(self, request: RunRequest, flow_run_id: str | None) -> RunOpening:
        assert self.run_id is not None and self.folder is not None
        totals = self.plan.pass_totals() if self.plan is not None else {}
        definition = self.plan.definition if self.plan is not None else "unplanned"
        return RunOpening(
            run_id=self.run_id,
            product=request.product,
            output=str(self.folder.release_dir),
            config_sha256=self.sealed.sha256("config.json"),
            seal=self.sealed.digest,
            definition=definition,
            budgets=totals,
            seed_mode=seed_mode(request.seed),
            markers=tuple(self.markers),
            flow_run_id=flow_run_id,
        )


def binding_changes(state: RunState, opening: RunOpening) -> list[str]:
    """How ``opening`` differs from what the ledger bound the run id to (empty: a resume)."""
    return [
        f"{key} {state.binding.get(key)!s:.60} → {value!s:.60}"
        for key, value in opening.binding().items()
        if state.binding.get(key) != value
    ]


def check_inputs_regular(inputs: RunInputs) -> None:
    problems = [
        problem
        for path in (*inputs.candidates, *inputs.records().values())
        if (problem := not_a_regular_file(path)) is not None
    ]
    if problems:
        raise RunRefused("input files must be regular files: " + "; ".join(dict.fromkeys(problems)))


def check_start(
    request: RunRequest, inputs: RunInputs, parse: Parse, run_id: str | None
) -> StartCheck:
    """The checks of the module docstring, in order; :class:`RunRefused` on the first that
    fails (nothing read from the records, nothing written but a new per-user ledger outside
    production)."""
    if request.context not in CONTEXTS:
        raise ValueError(f"unknown run context {request.context!r}")
    # What needs no parameter file first (a seed under DAS_PRODUCTION, the ledger setting).
    check_release_policy(request.seed, (), cumulative_total=request.cumulative_total)
    check_inputs_regular(inputs)
    sealed = seal_files(inputs.parameters)
    parameters = parse(sealed)
    plan: RunPlan | None = None if parameters is None else parameters.run_plan()
    measurements = plan.measurements if plan is not None else ()
    ledger = open_ledger()
    production = production_mode() or ledger.production
    check_pinned_roots(
        ledger.info.ledger_id, ledger.chain.chain, ledger.info.location, production=production
    )
    check_release_policy(
        request.seed, measurements, cumulative_total=request.cumulative_total,
        production=production,
    )  # fmt: skip
    markers = privacy_markers(request.seed, measurements)
    key_path, key = run_key(create=not production)
    if production:
        check_charter_for_runs(ledger, key)
    folder = existing = None
    if run_id is not None:
        check_run_id(run_id)
        folder = RunFolder(release_folder(request.output, run_id), run_id)
        existing = ledger.ledger.run(run_id)
    elif RUN_ID_FIELD not in str(request.output):
        # Before a flow run exists (`das run` without --run-id): the output is known already.
        folder = RunFolder(request.output, PREFLIGHT_RUN_ID)
    if folder is not None:
        assert folder.state is not None
        check_output_place(folder.release_dir, folder.state)
        folder.check_place()
        anchors = release_anchor_problems(ledger.ledger, ledger.info, folder.release_dir)
        if anchors:
            raise LedgerRefused(
                f"privacy ledger {ledger.info.location} is not the ledger of the releases "
                f"beside this output (in {folder.release_dir.parent}): "
                + "; ".join(anchors)
                + ". Nothing was drawn",
                anchor_remedy(ledger.info, folder.release_dir),
            )
    check = StartCheck(
        production, sealed, parameters, plan, markers, ledger, run_id, folder, existing, key_path
    )
    if existing is not None:
        changes = binding_changes(existing, check.opening(request, None))
        if changes:
            raise LedgerRefused(
                f"run id {run_id} is bound in the ledger to another run ("
                + "; ".join(changes)
                + "). Its noise was drawn for that run; start a new run (new run id)"
            )
    resuming_spend = existing is not None and existing.counting
    if (
        production
        and plan is not None
        and request.context != "deployment"
        and not resuming_spend
        and not ledger.ledger.has_open_approval(request.product, sealed.digest)
    ):
        held = ledger.ledger.approval_holders(request.product, sealed.digest)
        raise ApprovalRequired(
            f"no approval of these sealed parameters (config, spec files, coterminous file: "
            f"{sealed.digest[:12]}) for {request.product} signed by a quorum of approvers is "
            f"open in the privacy ledger {ledger.info.location}: in production every spend is "
            "approved before the run"
            + (
                ". The approval of these parameters went to " + "; ".join(h.line for h in held)
                if held
                else ""
            )
            + ". Nothing was read or drawn",
            # a run that took the approval and can go on is the way out, not a second approval
            Remedy(command=held[0].way) if held else Remedy(command=approve_command(request)),
            [],
            ledger.info.ceilings,
            "",
        )
    if folder is not None:
        if OutputLock.held_elsewhere(folder.lock_path):
            raise RunRefused(
                f"another run is writing this output (lock {folder.lock_path} is held); wait "
                "for it to finish, or choose another output"
            )
        ReleaseStager(folder, replace=request.replace_release).check_target()
    return check


def check_charter_for_runs(ledger: OpenedLedger, key: PublicKey) -> None:
    """A production run needs its ledger's charter in force and its own signing key among the
    charter's runners: otherwise its release could prove nothing."""
    chain = ledger.chain
    if chain.in_force is None:
        pending = chain.pending
        raise LedgerRefused(
            f"the charter of privacy ledger {ledger.info.location} is not in force yet"
            + (
                f" (charter {pending.digest[:16]} needs {pending.quorum} approvers' signatures)"
                if pending is not None
                else ""
            )
            + ": nothing can be spent before it is. Nothing was read or drawn",
            Remedy(command="each approver: das ledger charter sign --key <their approver key>"),
        )
    if key not in chain.in_force.runners:
        raise LedgerRefused(
            f"this run's signing key {key.fingerprint} ({RUN_KEY_ENV}) is not a runner of the "
            f"charter in force of privacy ledger {ledger.info.location}: a release it signed "
            "could not be proven. Nothing was read or drawn",
            Remedy(
                command=f"run as the service account whose key the charter names (set "
                f"{RUN_KEY_ENV}), or have the approvers add this key: das ledger charter propose "
                "--runner-key <its .pub file> --key <approver key>"
            ),
        )
