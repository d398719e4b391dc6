"""A refusal and its next step: what every layer raises when something may not go on.

:class:`RunRefused` is part of the interface, not a crash: nothing was drawn, the message says
why (and holds no data), and its :class:`Remedy` says what to do next in the syntax of where
the run was started. The run's policy (:mod:`das.runs.policy`), the privacy ledger and the
run key (:mod:`das.trust`) refuse with it, so it lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Remedy:
    """The next step after a refusal, in the syntax of where the run was started: a ``das
    run`` flag, a deployment parameter, or a command that is the same everywhere (e.g. the
    approval of the spend in the ledger)."""

    cli: str | None = None
    deployment: str | None = None
    command: str | None = None

    def for_context(self, context: str) -> str | None:
        """``context``: ``cli`` (das run), ``deployment`` or ``python`` (a direct flow call)."""
        if self.command is not None:
            return self.command
        if context == "cli":
            return self.cli
        return self.deployment or self.cli


class RunRefused(RuntimeError):
    """The run may not start, or may not go on to draw (policy, identity, ledger, approvals,
    output lock); nothing was drawn. The message says why, :attr:`remedy` what to do; it holds
    no data."""

    def __init__(self, message: str, remedy: Remedy | None = None) -> None:
        super().__init__(message)
        self.remedy = remedy

    def explained(self, context: str = "cli") -> str:
        """The message and, when there is one, the next step in ``context``'s syntax."""
        step = None if self.remedy is None else self.remedy.for_context(context)
        message = str(self).rstrip()
        if step is None:
            return message
        sentence = message if message.endswith((".", "!", "?")) else message + "."
        return f"{sentence} Next step: {step}"


def combined(remedies: Sequence[Remedy]) -> Remedy:
    """One next step for several problems: each one's step, in each caller's syntax."""
    if len(remedies) == 1:
        return remedies[0]

    def joined(context: str) -> str:
        steps = [r.for_context(context) for r in remedies]
        return "; and ".join(dict.fromkeys(s for s in steps if s))

    return Remedy(cli=joined("cli"), deployment=joined("deployment"))
