"""Shared test setup: offline Prefect/GX, and the path to the public Census spec files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from das.offline import configure_offline

configure_offline(prefect_home=Path(tempfile.mkdtemp(prefix="das-test-prefect-")))

# One plugin module, hence one session-wide temporary Prefect server (a fixture imported into
# several test modules would be a separate definition, and a separate server, in each).
# pg_cluster: the session fixture postgres_cluster (a private PostgreSQL; fails when it cannot
# start, unless DAS_TEST_POSTGRES_SKIP=1).
pytest_plugins = ("prefect_fixtures", "prefect_stack", "pg_cluster")  # prefect_stack: issue 11 e2e

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CENSUS_SPECS = SHARED / "census_specs"


@pytest.fixture(autouse=True)
def private_default_ledger(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Path:
    """Each test gets its own per-user default privacy ledger (XDG_DATA_HOME): tests that
    release the same toy records must not meet each other's recorded spend."""
    home = tmp_path_factory.mktemp("xdg-data")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home / "das" / "ledger"


@pytest.fixture
def census_specs() -> Path:
    """The real public 2020 spec files and Census toy inputs; skip when ../shared is absent."""
    if not CENSUS_SPECS.is_dir():
        pytest.skip("../shared/census_specs is not available")
    return CENSUS_SPECS


@pytest.fixture
def count_samples(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every draw of a mechanism (by mechanism class name), one-shot (``sample``) or streamed
    to disk (``sample_blocks``, one call per measurement): proves draws or none."""
    from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism

    calls: list[str] = []
    for cls in (DiscreteGaussianMechanism, GeometricMechanism):
        for method in ("sample", "sample_blocks"):
            original = getattr(cls, method)

            def counting(self, size, rng=None, *args, _original=original, **kwargs):
                calls.append(type(self).__name__)
                return _original(self, size, rng, *args, **kwargs)

            monkeypatch.setattr(cls, method, counting)
    return calls
