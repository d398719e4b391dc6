"""A chartered (production) privacy ledger for tests: approver keys, the run key, the charter
signed by a quorum, and approvals signed the way an approver makes them (`das ledger ...`
commands, in process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from das.cli import main as das_main
from das.trust import LedgerStore, PrivacyLedger, PublicKey, generate_key


@dataclass
class Chartered:
    """The ledger folder, the approvers' private key files (in charter order), the file of
    their public keys (what the agency publishes), and the run key."""

    ledger: Path
    approvers: list[Path]
    public: Path
    run_key: Path
    quorum: int
    extra: dict[str, Path] = field(default_factory=dict)

    @property
    def ledger_id(self) -> str:
        return PrivacyLedger(LedgerStore.in_directory(self.ledger)).info().ledger_id

    def trust_root(self) -> Path:
        """The ledger's trust root, as its approvers publish it (`das ledger trust-root`),
        written once beside the ledger."""
        path = self.ledger.with_name(self.ledger.name + "-trust-root.json")
        if not path.exists():
            argv = ["ledger", "trust-root", "--ledger", str(self.ledger), "--output", str(path)]
            assert das_main(argv) == 0
        return path

    def approve(
        self,
        config: Path,
        data: Path,
        product: str = "safetab-p",
        signers: int | None = None,
        *extra: str,
    ) -> None:
        """A quorum of approvers (or ``signers`` of them) sign the spend of ``config`` on
        ``data``; each asserts the command succeeded."""
        for key in self.approvers[: self.quorum if signers is None else signers]:
            argv = ["ledger", "approve", "--ledger", str(self.ledger), "--product", product,
                    "--config", str(config), "--data", str(data), "--key", str(key),
                    "--note", "test", *extra]  # fmt: skip
            assert das_main(argv) == 0


def key_pair(folder: Path, name: str) -> tuple[Path, PublicKey]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    return path, generate_key(path, name)


def make_chartered(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    approvers: int = 1,
    quorum: int = 1,
    production_env: bool = True,
    name: str = "ledger",
    pin: bool = True,
) -> Chartered:
    """A chartered ledger at ``tmp_path/name`` whose charter a quorum signed, this process's
    run key (``DAS_RUN_KEY``) its runner, and (``production_env``) the production environment
    of a run against it (DAS_PRODUCTION, DAS_LEDGER_DIR, DAS_LEDGER_ID). Its trust root is
    pinned beside the run key (``pin``), as a production run requires."""
    keys = tmp_path / f"{name}-keys"
    run_key, _ = key_pair(keys, "run-key")
    monkeypatch.setenv("DAS_RUN_KEY", str(run_key))
    pairs = [key_pair(keys, f"approver-{i + 1}") for i in range(approvers)]
    public = keys / "approvers.pub"
    public.write_text("".join(f"approver-{i + 1} {k.openssh()}\n" for i, (_, k) in
                              enumerate(pairs)))  # fmt: skip
    ledger = tmp_path / name
    argv = ["ledger", "init", "--ledger", str(ledger), "--approvers", str(public),
            "--quorum", str(quorum), "--key", str(pairs[0][0])]  # fmt: skip
    assert das_main(argv) == 0
    for path, _ in pairs[1:quorum]:
        assert das_main(["ledger", "charter", "sign", "--ledger", str(ledger), "--key",
                         str(path)]) == 0  # fmt: skip
    chartered = Chartered(ledger, [p for p, _ in pairs], public, run_key, quorum)
    if pin:
        # The service account's pin, as production requires: the root beside its run key.
        (keys / "trust-root.json").write_bytes(chartered.trust_root().read_bytes())
    if production_env:
        monkeypatch.setenv("DAS_PRODUCTION", "1")
        monkeypatch.setenv("DAS_LEDGER_DIR", str(ledger))
        monkeypatch.setenv("DAS_LEDGER_ID", chartered.ledger_id)
    return chartered
