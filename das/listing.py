"""Lists in messages: a count and the first few, never every item.

A refusal that named every earlier release beside an output ran to a thousand characters and
buried its next step; every message that lists things folds them here, the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

SHOWN = 3


def folded(items: Iterable[str], shown: int = SHOWN, sep: str = ", ") -> str:
    """``a, b, c and 4 more`` (``a; b; c; 4 more`` with ``sep="; "``); every item when there
    are at most ``shown + 1`` (a "1 more" would be no shorter than the item)."""
    listed = list(items)
    if len(listed) <= shown + 1:
        return sep.join(listed)
    more = len(listed) - shown
    if sep.strip() == ",":
        return f"{sep.join(listed[:shown])} and {more} more"
    return f"{sep.join(listed[:shown])}{sep}{more} more"
