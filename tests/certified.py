"""A certified release made in process, in a fraction of a second: a chartered SQLite ledger
(approvers and a quorum of them signing its charter), an approval a quorum signed, the run's
authorized spend, a release folder and its certificate — no run, no Prefect, no subprocess, so
that the verifier's tests are fast and can tamper with any part of it."""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from das.io.writers import file_sha256
from das.trust import (
    APPROVAL_NAMESPACE,
    AUDIT_FILE,
    CERTIFICATE,
    CHARTER_NAMESPACE,
    MANIFEST,
    Charter,
    LedgerStore,
    PrivacyLedger,
    PublicKey,
    RunOpening,
    RunSigner,
    approval_statement,
    canonical_json,
    certify,
    charter_statement,
    generate_key,
    ledger_ceilings,
    sign,
)

if TYPE_CHECKING:
    from das.trust import TrustRoot

SEAL = "5e" * 32  # the sealed parameters' digest the approval names
TABLE = "t1/t1.txt"


@dataclass
class Certified:
    """The ledger, the approvers' private key files and public keys, the run key, and what
    :meth:`release` certifies: the predicate and the files' content."""

    ledger: PrivacyLedger
    approvers: list[Path]
    trusted: list[PublicKey]
    run_key: Path
    predicate: dict[str, Any]
    passes: list[dict[str, Any]]

    def root(self) -> TrustRoot:
        """The trust root of the ledger's charter chain in force now (what `das ledger
        trust-root` writes)."""
        # imported here: the findings' tests run on the code before trust roots too
        from das.trust.root import root_document, trust_root_of

        return trust_root_of(root_document(self.ledger.charter_chain().chain))

    def release(
        self,
        folder: Path,
        *,
        predicate: Mapping[str, Any] | None = None,
        key: Path | None = None,
        table: bytes = b"1|USA|0001|42\n",
    ) -> Path:
        """A release folder (a table, the audit, the MANIFEST) and its certificate, signed by
        ``key`` (the charter's run key by default) over ``predicate`` (the run's by default)."""
        (folder / "t1").mkdir(parents=True)
        (folder / TABLE).write_bytes(table)
        audit = {"privacy_ledger": {"passes": self.passes}}
        (folder / AUDIT_FILE).write_text(json.dumps(audit))
        files = {name: {"sha256": file_sha256(folder / name)} for name in (TABLE, AUDIT_FILE)}
        manifest = {"run_id": self.predicate["run_id"], "files": files}
        (folder / MANIFEST).write_text(json.dumps(manifest))
        certify(folder, dict(self.predicate if predicate is None else predicate),
                key or self.run_key, manifest)  # fmt: skip
        return folder


def make_chartered_ledger(
    folder: Path, *, approvers: int = 2, quorum: int = 2
) -> tuple[PrivacyLedger, list[Path], list[PublicKey], Path]:
    """A ledger in ``folder`` whose first charter names ``approvers`` keys, needs ``quorum`` of
    them and one run key, signed by that quorum: the ledger, the approvers' private key files
    and public keys, and the run key's file."""
    keys = [folder / f"approver-{i + 1}" for i in range(approvers)]
    trusted = [generate_key(path, path.name) for path in keys]
    run_key = folder / "run-key"
    runner = generate_key(run_key, "run key")
    ledger_id = str(uuid.uuid4())
    charter = charter_statement(
        ledger_id=ledger_id, approvers=trusted, quorum=quorum, runners=[runner],
        ceilings=ledger_ceilings(None), previous=None,
    )  # fmt: skip
    signed = canonical_json(charter)
    ledger = PrivacyLedger.initialize(
        LedgerStore.in_directory(folder / "ledger"),
        ledger_id=ledger_id,
        charter=(charter, sign(signed, CHARTER_NAMESPACE, keys[0])),
    )
    digest = ledger.charter_chain().charters[0].digest
    for key in keys[1:quorum]:
        ledger.sign_charter(digest, sign(signed, CHARTER_NAMESPACE, key))
    return ledger, keys, trusted, run_key


def make_certified(folder: Path, *, approvers: int = 2, quorum: int = 2) -> Certified:
    """A chartered ledger in ``folder`` and run ``run-1``'s spend under an approval signed by
    ``quorum`` of ``approvers``: everything a release's certificate carries."""
    ledger, keys, trusted, run_key = make_chartered_ledger(
        folder, approvers=approvers, quorum=quorum
    )
    return certified_run(ledger, keys, keys[:quorum], trusted, run_key)


