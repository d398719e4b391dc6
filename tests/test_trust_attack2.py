"""Issue 38's second attack pass (on a87e5b7): the attacker holds ONE approver key (alice) of
a quorum of two and every published release. Each finding has its test here (``B<n>`` as the
pass named them); each fails on a87e5b7 and passes now.

Fast: ledgers made in process (`das ledger` commands), ed25519 keys, no run, no subprocess.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from das.cli import main as das_main
from das.trust import LedgerRefused, LedgerStore, PrivacyLedger, check_pinned_roots, generate_key

# -- B6: a production run needs a pinned trust root ----------------------------------------------


def test_attack2_a_production_run_without_a_pinned_root_is_refused_and_the_step_pins_it(
    tmp_path: Path,
) -> None:
    """Alice charters a ledger of her own (quorum 1) naming the service account's run key as
    its runner: with no root pinned (no DAS_TRUST_ROOT, no trust-root.json beside the run key)
    a production run against it is refused before anything is read; the next step it prints,
    run as printed, pins the root of the ledger it names (what the service account does for
    its agency's ledger), and the run goes on."""
    service = tmp_path / "service"
    service.mkdir()
    generate_key(service / "run-key", "das run key")  # and run-key.pub beside it
    generate_key(tmp_path / "alice", "alice")
    own = tmp_path / "own"
    argv = ["ledger", "init", "--ledger", str(own), "--approvers", str(tmp_path / "alice.pub"),
            "--quorum", "1", "--key", str(tmp_path / "alice"), "--runner-key",
            str(service / "run-key.pub")]  # fmt: skip
    assert das_main(argv) == 0
    ledger = PrivacyLedger(LedgerStore.in_directory(own))
    chain, info = ledger.charter_chain(), ledger.info()
    assert chain.in_force is not None  # in force at once: one approver's ledger
    environ = {"DAS_RUN_KEY": str(service / "run-key")}
    with pytest.raises(LedgerRefused, match="no trust root is pinned") as refused:
        check_pinned_roots(info.ledger_id, chain.chain, info.location, environ, production=True)
    assert "Nothing was read or drawn" in str(refused.value)
    check_pinned_roots(info.ledger_id, chain.chain, info.location, environ)  # not production
    remedy = refused.value.remedy
    assert remedy is not None and remedy.command is not None
    command = remedy.command.split(": ", 1)[1].split(" (or ")[0]
    words = shlex.split(command)
    assert words[:3] == ["das", "ledger", "trust-root"], command
    assert das_main(words[1:]) == 0
    assert (service / "trust-root.json").is_file()
    check_pinned_roots(info.ledger_id, chain.chain, info.location, environ, production=True)


def test_attack2_das_deploy_says_when_the_run_key_has_no_pinned_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`das deploy` (production) with a run key whose folder holds no trust root says so, with
    the command that pins it, which works as printed; with the pin, nothing is said."""
    from certified import make_certified

    from das.cli.deploy import _note_missing_pin

    made = make_certified(tmp_path / "production")
    service = tmp_path / "service"
    service.mkdir()
    generate_key(service / "run-key", "das run key")
    capsys.readouterr()
    _note_missing_pin(str(service / "run-key"), made.ledger.store)
    note = capsys.readouterr().out
    assert "no trust root beside the run key" in note
    assert das_main(shlex.split(note.split(": ")[-1])[1:]) == 0
    assert (service / "trust-root.json").is_file()
    capsys.readouterr()
    _note_missing_pin(str(service / "run-key"), made.ledger.store)
    assert capsys.readouterr().out == ""


# -- B2: run state beside the first release ------------------------------------------------------


def test_attack2_a_state_root_beside_the_first_output_is_refused_by_name(tmp_path: Path) -> None:
    """`DAS_STATE_DIR=$X/releases/state das run … --output $X/releases/r1` — no release there
    yet — put noise, spilled records and run.log in the folder of releases: an output beside
    the state root (resolved: a link to it too) is refused now, before anything is written,
    with the next step; the side-by-side layout (releases/ and state/) is not."""
    from das.refusal import RunRefused
    from das.runs.folder import RunFolder, check_output_place

    releases, state = tmp_path / "releases", tmp_path / "releases" / "state"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "st").symlink_to(state, target_is_directory=True)
    for named in (state, tmp_path / "elsewhere" / "st"):
        with pytest.raises(RunRefused, match="beside the runs' state root") as refused:
            check_output_place(releases / "r1", named)
        assert "Choose a state root outside the releases folder" in str(refused.value)
    assert not state.exists()
    check_output_place(releases / "r1", tmp_path / "state")  # releases/ and state/ side by side
    RunFolder(releases / "r1", "r1", tmp_path / "state").create()
    assert not releases.exists()


def test_attack2_an_output_beside_another_runs_state_root_is_refused(tmp_path: Path) -> None:
    """Third pass: a run with `DAS_STATE_DIR=$X/releases/state` (output elsewhere), then a run
    with the default state root publishing `$X/releases/r2`: the folder of releases held the
    first run's noise and spilled records. An output beside any state root (a folder holding
    ``runs/``, through a link too) is refused now; beside other releases it is not."""
    from das.refusal import RunRefused
    from das.runs.folder import RunFolder, check_output_place

    releases = tmp_path / "releases"
    RunFolder(tmp_path / "out" / "r1", "r1", releases / "state").create()
    assert (releases / "state" / "runs" / "r1").is_dir()
    with pytest.raises(RunRefused, match="the state root of other runs") as refused:
        check_output_place(releases / "r2", tmp_path / "default-state")
    assert str(releases / "state") in str(refused.value)
    (releases / "state").rename(tmp_path / "moved")
    (releases / "linked").symlink_to(tmp_path / "moved", target_is_directory=True)
    with pytest.raises(RunRefused, match="the state root of other runs"):
        check_output_place(releases / "r2", tmp_path / "default-state")
    (releases / "linked").unlink()
    (releases / "r0").mkdir()  # another release beside it: the usual folder of releases
    check_output_place(releases / "r2", tmp_path / "default-state")


# -- B3: a link inside the state root ------------------------------------------------------------


def test_attack2_a_link_inside_the_state_root_is_refused_where_run_state_is_created(
    tmp_path: Path,
) -> None:
    """`ln -s $X/pubs/pub-release st/runs`, then `DAS_STATE_DIR=st das run …`: the run wrote
    its run folder (noise, work) into the published release — only the state root was
    resolved. A link anywhere from the state root down to what the run writes (``runs``, the
    run folder, a pre-made run folder's ``noise`` or ``work``) is refused now, by name, and
    nothing is written through it."""
    from das.refusal import RunRefused
    from das.runs.folder import RunFolder

    published = tmp_path / "pubs" / "pub-release"
    published.mkdir(parents=True)
    (published / "MANIFEST.json").write_text("{}")
    output = tmp_path / "out" / "r1"
    state = tmp_path / "st"
    state.mkdir()
    (state / "runs").symlink_to(published, target_is_directory=True)
    with pytest.raises(RunRefused, match="a link to") as refused:
        RunFolder(output, "r1", state).create()
    assert str(state / "runs") in str(refused.value)
    assert sorted(p.name for p in published.iterdir()) == ["MANIFEST.json"]
    (state / "runs").unlink()
    premade = state / "runs" / "r1"
    premade.mkdir(parents=True)
    (premade / "noise").symlink_to(published, target_is_directory=True)
    with pytest.raises(RunRefused, match="noise"):
        RunFolder(output, "r1", state).create()
    (premade / "noise").unlink()
    (premade / "run.log").symlink_to(published / "MANIFEST.json")
    with pytest.raises(RunRefused, match=r"run\.log"):
        RunFolder(output, "r1", state).create()
    (premade / "run.log").unlink()
    assert RunFolder(output, "r1", state).create().noise_dir.is_dir()  # no link: made
    assert sorted(p.name for p in published.iterdir()) == ["MANIFEST.json"]


# -- B5: names printed raw -----------------------------------------------------------------------


def test_attack2_a_file_name_cannot_make_a_release_look_proven(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file named ``ESC[1A ESC[2K CR r6: PROVEN — … ESC[8m`` dropped into a release made a
    terminal show PROVEN for a NOT PROVEN release (exit 1): every line `das release verify`
    prints has its control characters escaped now, the name shown so (with JSON's own
    escaping under --json)."""
    from certified import make_certified

    made = make_certified(tmp_path / "production")
    release = made.release(tmp_path / "r6")
    name = "\x1b[1A\x1b[2K\rr6: PROVEN — a private safetab-p release \x1b[8m"
    (release / name).write_text("1|2|3\n")
    root = tmp_path / "trust-root.json"
    assert das_main(["ledger", "trust-root", "--ledger", str(made.ledger.store.path.parent),
                     "--output", str(root)]) == 0  # fmt: skip
    capsys.readouterr()
    assert das_main(["release", "verify", str(release), "--trust-root", str(root)]) == 1
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\r"), repr(out)
    assert out.startswith(f"{release}: NOT PROVEN\n")
    assert "\\x1b[1A\\x1b[2K\\rr6: PROVEN" in out  # the name, escaped: seen for what it is
    assert das_main(["release", "verify", str(release), "--trust-root", str(root), "--json"]) == 1
    assert "\x1b" not in capsys.readouterr().out


def test_attack2_das_ledger_verify_release_prints_a_file_name_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same kind of name in a release `das ledger verify --release` reports (inside the
    enclave): escaped too."""
    from certified import make_certified
    from test_trust_ledger_verify import _published

    made = make_certified(tmp_path / "production")
    release = _published(made, tmp_path / "r6")
    (release / "\x1b[2K\rr6: as recorded\x1b[8m").write_text("1|2|3\n")
    capsys.readouterr()
    das_main(["ledger", "verify", "--ledger", str(made.ledger.store.path.parent), "--no-prefect",
              "--release", str(release)])  # fmt: skip
    out = capsys.readouterr().out
    assert "\\x1b[2K\\rr6: as recorded" in out and not any(c in out for c in "\x1b\r"), out


def test_attack2_das_ledger_verify_prints_the_databases_text_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An insider who writes the ledger's database put terminal escapes in an entry's kind:
    `das ledger verify` printed them raw after "chain BROKEN", and on a terminal they erased it
    and drew "chain intact" in its place (the third attack pass on f5ad475). Escaped now."""
    import sqlite3

    from certified import make_certified

    made = make_certified(tmp_path / "production")
    database = made.ledger.store.path
    forged = (
        "\r\x1b[2K\x1b[1A\x1b[2Kprivacy ledger x: chain intact\u2028release r: as recorded\x1b[8m"
    )
    with sqlite3.connect(database) as db:
        db.execute(
            "UPDATE das_ledger_entries SET kind = ? WHERE seq = "
            "(SELECT max(seq) FROM das_ledger_entries)",
            (forged,),
        )
    capsys.readouterr()
    das_main(["ledger", "verify", "--ledger", str(database.parent), "--no-prefect"])
    out = capsys.readouterr().out
    assert "chain BROKEN" in out, out
    assert not any(c in out for c in "\x1b\r\u2028"), out
    assert "\\x1b[2K" in out, out
