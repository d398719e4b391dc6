"""The Prefect server's secrets (das.prefect_auth, `das prefect`, `das deploy`'s first question
to the server): read from 0600 files only, refused with the fix in one line otherwise. The
real authenticated server is tested end to end in test_e2e_prefect.py."""

from __future__ import annotations

import base64
import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from das import prefect_auth
from das.cli import main as das
from das.prefect_auth import SecretError

AUTH = "das:s3cret-token"


def secret_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o660])
def test_a_file_others_can_open_is_refused_naming_chmod(tmp_path: Path, mode: int) -> None:
    path = secret_file(tmp_path / "auth", AUTH + "\n", mode)
    with pytest.raises(SecretError) as refused:
        prefect_auth.read_secret_file(path, "DAS_PREFECT_AUTH_FILE")
    message = str(refused.value)
    assert "\n" not in message and message.endswith(f"run chmod 600 {path}")
    assert f"{mode:04o}" in message and AUTH not in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "is empty"), ("\n", "is empty"), ("das:a\ndas:b\n", "one line")],
)
def test_an_empty_or_multiline_file_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = secret_file(tmp_path / "auth", text)
    with pytest.raises(SecretError, match=problem):
        prefect_auth.read_secret_file(path, "DAS_PREFECT_AUTH_FILE")


def test_missing_file_and_folder_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SecretError, match="No such file"):
        prefect_auth.read_secret_file(tmp_path / "absent", "DAS_PREFECT_AUTH_FILE")
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    with pytest.raises(SecretError, match="not a regular file"):
        prefect_auth.read_secret_file(folder, "DAS_PREFECT_AUTH_FILE")


def test_the_auth_file_becomes_the_clients_setting(tmp_path: Path) -> None:
    path = secret_file(tmp_path / "auth", AUTH + "\r\n")
    environ = {"DAS_PREFECT_AUTH_FILE": str(path), "PREFECT_API_AUTH_STRING": "inherited:old"}
    prefect_auth.configure_prefect_auth(environ)
    assert environ["PREFECT_API_AUTH_STRING"] == AUTH  # the file wins
    untouched = {"PREFECT_API_AUTH_STRING": "from:env"}
    prefect_auth.configure_prefect_auth(untouched)
    assert untouched == {"PREFECT_API_AUTH_STRING": "from:env"}


