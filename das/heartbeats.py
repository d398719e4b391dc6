"""How often a flow run says it is alive, and how long its silence may last before the Prefect
server marks it Crashed (a lost host: its flow process is gone and nothing else will report it).

Prefect's engine emits a ``prefect.flow-run.heartbeat`` event from a thread of the flow process
every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (Prefect's default, 180 s, is too slow to
show a lost host within minutes); an automation on the server crashes a run that stays silent
longer than the window (``flows.crash_detection``). The two numbers must agree, so both come
from here:

- ``DAS_HEARTBEAT_SECONDS`` (default 30, Prefect's minimum): every ``das`` process sets
  ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` from it before Prefect is imported, and ``das deploy``
  writes it into every deployment's environment;
- ``DAS_CRASH_AFTER_SECONDS`` (default 90: three beats missed): the automation's window. At
  least twice the heartbeat, so that one late beat never crashes a run that is alive.

Never imports Prefect (the engine does not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

HEARTBEAT_ENV = "DAS_HEARTBEAT_SECONDS"
CRASH_AFTER_ENV = "DAS_CRASH_AFTER_SECONDS"
PREFECT_HEARTBEAT_ENV = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"
DEFAULT_HEARTBEAT_SECONDS = 30
DEFAULT_CRASH_AFTER_SECONDS = 90
MINIMUM_HEARTBEAT_SECONDS = 30  # Prefect refuses a shorter interval (flows.heartbeat_frequency)
MISSED_BEATS_TOLERATED = 2  # the window holds at least this many intervals


class HeartbeatSettingError(ValueError):
    """A ``DAS_HEARTBEAT_SECONDS`` / ``DAS_CRASH_AFTER_SECONDS`` that would miss or invent a
    crash; the message names the variable and the fix."""


@dataclass(frozen=True)
class Liveness:
    """A run beats every ``heartbeat_seconds``; silent ``crash_after_seconds``, it is Crashed."""

    heartbeat_seconds: int
    crash_after_seconds: int


def _seconds(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise HeartbeatSettingError(f"{name}={text!r}: expected whole seconds") from None


def liveness(environ: Mapping[str, str] | None = None) -> Liveness:
    """The settings of ``environ`` (default: this process's), checked."""
    environ = os.environ if environ is None else environ
    beat = _seconds(environ, HEARTBEAT_ENV, DEFAULT_HEARTBEAT_SECONDS)
    window = _seconds(environ, CRASH_AFTER_ENV, DEFAULT_CRASH_AFTER_SECONDS)
    if beat < MINIMUM_HEARTBEAT_SECONDS:
        raise HeartbeatSettingError(
            f"{HEARTBEAT_ENV}={beat}: Prefect emits heartbeats at most every "
            f"{MINIMUM_HEARTBEAT_SECONDS} s; use {MINIMUM_HEARTBEAT_SECONDS} or more"
        )
    if window < MISSED_BEATS_TOLERATED * beat:
        raise HeartbeatSettingError(
            f"{CRASH_AFTER_ENV}={window} with {HEARTBEAT_ENV}={beat}: one late heartbeat would "
            f"crash a run that is alive; use at least {MISSED_BEATS_TOLERATED * beat} "
            f"(default {DEFAULT_CRASH_AFTER_SECONDS}: three beats of {DEFAULT_HEARTBEAT_SECONDS} s)"
        )
    return Liveness(heartbeat_seconds=beat, crash_after_seconds=window)


def configure_heartbeats(environ: MutableMapping[str, str] | None = None) -> Liveness:
    """``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` from ``DAS_HEARTBEAT_SECONDS`` (over an inherited
    value: the automation's window assumes this interval), before Prefect reads its settings.
    Raises :class:`HeartbeatSettingError`."""
    environ = os.environ if environ is None else environ
    settings = liveness(environ)
    environ[PREFECT_HEARTBEAT_ENV] = str(settings.heartbeat_seconds)
    return settings
