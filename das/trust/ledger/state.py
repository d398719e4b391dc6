"""What the ledger's entries mean: the fold of entries into the state of a run and a ledger.

Nothing is ever updated in the ledger; a run's state, a ledger's identity and its approvals
are folds over entries. The ledger writes a run's entries in one order — ``run-opened`` →
``spend-authorized`` → ``drawing-started`` → ``draw-charged``/``draw-recorded`` →
``release-sealed`` → ``run-completed``; ``run-released`` only before the first draw; a
``run-resumed`` per new attempt. Runs in status ``authorized``, ``drawing`` or ``completed``
count as spent in full: a run killed after authorization may have drawn, and resuming it spends
nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from das.privacy.mechanisms import Budget, fraction_text, parse_fraction_text
from das.trust.ledger.amounts import PassSpend
from das.trust.ledger.store import Entry

LEDGER_FORMAT = "das-ledger/1"
COUNTING = ("authorized", "drawing", "completed")  # statuses that count as spent

# Every kind of entry the ledger holds, in the order a ledger's life writes them, with what it
# means. The documentation's page of entry kinds is generated from this; tests/test_docs.py
# fails when the code appends a kind this does not list, or this lists one nothing appends.
ENTRY_KINDS: dict[str, str] = {
    "init": "The ledger's first entry: its random id, its ceilings per pass, who created it, "
    "and the SHA-256 commitment to its secret key (which keys the dataset ids).",
    "charter": "A charter proposed: the approvers' OpenSSH public keys, the quorum, the "
    "runners' (run keys') public keys and the ceilings, continuing the charter in force; with "
    "the proposer's signature. In force once a quorum of the approvers it must satisfy signed.",
    "charter-signature": "Another approver's signature of a proposed charter.",
    "approval": "An approval statement (ledger, charter, product, dataset, sealed-parameters "
    "digest, per pass earlier/this-run/cumulative, expiry, note) with the signatures given "
    "with it; a deployment run waiting for its approvers writes its request with none. "
    "Authorizes one run once a quorum of the charter in force signed it.",
    "approval-signature": "An approver's signature added to an approval statement.",
    "approval-rejected": "An approval rejected (who, as typed; why; where): it authorizes "
    "nothing, and a run waiting for it ends Refused.",
    "approval-withdrawn": "An approval request closed because the run that asked for it was "
    "cancelled or deleted while it waited (why; by what): it authorizes nothing, no signature "
    "can be added, and a Retry of that run asks for a new approval.",
    "validation": "A validation verdict of a dataset under a config (valid or not, counts "
    "and the names of failed checks; no value).",
    "run-opened": "A run id bound to its output, product, sealed parameters, budgets and seed "
    "mode (status reserved).",
    "run-resumed": "A new attempt of a run that presents the same binding (a resume, a Retry).",
    "spend-authorized": "The run bound to the dataset it read, with per pass the earlier, "
    "this-run and cumulative totals, the approval it spends and its signers, the charter and "
    "the ceiling: from here its spend counts.",
    "drawing-started": "The run starts drawing noise: from here its spend counts in full, "
    "whatever happens.",
    "draw-charged": "A measurement charged before its noise exists.",
    "draw-recorded": "A measurement's noise file and its SHA-256, recorded after the draw; a "
    "resume reuses a noise file only when it matches this record.",
    "run-released": "A run that stopped before its first draw returned its reservation (and "
    "its approval); by hand (`das ledger release`) with who and why.",
    "run-failed": "An attempt failed (its error's type).",
    "refused": "A refused run (product, reason): the trail of what did not become a spend.",
    "release-sealed": "The content digest of a run's release, recorded before MANIFEST.json is "
    "written; the MANIFEST carries this entry's number and hash (the release's anchor).",
    "release-replaced": "An earlier release moved aside by `--replace-release`.",
    "run-completed": "The release published, with its MANIFEST's SHA-256 and where it is.",
}


@dataclass(frozen=True)
class LedgerInfo:
    """What identifies a ledger: its id, ceilings, where it is, its head."""

    ledger_id: str
    location: str
    ceilings: dict[str, Fraction]
    head_seq: int
    head_hash: str
    created: str
    created_by: str

    def head(self) -> dict[str, Any]:
        return {"id": self.ledger_id, "seq": self.head_seq, "hash": self.head_hash}


def ledger_info(first: Entry, head: Entry, location: str) -> LedgerInfo:
    """A ledger's identity from its ``init`` entry and its head."""
    data = first.payload
    return LedgerInfo(
        ledger_id=str(data["ledger_id"]),
        location=location,
        ceilings={d: Fraction(v) for d, v in data["ceilings"].items()},
        head_seq=head.seq,
        head_hash=head.hash,
        created=first.at,
        created_by=str(data.get("by", "")),
    )


@dataclass(frozen=True)
class RunOpening:
    """What a run declares when it opens: the ledger binds its run id to all of it."""

    run_id: str
    product: str
    output: str
    config_sha256: str
    seal: str
    definition: str
    budgets: Mapping[str, Budget]
    seed_mode: str
    markers: tuple[str, ...]
    flow_run_id: str | None = None

    @property
    def not_private(self) -> bool:
        return bool(self.markers)

    def binding(self) -> dict[str, Any]:
        """The fields a resume must present unchanged."""
        return {
            "product": self.product,
            "output": self.output,
            "config_sha256": self.config_sha256,
            "seal": self.seal,
            "definition": self.definition,
            "budgets": {name: fraction_text(b) for name, b in sorted(self.budgets.items())},
            "seed_mode": self.seed_mode,
        }


