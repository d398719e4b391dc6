"""requirements.lock read as pip reads it: the helpers shared by the lock's tests."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
ENTRY = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\[[^\]]*\])?==(?P<version>\S+)"
)
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})\b")


def parse_lock(text: str) -> dict[str, tuple[Version, list[str]]]:
    """{canonical name: (version, sha256s)}; every requirement line must be an `==` pin."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    # A requirement with its continuation lines (``\\`` at the end) is one logical line.
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("-"), f"an option in the lock (machine-specific?): {line}"
        match = ENTRY.match(line)
        assert match, f"not an exact pin: {line}"
        name = canonicalize_name(match["name"])
        assert name not in entries, f"{name} twice in the lock"
        entries[name] = (Version(match["version"]), HASH.findall(line))
    return entries


def locked_versions(path: Path = LOCK) -> dict[str, str]:
    """{canonical name: version} of the lock."""
    return {name: str(version) for name, (version, _) in parse_lock(path.read_text()).items()}


def frozen_versions(freeze_output: str) -> dict[str, str]:
    """{canonical name: version} of `pip freeze --all` output, without the project itself
    and pip (the lock does not pin the installer: the virtualenv brings it)."""
    found = {}
    for line in freeze_output.splitlines():
        if "==" not in line or line.startswith(("#", "-e")):
            continue
        name, version = line.split("==", 1)
        found[canonicalize_name(name)] = version.strip()
    for name in ("das-pipeline", "pip"):
        found.pop(name, None)
    return found
