"""Prefect's side of a release run: the host the run's safety lifecycle runs in.

The lifecycle itself — start checks, the ledger's steps, publication — is the engine's
(:mod:`das.runs.lifecycle`); :class:`PrefectHost` gives it what only the orchestrator has: the
flow run's logger and id, where the run was started (a deployment, `das run`, a Python call),
the Prefect server as the witness of the ledger's head, the pause for an approval, the check
that an existing Dask cluster shares the run's files, the progress display and the artifacts.
"""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

import contextlib  # noqa: E402
import logging  # noqa: E402
from collections.abc import Iterator, Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402

from das.privacy.accounting import PrivacyAccountant  # noqa: E402
from das.runs.lifecycle import ReleaseRun, RunHost, resolve_path  # noqa: E402
from das.runs.lifecycle import release_run as engine_release_run  # noqa: E402
from das.runs.progress import RunProgress  # noqa: E402
from das.runs.start import Parse, RunInputs, RunRequest  # noqa: E402
from das.trust import Approval, LedgerInfo, PrivacyLedger  # noqa: E402
from tasks.artifacts import artifact_key, publish_audit_artifact, publish_privacy_artifacts  # noqa: E402
from tasks.cluster import check_cluster_shares_run  # noqa: E402
from tasks.ledger_witness import post_head, require_witnessed  # noqa: E402
from tasks.progress import prefect_progress  # noqa: E402
from tasks.run_tags import RESUMED, WAITING, retag  # noqa: E402

__all__ = [
    "PrefectHost",
    "ReleaseRun",
    "RunRequest",
    "flow_run_id",
    "release_run",
    "request_context",
    "resolve_path",
    "started_from",
]


def flow_run_id() -> str | None:
    from prefect.runtime import flow_run

    return str(flow_run.id) if flow_run.id else None


def waited_for_approvers() -> bool:
    """Whether this flow run goes on after waiting for its approvers (it carries the tag the
    wait set): its new attempt is no resume after a crash."""
    from prefect.runtime import flow_run

    return WAITING in (flow_run.tags or [])


def started_by_deployment() -> bool:
    from prefect.runtime import deployment

    return bool(deployment.id)


def started_from(caller: str) -> str:
    """Where the run was started: a deployment (whatever the parameter says), else what the
    caller declares (`das run` passes ``cli``; a Python call is ``python``)."""
    return "deployment" if started_by_deployment() else caller


def request_context(request: RunRequest) -> str:
    """Where the run was started: a deployment, `das run`, or a Python call."""
    return started_from(request.context)


class PrefectHost:
    """The :class:`~das.runs.lifecycle.RunHost` of a Prefect flow run."""

    @property
    def logger(self) -> logging.Logger | logging.LoggerAdapter[Any]:
        return get_run_logger()

    def flow_run_id(self) -> str | None:
        return flow_run_id()

    def started_from(self, caller: str) -> str:
        return started_from(caller)

    def api_url(self) -> str | None:
        from prefect.settings import PREFECT_API_URL

        return PREFECT_API_URL.value() or None

    def require_witnessed(
        self, ledger: PrivacyLedger, info: LedgerInfo, production: bool, run_id: str
    ) -> list[str]:
        return require_witnessed(ledger, info, production, run_id)

    def post_head(self, info: LedgerInfo, moment: str) -> None:
        post_head(info, moment)

    def tag_attempt(self, attempt: int) -> None:
        """A resumed run carries ``attempt-N`` among its tags: the run list shows that this run
        crashed or failed before and was resumed. A run that goes on after waiting for its
        approvers loses its ``awaiting-approval`` tag instead."""
        if waited_for_approvers():  # it goes on after its approvers decided: no crash
            retag(flow_run_id(), remove=[WAITING])
        elif attempt >= 2:
            retag(flow_run_id(), add=[f"attempt-{attempt}", RESUMED])

    def await_approval(self, run: ReleaseRun, request: Approval) -> None:
        from tasks.approval import await_approval

        await_approval(run, request, flow_run_id())

    def suspended(self, exc: BaseException) -> bool:
        """Prefect's ``Pause``: the flow run suspended itself (it waits for its approvers) and
        its process exits; not a failure."""
        from prefect.exceptions import Pause

        return isinstance(exc, Pause)

    def check_cluster(
        self, files: Mapping[str, Path], run_root: Path, ledger: PrivacyLedger
    ) -> None:
        check_cluster_shares_run(files, run_root, ledger)

    def progress(self, product: str, run_id: str) -> RunProgress:
        return prefect_progress(product, run_id)

    def publish_audit(self, product: str, record: Mapping[str, Any], banner: str) -> None:
        publish_audit_artifact(product, record, banner)

    def publish_privacy(
        self,
        product: str,
        accountants: Mapping[str, PrivacyAccountant],
        delta: float,
        banner: str,
    ) -> None:
        publish_privacy_artifacts(product, accountants, delta, banner)

    def publish_release(self, product: str, markdown: str, description: str) -> None:
        create_markdown_artifact(
            markdown=markdown, key=artifact_key(product, "release"), description=description
        )


_HOST: RunHost = PrefectHost()


@contextlib.contextmanager
def release_run(request: RunRequest, inputs: RunInputs, parse: Parse) -> Iterator[ReleaseRun]:
    """The release run of a product flow (:func:`das.runs.lifecycle.release_run`) in Prefect."""
    with engine_release_run(_HOST, request, inputs, parse) as run:
        yield run
