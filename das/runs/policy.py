"""What a run may do in production, and the markers of a release that is not private.

``DAS_PRODUCTION`` (set on production work pools; read by :mod:`das.production`) says whether
this is a production run; a chartered ledger makes every run one. Production refuses seeded
noise, any infinite budget and ``--skip-validation`` without a recorded passing validation, and
requires an initialized privacy ledger (``DAS_LEDGER_DIR`` or ``DAS_LEDGER_URL``) whose
approvals govern every spend. The flows check it themselves, so the refusal holds whatever
starts them: ``das run``, a deployment, a schedule, a Retry, or a Python call of the flow
function. Outside production, seeds and Infinity are allowed for tests and demos, and the
release says so loudly (:func:`privacy_markers`): the success line, every artifact title, the
audit, and a marker file in the release folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

from das.listing import folded
from das.privacy.accounting import Measurement
from das.production import PRODUCTION_ENV, production_mode
from das.refusal import Remedy, RunRefused, combined
from das.trust import LEDGER_ENV, LEDGER_ID_ENV, LEDGER_URL_ENV

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
    *,
    cumulative_total: Mapping[str, str] | None = None,
    production: bool | None = None,
) -> None:
    """Refuse, in production, a seed, an infinite budget, a missing ledger setting (under
    ``DAS_PRODUCTION``) or a named cumulative total (spend is approved in the ledger there).
    ``production``: known from the ledger (chartered); None reads ``DAS_PRODUCTION`` alone.
    ``--skip-validation`` is checked later, against the ledger's record of a passing
    validation of the same data."""
    environ = os.environ if environ is None else environ
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise RunRefused(f"seed must be a non-negative integer, got {seed!r}")
    by_environment = production_mode(environ)
    if not (by_environment or production):
        return
    found: list[tuple[str, Remedy]] = []
    if seed is not None:
        found.append((
            "a seed was given (seeded noise is for tests and demos only)",
            Remedy(cli="run again without --seed",
                   deployment="start a new custom run with seed left empty (a Retry would "
                   "reuse the seed)"),
        ))  # fmt: skip
    infinite = infinite_queries(plan)
    if infinite:
        found.append((
            f"{len(infinite)} query(ies) have an infinite budget, i.e. no noise "
            f"({folded(infinite)})",
            Remedy(command="give every query of the config a finite budget (Infinity is for "
                   "golden tests, against a ledger without a charter), then start a new run"),
        ))  # fmt: skip
    if by_environment and not (environ.get(LEDGER_ENV) or environ.get(LEDGER_URL_ENV)):
        found.append((
            f"neither {LEDGER_ENV} nor {LEDGER_URL_ENV} is set (the privacy ledger is required "
            "in production)",
            Remedy(command=f"set {LEDGER_ENV} (or {LEDGER_URL_ENV}) and {LEDGER_ID_ENV} to "
                   "the production ledger, then run again"),
        ))  # fmt: skip
    if cumulative_total:
        found.append((
            "a cumulative total was named (in production a further spend is approved in the "
            "ledger by its approvers' signatures, not accepted on the command line)",
            Remedy(cli="run again without --cumulative-total, once the approvers signed the "
                   "spend (das ledger approve --key)",
                   deployment="start a new custom run with cumulative_total left empty"),
        ))  # fmt: skip
    if found:
        why = f"{PRODUCTION_ENV}=1" if by_environment else "a chartered (production) ledger"
        raise RunRefused(
            f"refused under {why}: " + "; ".join(p for p, _ in found) + ". Nothing was drawn.",
            combined([r for _, r in found]),
        )
