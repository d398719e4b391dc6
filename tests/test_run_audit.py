"""The audit record: every documented key, timings, status and error type (never messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from das.runs.audit import AUDIT_KEYS, AuditRecorder, code_version, package_versions


def test_audit_records_fields_stages_and_success(tmp_path: Path) -> None:
    audit = AuditRecorder("safetab-p", "r1", tmp_path / "audit.json")
    with audit.stage("load"):
        audit.update(validation={"skipped": True})
    record = audit.write("succeeded")
    on_disk = json.loads((tmp_path / "audit.json").read_text())
    assert on_disk == record and list(on_disk) == list(AUDIT_KEYS)
    assert on_disk["status"] == "succeeded" and on_disk["error_type"] is None
    assert on_disk["timings"]["load"] >= 0 and on_disk["seconds"] >= on_disk["timings"]["load"]
    assert on_disk["packages"]["numpy"] and on_disk["code_version"]
    with pytest.raises(KeyError, match="not audit fields"):
        audit.update(true_counts=[1, 2])


def test_failed_audit_keeps_the_error_type_not_its_message(tmp_path: Path) -> None:
    audit = AuditRecorder("safetab-p", "r2", tmp_path / "audit.json")
    with pytest.raises(ValueError), audit.stage("measure"):
        raise ValueError("secret value 12345")
    audit.write("failed", ValueError("secret value 12345"))
    text = (tmp_path / "audit.json").read_text()
    record = json.loads(text)
    assert record["status"] == "failed" and record["error_type"] == "ValueError"
    assert "12345" not in text and "measure" in record["timings"]


def test_versions_and_code_version() -> None:
    assert package_versions(("numpy", "no-such-dist-xyz"))["no-such-dist-xyz"] is None
    assert code_version().startswith(("git ", "das-pipeline "))
