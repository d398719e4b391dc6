"""The Prefect `audit-privacy` flow, in process against the session's temporary server."""

from __future__ import annotations

import pytest

from das.offline import configure_offline

configure_offline()

from prefect_fixtures import artifacts  # noqa: E402

from flows.audit_privacy import audit_privacy_flow  # noqa: E402
from tasks.audit_privacy import REPORT_ARTIFACT_KEY  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_flow_audits_a_mechanism_and_posts_the_report() -> None:
    state = audit_privacy_flow(
        target="mechanism", mechanism="geometric", budget="1", sensitivity="1",
        trials=100_000, seed=1, return_state=True,
    )  # fmt: skip
    result = state.result()
    assert result["ok"] is True and result["rows"][0]["lower_bound"] <= 1.0
    posted = artifacts(REPORT_ARTIFACT_KEY, str(state.state_details.flow_run_id))
    assert posted and "## Claimed versus lower bound" in posted[0].data
    assert "100,000" in posted[0].data


def test_flow_runs_the_self_test() -> None:
    state = audit_privacy_flow(target="self-test", seed=2, return_state=True)
    result = state.result()
    assert result["ok"] is True and all(v["detected"] for v in result["variants"])
    (posted,) = artifacts(REPORT_ARTIFACT_KEY, str(state.state_details.flow_run_id))
    assert "deliberately broken" in posted.data


def test_flow_refuses_an_unknown_target() -> None:
    with pytest.raises(ValueError, match="Unknown audit target"):
        audit_privacy_flow(target="swap")
