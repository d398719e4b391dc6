"""Entries a run signs: what a resume and a certificate trust of a run's own history.

Whoever can write the ledger's database can append well-hashed entries in the order the
pipeline writes them. Two of them would be worth forging: a ``spend-authorized`` entry (a run
"already authorized" — under an approval another run spent — which a resume would not authorize
again) and a ``draw-recorded`` entry (a noise file of zeros "already drawn", which a resume
would reuse: exact counts in a release labelled private). So the run signs them with its run
key (:mod:`das.trust.run_keys`), over the entry's kind, run id, dataset and payload; in a
chartered ledger a resume, the noise checks and the certificate trust only entries signed by a
run key the charter names, refuse a run whose history holds an unsigned one, and `das ledger
verify` names it. The operator holds no run key (the service account does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.trust.ledger.store import Entry
from das.trust.signing.canonical import canonical_json
from das.trust.signing.errors import SignatureInvalid
from das.trust.signing.keys import PublicKey
from das.trust.signing.sshsig import verify

RUN_ENTRY_NAMESPACE = "das-run-entry"
SIGNED_KINDS = ("spend-authorized", "draw-recorded")
SIGNATURE_FIELD = "run_signature"


def entry_message(
    kind: str, run_id: str | None, dataset: str | None, payload: Mapping[str, Any]
) -> bytes:
    """The bytes a run signs for an entry: everything it says but the signature itself."""
    body = {k: v for k, v in payload.items() if k != SIGNATURE_FIELD}
    return canonical_json({"kind": kind, "run_id": run_id, "dataset": dataset, "payload": body})


@dataclass(frozen=True)
class RunSigner:
    """The run key that signs a run's entries (a path: picklable to the Dask workers, which
    record draws and must see the key at the same path)."""

    key: Path

    def sign(
        self, kind: str, run_id: str | None, dataset: str | None, payload: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``payload`` with the run's signature of the entry added."""
        from das.trust.signing.sshsig import sign

        signature = sign(
            entry_message(kind, run_id, dataset, payload), RUN_ENTRY_NAMESPACE, self.key
        )
        return {**payload, SIGNATURE_FIELD: signature}


def signed(payload: Mapping[str, Any], signer: RunSigner | None, kind: str, run_id: str,
           dataset: str | None = None) -> dict[str, Any]:  # fmt: skip
    return dict(payload) if signer is None else signer.sign(kind, run_id, dataset, payload)


def entry_signer(entry: Entry, runners: Iterable[PublicKey]) -> PublicKey | None:
    """The run key of ``runners`` that signed ``entry``, or None (unsigned, or not theirs)."""
    data = entry.payload
    signature = data.get(SIGNATURE_FIELD)
    if not signature:
        return None
    try:
        return verify(
            entry_message(entry.kind, entry.run_id, entry.dataset, data),
            str(signature),
            RUN_ENTRY_NAMESPACE,
            list(runners),
        )
    except SignatureInvalid:
        return None


def unsigned(entries: Iterable[Entry], runners: Iterable[PublicKey]) -> list[Entry]:
    """The entries of the signed kinds that no run key of ``runners`` signed."""
    keys = list(runners)
    return [e for e in entries if e.kind in SIGNED_KINDS and entry_signer(e, keys) is None]