def certified_run(
    ledger: PrivacyLedger,
    keys: list[Path],
    signers: list[Path],
    trusted: list[PublicKey],
    run_key: Path,
    run_id: str = "run-1",
) -> Certified:
    """Run ``run_id``'s spend in ``ledger`` under the charter in force, approved by
    ``signers``: what its release's certificate carries."""
    ledger_id = ledger.info().ledger_id
    budgets = {"US": Fraction("4.944")}
    dataset = ledger.dataset_id(uuid.uuid4().hex)
    planned, ceiling, chain, _ = ledger.plan_spend("safetab-p", dataset, SEAL, "zcdp", budgets)
    approval = approval_statement(
        ledger_id=ledger_id, charter=chain.in_force, product="safetab-p", dataset=dataset,
        parameters={"digest": SEAL, "files": {}}, definition="zcdp", passes=planned,
        ceiling=ceiling, note="test", requested_by="test",
    )  # fmt: skip
    ledger.record_approval(
        approval, [sign(canonical_json(approval), APPROVAL_NAMESPACE, k) for k in signers]
    )
    ledger.open_run(RunOpening(run_id, "safetab-p", f"/out/{run_id}", "c" * 64, SEAL, "zcdp",
                               budgets, "secure", ()))  # fmt: skip
    passes = ledger.authorize(run_id, dataset, production=True, signer=RunSigner(run_key))
    predicate = {
        "product": "safetab-p", "run_id": run_id, "private": True, "markers": [],
        "ledger": {"id": ledger_id}, **ledger.spend_proof(run_id), "dataset": dataset,
        "definition": "zcdp", "parameters": {"digest": SEAL, "files": {}},
        "spend": [p.exact() for p in passes],
    }  # fmt: skip
    return Certified(ledger, keys, trusted, run_key, predicate, [p.to_dict() for p in passes])


def rotate(ledger: PrivacyLedger, signers: list[Path], **changes: Any) -> None:
    """A new charter continuing the one in force (its approvers, quorum, runners and ceilings
    but for ``changes``), proposed by the first of ``signers`` and signed by the others: in
    force once they are a quorum of the charter before."""
    current = ledger.charter_chain().in_force
    assert current is not None
    fields = {
        "approvers": list(current.approvers), "quorum": current.quorum,
        "runners": list(current.runners), "ceilings": current.ceilings,
    } | changes  # fmt: skip
    statement = charter_statement(ledger_id=current.ledger_id, previous=current, **fields)
    message = canonical_json(statement)
    proposed = ledger.propose_charter(statement, sign(message, CHARTER_NAMESPACE, signers[0]))
    for key in signers[1:]:
        ledger.sign_charter(proposed.digest, sign(message, CHARTER_NAMESPACE, key))


def copy_release(release: Path, to: Path) -> Path:
    """Another copy of a release folder (what anyone holding a published release can make)."""
    shutil.copytree(release, to, symlinks=True)
    return to


def forge(
    release: Path,
    to: Path,
    run_key: Path,
    charter: dict[str, Any],
    signers: tuple[Path, ...] = (),
) -> Path:
    """What the attacker makes of a published release: a copy with a count changed and its
    MANIFEST recomputed, its charter changed to ``charter``'s fields, every approver signature
    dropped (or made again by ``signers``), and the envelope signed with their own ``run_key``."""
    forged = copy_release(release, to)
    (forged / TABLE).write_text("1|USA|0001|999\n")
    manifest = json.loads((forged / MANIFEST).read_text())
    for name, item in manifest["files"].items():
        item["sha256"] = file_sha256(forged / name)
    (forged / MANIFEST).write_text(json.dumps(manifest))
    envelope = json.loads((forged / CERTIFICATE).read_text())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    statement = predicate["charters"][0]["statement"] | charter
    approval = predicate["approvals"][0]["statement"]
    approval["charter"] = Charter(statement, 0, "").digest
    predicate["charters"] = [{"statement": statement, "signatures": [
        sign(canonical_json(statement), CHARTER_NAMESPACE, k) for k in signers]}]  # fmt: skip
    predicate["approvals"] = [{"statement": approval, "signatures": [
        sign(canonical_json(approval), APPROVAL_NAMESPACE, k) for k in signers]}]  # fmt: skip
    (forged / CERTIFICATE).unlink()
    certify(forged, predicate, run_key, manifest)
    return forged
