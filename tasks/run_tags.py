"""Tags on a flow run: what the UI's run list shows beside the state (best effort: a tag is
information, never a reason for a run to fail)."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import contextlib  # noqa: E402
from collections.abc import Iterable  # noqa: E402

RESUMED, WAITING, REFUSED = "resumed", "awaiting-approval", "refused"


def retag(flow_run_id: str | None, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
    """Add ``add`` to the flow run's tags and take ``remove`` off."""
    if flow_run_id is None:
        return
    from prefect.client.orchestration import get_client

    add, remove = list(add), set(remove)
    with contextlib.suppress(Exception), get_client(sync_client=True) as client:
        tags = [t for t in (client.read_flow_run(flow_run_id).tags or []) if t not in remove]
        client.update_flow_run(flow_run_id, tags=[*tags, *(t for t in add if t not in tags)])
