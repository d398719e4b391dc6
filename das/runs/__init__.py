"""Product-neutral run infrastructure (no Prefect import).

- :mod:`das.runs.start`: every check a release run passes before it reads a record.
- :mod:`das.runs.seal`: the run's parameters frozen at its start.
- the privacy ledger, the system of record of runs, approvals, spends and draws, is not here:
  it is part of the trust core, :mod:`das.trust`, which the run lifecycle uses through its face.
- :mod:`das.runs.folder`: where a run keeps its state (``<state root>/runs/<run-id>/``, never
  inside an output).
- :mod:`das.runs.noise_store`: every draw persisted and recorded in the ledger, so a rerun of a
  failed run reuses the noise instead of drawing (and spending) again.
- :mod:`das.runs.release`: the output lock and lease, the staged release and its manifest.
- :mod:`das.runs.audit`: the audit record (``audit.json``) of a run, succeeded or failed.
- :mod:`das.runs.faults`: infrastructure faults explained in one line.
"""

from das.runs.audit import AuditRecorder, code_version, package_versions
from das.runs.folder import RunFolder, new_run_id
from das.runs.noise_store import NoiseDigestError, NoiseStore, seeded_streams

__all__ = [
    "AuditRecorder",
    "NoiseDigestError",
    "NoiseStore",
    "RunFolder",
    "code_version",
    "new_run_id",
    "package_versions",
    "seeded_streams",
]
