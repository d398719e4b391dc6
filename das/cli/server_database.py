"""The local API's new database, copied from one migrated once per installation.

`prefect server start` on a new home creates its SQLite database and runs every one of
Prefect's migrations on it (over a hundred): about 4 CPU-s, and on a 2-core machine the
longest part of a first run's wait for its local API. The result is the same empty database
for every home of one Prefect version, so it is made once, kept as a *template*, and a new
home's database is a copy of it (milliseconds); the server still checks the migrations when
it starts and finds nothing to do.

- **Where the template lives**: ``<sys.prefix>/share/das/prefect-<version>.db`` (the
  virtualenv's: every home that uses this installation shares it), else, when that folder is
  not writable, ``${XDG_CACHE_HOME:-~/.cache}/das/``. It holds Prefect's empty tables and
  nothing of any run.
- **Who makes it**: the first start that finds none starts the server as before (it migrates
  its own database) and, beside it, a detached process at the lowest priority that runs
  ``prefect server database upgrade`` on a database of its own and moves the result into
  place whole (:func:`build`); two at once: one builds, the other leaves it.
- **What is trusted**: a template is used only when SQLite opens it, finds it intact
  (``PRAGMA quick_check``), it records exactly one migration revision and holds no record of
  any run, artifact, log, variable, deployment, block, work pool or automation
  (:data:`RECORD_TABLES`); otherwise the server makes its database as before. Whoever can
  write the installation's folder can change its code too: the template adds no one to
  trust. A template of an older revision is still migrated to the current one by the
  server's own check.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from das.offline import OFFLINE_ENVIRONMENT

DATABASE = "prefect.db"  # Prefect's SQLite file in its home (PREFECT_HOME)
# What runs and operators put on a server: empty in a template (a copy holding any of it would
# show a new home runs, artifacts, logs or deployments that were never its own)
RECORD_TABLES = ("flow_run", "task_run", "artifact", "log", "variable", "deployment",
                 "block_document", "work_pool", "automation")  # fmt: skip


def template_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where a template may be, in the order read and written: the installation's, then the
    user's cache."""
    environ = os.environ if environ is None else environ
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return [Path(sys.prefix) / "share" / "das", Path(cache).expanduser().absolute() / "das"]


def template_name(prefect: str) -> str:
    return f"prefect-{prefect}.db"


def usable(path: Path) -> bool:
    """Whether ``path`` is an intact SQLite database that records one migration revision and
    holds nothing in :data:`RECORD_TABLES`."""
    try:
        # read-only and immutable: no lock or -shm file beside it (templates are replaced,
        # never changed in place)
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return False
    try:
        checked = connection.execute("PRAGMA quick_check").fetchall()
        revisions = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        held = [
            connection.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]
            for table in RECORD_TABLES
            if table in tables
        ]
    except sqlite3.Error:
        return False
    finally:
        connection.close()
    return checked == [("ok",)] and len(revisions) == 1 and not any(held)


def seed(home: Path, prefect: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """A new Prefect home's database (``home/prefect.db``) copied from this version's template;
    the template used, or None (the home had a database, or no usable template was found: then
    one is built in the background for the next new home)."""
    target = home / DATABASE
    if target.exists():
        return None
    for folder in template_dirs(environ):
        template = folder / template_name(prefect)
        if template.is_file() and usable(template):
            home.mkdir(parents=True, exist_ok=True, mode=0o700)
            partial = home / f".{DATABASE}.{os.getpid()}.{secrets.token_hex(4)}"
            shutil.copyfile(template, partial)
            os.replace(partial, target)  # whole, or not there
            return template
    build_in_background(environ)
    return None


def build_in_background(environ: Mapping[str, str] | None = None) -> None:
    """Start :func:`build` in a detached process at the lowest priority."""
    environ = dict(os.environ if environ is None else environ)
    subprocess.Popen(
        [sys.executable, "-m", "das.cli.server_database"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environ,
        start_new_session=True,
    )


def _writable(folder: Path) -> bool:
    """Whether ``folder`` can be made (when missing) and written to."""
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            return False
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)


def build(prefect: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Make this version's template in the first writable :func:`template_dirs` folder: a new
    database migrated by ``prefect server database upgrade``, checked, moved into place whole.
    The template, or None (one exists, another process is building it, or it failed)."""
    from das.cli.prefect_wrapper import prefect_command

    environ = os.environ if environ is None else environ
    folder = next((f for f in template_dirs(environ) if _writable(f)), None)
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / template_name(prefect)
    with open(folder / ".template.lock", "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # another process builds it
        if template.is_file() and usable(template):
            return None
        for left in folder.glob(".build-*"):  # a builder killed midway (none runs: the lock)
            shutil.rmtree(left, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as work:
            server_env = {
                key: value for key, value in environ.items() if not key.startswith("PREFECT_")
            }
            server_env.update(OFFLINE_ENVIRONMENT, PREFECT_HOME=work)
            done = subprocess.run(
                [*prefect_command(), "server", "database", "upgrade", "-y"],
                cwd=work,
                env=server_env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
            built = Path(work) / DATABASE
            if done.returncode != 0 or not built.is_file():
                return None
            # one file, no write-ahead log beside it (the server turns it on again when it
            # opens its copy)
            with contextlib.closing(sqlite3.connect(built)) as connection:
                connection.execute("PRAGMA journal_mode = DELETE")
            if not usable(built):
                return None
            built.chmod(0o644)  # empty tables: nothing private
            os.replace(built, template)
    return template


def _main() -> None:
    from importlib.metadata import version

    with contextlib.suppress(OSError):
        os.nice(19)  # spare the run that started it
    build(version("prefect"))


if __name__ == "__main__":
    _main()
