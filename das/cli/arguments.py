"""Argument types shared by the `das` commands (argparse `type=` callables)."""

from __future__ import annotations

import argparse


def _whole_number(text: str, minimum: int) -> int:
    """A whole number >= minimum; thousands separators (``10,000,000``) are accepted."""
    try:
        value = int(text.replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}")
    return value


def positive_int(text: str) -> int:
    """Counts (persons, rows): at least 1."""
    return _whole_number(text, 1)


def seed_int(text: str) -> int:
    """Seeds: at least 0."""
    return _whole_number(text, 0)
