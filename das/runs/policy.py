"""What a run may do: production mode, and the markers of a release that is not private.

``DAS_PRODUCTION=1`` (set on production work pools) refuses seeded noise and any infinite budget,
and requires a privacy ledger (``DAS_LEDGER_DIR``). The flows call :func:`check_release_policy`
first thing, so the refusal holds whatever starts them: ``das run``, a deployment, a schedule, a
Retry, or a Python call of the flow function. Outside production both are allowed for tests and
demos, and the release says so loudly (:func:`privacy_markers`): the success line, every artifact
title, the audit, and a marker file in the release folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from das.privacy.accounting import Measurement

PRODUCTION_ENV = "DAS_PRODUCTION"
LEDGER_ENV = "DAS_LEDGER_DIR"

# Marker files of the release folder, and what each one says.
NOT_PRIVATE = "NOT-PRIVATE"
SEEDED = "SEEDED"
MARKER_TEXT = {
    NOT_PRIVATE: (
        "This release is NOT differentially private: at least one query had an infinite budget "
        "(no noise), so some released counts are exact. For golden tests only; never publish it.\n"
    ),
    SEEDED: (
        "This release used SEEDED noise (reproducible from the seed): anyone with the seed can "
        "remove the noise. For tests and demos only; never publish it.\n"
    ),
}


class RunRefused(RuntimeError):
    """The run may not start (policy, identity, ledger or output lock); nothing was drawn and
    nothing in the output was touched. The message says why and what to do; it holds no data."""


def is_production(environ: Mapping[str, str] | None = None) -> bool:
    """True under ``DAS_PRODUCTION=1``."""
    return (os.environ if environ is None else environ).get(PRODUCTION_ENV) == "1"


def infinite_queries(plan: Iterable[Measurement]) -> list[str]:
    """Names of the planned measurements whose budget is infinite (they release exact counts)."""
    return [m.name for m in plan if isinstance(m.budget, float) and math.isinf(m.budget)]


def privacy_markers(seed: int | None, plan: Iterable[Measurement]) -> list[str]:
    """The marker names a release of this run carries (empty for a private release)."""
    markers = []
    if infinite_queries(plan):
        markers.append(NOT_PRIVATE)
    if seed is not None:
        markers.append(SEEDED)
    return markers


def marker_banner(markers: Iterable[str]) -> str:
    """``"[NOT-PRIVATE, SEEDED] "`` for titles and lines; empty for a private release."""
    names = list(markers)
    return f"[{', '.join(names)}] " if names else ""


def check_release_policy(
    seed: int | None,
    plan: Iterable[Measurement],
    environ: Mapping[str, str] | None = None,
) -> None:
    """Refuse, under production mode, a seed, an infinite budget or a missing ledger folder."""
    environ = os.environ if environ is None else environ
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise RunRefused(f"seed must be a non-negative integer, got {seed!r}")
    if not is_production(environ):
        return
    problems = []
    if seed is not None:
        problems.append("a seed was given (seeded noise is for tests and demos only)")
    infinite = infinite_queries(plan)
    if infinite:
        shown = ", ".join(infinite[:3]) + (", ..." if len(infinite) > 3 else "")
        problems.append(
            f"{len(infinite)} query(ies) have an infinite budget, i.e. no noise ({shown})"
        )
    if not environ.get(LEDGER_ENV):
        problems.append(f"{LEDGER_ENV} is not set (the privacy ledger is required in production)")
    if problems:
        raise RunRefused(
            f"refused under {PRODUCTION_ENV}=1: " + "; ".join(problems) + ". Nothing was drawn."
        )


def ledger_directory(output: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Where the privacy ledger lives: ``DAS_LEDGER_DIR``, else (outside production only) the
    folder ``.das-ledger`` beside the output folder, shared by sibling outputs."""
    environ = os.environ if environ is None else environ
    configured = environ.get(LEDGER_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    if is_production(environ):
        raise RunRefused(f"{LEDGER_ENV} is required under {PRODUCTION_ENV}=1")
    return Path(output).resolve().parent / ".das-ledger"
