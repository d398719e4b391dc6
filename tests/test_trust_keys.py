"""The run key (das.trust.run_keys) and text shown to a person (das.trust.text), in process: the
key a run signs with is the one named, private to its account, and made only where that is
harmless; typed text never prints as something else."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from das.refusal import RunRefused
from das.trust import RUN_KEY_ENV, generate_key, run_key, shown


def test_the_per_user_run_key_is_made_once_and_reused(tmp_path: Path) -> None:
    environ = {"XDG_DATA_HOME": str(tmp_path / "data")}
    path, key = run_key(environ)
    assert path == tmp_path / "data" / "das" / "run-key"
    assert (path.stat().st_mode & 0o777, run_key(environ)) == (0o600, (path, key))
    with pytest.raises(RunRefused, match="missing or not a regular file"):
        run_key({"XDG_DATA_HOME": str(tmp_path / "other")}, create=False)


def test_first_runs_at_once_make_one_per_user_run_key_and_all_use_it(tmp_path: Path) -> None:
    """Two first runs of a home at once both found no key: one wrote it, the other stopped
    with "run-key already exists" (or read it half written). Now one makes it, all use it."""
    for home in range(12):
        environ = {"XDG_DATA_HOME": str(tmp_path / f"data{home}")}
        start = threading.Barrier(6)

        def first_run(
            _: int, environ: dict[str, str] = environ, start: threading.Barrier = start
        ) -> object:
            start.wait()
            return run_key(environ)

        with ThreadPoolExecutor(6) as pool:
            keys = set(pool.map(first_run, range(6)))
        assert len(keys) == 1


def test_a_named_run_key_must_exist_be_private_and_be_a_key(tmp_path: Path) -> None:
    named = tmp_path / "service-key"
    with pytest.raises(RunRefused, match="missing or not a regular file"):
        run_key({RUN_KEY_ENV: str(named)})  # never made in its place
    assert not named.exists()
    key = generate_key(named, "service")
    assert run_key({RUN_KEY_ENV: str(named)}) == (named, key)
    named.chmod(0o640)
    with pytest.raises(RunRefused, match=r"open to group or others \(mode 0640\)"):
        run_key({RUN_KEY_ENV: str(named)})
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    junk.chmod(0o600)
    with pytest.raises(RunRefused, match="cannot be used"):
        run_key({RUN_KEY_ENV: str(junk)})


@pytest.mark.parametrize(
    ("typed", "seen"),
    [
        ("a note", "a note"),
        ("two\nlines", "two\\nlines"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("abc\u202edef", "abc\\u202edef"),  # a right-to-left override
        ("back\\slash", "back\\\\slash"),
        ("x" * 300, "x" * 199 + "…"),
    ],
)
def test_typed_text_is_shown_on_one_line_as_typed(typed: str, seen: str) -> None:
    assert shown(typed) == seen
