"""`das ledger verify --release`: a release checked against what the ledger recorded
(das.trust.ledger.verify), on a run made in process (tests/certified.py): sealed, published and
completed as the pipeline does it, it is as recorded; each way of editing it afterwards, or of
presenting it to another or a cut-back ledger, is named. Fast: one SQLite ledger per test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from certified import TABLE, Certified, make_certified

from das.trust import AUDIT_FILE, MANIFEST, content_digest, release_problems


def _published(made: Certified, folder: Path) -> Path:
    """Run-1's release as the pipeline publishes it: the ledger seals its content, the
    MANIFEST carries that head, the run completes with the MANIFEST's digest."""
    ledger = made.ledger
    ledger.start_drawing("run-1", 1)
    state = ledger.run("run-1")
    (folder / "t1").mkdir(parents=True)
    (folder / TABLE).write_text("1|USA|0001|42\n")
    audit = {
        "privacy_ledger": {"dataset": state.dataset, "passes": [p.to_dict() for p in state.passes]},
        "markers": [],
        "ledger": {},
    }
    (folder / AUDIT_FILE).write_text(json.dumps(audit))
    files = {
        name: {"sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest()}
        for name in (TABLE, AUDIT_FILE)
    }
    head = ledger.seal_release("run-1", content_digest(files))
    (folder / MANIFEST).write_text(json.dumps({"run_id": "run-1", "files": files, "ledger": head,
                                               "markers": []}))  # fmt: skip
    digest = hashlib.sha256((folder / MANIFEST).read_bytes()).hexdigest()
    ledger.complete("run-1", digest, str(folder))
    return folder


def _edit_audit(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(release: Path) -> None:
        audit = json.loads((release / AUDIT_FILE).read_text())
        change(audit)
        (release / AUDIT_FILE).write_text(json.dumps(audit))

    return edit


EDITS: dict[str, tuple[Callable[[Path], None], str]] = {
    "a table changed": (
        lambda r: (r / TABLE).write_text("1|USA|0001|43\n"),
        f"{TABLE}: its content differs from the MANIFEST",
    ),
    "a record file dropped in": (
        lambda r: (r / "person-records.txt").write_text("1|2|3\n"),
        "person-records.txt: in the release folder but not in its MANIFEST",
    ),
    "a table removed": (lambda r: (r / TABLE).unlink(), "listed in the MANIFEST but missing"),
    "the MANIFEST rewritten": (
        lambda r: (r / MANIFEST).write_text((r / MANIFEST).read_text() + " "),
        "the MANIFEST differs from the one the ledger recorded",
    ),
    "the MANIFEST unreadable": (lambda r: (r / MANIFEST).write_text("{"), "not a DAS release"),
    "another ledger's head": (
        lambda r: (r / MANIFEST).write_text(
            json.dumps({**json.loads((r / MANIFEST).read_text()), "ledger": {"id": "other"}})
        ),
        "recorded in ledger other, not in this one",
    ),
    "the audit's spend changed": (
        _edit_audit(lambda a: a["privacy_ledger"]["passes"][0].update(this_run="1")),
        "the audit's per-pass spend differs from the ledger's",
    ),
    "the audit's dataset changed": (
        _edit_audit(lambda a: a["privacy_ledger"].update(dataset="other")),
        "the audit names another dataset",
    ),
    "a marker removed from the audit": (
        _edit_audit(lambda a: a.update(markers=["SEEDED"])),
        "the audit's privacy markers differ",
    ),
    "a noise id the ledger never recorded": (
        _edit_audit(lambda a: a.update(ledger={"US": {"measurements": [{"name": "x"}]}})),
        "in the audit, never recorded as drawn: x",
    ),
    "an audit read two ways": (
        lambda r: (r / AUDIT_FILE).write_text('{"markers": [], "markers": []}'),
        "audit.json: missing or unreadable",
    ),
}


def test_a_release_as_the_pipeline_published_it_is_as_recorded(tmp_path: Path) -> None:
    made = make_certified(tmp_path)
    release = _published(made, tmp_path / "release")
    assert release_problems(made.ledger, made.ledger.info(), release) == []


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_release_edited_after_publication_is_named(tmp_path: Path, edit: str) -> None:
    made = make_certified(tmp_path)
    release = _published(made, tmp_path / "release")
    change, reason = EDITS[edit]
    change(release)
    problems = "\n".join(release_problems(made.ledger, made.ledger.info(), release))
    assert reason in problems


def test_a_ledger_that_no_longer_holds_the_release_head_is_named(tmp_path: Path) -> None:
    """The ledger cut back and written again (the operator's copy from before the release):
    the head the MANIFEST carries is not the entry the ledger holds at that number."""
    made = make_certified(tmp_path)
    release = _published(made, tmp_path / "release")
    manifest = json.loads((release / MANIFEST).read_text())
    manifest["ledger"]["hash"] = "0" * 64
    (release / MANIFEST).write_text(json.dumps(manifest))
    problems = "\n".join(release_problems(made.ledger, made.ledger.info(), release))
    assert "the ledger does not hold entry" in problems
