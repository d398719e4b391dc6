"""das.io.open_files: a pass that keeps many files open raises the soft limit it needs, or is
refused with what to do, never failing half-way with EMFILE."""

from __future__ import annotations

import resource

import pytest

from das.io.open_files import MARGIN, TooManyOpenFiles, ensure_open_files


@pytest.fixture
def limits():
    """The process's limits, put back after the test (they are the whole process's)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_the_soft_limit_is_raised_to_what_the_pass_needs(limits) -> None:
    _, hard = limits
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit ({hard}) leaves no room to test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    ensure_open_files(2300, "the test's pass")
    raised, kept = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert kept == hard and 2300 + MARGIN <= raised <= 2300 + MARGIN + 1024
    ensure_open_files(10, "a small pass")  # enough already: left as it is
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == raised


def test_beyond_the_hard_limit_the_pass_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Limits faked: a process that lowers its hard limit may never raise it again.)"""
    from das.io import open_files

    set_to = []
    monkeypatch.setattr(open_files.resource, "getrlimit", lambda _: (512, 1024))
    monkeypatch.setattr(open_files.resource, "setrlimit", lambda _, v: set_to.append(v))
    monkeypatch.setattr(open_files, "_open_now", lambda: 10)
    with pytest.raises(TooManyOpenFiles, match=r"the one read keeps more.*1,024.*-Hn") as info:
        ensure_open_files(2300, "the one read")
    assert "nothing was drawn" in str(info.value) and set_to == []
    assert "2,300" not in str(info.value) and "2300" not in str(info.value)  # nothing of the data
    ensure_open_files(500, "a pass that fits")  # 10 open + 500 + the margin, under 1,024
    assert set_to == [(10 + 500 + open_files.MARGIN, 1024)]
