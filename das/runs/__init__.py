"""Product-neutral run infrastructure: the run folder, the persisted noise store, the audit.

- :mod:`das.runs.folder`: where a run keeps its state (``<output>/.run/<run-id>/``).
- :mod:`das.runs.noise_store`: every draw persisted with its ledger entry, so a rerun of a
  failed run reuses the noise instead of drawing (and spending) again.
- :mod:`das.runs.audit`: the audit record (``audit.json``) of a run, succeeded or failed.
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
