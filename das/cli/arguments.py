"""Argument types shared by the `das` commands (argparse `type=` callables)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


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


def resolved_path(text: str) -> Path:
    """A path argument made absolute (``~`` expanded, ``..`` folded) against the working
    directory the command was started in: what runs later — Great Expectations' Data Docs,
    Prefect tasks and Dask workers in other processes, the audit record — never depends on a
    working directory of its own."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    return Path(os.path.abspath(os.path.expanduser(text)))
