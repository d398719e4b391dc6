"""Where a run keeps its state: under a state root, never inside an output or a release.

Layout, for ``--output OUT`` and the state root ``STATE`` (``DAS_STATE_DIR``, else
``${XDG_STATE_HOME:-~/.local/state}/das``; a deployment's is ``<root>/state``)::

    OUT/                            the release: appears whole (one rename) or not at all
    OUT.das/                        beside the release, on its file system (for the rename);
        lock                        held (flock) by the one run writing OUT
        staging/<run-id>/           the release being built (released values only)
        replaced/<run-id>-<time>/   earlier releases moved aside by an explicit replace
    STATE/runs/<run-id>/            the run's confidential state:
        sealed/<digest>/            the run's parameters frozen at its start (validation reads them)
        lease                       the token of the attempt that owns the run now
        noise/<measurement>.<token>.npy  one int64 noise vector per measurement drawn; the
                                    privacy ledger records which file and its digest
        accountants/<partition>.json  each partition's accountant (level, table): budgets,
                                    digests
        work/                       spilled records, true counts (reading and counting steps)
        validation/                 the validation report of this run (curator only)
        run.log                     the run's local log (the curator's; may hold record counts)
        audit.json                  the audit of the latest attempt, failed ones included
        <name>.seed                 seeds a rerun must reuse (e.g. statistical postprocessing)

Noise vectors and spilled records are confidential (noise + a released count gives the true
count): the state root stays inside the secure enclave with the inputs, and is never inside an
output (:func:`check_output_place`) nor inside or beside a release or under a work folder
(:func:`check_state_place`, resolved), so publishing a release — or a folder of releases —
never publishes run state. `das runs clean` removes what the ledger no longer needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.io.atomic import atomic_write_text

WORK_SUFFIX = ".das"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def new_run_id() -> str:
    """A fresh run id: UTC timestamp plus 8 random hex digits (sortable, collision-free)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def safe_name(name: str) -> str:
    """File-name form of a ledger name: "US/USA/1/stage-1" → "US__USA__1__stage-1"."""
    return _UNSAFE.sub("_", name.replace("/", "__"))


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f"Invalid run id {run_id!r}: use letters, digits, '.', '_', '-' (≤ 128)")
    return run_id


def work_dir_of(output: str | Path) -> Path:
    """``OUT.das``: the sibling folder of the release that holds its lock and staging."""
    output = Path(output).absolute()
    return output.with_name(output.name + WORK_SUFFIX)


STATE_ENV = "DAS_STATE_DIR"


