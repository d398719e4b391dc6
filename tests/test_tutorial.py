"""The tutorials' commands, run as typed: a page cannot drift from the code.

Each ```` ```bash ```` block of a tutorial preceded by ``<!-- test: NAME -->`` is run, in page
order, in one bash session (``set -euo pipefail``) in a fresh temporary folder, with the
repository's virtualenv first on the PATH (what ``source .venv/bin/activate`` does for the
reader), a private home, and no ``DAS_*`` or ``PREFECT_*`` variable from the caller's
environment but two, for time: ``PREFECT_API_URL`` names the session's Prefect test harness
(one server for every page, where each ``das run`` would otherwise start a temporary one: 10-35
s each on 2 cores), and ``DAS_TASK_RUNNER=threads`` keeps the flows' tasks on threads (with an
API URL set, each ``das run`` would start a Dask cluster of worker processes;
tests/test_dask_cluster.py tests those). The commands are the page's, as typed.
``<!-- test: NAME expect="TEXT" -->`` also requires TEXT in that block's output;
``<!-- test: NAME background -->`` starts the block and goes on (a server in a terminal of its
own), stopping it, with all it started, when the page ends.

- ``tutorial``: docs/tutorials/first-release.md, every step of it.
- ``production``: docs/tutorials/first-production-release.md, the part that runs on one
  machine (approvers' and run keys made with ssh-keygen, the chartered ledger, the second
  approver's charter signature, the trust root published, a refused run, two signed approvals,
  the production run, `das release verify --trust-root`, `das ledger verify`).
- ``postgres`` and ``enclave``: the same page's part 2, on PostgreSQL as it asks of production:
  the rehearsal cluster of the service account's own (``initdb`` into a folder of its home,
  127.0.0.1:5433, the two roles and databases with scram passwords from 0600 files), then the
  Prefect secret, the settings of every terminal, the Prefect server on that cluster (a block
  marked ``background``: started and left running, as in a terminal of its own, and stopped
  when the page ends), the check that it answers, the chartered ledger on PostgreSQL and its
  charter shown. The page's ports are fixed (5433, 4200), so both run in a private network
  namespace (``unshare -n``, root only), where nothing else listens; PostgreSQL refuses to run
  as root, so the ``postgres`` blocks run as an unprivileged user (Debian's ``postgres``, as
  tests/pg_cluster.py does), in the home both share, and the ``enclave`` blocks as the test's
  user, whose virtualenv that user may not reach. The approvers' keys are made first without a
  passphrase (what each approver does at their own terminal). The server's deployments, its
  worker and the runs are what the end-to-end tests run (`.ci/e2e-prefect`:
  tests/test_e2e_prefect.py, with `das deploy --local`, the server and the ledger on
  PostgreSQL too).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MARKER = re.compile(
    r'^<!-- test: ([a-z-]+)( background)?(?: expect="([^"]*)")? -->\n```bash\n(.*?)\n```',
    re.M | re.S,
)
PAGES = {
    "tutorial": REPO / "docs" / "tutorials" / "first-release.md",
    "production": REPO / "docs" / "tutorials" / "first-production-release.md",
}

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass(frozen=True)
class Block:
    number: int
    commands: str
    expect: str | None
    background: bool = False


def blocks(page: Path, name: str) -> list[Block]:
    """The page's blocks marked for ``name``, in order."""
    found = [
        Block(number, match.group(4), match.group(3), bool(match.group(2)))
        for number, match in enumerate(MARKER.finditer(page.read_text()), 1)
        if match.group(1) == name
    ]
    assert found, f"{page}: no block is marked <!-- test: {name} -->"
    return found


