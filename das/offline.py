"""Keep Prefect, Great Expectations and Dask offline: no telemetry, no phoning home; and give
every flow run the heartbeat the server's crash detection expects (:mod:`das.heartbeats`).

Called before Prefect or GX is imported (by the CLI, the flows and the tests). Only sets
variables the operator has not set, so a deployment can still point at its own Prefect server
(and keeps the heartbeat its environment names).
"""

from __future__ import annotations

import os
from pathlib import Path

from das.heartbeats import PREFECT_HEARTBEAT_ENV, liveness

EPHEMERAL_STARTUP_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
EPHEMERAL_STARTUP_SECONDS = "180"

OFFLINE_ENVIRONMENT = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    "GX_ANALYTICS_ENABLED": "false",
}


def configure_offline(prefect_home: str | Path | None = None) -> None:
    """Disable analytics of Prefect and GX; give Prefect a per-project home unless one is set;
    flow runs beat every ``DAS_HEARTBEAT_SECONDS`` unless the environment names an interval; a
    temporary Prefect API may take 180 s to start unless the environment says otherwise."""
    for key, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault(PREFECT_HEARTBEAT_ENV, str(liveness().heartbeat_seconds))
    # A loaded machine starts a temporary Prefect API slowly: wait longer than Prefect's 20 s.
    # Here, before anything reads Prefect's settings (which are read once per process: `das
    # demo` runs several commands in one, and its first `das run` failed after 20 s when an
    # earlier step had read them).
    os.environ.setdefault(EPHEMERAL_STARTUP_ENV, EPHEMERAL_STARTUP_SECONDS)
    if prefect_home is not None:
        os.environ.setdefault("PREFECT_HOME", str(prefect_home))