def test_the_server_gets_auth_csrf_and_its_database_password(tmp_path: Path) -> None:
    environ = {
        "DAS_PREFECT_AUTH_FILE": str(secret_file(tmp_path / "auth", AUTH)),
        "DAS_PREFECT_DATABASE_PASSWORD_FILE": str(secret_file(tmp_path / "db", "pw0\n")),
    }
    prefect_auth.configure_prefect_server(environ)
    assert environ["PREFECT_SERVER_API_AUTH_STRING"] == AUTH
    assert environ["PREFECT_API_AUTH_STRING"] == AUTH
    assert environ["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] == "true"
    assert environ["PREFECT_SERVER_DATABASE_PASSWORD"] == "pw0"
    explicit = {"PREFECT_SERVER_API_AUTH_STRING": AUTH,
                "PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "false"}  # fmt: skip
    prefect_auth.configure_prefect_server(explicit)
    assert explicit["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] == "false"  # the operator's say


def test_no_server_without_authentication() -> None:
    with pytest.raises(SecretError, match="DAS_PREFECT_AUTH_FILE"):
        prefect_auth.configure_prefect_server({})


def test_every_das_command_refuses_a_loose_auth_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = secret_file(tmp_path / "auth", AUTH, 0o644)
    monkeypatch.setenv("DAS_PREFECT_AUTH_FILE", str(path))
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    for argv in (["deploy", "--local"], ["prefect", "server", "start"], ["budget", "report"]):
        assert das(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.rstrip().endswith(f"chmod 600 {path}"), err
    assert "PREFECT_API_AUTH_STRING" not in os.environ


def test_das_prefect_server_refuses_to_start_without_auth(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    for name in ("DAS_PREFECT_AUTH_FILE", "PREFECT_API_AUTH_STRING",
                 "PREFECT_SERVER_API_AUTH_STRING"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    assert das(["prefect", "--no-prompt", "server", "start"]) == 2
    assert "without authentication" in capsys.readouterr().err


@pytest.mark.integration  # the real `das` console script and the `prefect` it starts
def test_das_prefect_hands_the_auth_string_to_prefect(tmp_path: Path) -> None:
    """The secret reaches the `prefect` process through its environment (never argv)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(DAS_PREFECT_AUTH_FILE=str(secret_file(tmp_path / "auth", AUTH)),
               PREFECT_HOME=str(tmp_path / "home"))  # fmt: skip
    das_script = Path(sys.executable).with_name("das")
    shown = subprocess.run([str(das_script), "prefect", "config", "view", "--show-secrets"],
                           env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"PREFECT_API_AUTH_STRING='{AUTH}' (from env)" in shown.stdout


def test_dask_preload_sets_the_auth_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAS_PREFECT_AUTH_FILE", str(secret_file(tmp_path / "auth", AUTH)))
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    prefect_auth.dask_setup(object())
    assert os.environ["PREFECT_API_AUTH_STRING"] == AUTH


# -- das deploy asks the server first ------------------------------------------------------------
class _Server(http.server.BaseHTTPRequestHandler):
    """``/api/admin/version`` of a server that requires ``AUTH`` (or none, when open)."""

    open = False

    def do_GET(self) -> None:
        expected = "Basic " + base64.b64encode(AUTH.encode()).decode()
        ok = self.path == "/api/admin/version" and (
            self.open or self.headers.get("Authorization") == expected
        )
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(b'"3.8.8"' if ok else b'{"exception_message": "Unauthorized"}')

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _api(is_open: bool) -> Iterator[str]:
    handler = type("Handler", (_Server,), {"open": is_open})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("is_open", [False, True], ids=["authenticated", "open"])
def test_check_api(is_open: bool) -> None:
    with _api(is_open) as url:
        assert prefect_auth.check_api(url, AUTH) == (None, is_open)
        problem, _ = prefect_auth.check_api(url, "das:wrong")
        assert (problem is None) == is_open
        if not is_open:
            assert "refused the auth string (HTTP 401)" in problem
            problem, _ = prefect_auth.check_api(url, None)
            assert "requires authentication" in problem and "DAS_PREFECT_AUTH_FILE" in problem


def test_check_api_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    problem, _ = prefect_auth.check_api(f"http://127.0.0.1:{port}/api", AUTH, timeout=5)
    assert problem.startswith(
        f"the Prefect API could not be reached at http://127.0.0.1:{port}/api"
    )


def test_das_deploy_stops_at_refused_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("DAS_PREFECT_AUTH_FILE", str(secret_file(tmp_path / "auth", "das:wrong")))
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    with _api(is_open=False) as url:
        monkeypatch.setenv("PREFECT_API_URL", url)
        assert das(["deploy", "--local", "--root", str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err
    assert "refused the auth string (HTTP 401)" in err and "das:wrong" not in err
    assert not (tmp_path / "root").exists()  # stopped before preparing anything


def test_das_deploy_warns_about_an_open_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("DAS_PREFECT_AUTH_FILE", str(secret_file(tmp_path / "auth", AUTH)))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    with _api(is_open=True) as url:
        monkeypatch.setenv("PREFECT_API_URL", url)
        das(["deploy"])  # the fake server has no variables: refused after the warning
    assert "das deploy: warning:" in (err := capsys.readouterr().err) and "anonymous calls" in err


def test_das_run_stops_at_refused_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """One line and exit 2 before anything runs (not a traceback from the flow's first call)."""
    for name in ("DAS_PREFECT_AUTH_FILE", "PREFECT_API_AUTH_STRING"):
        monkeypatch.delenv(name, raising=False)
    output = tmp_path / "out"
    with _api(is_open=False) as url:
        monkeypatch.setenv("PREFECT_API_URL", url)
        argv = ["run", "safetab-p", "--config", str(tmp_path / "config.json"),
                "--data", str(tmp_path), "--output", str(output)]  # fmt: skip
        assert das(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("das run: error: the Prefect server at") and "HTTP 401" in err
    assert not output.exists() and not (tmp_path / "out.das").exists()


# -- the UI's login: the auth string to a clipboard, never to the screen ------------------------
def _das_ui_login(tmp_path: Path, *args: str, terminal: bool) -> tuple[int, bytes]:
    """`das ui-login ARGS` with stdout a pipe or a pseudo-terminal: (exit code, what it
    wrote to stdout and stderr)."""
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "TMUX"))}
    env["DAS_PREFECT_AUTH_FILE"] = str(secret_file(tmp_path / "auth", AUTH + "\n"))
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    argv = [str(Path(sys.executable).with_name("das")), "ui-login", *args]
    if not terminal:
        done = subprocess.run(argv, env=env, capture_output=True, timeout=120)
        return done.returncode, done.stdout + b"\0" + done.stderr
    leader, follower = pty.openpty()
    with subprocess.Popen(argv, env=env, stdin=follower, stdout=follower, stderr=follower,
                          start_new_session=True) as process:  # fmt: skip
        os.close(follower)
        output = b""
        with contextlib.suppress(OSError):  # EIO once the process has closed the terminal
            while chunk := os.read(leader, 4096):
                output += chunk
        code = process.wait(timeout=120)
    os.close(leader)
    return code, output


@pytest.mark.integration  # the console script in a pipe or a pseudo-terminal
def test_ui_login_writes_the_auth_string_into_a_pipe_only(tmp_path: Path) -> None:
    """`das ui-login | xclip ...`: the string alone, no newline, for the clipboard tool; on a
    terminal it is refused and the secret never shown."""
    code, output = _das_ui_login(tmp_path, terminal=False)
    assert code == 0 and output == AUTH.encode() + b"\0"
    code, output = _das_ui_login(tmp_path, terminal=True)
    assert code == 2 and AUTH.encode() not in output
    assert b"xclip -selection clipboard" in output


@pytest.mark.integration  # the console script in a pipe or a pseudo-terminal
def test_ui_login_osc52_sends_the_string_to_the_terminals_clipboard(tmp_path: Path) -> None:
    """--osc52: the escape sequence that asks the terminal to copy (base64 of the string), not
    the string itself; the terminal shows neither."""
    code, output = _das_ui_login(tmp_path, "--osc52", terminal=True)
    encoded = base64.b64encode(AUTH.encode()).decode().encode()
    assert code == 0 and b"\x1b]52;c;" + encoded + b"\x07" in output
    assert AUTH.encode() not in output


@pytest.mark.parametrize(
    ("args", "environ", "address"),
    [
        (["server", "start"], {}, "http://127.0.0.1:4200"),
        (["server", "start", "--host", "0.0.0.0", "--port", "4300"], {}, "http://127.0.0.1:4300"),
        (["server", "start", "--port=4400"], {"PREFECT_SERVER_API_HOST": "10.0.0.5"},
         "http://10.0.0.5:4400"),
        (["server", "start"], {"PREFECT_SERVER_API_PORT": "4500"}, "http://127.0.0.1:4500"),
    ],
)  # fmt: skip
def test_server_start_names_the_login_page(args: list[str], environ: dict, address: str) -> None:
    from das.cli.prefect_wrapper import login_hint, ui_address

    assert ui_address(args, environ) == address
    hint = login_hint(address, ".venv/bin/das")
    assert f"{address}/login" in hint and "`.venv/bin/das ui-login | xclip" in hint
    # Prefect's banner, printed below it, says otherwise: the hint says which part to keep.
    assert hint.endswith(
        "Prefect's own banner follows, written for a server without authentication: its "
        "`prefect config set PREFECT_API_URL=…` is not needed (`das` reads PREFECT_API_URL from "
        "the environment; the plain `prefect` has no auth string: use `.venv/bin/das prefect "
        f"…`), and the dashboard to open is {address}/login, not the front page it names"
    )
