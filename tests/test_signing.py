"""das.signing: canonical statements, OpenSSH keys, SSHSIG signatures and DSSE envelopes.

``ssh-keygen`` is the oracle wherever OpenSSH defines the format (fingerprints, key files,
signatures); those tests start it and are marked ``integration``. The rest is pure and fast.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given
from hypothesis import strategies as st

from das.signing import (
    SUPPORTED_ALGORITHMS,
    PublicKey,
    SigningError,
    canonical_json,
    generate_key,
    load_keys_file,
    parse_public_key,
    public_key_of,
    sha256_hex,
    statement_digest,
)

REPO = Path(__file__).resolve().parents[1]


# -- canonical_json --------------------------------------------------------------------------------


def test_canonical_json_is_sorted_compact_utf8() -> None:
    value = {"b": 1, "a": [True, None, "café"], "c": {"z": -3, "y": ("x",)}}
    assert canonical_json(value) == '{"a":[true,null,"café"],"b":1,"c":{"y":["x"],"z":-3}}'.encode()


def test_canonical_json_does_not_depend_on_key_order_or_layout() -> None:
    first = {"passes": {"US": {"this_run": "1/3", "total": "2/3"}}, "ledger": "L1"}
    second = json.loads(
        json.dumps(
            {"ledger": "L1", "passes": {"US": {"total": "2/3", "this_run": "1/3"}}}, indent=4
        )
    )
    assert canonical_json(first) == canonical_json(second)
    assert statement_digest(first) == statement_digest(second)


def test_canonical_json_keeps_non_ascii_as_utf8() -> None:
    encoded = canonical_json({"name": "Nuñez 北京 😀"})
    assert "Nuñez 北京 😀".encode() in encoded
    assert b"\\u" not in encoded


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"passes": {"US": {"this_run": 0.5}}}, "passes.US.this_run"),
        ({"passes": {"US": {"this_run": math.nan}}}, "passes.US.this_run"),
        ({"ceiling": math.inf}, "ceiling"),
        ({"subjects": ["a", {"n": 1.0}]}, "subjects[1].n"),
        (2.5, "the top level"),
    ],
)
def test_canonical_json_refuses_floats_with_their_path(value: object, path: str) -> None:
    with pytest.raises(TypeError, match="float") as caught:
        canonical_json(value)
    assert f"{path} is a float" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"passes": {3: "x"}}, "passes has a key 3 of type int"),
        ({"a": [{None: 1}]}, "a[0] has a key None"),
        ({"a": {"b": Fraction(1, 3)}}, "a.b is a Fraction"),
        ({"a": b"bytes"}, "a is a bytes"),
        ({"a": {1, 2}}, "a is a set"),
        ({"a": "\ud800"}, "a is not valid Unicode"),
    ],
)
def test_canonical_json_refuses_what_has_no_canonical_form(value: object, fragment: str) -> None:
    with pytest.raises(TypeError) as caught:
        canonical_json(value)
    assert fragment in str(caught.value)


def test_canonical_json_refuses_a_value_that_contains_itself() -> None:
    value: dict = {"a": []}
    value["a"].append(value)
    with pytest.raises(TypeError, match="circular"):
        canonical_json(value)


def test_a_repeated_value_is_not_circular() -> None:
    shared = ["x"]
    assert canonical_json({"a": shared, "b": shared}) == b'{"a":["x"],"b":["x"]}'


def test_digests_are_sha256_hex_of_the_canonical_bytes() -> None:
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert statement_digest({"b": 1, "a": 2}) == sha256_hex(b'{"a":2,"b":1}')


_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_JSON_LIKE)
def test_canonical_json_is_a_fixed_point_of_parsing(value: object) -> None:
    encoded = canonical_json(value)
    assert canonical_json(json.loads(encoded)) == encoded


# -- helpers ---------------------------------------------------------------------------------------


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _line(algorithm: str, blob: bytes, comment: str = "") -> str:
    return f"{algorithm} {base64.b64encode(blob).decode()} {comment}".strip()


def _write_private(path: Path, private: object, password: bytes | None = None) -> Path:
    """An OpenSSH private key file (and its .pub) written with cryptography."""
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        private.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption
        )
    )
    path.chmod(0o600)
    public = private.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    path.with_name(path.name + ".pub").write_bytes(public + b" " + path.name.encode() + b"\n")
    return path


@pytest.fixture(scope="module")
def rsa_private() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def alice(tmp_path: Path) -> Path:
    """An unencrypted ed25519 key file (alice@example) with its .pub."""
    generate_key(tmp_path / "alice", "alice@example")
    return tmp_path / "alice"


@pytest.fixture
def bob(tmp_path: Path) -> Path:
    generate_key(tmp_path / "bob", "bob@example")
    return tmp_path / "bob"


@pytest.fixture
def ssh_keygen() -> str:
    program = shutil.which("ssh-keygen")
    if program is None:
        pytest.skip("ssh-keygen (the OpenSSH client) is not installed")
    return program


def _keygen(*args: str, stdin: bytes | None = None, env: dict | None = None) -> str:
    """Run ssh-keygen (the oracle); its standard output, or the test fails with its stderr."""
    done = subprocess.run(
        ["ssh-keygen", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def _new_ssh_key(folder: Path, kind: str, *extra: str, name: str | None = None) -> Path:
    """A key pair made by ssh-keygen itself (-t ed25519, rsa or ecdsa)."""
    path = folder / (name or f"id_{kind}")
    _keygen("-q", "-t", kind, "-N", "", "-C", f"{kind}@example", "-f", str(path), *extra)
    return path


# -- keys ------------------------------------------------------------------------------------------


def test_parse_an_openssh_public_key_line() -> None:
    private = ed25519.Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    blob = _ssh_string(b"ssh-ed25519") + _ssh_string(raw)
    key = parse_public_key(_line("ssh-ed25519", blob, "alice@laptop  2024"))
    assert (key.algorithm, key.blob, key.label) == ("ssh-ed25519", blob, "alice@laptop  2024")
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert key.fingerprint == f"SHA256:{digest}"
    assert key.openssh() == _line("ssh-ed25519", blob, "alice@laptop  2024")
    assert parse_public_key(key.openssh()) == key


@pytest.mark.parametrize(
    ("prefix", "label"),
    [
        ("alice@example.org", "alice@example.org"),
        ("alice@example.org,al@example.org", "alice@example.org,al@example.org"),
        ('"Alice Smith,alice@example.org"', "Alice Smith,alice@example.org"),
        ('alice@example.org namespaces="git,das-approval"', "alice@example.org"),
        ('alice namespaces="das",valid-after=20240101,valid-before="20300101"', "alice"),
    ],
)
def test_parse_an_allowed_signers_line(alice: Path, prefix: str, label: str) -> None:
    own = public_key_of(alice)
    key = parse_public_key(f"{prefix} {own.openssh()}")
    assert key == own
    assert key.label == label


def test_labels_do_not_make_keys_different(alice: Path) -> None:
    key = public_key_of(alice)
    relabelled = PublicKey(key.algorithm, key.blob, "someone else")
    assert relabelled == key
    assert len({key, relabelled}) == 1


def test_a_key_round_trips_through_its_json_form(alice: Path) -> None:
    key = public_key_of(alice)
    data = key.to_dict()
    assert data == {"key": key.openssh().rsplit(" ", 1)[0], "label": "alice@example"}
    back = PublicKey.from_dict(json.loads(json.dumps(data)))
    assert (back, back.label) == (key, key.label)


@pytest.mark.parametrize(
    "data",
    [
        {"label": "x"},
        {"key": 3},
        {"key": "ssh-ed25519"},
        {"key": "alice ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA=="},
        {"key": "ssh-ed25519 AAAA", "label": 1},
        {"key": "ssh-ed25519 AAAA", "role": "admin"},
    ],
)
def test_a_malformed_json_key_is_refused(data: dict) -> None:
    with pytest.raises(SigningError, match="key entry"):
        PublicKey.from_dict(data)


def _ed25519_blob() -> bytes:
    raw = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return _ssh_string(b"ssh-ed25519") + _ssh_string(raw)


def _refusals() -> list[tuple[str, str]]:
    blob = _ed25519_blob()
    cert = _ssh_string(b"ssh-ed25519-cert-v01@openssh.com") + _ssh_string(os.urandom(32))
    small_rsa = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    numbers = small_rsa.public_numbers()
    rsa_blob = (
        _ssh_string(b"ssh-rsa")
        + _ssh_string(numbers.e.to_bytes(3, "big"))
        + _ssh_string(b"\0" + numbers.n.to_bytes(128, "big"))
    )
    return [
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private key"),
        (_line("ssh-ed25519-cert-v01@openssh.com", cert), "certificates"),
        ("hello world, this is not a key", "not a public key"),
        ("ssh-ed25519", "no key data"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI", "does not decode"),
        (_line("ssh-ed25519", blob[:-5]), "malformed"),
        (_line("ssh-ed25519", blob + b"\0"), "unexpected bytes"),
        (_line("ssh-rsa", blob), "marked ssh-rsa but its data is of type 'ssh-ed25519'"),
        (_line("ssh-dss", _ssh_string(b"ssh-dss") + b"\0" * 40), "DSA"),
        (_line("ssh-foo", _ssh_string(b"ssh-foo") + b"\0" * 8), "unsupported key type"),
        (_line("ssh-rsa", rsa_blob), "1024 bits"),
        (f"alice cert-authority {_line('ssh-ed25519', blob)}", "cert-authority"),
        (f"alice restrict {_line('ssh-ed25519', blob)}", "unknown allowed-signers option"),
        ("---- BEGIN SSH2 PUBLIC KEY ----", "RFC 4716"),
    ]


@pytest.mark.parametrize(("line", "reason"), _refusals())
def test_what_is_not_a_usable_public_key_is_refused_naming_the_line(
    tmp_path: Path, line: str, reason: str
) -> None:
    path = tmp_path / "approvers.txt"
    path.write_text(f"# approvers\n\n{_line('ssh-ed25519', _ed25519_blob())}\n{line}\n")
    with pytest.raises(SigningError) as caught:
        load_keys_file(path)
    assert str(caught.value).startswith(f"{path} line 4: ")
    assert reason in str(caught.value)
    with pytest.raises(SigningError, match=f"^web form: .*{reason[:8]}"):
        parse_public_key(line, source="web form")


def test_a_private_key_file_is_refused_without_quoting_it(tmp_path: Path) -> None:
    key = _write_private(tmp_path / "id", ed25519.Ed25519PrivateKey.generate())
    pasted = tmp_path / "approvers.txt"
    pasted.write_text(key.read_text())
    with pytest.raises(SigningError, match="line 1: this is a private key") as caught:
        load_keys_file(pasted)
    for secret_line in key.read_text().splitlines()[1:-1]:
        assert secret_line not in str(caught.value)


def test_a_keys_file_skips_comments_and_collapses_duplicates(tmp_path: Path, alice: Path) -> None:
    own = public_key_of(alice)
    other = parse_public_key(_line("ssh-ed25519", _ed25519_blob(), "carol"))
    path = tmp_path / "approvers"
    path.write_text(
        "\n".join(
            [
                "# the approvers of ledger L1",
                "",
                f"alice-first {own.openssh().rsplit(' ', 1)[0]}",
                other.openssh(),
                f"   {own.openssh()}   ",
                f"alice-again {own.openssh()}",
            ]
        )
        + "\n"
    )
    keys = load_keys_file(path)
    assert keys == [own, other]
    assert [key.label for key in keys] == ["alice-first", "carol"]


def test_an_empty_keys_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "approvers"
    path.write_text("# nobody yet\n\n")
    with pytest.raises(SigningError, match=f"no public key in {path}"):
        load_keys_file(path)
    with pytest.raises(SigningError, match="cannot read"):
        load_keys_file(tmp_path / "missing")


def test_supported_algorithms_are_the_openssh_signing_key_types() -> None:
    assert SUPPORTED_ALGORITHMS == (
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    )
    with pytest.raises(SigningError, match="unsupported key type 'ssh-ed448'"):
        PublicKey("ssh-ed448", _ssh_string(b"ssh-ed448") + _ssh_string(b"\0" * 57))


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_generate_key_writes_0600_and_0644_and_never_overwrites(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        key = generate_key(tmp_path / "keys" / "service", "das-run@enclave")
    finally:
        os.umask(previous)
    private, public = tmp_path / "keys" / "service", tmp_path / "keys" / "service.pub"
    assert private.stat().st_mode & 0o777 == 0o600
    assert public.stat().st_mode & 0o777 == 0o644
    assert public.read_text() == key.openssh() + "\n"
    assert key.label == "das-run@enclave" and key.algorithm == "ssh-ed25519"
    assert public_key_of(private) == key and public_key_of(public) == key
    before = private.read_bytes()
    with pytest.raises(SigningError, match="already exists"):
        generate_key(private, "again")
    public.unlink()
    with pytest.raises(SigningError, match="already exists"):
        generate_key(private, "again")
    assert private.read_bytes() == before


def test_public_key_of_reads_private_and_public_files(tmp_path: Path, rsa_private) -> None:
    path = _write_private(tmp_path / "id_rsa", rsa_private)
    expected = parse_public_key((tmp_path / "id_rsa.pub").read_text())
    assert public_key_of(path) == expected
    assert public_key_of(path).label == "id_rsa"  # the comment of the .pub beside it
    (tmp_path / "id_rsa.pub").unlink()
    assert public_key_of(path) == expected
    ecdsa = _write_private(tmp_path / "id_ecdsa", ec.generate_private_key(ec.SECP384R1()))
    assert public_key_of(ecdsa).algorithm == "ecdsa-sha2-nistp384"
    with pytest.raises(SigningError, match="cannot read the key file"):
        public_key_of(tmp_path / "missing")


@pytest.mark.integration
def test_public_key_of_an_encrypted_openssh_key_needs_no_passphrase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_keygen: str
) -> None:
    """Its header carries the public key in clear: no prompt, no ssh-keygen, no .pub needed."""
    path = tmp_path / "id"
    _keygen("-q", "-t", "ed25519", "-N", "correct horse", "-C", "enc", "-f", str(path))
    expected = parse_public_key((tmp_path / "id.pub").read_text())
    (tmp_path / "id.pub").unlink()
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh-keygen to fall back on
    assert public_key_of(path) == expected


def _askpass(folder: Path, monkeypatch: pytest.MonkeyPatch, answer: str | None) -> None:
    """Make ssh-keygen ask this script for a passphrase instead of the terminal (none if None)."""
    script = folder / "askpass"
    script.write_text(
        f"#!/bin/sh\necho '{answer}'\n" if answer is not None else "#!/bin/sh\nexit 1\n"
    )
    script.chmod(0o700)
    monkeypatch.setenv("SSH_ASKPASS", str(script))
    monkeypatch.setenv("SSH_ASKPASS_REQUIRE", "force")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("kind", "extra"), [("ed25519", ()), ("rsa", ("-b", "2048")), ("ecdsa", ())]
)
def test_fingerprints_are_those_ssh_keygen_prints(
    tmp_path: Path, ssh_keygen: str, kind: str, extra: tuple[str, ...]
) -> None:
    path = _new_ssh_key(tmp_path, kind, *extra)
    oracle = _keygen("-l", "-E", "sha256", "-f", f"{path}.pub").split()
    for key in (public_key_of(path), load_keys_file(f"{path}.pub")[0]):
        assert key.fingerprint == oracle[1]
        assert key.label == f"{kind}@example"


@pytest.mark.integration
def test_a_fido_public_key_parses_and_fingerprints_as_ssh_keygen_does(
    tmp_path: Path, ssh_keygen: str
) -> None:
    blob = (
        _ssh_string(b"sk-ssh-ed25519@openssh.com")
        + _ssh_string(_ed25519_blob()[-32:])
        + _ssh_string(b"ssh:")
    )
    path = tmp_path / "id_ed25519_sk.pub"
    path.write_text(_line("sk-ssh-ed25519@openssh.com", blob, "yubikey") + "\n")
    oracle = _keygen("-l", "-E", "sha256", "-f", str(path)).split()
    assert load_keys_file(path)[0].fingerprint == oracle[1]


@pytest.mark.integration
def test_generated_keys_are_read_by_ssh_keygen(tmp_path: Path, ssh_keygen: str) -> None:
    key = generate_key(tmp_path / "service", "das-run@enclave")
    derived = _keygen("-y", "-f", str(tmp_path / "service")).strip()
    assert parse_public_key(derived) == key
    oracle = _keygen("-l", "-E", "sha256", "-f", str(tmp_path / "service.pub")).split()
    assert (oracle[1], oracle[2]) == (key.fingerprint, "das-run@enclave")


def _encrypted_pem(path: Path, passphrase: bytes) -> PublicKey:
    """A passphrase-protected PKCS#8 PEM key (the format cryptography cannot open unasked)."""
    private = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(passphrase),
        )
    )
    path.chmod(0o600)
    line = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return parse_public_key(line.decode())


@pytest.mark.integration
def test_public_key_of_an_encrypted_pem_key_asks_ssh_keygen_then_reads_the_pub_beside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_keygen: str
) -> None:
    path = tmp_path / "id_ecdsa"
    expected = _encrypted_pem(path, b"s3cret")
    _askpass(tmp_path, monkeypatch, "s3cret")
    assert public_key_of(path) == expected  # through `ssh-keygen -y`, which asked for it
    _askpass(tmp_path, monkeypatch, None)  # nobody answers: the .pub beside is the last resort
    with pytest.raises(SigningError, match="cannot read its public key"):
        public_key_of(path)
    (tmp_path / "id_ecdsa.pub").write_text(
        PublicKey(expected.algorithm, expected.blob, "me").openssh()
    )
    assert public_key_of(path) == expected
    assert public_key_of(path).label == "me"
