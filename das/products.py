"""The release products by name, for the code above them (the command line, the flows, the
ledger's approvals): which record files are confidential, where a run's inputs are, and how its
sealed parameters parse. The product modules are imported only when asked for (`das --help`
stays fast).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from das.runs.seal import SealedParameters
    from das.runs.start import RunInputs

RELEASE_PRODUCTS = ("safetab-p", "phsafe")
_MODULES = {"safetab-p": "das.safetab_p.parameters", "phsafe": "das.phsafe.parameters"}


@dataclass(frozen=True)
class ReleaseProduct:
    """One release product: ``safetab-p`` or ``phsafe``."""

    name: str

    def _module(self) -> Any:
        return importlib.import_module(_MODULES[self.name])

    @property
    def confidential(self) -> tuple[str, ...]:
        """The names of its confidential record files (they key the ledger's dataset)."""
        return tuple(self._module().CONFIDENTIAL)

    def run_inputs(self, config: Path, data: Path, coterminous: Path | None = None) -> RunInputs:
        """Every file a run of it reads, by role (SafeTab-P alone takes a coterminous file)."""
        if self.name == "safetab-p":
            return self._module().run_inputs(config, data, coterminous)
        return self._module().run_inputs(config, data)

    def parse_parameters(self, sealed: SealedParameters) -> Any:
        """Its parameters parsed from the sealed files (None when they cannot be)."""
        return self._module().parse_parameters(sealed)


def release_product(name: str) -> ReleaseProduct:
    if name not in _MODULES:
        raise ValueError(f"unknown product {name!r} (one of {', '.join(RELEASE_PRODUCTS)})")
    return ReleaseProduct(name)
