"""What signed approvals and release certificates cost a production run, and what proving a
release costs a verifier (issue 23).

  python benchmarks/signatures.py [--approvers 1,2,3,5] [--release-mb 512] [--repeat 5]

Measured, each the median of ``--repeat`` runs, on a SQLite ledger in a temporary folder:

1. **authorize**: `PrivacyLedger.authorize` of one run under an approval signed by a quorum of
   K approvers (the charter chain folded and every signature verified, as a run does), against
   the same call on a ledger without a charter (no signature) — the difference is what the
   signatures add to a run's authorization;
2. **certify**: writing a release's certificate (in-toto statement over the MANIFEST's digests,
   signed by the run key) for a release of ``--release-mb`` MB of tables;
3. **verify**: `das release verify`'s check of that release (the charter chain, the approval,
   the run key's envelope and every file hashed again), in process.

Prints one JSON object. The whole process tree's peak memory is not at stake here (KB of
statements); wall time is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from fractions import Fraction
from pathlib import Path

from das.trust import (
    APPROVAL_NAMESPACE,
    MANIFEST,
    LedgerStore,
    PrivacyLedger,
    RunOpening,
    RunSigner,
    approval_statement,
    canonical_json,
    certify,
    public_key_of,
    read_trust_root,
    root_document,
    sign,
    verify_release,
)

# The chartered ledger the fast tests make (tests/certified.py): one way to make it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from certified import make_chartered_ledger

SEAL = "s" * 64
US = {"US": Fraction("4.944")}


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 4)


def _chartered(folder: Path, approvers: int) -> tuple[PrivacyLedger, list[Path], Path]:
    ledger, keys, _, run_key = make_chartered_ledger(folder, approvers=approvers, quorum=approvers)
    return ledger, keys, run_key


def _approved_run(ledger: PrivacyLedger, keys: list[Path], run_id: str) -> str:
    dataset = ledger.dataset_id(uuid.uuid4().hex)
    passes, ceiling, chain, _ = ledger.plan_spend("safetab-p", dataset, SEAL, "zcdp", US)
    statement = approval_statement(
        ledger_id=ledger.info().ledger_id, charter=chain.in_force, product="safetab-p",
        dataset=dataset, parameters={"digest": SEAL, "files": {}}, definition="zcdp",
        passes=passes, ceiling=ceiling, note="benchmark", requested_by="benchmark",
    )  # fmt: skip
    signatures = [sign(canonical_json(statement), APPROVAL_NAMESPACE, k) for k in keys]
    ledger.record_approval(statement, signatures if chain.chartered else [])
    ledger.open_run(
        RunOpening(run_id, "safetab-p", f"/r/{run_id}", "c" * 64, SEAL, "zcdp", US, "secure", ())
    )
    return dataset


def authorize_cost(approvers: int, repeat: int) -> dict[str, float]:
    timings: dict[str, list[float]] = {"chartered": [], "unchartered": []}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            (folder / "c").mkdir()
            chartered, keys, run_key = _chartered(folder / "c", approvers)
            plain = PrivacyLedger.initialize(LedgerStore.in_directory(folder / "plain"))
            for name, ledger, production, signer in (
                ("chartered", chartered, True, RunSigner(run_key)),  # as a run signs it
                ("unchartered", plain, False, None),
            ):
                dataset = _approved_run(ledger, keys, "run")
                started = time.perf_counter()
                ledger.authorize("run", dataset, production=production, signer=signer)
                timings[name].append(time.perf_counter() - started)
    return {f"{name}_s": _median(values) for name, values in timings.items()}


def release_cost(megabytes: int, repeat: int) -> dict[str, float]:
    """Certify and verify a release of ``megabytes`` MB of tables, made under a real charter
    and a quorum-signed approval (so that the verifier checks everything it checks)."""
    from das.io.writers import file_sha256
    from das.trust import AUDIT_FILE

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "c").mkdir()
        ledger, keys, run_key = _chartered(folder / "c", 1)
        dataset = _approved_run(ledger, keys, "run")
        passes = ledger.authorize("run", dataset, production=True, signer=RunSigner(run_key))
        proof = ledger.spend_proof("run")
        release = folder / "release"
        (release / "t1").mkdir(parents=True)
        block = (b"1|USA|0001|" + b"12345\n") * (1 << 14)
        with open(release / "t1" / "t1.txt", "wb") as handle:
            for _ in range(max(1, megabytes * (1 << 20) // len(block))):
                handle.write(block)
        audit = {"privacy_ledger": {"passes": [p.to_dict() for p in passes]}}
        (release / AUDIT_FILE).write_text(json.dumps(audit))
        files = {
            name: {"sha256": file_sha256(release / name)} for name in ("t1/t1.txt", AUDIT_FILE)
        }
        manifest = {"files": files}
        (release / MANIFEST).write_text(json.dumps(manifest))
        predicate = {
            "product": "safetab-p", "run_id": "run", "private": True, "markers": [],
            "ledger": {"id": ledger.info().ledger_id}, **proof, "dataset": dataset,
            "definition": "zcdp", "parameters": {"digest": SEAL, "files": {}},
            "spend": [p.exact() for p in passes],
        }  # fmt: skip
        trusted = [public_key_of(key) for key in keys]
        (folder / "trust-root.json").write_bytes(root_document(ledger.charter_chain().chain))
        root = read_trust_root(folder / "trust-root.json")
        certifying, verifying = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            certify(release, predicate, run_key, manifest)
            certifying.append(time.perf_counter() - started)
            started = time.perf_counter()
            proven = verify_release(release, trusted, root=root)
            verifying.append(time.perf_counter() - started)
            if not proven.proven:
                raise SystemExit(f"the benchmark's release did not verify: {proven.problems}")
        return {"certify_s": _median(certifying), "verify_s": _median(verifying),
                "release_mb": megabytes}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvers", default="1,2,3,5")
    parser.add_argument("--release-mb", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    result = {
        "authorize": {
            f"quorum_{k}": authorize_cost(int(k), args.repeat) for k in args.approvers.split(",")
        },
        "release": release_cost(args.release_mb, args.repeat),
    }
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
