"""The throwaway PostgreSQL of the tests (tests/pg_cluster.py): both URLs work, the role is
no superuser and needs its password, the cluster is private, and it is stopped and removed
however its block ends."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pg_cluster import PostgresCluster, PostgresURLs


def test_the_session_cluster_answers_on_both_urls(postgres_cluster: PostgresURLs) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(postgres_cluster.sync_url)
    try:
        with engine.begin() as connection:
            user, superuser = connection.execute(
                sa.text("SELECT current_user, usesuper FROM pg_user WHERE usename = current_user")
            ).one()
            connection.execute(sa.text("CREATE TABLE IF NOT EXISTS probe (x int)"))
    finally:
        engine.dispose()
    assert (user, superuser) == ("das", False)
    assert postgres_cluster.async_url.startswith("postgresql+asyncpg://das:")
    assert postgres_cluster.sync_url.startswith("postgresql+psycopg://das:")

    async def asyncpg_database() -> str:
        import asyncpg

        url = postgres_cluster.async_url.replace("postgresql+asyncpg://", "postgresql://")
        connection = await asyncpg.connect(url)
        try:
            return await connection.fetchval("SELECT current_database()")
        finally:
            await connection.close()

    assert asyncio.run(asyncpg_database()) == "das"


def test_the_password_is_required(postgres_cluster: PostgresURLs) -> None:
    import sqlalchemy as sa

    cluster = postgres_cluster.cluster
    if cluster is None:
        pytest.skip("a cluster started outside this session (DAS_TEST_POSTGRES_URL)")
    engine = sa.create_engine(cluster.url("postgresql+psycopg", password="wrong"))
    try:
        with pytest.raises(sa.exc.OperationalError, match="password authentication failed"):
            engine.connect().close()
    finally:
        engine.dispose()
    assert stat.S_IMODE(cluster.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(cluster.socket_dir.stat().st_mode) == 0o700
    assert cluster.password not in " ".join(cluster.process.args)  # never on a command line


def test_stopped_and_removed_when_its_block_fails() -> None:
    with pytest.raises(RuntimeError, match="the test failed"), PostgresCluster.started() as cluster:
        pid, folder = cluster.process.pid, cluster.folder
        assert "das" in cluster.psql("SELECT current_database();")
        raise RuntimeError("the test failed")
    assert not folder.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(("allow_skip", "outcome"), [("", "1 error"), ("1", "1 skipped")])
def test_the_fixture_fails_unless_a_skip_is_allowed(
    tmp_path: Path, allow_skip: str, outcome: str
) -> None:
    """No PostgreSQL (here: a bin folder without one) fails the tests that need it; only
    DAS_TEST_POSTGRES_SKIP=1 turns that into a skip."""
    test = tmp_path / "test_needs_pg.py"
    test.write_text("def test_needs_pg(postgres_cluster):\n    pass\n")
    # Not as CI (DAS_CI): the inner session's skip is what this test looks at.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DAS_TEST_POSTGRES") and k != "DAS_CI"}  # fmt: skip
    env.update(DAS_PG_BINDIR=str(tmp_path), DAS_TEST_POSTGRES_SKIP=allow_skip)
    tests = Path(__file__).parent
    options = ["-q", "-p", "no:cacheprovider", "-c", str(tests.parent / "pyproject.toml"),
               "--rootdir", str(tests), "--noconftest", "-p", "pg_cluster"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pytest", *options, str(test)], cwd=tests,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert outcome in done.stdout, done.stdout[-2000:]
    if not allow_skip:
        assert "PostgreSQL could not be started" in done.stdout