def state_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where runs keep their confidential state: ``DAS_STATE_DIR``, else the per-user
    ``${XDG_STATE_HOME:-~/.local/state}/das``."""
    environ = os.environ if environ is None else environ
    named = environ.get(STATE_ENV)
    if named:
        return Path(named).expanduser().absolute()
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser().absolute() / "das"


def _release_files() -> tuple[str, ...]:
    from das.trust import CERTIFICATE, MANIFEST

    return (MANIFEST, CERTIFICATE)


def check_state_place(state: Path) -> None:
    """Refuse a state root that publishing a release would publish: at or under a folder that
    holds a release (its ``MANIFEST.json`` or certificate), under a run's work folder
    (``*.das``), or in a folder of releases (beside one) — checked on the resolved path, so a
    link into one of them is refused too. Said by name."""
    from das.refusal import RunRefused

    named = Path(state)
    state = named.resolve()
    via = f" (through {named})" if named.absolute() != state else ""
    for folder in (state, *state.parents):
        held = [name for name in _release_files() if (folder / name).exists()]
        if held:
            raise RunRefused(
                f"the runs' state root {state}{via} ({STATE_ENV}) is "
                + ("the published release" if folder == state else "inside the published release")
                + f" {folder} (it holds {held[0]}): run state — noise, spilled records, true "
                "counts — would be published with it. Choose a state root outside every release"
            )
        if folder.name.endswith(WORK_SUFFIX):
            raise RunRefused(
                f"the runs' state root {state}{via} ({STATE_ENV}) is inside {folder}, a run's "
                "work folder (lock, staging of a release). Choose a state root outside it"
            )
    with contextlib.suppress(OSError):
        for sibling in sorted(state.parent.iterdir()):
            if (
                sibling != state
                and sibling.is_dir()
                and any((sibling / name).is_file() for name in _release_files())
            ):
                raise RunRefused(
                    f"the runs' state root {state}{via} ({STATE_ENV}) is beside the release "
                    f"{sibling}, in a folder of releases: publishing that folder would publish "
                    "run state. Choose a state root outside it"
                )


def _links_below(root: Path, parts: tuple[str, ...]) -> list[Path]:
    """The symbolic links on the way from ``root`` down ``parts`` (the first one met), else
    those anywhere under the folder they lead to (not followed)."""
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            return [path]
    found: list[Path] = []
    for folder, dirs, files in os.walk(path):  # links are not followed, only listed
        found += [Path(folder) / n for n in (*dirs, *files) if (Path(folder) / n).is_symlink()]
    return sorted(found)


def check_output_place(output: Path, state: Path) -> None:
    """Refuse an output that would put a release where run state or another release is: inside
    a release (a folder holding a MANIFEST.json), inside a run's work folder (``*.das``), inside
    the state root or beside it (its folder is a folder of releases) — or an output that holds
    the state root; and a state root a release could carry out (:func:`check_state_place`).
    Said by name; resolved."""
    from das.refusal import RunRefused

    check_state_place(state)
    # resolved: a state root reached through a symbolic link is still the state root
    output = Path(output).resolve()
    state = Path(state).resolve()
    if output == state or state.is_relative_to(output):
        raise RunRefused(
            f"the output {output} would hold the runs' state root {state} ({STATE_ENV}): run "
            "state (records, noise) must never be inside a release. Choose another output"
        )
    if output.is_relative_to(state):
        raise RunRefused(
            f"the output {output} is inside the runs' state root {state} ({STATE_ENV}), where "
            "confidential run state lives. Choose an output outside it"
        )
    if output.parent == state.parent:
        # An output's folder is a folder of releases (the ledger's check reads an output's
        # siblings as its fellow releases): publishing it would publish the state root too.
        raise RunRefused(
            f"the output {output} is beside the runs' state root {state} ({STATE_ENV}), in "
            f"{output.parent}: that is the folder of its releases, and publishing it would "
            "publish run state — noise, spilled records, true counts. Choose a state root "
            f"outside the releases folder ({STATE_ENV}; unset, the default "
            "${XDG_STATE_HOME:-~/.local/state}/das), or outputs in a folder of their own"
        )
    other = _state_root_beside(output)
    if other is not None:
        raise RunRefused(
            f"the output {output} is beside {other}, the state root of other runs (it holds "
            f"their runs/): {output.parent} is the folder of its releases, and publishing it "
            "would publish their run state — noise, spilled records, true counts. Move that "
            "state root out of the releases folder, or choose an output in a folder of its own"
        )
    for ancestor in output.parents:
        if (ancestor / "MANIFEST.json").is_file():
            raise RunRefused(
                f"the output {output} is inside the published release {ancestor}: a release "
                "inside a release would mix their files (and its run state would sit in the "
                "published folder). Choose an output outside it"
            )
        if ancestor.name.endswith(WORK_SUFFIX):
            raise RunRefused(
                f"the output {output} is inside {ancestor}, a run's work folder (lock, staging). "
                "Choose an output outside it"
            )


def _state_root_beside(output: Path) -> Path | None:
    """A folder beside ``output`` that is a state root — another run's, under another
    ``DAS_STATE_DIR`` (it holds ``runs/``, where run folders live) — or None."""
    with contextlib.suppress(OSError):
        for sibling in sorted(output.parent.iterdir()):
            if sibling != output and (sibling / "runs").is_dir():
                return sibling
    return None


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run (``output`` made absolute; ``state``: the state root, by default
    :func:`state_root`); :meth:`create` makes them."""

    output: Path
    run_id: str
    state: Path | None = None

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        object.__setattr__(self, "output", Path(self.output).absolute())
        state = state_root() if self.state is None else Path(self.state).absolute()
        object.__setattr__(self, "state", state)

    @property
    def release_dir(self) -> Path:
        return self.output

    @property
    def work_dir(self) -> Path:
        return work_dir_of(self.output)

    @property
    def lock_path(self) -> Path:
        return self.work_dir / "lock"

    @property
    def root(self) -> Path:
        """The run's confidential state (see the module docstring)."""
        assert self.state is not None
        return self.state / "runs" / self.run_id

    @property
    def staging_dir(self) -> Path:
        return self.work_dir / "staging" / self.run_id

    @property
    def replaced_dir(self) -> Path:
        return self.work_dir / "replaced"

    @property
    def noise_dir(self) -> Path:
        return self.root / "noise"

    @property
    def accountants_dir(self) -> Path:
        return self.root / "accountants"

    @property
    def validation_dir(self) -> Path:
        return self.root / "validation"

    @property
    def log_path(self) -> Path:
        return self.root / "run.log"

    @property
    def audit_path(self) -> Path:
        """The audit of the latest attempt (a published release carries its own copy)."""
        return self.root / "audit.json"

    @property
    def lease_path(self) -> Path:
        return self.root / "lease"

    def exists(self) -> bool:
        """True when a run with this id has left state behind (a rerun)."""
        return self.root.is_dir()

    def check_place(self) -> None:
        """Refuse (RunRefused) to keep this run's state where a release would carry it: the
        state root as :func:`check_state_place` says, and no link from it down to what the run
        writes — ``runs``, the run folder and everything in it (a pre-made run folder, its
        ``noise`` or ``work``) — since only the state root itself is resolved: a ``runs`` link
        into a published release would put the run's noise and records there."""
        from das.refusal import RunRefused

        assert self.state is not None
        check_state_place(self.state)
        links = _links_below(self.state.resolve(), ("runs", self.run_id))
        if links:
            path = links[0]
            raise RunRefused(
                f"the run folder {self.root} reaches {path}, a link to {path.resolve()}: run "
                "state — noise, spilled records, true counts — is written only in the state "
                f"root's own folders, never through a link (it may lead into a release). "
                f"Remove the link, or choose another state root ({STATE_ENV})"
            )

    def create(self) -> RunFolder:
        self.check_place()  # never create run state where a release would carry it
        for folder in (self.noise_dir, self.accountants_dir, self.validation_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    def accountant_path(self, partition: str) -> Path:
        return self.accountants_dir / f"{safe_name(partition)}.json"

    def stored_accountants(self) -> dict[str, Any]:
        """Partition accountants persisted so far (digests and budgets only): the audit of a
        failed run lists what is on disk, whoever drew it."""
        if not self.accountants_dir.is_dir():
            return {}
        return {
            path.stem: json.loads(path.read_text())
            for path in sorted(self.accountants_dir.glob("*.json"))
        }

    def noise_path(self, measurement_name: str) -> Path:
        return self.noise_dir / f"{safe_name(measurement_name)}.npy"

    def persistent_seed(self, name: str) -> int:
        """A 63-bit seed drawn from OS entropy on the first call and reread on every rerun, so
        that a resumed run's Monte Carlo steps give the same release as an uninterrupted one.
        (Not privacy noise: for postprocessing of released values only.)"""
        path = self.root / f"{safe_name(name)}.seed"
        if not path.is_file():
            atomic_write_text(path, f"{secrets.randbits(63)}\n")
        return int(path.read_text().strip())
