"""What the privacy ledger refuses, and how it fails: one home for the ledger's exceptions.

A *refusal* (:class:`LedgerRefused` and its kinds) is part of the interface: nothing was drawn,
the message says why and its :class:`~das.refusal.Remedy` what to do next. A *fault*
(:class:`LedgerUnavailable`) is infrastructure: the ledger cannot be read at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

from das.refusal import Remedy, RunRefused

if TYPE_CHECKING:
    from das.trust.ledger.amounts import PassSpend


class LedgerRefused(RunRefused):
    """The ledger refuses this run or this step (not initialized, broken, bound elsewhere,
    misconfigured...)."""


class LedgerUnavailable(RuntimeError):
    """The ledger's database cannot be opened or read (missing, corrupted, unreachable)."""


class CumulativeSpendRequired(LedgerRefused):
    """Outside production: the dataset already has recorded spend, and the operator must name
    the new cumulative total (or approve it in the ledger)."""


class ApprovalRequired(LedgerRefused):
    """Production: no approval in the ledger covers this spend. Carries what a person needs to
    decide (the planned spend per pass, the cumulative spend, the ceiling)."""

    def __init__(
        self,
        message: str,
        remedy: Remedy,
        passes: list[PassSpend],
        ceilings: Mapping[str, Fraction],
        dataset: str,
    ) -> None:
        super().__init__(message, remedy)
        self.passes = passes
        self.ceilings = dict(ceilings)
        self.dataset = dataset


class CeilingExceeded(LedgerRefused):
    """The cumulative spend would pass the ledger's ceiling: no approval can allow it."""


class ReleaseDiffers(RuntimeError):
    """A run tried to publish content other than the release it sealed (never allowed)."""


class DrawRefused(RuntimeError):
    """A draw the ledger does not allow: the run is not drawing, or a newer attempt owns it
    (orphaned work of a killed attempt stops instead of drawing on)."""


class DuplicateDraw(RuntimeError):
    """A measurement already recorded as drawn: it is never drawn twice in one run."""