def session(marked: list[Block], logs: Path, prelude: str = "") -> str:
    """One bash session running ``marked`` in order (``set -euo pipefail``), each block's
    output after a ``::block N::`` line; a background block's output goes to its log in
    ``logs``, and it is stopped with its process group when the session ends."""
    script = [
        "set -euo pipefail",
        "background=()",
        'stop() { for pid in ${background[@]+"${background[@]}"}; do '
        "kill -TERM -- -$pid 2> /dev/null; done; wait; }",
        "trap stop EXIT",
        prelude,
    ]
    for block in marked:
        script.append(f"echo '::block {block.number}::'")
        if block.background:
            log = logs / f"block-{block.number}.log"
            script += ["set -m", f"(\n{block.commands}\n) > '{log}' 2>&1 &", "background+=($!)",
                       "set +m"]  # fmt: skip
        else:
            script.append(block.commands)
    script.append("echo '::end::'")
    return "\n".join(script)


def block_outputs(name: str, marked: list[Block], done: subprocess.CompletedProcess) -> dict:
    """Each block's output by block number, once the session passed; checks ``expect``."""
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "::end::" in done.stdout, (
        f"the {name} page's commands failed (exit {done.returncode}); the last block run and "
        f"its output:\n{output[-6000:]}"
    )
    parts = re.split(r"^::block (\d+)::$", done.stdout, flags=re.M)
    outputs = {int(number): text for number, text in zip(parts[1::2], parts[2::2], strict=True)}
    for block in marked:
        if block.expect is not None:
            assert block.expect in outputs[block.number], (
                f"block {block.number} of the {name} page should print {block.expect!r}:\n"
                f"{block.commands}\n---\n{outputs[block.number][-3000:]}"
            )
    return outputs


