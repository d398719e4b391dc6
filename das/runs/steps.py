"""Which steps of a run are complete, so that a resumed run redoes only what is missing.

At national scale the steps before the release (validation, spilling the records, counting the
true totals and cells) take most of an hour; a run killed while writing must not redo them.
Each step that finishes writes ``steps/<name>.json`` in its run folder (atomically, after its
outputs). A resumed run skips a step with a marker. That is sound because a resumed run has
passed the ledger's binding check (the same sealed parameters and seed mode as the noise was
drawn for), its records are bound to one dataset (a record file that changed since the run read
it is read again and its fingerprint compared: the reading steps are forgotten), and a marker
holds the code version that wrote it: after a code change, every step is redone. Noise is never
a "step": it is reused as the privacy ledger recorded it, whatever the markers say.
"""

from __future__ import annotations

import json
from typing import Any

from das.io.atomic import atomic_write_text
from das.runs.folder import RunFolder, safe_name


class RunSteps:
    """The step markers of one run folder."""

    def __init__(self, folder: RunFolder, code_version: str) -> None:
        self.directory = folder.root / "steps"
        self.code_version = code_version

    def _path(self, name: str):
        return self.directory / f"{safe_name(name)}.json"

    def done(self, name: str) -> dict[str, Any] | None:
        """The marker of ``name`` when this code completed it, else None."""
        path = self._path(name)
        if not path.is_file():
            return None
        marker = json.loads(path.read_text())
        return marker if marker.get("code_version") == self.code_version else None

    def mark(self, name: str, **info: Any) -> None:
        """Record ``name`` as complete (call only after its outputs are in place)."""
        marker = {"step": name, "code_version": self.code_version, **info}
        atomic_write_text(self._path(name), json.dumps(marker, sort_keys=True) + "\n")

    def forget(self, *names: str) -> None:
        """Make steps count as not done (their inputs changed): a resume redoes them."""
        for name in names:
            self._path(name).unlink(missing_ok=True)

    def completed(self) -> list[str]:
        """Names of the steps this code completed (for the audit)."""
        if not self.directory.is_dir():
            return []
        names = []
        for path in sorted(self.directory.glob("*.json")):
            marker = json.loads(path.read_text())
            if marker.get("code_version") == self.code_version:
                names.append(str(marker["step"]))
        return names