@dataclass
class RunState:
    """A run as the ledger's entries tell it."""

    run_id: str
    binding: dict[str, Any]
    markers: tuple[str, ...]
    attempt: int
    status: str
    dataset: str | None = None
    passes: list[PassSpend] = field(default_factory=list)
    approval: str | None = None
    input_stats: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    charged: dict[str, int] = field(default_factory=dict)  # name -> attempt
    draws: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {digest, size, file}
    sealed_release: dict[str, Any] | None = None
    completed: dict[str, Any] | None = None
    manifests: list[str] = field(default_factory=list)  # every MANIFEST it published
    opened: str = ""
    flow_run_id: str | None = None  # of the latest attempt, when a Prefect flow run made it
    last_at: str = ""  # the time of the run's newest entry
    last_draw_at: str | None = None
    ended: dict[str, Any] | None = None  # why it was released or failed last, and by whom
    production: bool | None = None  # whether its spend was authorized as a production spend
    # entries this code never writes in that order (a forged, well-hashed append): ignored
    # when they would lower the spend, and named by verify()
    out_of_order: list[str] = field(default_factory=list)

    @property
    def counting(self) -> bool:
        return self.status in COUNTING

    @property
    def product(self) -> str:
        return str(self.binding["product"])

    @property
    def output(self) -> str:
        return str(self.binding["output"])

    @property
    def definition(self) -> str:
        return str(self.binding["definition"])

    @property
    def budgets(self) -> dict[str, Budget]:
        return {k: parse_fraction_text(v) for k, v in self.binding["budgets"].items()}

    @property
    def not_private(self) -> bool:
        return bool(self.markers)

    @property
    def drew(self) -> bool:
        """Whether any noise may exist for it (a draw was charged): then it counts in full."""
        return bool(self.charged) or bool(self.draws)

    @property
    def unfinished(self) -> bool:
        """Counted as spent but never published: killed, crashed, failed after drawing, or
        still running — a resume of it spends nothing more."""
        return self.counting and self.status != "completed"


def fold_run(entries: Iterable[Entry]) -> RunState | None:
    """A run's state from its entries (in chain order).

    An entry out of the order of the module docstring cannot come from this code: it is
    recorded in ``out_of_order`` and, where it would un-count a spend (released after drawing,
    authorized again), ignored.
    """
    state: RunState | None = None
    for entry in entries:
        data = entry.payload
        if entry.kind == "run-opened" and state is None:
            state = RunState(
                run_id=str(entry.run_id),
                binding=data["binding"],
                markers=tuple(data.get("markers", ())),
                attempt=int(data["attempt"]),
                status="reserved",
                opened=entry.at,
                flow_run_id=data.get("flow_run_id"),
                last_at=entry.at,
            )
            continue
        if state is None:
            continue
        state.last_at = entry.at
        unexpected = _out_of_order(state, entry.kind, data)
        if unexpected:
            state.out_of_order.append(f"entry {entry.seq} ({entry.kind}) {unexpected}")
            if entry.kind in ("run-opened", "spend-authorized", "run-released", "draw-recorded"):
                continue
        if entry.kind == "run-resumed":
            state.attempt = int(data["attempt"])
            state.flow_run_id = data.get("flow_run_id") or state.flow_run_id
        elif entry.kind == "spend-authorized":
            state.status = "authorized"
            state.dataset = entry.dataset
            state.passes = [PassSpend.from_exact(p) for p in data["passes"]]
            state.approval = data.get("approval")
            state.input_stats = data.get("input_stats")
            state.files = dict(data.get("files", {}))
            state.production = data.get("production")
        elif entry.kind == "drawing-started":
            state.status = "drawing"
        elif entry.kind == "draw-charged":
            state.charged[data["name"]] = int(data["attempt"])
        elif entry.kind == "draw-recorded":
            state.draws[data["name"]] = {
                "digest": data["digest"],
                "size": int(data["size"]),
                "file": data["file"],
                "attempt": int(data["attempt"]),
            }
            state.last_draw_at = entry.at
        elif entry.kind == "run-released":
            state.status = "released"
            state.approval = None
            state.ended = {"kind": "released", "at": entry.at, **data}
        elif entry.kind == "run-failed":
            state.ended = {"kind": "failed", "at": entry.at, **data}
        elif entry.kind == "release-sealed" and state.sealed_release is None:
            state.sealed_release = {"seq": entry.seq, "hash": entry.hash, **data}
        elif entry.kind == "run-completed":
            state.status = "completed"
            state.completed = data
            state.manifests.append(str(data["manifest_sha256"]))
    return state


def _out_of_order(state: RunState, kind: str, data: Mapping[str, Any]) -> str:
    """Why ``kind`` cannot follow ``state`` as this code writes a run (empty: it can)."""
    if kind == "draw-recorded":
        name = data.get("name")
        if name in state.draws:
            return f"records {name} again (a draw is recorded once; the first record stands)"
        if name not in state.charged:
            return f"records {name}, which was never charged"
        return ""
    if kind == "run-opened":
        return "opens a run that is open already"
    if kind == "spend-authorized" and state.counting:
        return f"authorizes a run already counted as spent (status {state.status})"
    if kind == "run-released" and (state.status not in ("reserved", "authorized") or state.charged):
        return f"returns the spend of a run that drew (status {state.status})"
    if kind in ("drawing-started", "draw-charged") and state.status not in (
        "authorized",
        "drawing",
        "completed",
    ):
        return f"draws for a run without an authorized spend (status {state.status})"
    if kind == "run-completed" and state.sealed_release is None:
        return "completes a run whose release was never sealed"
    return ""