def environment(home: Path, api_url: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DAS_", "PREFECT_", "XDG_"))}
    return {
        **keep,
        "PREFECT_API_URL": api_url,
        "DAS_TASK_RUNNER": "threads",
        "PATH": f"{VENV_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "NO_COLOR": "1",
    }


def api_url() -> str:
    """The session's Prefect test harness (fixture ``prefect_server``), for the pages' runs."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the prefect_server fixture sets PREFECT_API_URL"
    return str(url)


def run_page(name: str, folder: Path) -> dict[int, str]:
    """Run the page's blocks in one bash session; each block's output by block number."""
    home = folder / "home"
    home.mkdir()
    work = folder / "work"
    work.mkdir()
    marked = blocks(PAGES[name], name)
    done = subprocess.run(
        ["bash", "-c", session(marked, folder)],
        cwd=work,
        env=environment(home, api_url()),
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    return block_outputs(name, marked, done)


def test_the_marker_finds_the_blocks_it_should() -> None:
    """The pages mark what they say is tested (a page whose markers stopped matching would
    test nothing)."""
    assert len(blocks(PAGES["tutorial"], "tutorial")) >= 9
    assert len(blocks(PAGES["production"], "production")) >= 6
    assert len(blocks(PAGES["production"], "postgres")) == 2
    enclave = blocks(PAGES["production"], "enclave")
    assert [block.background for block in enclave] == [False, True, False, False, False]
    assert "das prefect server start" in enclave[1].commands


@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("prefect_server")
def test_first_release_tutorial_runs_as_typed(tmp_path: Path) -> None:
    run_page("tutorial", tmp_path)
    release = tmp_path / "work" / "tutorial" / "release"
    assert (release / "MANIFEST.json").is_file() and (release / "SEEDED").is_file()
    assert not (tmp_path / "work" / "tutorial" / "release-2").exists()


@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("prefect_server")
def test_first_production_release_runs_as_typed_on_one_machine(tmp_path: Path) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed")
    outputs = run_page("production", tmp_path)
    text = "\n".join(outputs.values())
    assert "PROVEN — a private safetab-p release" in text


# What each approver and the release manager did at their own terminals before part 2's
# tested blocks (their keys without a passphrase here), and the service account's run key,
# whose public half the release manager keeps as das-run-key.pub.
ENCLAVE_PRELUDE = """
mkdir -p ~/.ssh && ssh-keygen -q -t ed25519 -N '' -C alice -f ~/.ssh/das-approver
ssh-keygen -q -t ed25519 -N '' -C bob -f bob
cat ~/.ssh/das-approver.pub bob.pub > approvers.pub
mkdir -m 700 -p ~/.das && ssh-keygen -q -t ed25519 -N '' -C "das run key" -f ~/.das/run-key
cp ~/.das/run-key.pub das-run-key.pub
"""


@pytest.mark.timeout(900)
def test_production_part_two_on_postgresql_runs_as_typed() -> None:
    """Part 2's PostgreSQL as printed: the rehearsal cluster, the Prefect server on it, the
    chartered ledger on it (the module docstring says how and why as which user)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs root, unshare and ip: a private network namespace, its loopback up, "
                    "for the page's fixed ports")  # fmt: skip
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed")
    import pg_cluster  # a pytest plugin of conftest: importable once pytest runs

    pg_cluster.install_postgresql()  # Debian's package, as the page's reader installs it
    pg_cluster.find_bindir()  # or PostgresUnavailable, naming the fix
    user = pg_cluster._unprivileged_user()
    assert user is not None
    # A folder that user owns and can reach (the tests' temporary folders may be private).
    folder = pg_cluster.PostgresCluster._new_folder(None, user)
    home, work, logs = folder / "home", folder / "work", folder / "logs"
    for path in (home, work):
        path.mkdir()
        os.chown(path, user.pw_uid, user.pw_gid)
    logs.mkdir()
    env = environment(home, "")  # no Prefect API but the page's, no task runner setting
    for name in ("PREFECT_API_URL", "DAS_TASK_RUNNER"):
        env.pop(name)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    pg_ctl_stop = [*as_user, "env", f"HOME={home}", "bash", "-c",
                   '"$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)/pg_ctl" -D '
                   '~/.das/postgres/data stop -m fast']  # fmt: skip
    postgres = blocks(PAGES["production"], "postgres")
    enclave = blocks(PAGES["production"], "enclave")
    (folder / "postgres.sh").write_text(session(postgres, logs))
    (folder / "enclave.sh").write_text(session(enclave, logs, ENCLAVE_PRELUDE))
    # In the namespace: its loopback up, the cluster's blocks as the user (a PATH without the
    # test's virtualenv), the rest as the test's user; the cluster stopped however it ends.
    user_env = f"env -i HOME={home} PATH=/usr/bin:/bin LANG=C.UTF-8"
    driver = "\n".join([
        f"stop_cluster() {{ {shlex.join(pg_ctl_stop)} > /dev/null 2>&1; }}",
        "trap stop_cluster EXIT",
        "ip link set lo up",
        f"{shlex.join(as_user)} {user_env} bash {folder}/postgres.sh > {logs}/postgres.out "
        f"2> {logs}/postgres.err || exit 3",
        f"bash {folder}/enclave.sh",
        f"{shlex.join(as_user)} {user_env} bash {folder}/tables.sh > {logs}/tables",
    ])  # fmt: skip
    # Afterwards: the tables each database holds (the server's and the ledger's, on PostgreSQL).
    (folder / "tables.sh").write_text(
        "pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)\n"
        'for db in prefect das_ledger; do "$pgbin/psql" -h ~/.das/postgres -p 5433 -d "$db" -tA '
        "-c \"SELECT '$db ' || count(*) FROM pg_tables WHERE schemaname = 'public'\"; done\n"
    )
    try:
        done = subprocess.run(["unshare", "-n", "bash", "-c", driver], cwd=work, env=env,
                              capture_output=True, text=True, timeout=840, check=False)  # fmt: skip
        assert (logs / "postgres.out").is_file(), done.stdout + done.stderr  # the namespace
        recipe = subprocess.CompletedProcess(
            [],
            0 if done.returncode != 3 else 1,
            (logs / "postgres.out").read_text(),
            (logs / "postgres.err").read_text(),
        )
        block_outputs("production (postgres)", postgres, recipe)
        outputs = block_outputs("production (enclave)", enclave, done)
        text = "\n".join(outputs.values())
        assert "created privacy ledger" in text and "postgresql" in text
        server = (logs / f"block-{enclave[1].number}.log").read_text()
        assert "database is locked" not in server
        tables = dict(line.split() for line in (logs / "tables").read_text().splitlines())
        assert int(tables["prefect"]) > 20 and int(tables["das_ledger"]) > 0, tables
    finally:
        subprocess.run(pg_ctl_stop, capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)
