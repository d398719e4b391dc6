"""The ``approval-sweep`` flow: what notices the approvers' decision for a run that waits
without a process.

A deployment run waiting for its approvers is suspended: nothing of it runs
(:mod:`tasks.approval`). `das ledger approve` and `das ledger reject` resume it at once when they
reach the Prefect server, and *Resume* in the UI does; this flow, which `das deploy` registers
with a schedule (deployment ``approval-sweep/every-few-minutes``), does the rest, from a worker
that reaches the deployments' privacy ledger. For every request a flow run wrote that nothing
closed yet:

- the run is suspended: resumed when a quorum signed (approvers on hosts without the Prefect
  API, a server that was down when they signed), when it was rejected at a terminal, or when it
  expired — the run then goes on, or ends Refused with its reason; else the count of
  signatures on its page is brought up to date;
- the run was cancelled, or deleted, while it waited: the request is withdrawn in the ledger
  (``approval-withdrawn``): a signature that comes later authorizes nothing.

It reads approvals and flow runs' states only, and posts nothing but approval ids and flow-run
ids; it draws nothing and runs in seconds.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import datetime as dt  # noqa: E402

from prefect import flow, get_run_logger  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402

from das.trust import open_ledger  # noqa: E402
from tasks.approval import BACKSTOP_SECONDS, open_requests, settle  # noqa: E402


@flow(
    name="approval-sweep",
    description="Resume runs waiting for approvers once the ledger decided; withdraw the "
    "requests of cancelled runs",
)
def approval_sweep_flow() -> list[str]:
    """Settle every open request a flow run wrote (see the module docstring); what was done."""
    logger = get_run_logger()
    ledger = open_ledger().ledger
    done = []
    within = dt.timedelta(seconds=2 * BACKSTOP_SECONDS)  # older ones' runs ended long ago
    with get_client(sync_client=True) as client:
        for approval_id in open_requests(ledger, within):
            try:
                outcome = settle(client, ledger, approval_id, by="the approvals sweep")
            except Exception as exc:  # one request's trouble does not stop the others
                logger.warning("approval %s: %s", approval_id, type(exc).__name__)
                continue
            if outcome:
                logger.info("%s", outcome)
                done.append(outcome)
    if not done:
        logger.info("no run waiting for its approvers needed anything")
    return done
