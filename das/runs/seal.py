"""A run's parameters, frozen at its start: what it measures with is what it was checked with.

A run reads its config, its spec files and a reviewed coterminous file once, at the start,
into memory (:func:`seal_files`): every file must be a regular file of bounded size, named by
its role (spec files by their names, not "every ``*.txt`` beside the config"). From then on
nothing re-reads them from where the operator keeps them: the products parse the sealed bytes
once (in a private temporary folder, :meth:`SealedParameters.materialized`) and hand the parsed
objects — and the plan built from them — to every task, on every Dask worker. A copy is kept in
the run folder, content-addressed (``sealed/<digest>/``), for validation to read and for the
record; a resume must present the same digest (the privacy ledger binds the run id to it), and
validation's copy is checked again after it ran (:meth:`SealedParameters.check_copy`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from das.io.atomic import atomic_write_bytes
from das.refusal import RunRefused

MAX_PARAMETER_BYTES = 256 * 1024 * 1024  # far above any real spec or coterminous file
CONFIG = "config.json"


class ParameterError(RunRefused):
    """The sealed parameters cannot be parsed (a config, spec or coterminous file problem, or a
    budget outside the limits): refused before any record is read. The parameters are public,
    so the message lists the problems as the parser reports them (the first few: `das
    validate` lists every one)."""

    SHOWN = 6

    @classmethod
    def of(cls, exc: Exception, folder: Path | None = None) -> ParameterError:
        """From a parser's error; paths in the private parsing folder become bare names."""
        text = str(exc) if folder is None else str(exc).replace(f"{folder}/", "")
        lines = text.splitlines()
        if len(lines) > cls.SHOWN + 1:
            more = len(lines) - cls.SHOWN - 1
            lines = [*lines[: cls.SHOWN + 1], f"  ... and {more} more (`das validate` lists all)"]
        return cls("the run's parameters are not valid: " + "\n".join(lines))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def regular_file_problem(role: str, path: Path) -> str | None:
    """Why ``path`` cannot be read as the run's ``role`` file, or None. Checked before any
    read: a named pipe would block a reader forever, a device never ends."""
    if not os.path.lexists(path):
        return f"{role} {path}: no such file"
    if path.is_symlink() and not path.exists():
        return f"{role} {path}: a symbolic link to a missing target"
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        return f"{role} {path}: a directory, not a file"
    if stat.S_ISFIFO(mode):
        return f"{role} {path}: a named pipe (FIFO), not a regular file"
    if not stat.S_ISREG(mode):
        return f"{role} {path}: not a regular file (a socket or a device)"
    return None


@dataclass(frozen=True)
class SealedFile:
    name: str
    sha256: str
    content: bytes


@dataclass(frozen=True)
class SealedParameters:
    """The parameter files of one run, by name, in memory (picklable, small)."""

    files: tuple[SealedFile, ...]

    @property
    def digest(self) -> str:
        """SHA-256 over the sorted ``name:sha256`` lines: the seal's identity."""
        lines = "".join(f"{f.name}:{f.sha256}\n" for f in sorted(self.files, key=lambda f: f.name))
        return _sha256(lines.encode())

    def names(self) -> list[str]:
        return [f.name for f in self.files]

    def _file(self, name: str) -> SealedFile:
        for item in self.files:
            if item.name == name:
                return item
        raise KeyError(f"{name} is not among the sealed parameter files")

    def content(self, name: str) -> bytes:
        return self._file(name).content

    def sha256(self, name: str) -> str:
        return self._file(name).sha256

    def hashes(self) -> dict[str, str]:
        return {f.name: f.sha256 for f in self.files}

    @contextlib.contextmanager
    def materialized(self) -> Iterator[Path]:
        """The sealed files in a private temporary folder (0700, removed afterwards), for
        parsers that read paths; nobody else can change them while they are parsed."""
        folder = Path(tempfile.mkdtemp(prefix="das-sealed-"))
        try:
            for item in self.files:
                target = folder / item.name
                with open(target, "xb") as handle:
                    handle.write(item.content)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def copy_dir(self, run_root: Path) -> Path:
        """``<run_root>/sealed/<digest>``: where :meth:`write_copy` keeps the files."""
        return Path(run_root) / "sealed" / self.digest[:32]

    def write_copy(self, run_root: Path) -> Path:
        """The content-addressed copy in the run folder (validation reads it); an existing
        copy (a resume) must still hold exactly these files."""
        folder = self.copy_dir(run_root)
        folder.mkdir(parents=True, exist_ok=True)
        for item in self.files:
            target = folder / item.name
            if target.is_file() and _sha256(target.read_bytes()) == item.sha256:
                continue
            atomic_write_bytes(target, item.content)
        self.check_copy(run_root)
        return folder

    def check_copy(self, run_root: Path) -> None:
        """Refuse when the run folder's copy no longer holds the sealed files (edited while the
        run was reading it)."""
        folder = self.copy_dir(run_root)
        changed = [
            item.name
            for item in self.files
            if not (folder / item.name).is_file()
            or _sha256((folder / item.name).read_bytes()) != item.sha256
        ]
        if changed:
            raise RunRefused(
                f"the sealed copy of the run's parameters in {folder} was changed while the "
                f"run used it ({', '.join(changed)}); nothing was drawn. Start a new run"
            )


def seal_files(paths: Mapping[str, Path]) -> SealedParameters:
    """Read every parameter file once (name → path), refusing a missing, non-regular or
    oversized one by name before anything else reads it."""
    problems = [
        problem
        for name, path in paths.items()
        if (problem := regular_file_problem(name, Path(path))) is not None
    ]
    if problems:
        raise RunRefused("cannot read the run's parameters: " + "; ".join(problems))
    files = []
    for name, path in paths.items():
        with open(path, "rb") as handle:
            content = handle.read(MAX_PARAMETER_BYTES + 1)
        if len(content) > MAX_PARAMETER_BYTES:
            raise RunRefused(
                f"{name} {path} is larger than {MAX_PARAMETER_BYTES >> 20} MiB: not a "
                "parameter file"
            )
        files.append(SealedFile(name, _sha256(content), content))
    return SealedParameters(tuple(files))
