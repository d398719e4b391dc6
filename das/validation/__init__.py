"""Input validation that fails closed, before any noise is drawn (`das validate`;
docs/explanation/architecture.md#validation-and-audit).

Two layers over one source of rules:

- the reviewed Great Expectations suites in ``expectations/<file>.json`` (column presence and
  order, text type, value sets, regexes, uniqueness), run by GX on each file (whole, or a
  sample for big files) to produce its Data Docs, and interpreted by the engine on every row
  (:mod:`das.validation.suites`);
- the cross-file and semantic checks GX cannot express, vectorized in the engine
  (:mod:`das.validation.specs`, :mod:`das.validation.safetab_p`, :mod:`das.validation.phsafe`).

Entry points: :func:`validate_safetab_p` and :func:`validate_phsafe` return a
:class:`ValidationReport` (``.ok``, ``.failures``, ``.to_dict()``, ``.raise_for_failures()``,
``.fingerprints``: each record file's canonical fingerprint, computed on the chunks validation
reads anyway, for the privacy ledger; curator-local like the report) and always leave
``report.json``, ``report.html``, GX Data Docs and ``validation.log`` in the report folder
(default ``<data>/validation/``).
"""

from das.validation.findings import Failure, ValidationFailed, ValidationReport
from das.validation.phsafe import validate_phsafe
from das.validation.runner import default_report_dir
from das.validation.safetab_p import validate_safetab_p

__all__ = [
    "Failure",
    "ValidationFailed",
    "ValidationReport",
    "default_report_dir",
    "validate_phsafe",
    "validate_safetab_p",
]
