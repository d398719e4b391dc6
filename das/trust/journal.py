"""An approver's own memory of what they signed, kept outside the ledger.

The operator can write the ledger's database; an approver cannot be told by the ledger alone
whether it is the ledger they signed for before. So `das ledger approve --key` and `das ledger
charter sign --key` keep a journal per approver key, in the approver's own account
(``${XDG_DATA_HOME:-~/.local/share}/das/approver/``, 0700): which ledgers' charters they
signed, and which spends they approved — on which records (a keyed mark of the records'
canonical fingerprint, never the fingerprint: the key is the journal's own, 0600) and up to
which cumulative totals. Before they sign again they are shown:

- a charter of a ledger they never signed for, while they signed others: a *second* ledger,
  whose history starts at zero — the spend recorded in the others does not count there;
- an approval of records they approved in another ledger: the spend there;
- a ledger that no longer holds an approval they signed in it: its history was cut or
  rewritten.

Each of these needs the approver to say so (``--new-history``) before they sign.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from das.privacy.mechanisms import parse_fraction_text
from das.trust.ledger.amounts import decimal_text
from das.trust.signing.canonical import StrictJSONError, strict_loads
from das.trust.signing.keys import PublicKey

JOURNAL_TAG = "das-approver-journal/1"


def journal_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "das" / "approver"


@dataclass(frozen=True)
class ApproverJournal:
    """The journal of one approver key (see the module docstring)."""

    key: PublicKey
    folder: Path

    @classmethod
    def of(cls, key: PublicKey) -> ApproverJournal:
        return cls(key, journal_dir())

    @property
    def path(self) -> Path:
        name = hashlib.sha256(self.key.fingerprint.encode()).hexdigest()[:32]
        return self.folder / f"{name}.jsonl"

    def _secret(self) -> bytes:
        path = self.folder / "journal.key"
        if not path.is_file():
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(descriptor, "w") as handle:
                    handle.write(secrets.token_hex(32))
        return path.read_text().strip().encode()

    def records_mark(self, fingerprint: str) -> str:
        """The journal's name for a set of records: keyed, so the journal reveals nothing."""
        return hmac.new(
            self._secret(), f"{JOURNAL_TAG}\n{fingerprint}".encode(), hashlib.sha256
        ).hexdigest()

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        found = []
        for line in self.path.read_text().splitlines():
            try:
                entry = strict_loads(line)
            except StrictJSONError:
                continue  # a line cut by a crash (or not the journal's): the rest still speaks
            if isinstance(entry, dict):
                found.append(entry)
        return found

    def _append(self, entry: Mapping[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        line = json.dumps(
            {"at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **entry},
            sort_keys=True,
        )
        descriptor = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "a+") as handle:
            # After a line cut by a crash, start a new line: the cut one is skipped on reading,
            # and this entry must not be glued to it and lost with it.
            cut = handle.tell() > 0 and os.pread(descriptor, 1, handle.tell() - 1) != b"\n"
            handle.write(("\n" if cut else "") + line + "\n")

    def record_charter(self, ledger_id: str, digest: str, version: int) -> None:
        self._append({"kind": "charter", "ledger_id": ledger_id, "charter": digest,
                      "version": version})  # fmt: skip

    def record_approval(
        self, ledger_id: str, mark: str | None, approval: Mapping[str, Any]
    ) -> None:
        self._append({
            "kind": "approval",
            "ledger_id": ledger_id,
            "records": mark,
            "approval_id": approval["approval_id"],
            "product": approval["product"],
            "cumulative": {n: p["cumulative"] for n, p in approval["passes"].items()},
        })  # fmt: skip

    # -- what the approver is shown -------------------------------------------------------------

    def charter_history(self, ledger_id: str, version: int) -> tuple[list[str], list[str]]:
        """(what the approver should know, what needs ``--new-history``) before signing a
        charter of ``ledger_id``."""
        charters = [e for e in self.entries() if e.get("kind") == "charter"]
        mine = [e for e in charters if e.get("ledger_id") == ledger_id]
        others = sorted({str(e.get("ledger_id")) for e in charters} - {ledger_id})
        info, needs = [], []
        if mine:
            versions = sorted({int(e.get("version", 0)) for e in mine})
            info.append(
                f"you signed charter version(s) {', '.join(map(str, versions))} of this ledger "
                f"({ledger_id}) before: this one continues its history"
            )
        elif others:
            needs.append(
                f"you signed the charter of ledger(s) {', '.join(others)} before, never one of "
                f"ledger {ledger_id}: this is a SECOND ledger, whose history of spend starts "
                "at zero — what was spent in the other ledger(s) is not counted here"
            )
        else:
            info.append("this key has signed no charter before (its first ledger)")
        return info, needs

    def approval_history(
        self,
        ledger_id: str,
        mark: str | None,
        passes: Mapping[str, Mapping[str, str]],
        held: set[str],
    ) -> tuple[list[str], list[str]]:
        """(what the approver should know, what needs ``--new-history``) before approving a
        spend on the records ``mark`` in ``ledger_id``; ``passes``: the statement's; ``held``:
        the ids of the approvals the ledger holds."""
        lost = [
            e
            for e in self.entries()
            if e.get("kind") == "approval"
            and e.get("ledger_id") == ledger_id
            and e.get("approval_id") not in held
        ]
        needs = [
            f"this ledger no longer holds approval {e.get('approval_id')} that you signed in it "
            f"on {str(e.get('at'))[:10]}: its history was cut back or rewritten"
            for e in lost
        ]
        if mark is None:
            return ["the records were not read here: the journal cannot compare them"], needs
        same = [
            e for e in self.entries() if e.get("kind") == "approval" and e.get("records") == mark
        ]
        info: list[str] = []
        elsewhere = [e for e in same if e.get("ledger_id") != ledger_id]
        for entry in elsewhere:
            totals = ", ".join(
                f"pass {n} up to {decimal_text(parse_fraction_text(v))}"
                for n, v in sorted(entry.get("cumulative", {}).items())
            )
            needs.append(
                f"you approved spend on these very records in ANOTHER ledger, "
                f"{entry.get('ledger_id')}, on {str(entry.get('at'))[:10]} ({totals}); this "
                "ledger does not count it"
            )
        here = [e for e in same if e.get("ledger_id") == ledger_id]
        for name, item in sorted(passes.items()):
            earlier = parse_fraction_text(item["prior"])
            approved_before = [
                parse_fraction_text(e["cumulative"][name])
                for e in here
                if name in e.get("cumulative", {})
            ]
            if approved_before:
                info.append(
                    f"pass {name}: you approved up to {decimal_text(max(approved_before))} on "
                    f"these records in this ledger before; it now shows {decimal_text(earlier)} "
                    "spent (less when an approval went unused, never less than what was spent)"
                )
        if not same:
            info.append("you have approved no spend on these records before")
        return info, needs
