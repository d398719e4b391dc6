"""requirements.lock, the hash-checked environment, agrees with pyproject.toml.

Cheap and offline (the default suite): pyproject's ranges are the package's promise, the lock
the one environment it is tested and installed with (`bash .ci/lock` regenerates it). The lock
must hold every direct dependency (runtime, the dev extra, the build backend) at a version
inside its range, the packages those dependencies' extras ask for, a sha256 for every entry,
and nothing else: with ``pip install --no-deps`` (the README's commands) pip installs the
lock's list as it is, so a missing package would only show at run time. Closure is checked with
the requirements of the installed distributions (their metadata), which is why the test
environment itself must be the lock's.
"""

from __future__ import annotations

import tomllib
from collections import deque
from importlib import metadata

import pytest
from lock_file import LOCK, REPO, parse_lock
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

PYPROJECT = REPO / "pyproject.toml"


def pyproject_requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) for the runtime dependencies, each optional group and the build
    backend."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    found = [("dependencies", Requirement(r)) for r in project["project"]["dependencies"]]
    for group, reqs in project["project"].get("optional-dependencies", {}).items():
        found += [(f"[{group}]", Requirement(r)) for r in reqs]
    found += [("build-system", Requirement(r)) for r in project["build-system"]["requires"]]
    return found


@pytest.fixture(scope="module")
def lock() -> dict[str, tuple[Version, list[str]]]:
    return parse_lock(LOCK.read_text(encoding="utf-8"))


def _applies(req: Requirement, extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    env = default_environment()
    return any(req.marker.evaluate({**env, "extra": extra}) for extra in {"", *extras})


def test_lock_is_the_generated_one() -> None:
    text = LOCK.read_text(encoding="utf-8")
    # The header names the one command that regenerates it.
    assert "#    bash .ci/lock\n" in text[:400]
    options = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["pip-tools"]
    assert options["output-file"] == LOCK.name
    assert options["generate-hashes"] and options["allow-unsafe"] and options["all-build-deps"]
    assert options["extra"] == ["dev", "docs"]  # the test tools and the documentation site


def test_every_lock_entry_has_a_hash(lock: dict[str, tuple[Version, list[str]]]) -> None:
    assert len(lock) > 100
    unhashed = sorted(name for name, (_, hashes) in lock.items() if not hashes)
    assert not unhashed, f"entries without a sha256: {unhashed}"


def test_parse_lock_refuses_what_pip_would_not_hash_check() -> None:
    good = "a==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via b\n"
    assert parse_lock(good) == {"a": (Version("1.0"), ["0" * 64])}
    for bad in ("a>=1.0\n", "-e .\n", "--extra-index-url file:///opt/x\n", good + good):
        with pytest.raises(AssertionError):
            parse_lock(bad)


def test_every_direct_dependency_is_locked_inside_its_range(
    lock: dict[str, tuple[Version, list[str]]],
) -> None:
    problems = []
    for where, req in pyproject_requirements():
        if not _applies(req, frozenset()):
            continue
        name = canonicalize_name(req.name)
        if name not in lock:
            problems.append(f"{where}: {req} is not in the lock")
        elif not req.specifier.contains(lock[name][0], prereleases=True):
            problems.append(f"{where}: {req}, but the lock has {name}=={lock[name][0]}")
    assert not problems, "\n".join(problems) + "\n(regenerate: bash .ci/lock)"


def test_the_new_direct_dependencies_are_declared() -> None:
    names = {canonicalize_name(req.name): req for _, req in pyproject_requirements()}
    # psycopg 3 (not psycopg2), with its binary libpq: nothing to compile in the enclave.
    assert "binary" in names["psycopg"].extras
    assert not names["psycopg"].specifier.contains("4.0") and "rich" in names
    assert Version("2.0.58") in names["sqlalchemy"].specifier
    assert Version("2.1") not in names["sqlalchemy"].specifier  # breaks Prefect 3.8.8's scheduler
    assert Version("3.9.0") not in names["prefect"].specifier


def _installed_at_lock(lock: dict[str, tuple[Version, list[str]]]) -> list[str]:
    """Lock entries whose installed version differs (or that are not installed)."""
    wrong = []
    for name, (version, _) in sorted(lock.items()):
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed (lock {version})")
            continue
        if installed != version:
            wrong.append(f"{name}: {installed} installed, lock {version}")
    return wrong


def test_the_test_environment_is_the_lock(lock: dict[str, tuple[Version, list[str]]]) -> None:
    wrong = _installed_at_lock(lock)
    assert not wrong, (
        "the tests do not run in the locked environment (install it with the README's "
        "command):\n" + "\n".join(wrong)
    )


def test_the_lock_is_closed(lock: dict[str, tuple[Version, list[str]]]) -> None:
    """From pyproject's requirements (with their extras), every requirement of every reached
    distribution, as its installed metadata states it, is in the lock inside its range; and
    every lock entry is reached."""
    if _installed_at_lock(lock):
        pytest.skip("the environment is not the lock's: test_the_test_environment_is_the_lock")
    queue = deque(
        (canonicalize_name(req.name), frozenset(req.extras), where)
        for where, req in pyproject_requirements()
        if _applies(req, frozenset())
    )
    seen: set[tuple[str, frozenset[str]]] = set()
    problems = []
    while queue:
        name, extras, via = queue.popleft()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        if name not in lock:
            continue  # reported below (direct) or where it is required
        provided = {
            canonicalize_name(e) for e in metadata.metadata(name).get_all("Provides-Extra") or []
        }
        missing_extras = {canonicalize_name(e) for e in extras} - provided
        if missing_extras:
            problems.append(f"{name} has no extra {sorted(missing_extras)} (asked by {via})")
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if not _applies(req, extras):
                continue
            dep = canonicalize_name(req.name)
            if dep not in lock:
                problems.append(f"{name} requires {req}: not in the lock")
            elif not req.specifier.contains(lock[dep][0], prereleases=True):
                problems.append(f"{name} requires {req}: the lock has {dep}=={lock[dep][0]}")
            else:
                queue.append((dep, frozenset(req.extras), name))
    reached = {name for name, _ in seen}
    unreached = sorted(set(lock) - reached)
    assert not problems, "\n".join(problems) + "\n(regenerate: bash .ci/lock)"
    assert not unreached, f"in the lock but required by nothing: {unreached}"


def test_the_installers_lock_is_its_lines_of_the_lock(
    lock: dict[str, tuple[Version, list[str]]],
) -> None:
    """pip installs uv from requirements-uv.lock before uv installs the rest (the README's
    commands): the same pin and the same hashes as requirements.lock, nothing else."""
    installer = parse_lock((REPO / "requirements-uv.lock").read_text(encoding="utf-8"))
    assert list(installer) == ["uv"]
    assert installer["uv"] == lock["uv"]
    assert len(installer["uv"][1]) > 1  # every platform's wheel, not only this machine's
