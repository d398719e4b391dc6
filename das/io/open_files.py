"""Room for the files a streamed pass keeps open at once: the soft limit of open files raised
to what the pass needs, or the pass refused before it reads a record.

The PHSafe one read appends every chunk to each MAFID bucket's column files (a national units
file: 134 buckets of 17 columns, about 2,300 files open at once), and many systems start a
process with a soft limit of 1,024 open files, which an unprivileged process may raise up to its
hard limit. Raising it here, at the pass that needs it, serves every way a run starts (`das
run`, a deployment's flow run, a Dask worker).
"""

from __future__ import annotations

import os
import resource

MARGIN = 256  # the process's other files: its libraries, sockets, logs, the ledger, the runs


class TooManyOpenFiles(OSError):
    """The pass needs more open files than this process may ever have (its hard limit)."""


def ensure_open_files(needed: int, what: str) -> None:
    """Make sure ``needed`` more files can be open at once, raising the soft limit up to the
    hard one; else raise :class:`TooManyOpenFiles`, saying what needed them and how to fix it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _open_now() + needed + MARGIN  # another pass's files may be open beside these
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        # No count in the text: the number of buckets follows the number of records.
        raise TooManyOpenFiles(
            f"{what} keeps more files open at once than this process may ever open (its hard "
            f"limit of open files, {hard:,}): raise it (`ulimit -Hn 65536` as root, or "
            "LimitNOFILE=65536 in the service's unit) and run again; nothing was drawn"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _open_now() -> int:
    """The files this process has open (Linux's /proc), else 0."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
