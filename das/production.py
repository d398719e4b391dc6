"""Production mode: whether ``DAS_PRODUCTION`` says this is a production run.

On for ``1``, ``true`` or ``yes`` (any case), off when unset, empty, ``0``, ``false`` or ``no``;
any other value is refused, so a typo never silently means "not production". The run's policy
(:mod:`das.runs.policy`) and the privacy ledger (:mod:`das.trust`: production never creates a
ledger, and requires a chartered one) both ask it, so it lives below both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from das.refusal import RunRefused

PRODUCTION_ENV = "DAS_PRODUCTION"
_ON = ("1", "true", "yes")
_OFF = ("", "0", "false", "no")


def production_mode(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``DAS_PRODUCTION`` says production; refuses a value it does not know."""
    raw = (os.environ if environ is None else environ).get(PRODUCTION_ENV)
    value = "" if raw is None else raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise RunRefused(
        f"{PRODUCTION_ENV}={raw!r} is neither on (1, true, yes) nor off (unset, 0, false, no); "
        "refusing to guess whether this is a production run"
    )
