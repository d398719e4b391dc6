"""The pinned stack imports together: a dependency break shows here first."""

import importlib.metadata as metadata
import os

import pytest


def test_prefect_server_imports() -> None:
    import prefect.server.api.server as server

    assert hasattr(server, "create_app")


@pytest.mark.parametrize(
    ("package", "major"),
    [
        ("prefect", "3"),
        ("great-expectations", "1"),
        ("pydantic", "2"),
        ("pandas", "3"),
        ("numpy", "2"),
    ],
)
def test_pinned_major_versions(package: str, major: str) -> None:
    assert metadata.version(package).split(".")[0] == major


def test_telemetry_disabled_for_tests() -> None:
    assert os.environ["DO_NOT_TRACK"] == "1"
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"
