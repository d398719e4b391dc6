"""The Prefect server's scheduler creates the runs of an active schedule, with the pinned stack.

With SQLAlchemy 2.1 under Prefect 3.8.8 the scheduler fails every loop (``Can't evaluate bulk
DML statement``) and production schedules never run; this runs the scheduler's own loop body
once against the test server's database, in seconds. The end-to-end test checks the same on a
real ``prefect server`` (tests/test_e2e_prefect.py).
"""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.usefixtures("prefect_server")


async def _schedule_and_read() -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.server.services.scheduler import schedule_deployments

    async with get_client() as client:
        flow_id = await client.create_flow_from_name("das-scheduler-check")
        production = CronSchedule(cron="0 2 * * 1", timezone="America/New_York")
        deployment_id = await client.create_deployment(
            flow_id=flow_id,
            name="weekly",
            schedules=[DeploymentScheduleCreate(schedule=production, active=True)],
        )
        await schedule_deployments(perpetual=None)
        return await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        )


def test_scheduler_creates_the_runs_of_an_active_schedule() -> None:
    runs = asyncio.run(_schedule_and_read())
    assert runs, "the scheduler created no run for an active schedule"
    assert all(run.state.is_scheduled() and run.auto_scheduled for run in runs)
    assert all(run.expected_start_time.weekday() == 0 for run in runs)  # Mondays
