"""The one session-wide temporary Prefect server of the test suite (DESIGN §8).

Registered once as a plugin by ``conftest.py``; a test module that runs flows asks for it with
``pytestmark = pytest.mark.usefixtures("prefect_server")``. Every module shares the same server.
"""

from __future__ import annotations

import pytest

from das.offline import configure_offline

configure_offline()

from prefect.testing.utilities import prefect_test_harness  # noqa: E402


@pytest.fixture(scope="session")
def prefect_server():
    """A temporary Prefect API and database for the whole session."""
    with prefect_test_harness(server_startup_timeout=120):
        yield
