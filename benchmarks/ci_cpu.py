"""Where a command's CPU time goes, process by process: for the test suite above all (`.ci/test`,
one tier, one test module), whose processes (das runs, Prefect servers, flow processes, Dask
workers, Great Expectations processes, Chromium, pip and uv) outnumber its tests' own.

The command runs with a marker in its environment; every process that inherits it is found in
``/proc`` (daemons that left the process tree included: a local API, a detached server) and
its CPU time (user + system, its own, not its children's) read until it ends, every
``--interval`` seconds: a process that lives less than one interval is missed (the total of
all of them is printed beside the command's own, from the kernel's children accounting).
A process started by a test carries the test's id (pytest's ``PYTEST_CURRENT_TEST``, copied
into its environment): the figures are also summed by test module and by test. Linux only;
reads only what the user may read. Usage::

    .venv/bin/python benchmarks/ci_cpu.py [--interval 0.2] [--json OUT] [--top 25] -- CMD...

for example ``benchmarks/ci_cpu.py -- bash .ci/test`` or ``benchmarks/ci_cpu.py --
.venv/bin/python -m pytest -q -m "integration and not e2e" -n 3``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import secrets
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "CI_CPU_MARKER"  # not a setting: how its processes are told apart
TICK = os.sysconf("SC_CLK_TCK")

# What a process is, from its command line: the first pattern that matches names it.
KINDS = [
    ("pytest-xdist worker", re.compile(r"-c import sys;exec\(eval\(sys\.stdin")),
    ("pytest", re.compile(r"-m (slipcover .*-m )?pytest")),
    ("Prefect server", re.compile(r"prefect server start|prefect\.server\.api\.server|uvicorn")),
    ("Prefect server database", re.compile(r"prefect server database|das\.cli\.server_database")),
    ("flow process (Prefect worker)", re.compile(r"prefect\.runner\._workspace|prefect\.engine")),
    ("Prefect worker", re.compile(r"prefect worker start")),
    ("Great Expectations process", re.compile(r"das\.validation\.gx_runner")),
    ("Dask scheduler", re.compile(r"dask scheduler|dask-scheduler")),
    ("Dask worker", re.compile(r"dask worker|dask-worker|spawn_main|forkserver")),
    ("das", re.compile(r"(/bin/das|-m das)( |$)")),
    ("PostgreSQL", re.compile(r"postgres")),
    ("Chromium", re.compile(r"chrom")),
    ("Playwright driver", re.compile(r"playwright")),
    ("MkDocs", re.compile(r"mkdocs")),
    ("uv", re.compile(r"(^|/)uv( |$)")),
    ("pip", re.compile(r"\bpip\b|pip_compileall|ensurepip")),
    ("bytecode compilation", re.compile(r"compileall")),
]


@dataclass
class Seen:
    """One process, as last read."""

    pid: int
    ppid: int
    command: str
    test: str
    first: float
    last: float
    cpu: float


def kind(command: str) -> str:
    for name, pattern in KINDS:
        if pattern.search(command):
            return name
    return "other: " + (Path(command.split(" ", 1)[0]).name or "?")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def _environment(pid: int, marker: bytes) -> dict[str, str] | None:
    """The marked process's test id (empty if none); None if it does not carry the marker."""
    raw = _read(f"/proc/{pid}/environ")
    if raw is None or marker not in raw:
        return None
    test = ""
    for item in raw.split(b"\0"):
        if item.startswith(b"PYTEST_CURRENT_TEST="):
            test = item.split(b"=", 1)[1].decode(errors="replace").rsplit(" ", 1)[0]
    return {"test": test}


def poll(seen: dict[tuple[int, int], Seen], marker: bytes, ignored: set[int]) -> None:
    """One pass over ``/proc``: every marked process's CPU time so far."""
    now = time.monotonic()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in ignored:
            continue
        pid = int(name)
        stat = _read(f"/proc/{pid}/stat")
        if stat is None:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        ppid, cpu = int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK
        key = (pid, int(fields[19]))  # the start time tells a reused pid apart
        record = seen.get(key)
        if record is None:
            environment = _environment(pid, marker)
            if environment is None:
                ignored.add(pid)  # not ours (pids are reused: only for this run's life)
                continue
            command = (
                (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace")
            )
            record = seen[key] = Seen(
                pid, ppid, command.strip(), environment["test"], now, now, cpu
            )
        record.cpu, record.last = cpu, now


def measure(command: list[str], interval: float) -> tuple[list[Seen], float, float, int]:
    """Run ``command``; its processes, its wall seconds, the CPU-seconds of all its waited-for
    descendants (the kernel's count) and its exit code."""
    token = secrets.token_hex(8)
    marker = f"{MARKER}={token}".encode()
    seen: dict[tuple[int, int], Seen] = {}
    ignored: set[int] = {os.getpid()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(command, env={**os.environ, MARKER: token})
    while process.poll() is None:
        poll(seen, marker, ignored)
        ignored = {pid for pid in ignored if os.path.exists(f"/proc/{pid}")} | {os.getpid()}
        time.sleep(interval)
    wall = time.monotonic() - started
    deadline = time.monotonic() + 5  # daemons it left behind, until they end (or 5 s)
    while time.monotonic() < deadline:
        poll(seen, marker, ignored)
        if not any(os.path.exists(f"/proc/{r.pid}") for r in seen.values()):
            break
        time.sleep(interval)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return list(seen.values()), wall, waited, process.returncode


def _table(title: str, totals: collections.Counter, counts: collections.Counter, top: int) -> None:
    print(f"\n{title}")
    print(f"  {'CPU-s':>8} {'procs':>5}  what")
    for name, cpu in totals.most_common(top):
        print(f"  {cpu:8.1f} {counts[name]:5d}  {name}")


def report(processes: list[Seen], wall: float, waited: float, top: int) -> None:
    total = sum(p.cpu for p in processes)
    print(f"wall {wall:.1f} s; CPU {total:.1f} s in {len(processes)} processes seen "
          f"({waited:.1f} CPU-s by the kernel's count of waited-for descendants); "
          f"{total / wall if wall else 0:.2f} cores on average")  # fmt: skip
    for title, key in (
        ("by kind of process", lambda p: kind(p.command)),
        ("by test module (processes a test started)", lambda p: p.test.split("::")[0]),
        ("by test (processes a test started)", lambda p: p.test),
    ):
        totals: collections.Counter = collections.Counter()
        counts: collections.Counter = collections.Counter()
        for process in processes:
            name = key(process) or "(none: the command's own processes)"
            totals[name] += process.cpu
            counts[name] += 1
        _table(title, totals, counts, top)
    print("\nlongest-running processes by CPU")
    for process in sorted(processes, key=lambda p: -p.cpu)[:top]:
        print(f"  {process.cpu:8.1f} {process.last - process.first:6.0f}s  "
              f"{process.command[:110]}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between polls")
    parser.add_argument("--json", type=Path, help="also write every process seen here")
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    processes, wall, waited, code = measure(command, args.interval)
    report(processes, wall, waited, args.top)
    if args.json:
        args.json.write_text(json.dumps([asdict(p) for p in processes], indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
