"""das.trust.signing: canonical statements, OpenSSH keys, SSHSIG signatures and DSSE envelopes.

``ssh-keygen`` is the oracle wherever OpenSSH defines the format (fingerprints, key files,
signatures); those tests start it and are marked ``integration``. The rest is pure and fast.
"""

from __future__ import annotations

import ast
import base64
import copy
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given
from hypothesis import strategies as st
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from das.trust import (
    PublicKey,
    SignatureInvalid,
    SigningError,
    canonical_json,
    generate_key,
    load_keys_file,
    public_key_of,
    sign,
)
from das.trust.signing.canonical import sha256_hex, statement_digest
from das.trust.signing.dsse import (
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    pae,
    sign_envelope,
    statement,
    verify_envelope,
)
from das.trust.signing.keys import SUPPORTED_ALGORITHMS, parse_public_key
from das.trust.signing.sshsig import signature_key, verify

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
    with pytest.raises(TypeError, match="carry exact numbers as strings") as caught:
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
        (_line("ssh-ed25519", blob + b"\0"), "malformed: Corrupt data: unparsed data"),
        (_line("ssh-rsa", blob), "marked ssh-rsa but its data is of type 'ssh-ed25519'"),
        (_line("ssh-dss", _ssh_string(b"ssh-dss") + b"\0" * 40), "DSA"),
        (_line("ssh-foo", _ssh_string(b"ssh-foo") + b"\0" * 8), "unsupported key type"),
        (_line("ssh-rsa", rsa_blob), "1024 bits"),
        (f"alice cert-authority {_line('ssh-ed25519', blob)}", "cert-authority"),
        (f"alice restrict {_line('ssh-ed25519', blob)}", "unknown allowed-signers option"),
        (f'alice foo="x" {_line("ssh-ed25519", blob)}', "option it cannot read"),
        # a restriction OpenSSH would enforce is refused, never accepted and ignored (issue 38)
        (f'alice namespaces="git" {_line("ssh-ed25519", blob)}', "refused, not ignored"),
        (f'bob valid-before="20200101" {_line("ssh-ed25519", blob)}', "retire a key"),
        (f'al namespaces="das",valid-after="20240101" {_line("ssh-ed25519", blob)}', "from when"),
        ("---- BEGIN SSH2 PUBLIC KEY ----", "RFC 4716"),
    ]


# ids by reason: the lines hold random keys, and every xdist worker must collect the same ids
@pytest.mark.parametrize(("line", "reason"), _refusals(), ids=[r for _, r in _refusals()])
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


# -- SSHSIG ----------------------------------------------------------------------------------------

NS = "das-approval@example.org"
MESSAGE = canonical_json({"ledger": "L1", "spend": {"US": "1/4"}, "approver": "alice"})


def _armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    body = [text[start : start + 70] for start in range(0, len(text), 70)]
    return "\n".join(["-----BEGIN SSH SIGNATURE-----", *body, "-----END SSH SIGNATURE-----"]) + "\n"


def _blob(signature: str) -> bytes:
    return base64.b64decode("".join(signature.strip().splitlines()[1:-1]))


def _signed_data(namespace: str, message: bytes, hash_name: str = "sha512") -> bytes:
    return (
        b"SSHSIG"
        + _ssh_string(namespace.encode())
        + _ssh_string(b"")
        + _ssh_string(hash_name.encode())
        + _ssh_string(hashlib.new(hash_name, message).digest())
    )


def _sshsig(key_blob: bytes, namespace: str, hash_name: str, signature: bytes) -> str:
    """An armored SSHSIG made field by field (PROTOCOL.sshsig), for the cases nobody signs."""
    return _armor(
        b"SSHSIG"
        + struct.pack(">I", 1)
        + _ssh_string(key_blob)
        + _ssh_string(namespace.encode())
        + _ssh_string(b"")
        + _ssh_string(hash_name.encode())
        + _ssh_string(signature)
    )


def _allowed_signers(folder: Path, key: PublicKey, principal: str = "alice@example") -> Path:
    path = folder / "allowed_signers"
    path.write_text(f"{principal} {PublicKey(key.algorithm, key.blob).openssh()}\n")
    return path


def _ssh_keygen_verifies(folder: Path, key: PublicKey, signature: str, message: bytes) -> bool:
    """The oracle: ssh-keygen -Y verify -f allowed_signers -I principal -n NS -s sig < msg."""
    allowed = _allowed_signers(folder, key)
    sig = folder / "message.sig"
    sig.write_text(signature)
    command = ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "alice@example"]
    done = subprocess.run(
        [*command, "-n", NS, "-s", str(sig)],
        input=message,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode == 0


@pytest.fixture
def rsa_key(tmp_path: Path, rsa_private: rsa.RSAPrivateKey) -> Path:
    return _write_private(tmp_path / "id_rsa", rsa_private)


@pytest.fixture
def ecdsa_key(tmp_path: Path) -> Path:
    return _write_private(tmp_path / "id_ecdsa", ec.generate_private_key(ec.SECP256R1()))


def test_sign_writes_the_armor_ssh_keygen_writes(alice: Path) -> None:
    signature = sign(MESSAGE, NS, alice)
    lines = signature.split("\n")
    assert lines[0] == "-----BEGIN SSH SIGNATURE-----"
    assert lines[-2:] == ["-----END SSH SIGNATURE-----", ""]
    assert {len(line) for line in lines[1:-3]} == {70}
    assert 0 < len(lines[-3]) <= 70
    assert signature_key(signature) == public_key_of(alice)


@pytest.mark.parametrize("which", ["alice", "rsa_key"])
def test_verify_returns_the_allowed_key_that_signed(
    request: pytest.FixtureRequest, bob: Path, which: str
) -> None:
    key_path = request.getfixturevalue(which)
    signer = public_key_of(key_path)
    allowed = [public_key_of(bob), PublicKey(signer.algorithm, signer.blob, "approver 2")]
    found = verify(MESSAGE, sign(MESSAGE, NS, key_path), NS, allowed)
    assert (found, found.label) == (signer, "approver 2")


def _flip_inside_signature(signature: str) -> str:
    """The same armor with one base64 character of the signature bytes changed (still base64)."""
    lines = signature.splitlines()
    last = lines[-2]
    index = len(last) // 2
    lines[-2] = last[:index] + ("B" if last[index] != "B" else "C") + last[index + 1 :]
    return "\n".join(lines) + "\n"


def _cases(key_path: Path, other_path: Path) -> list[tuple[bytes, str, str, list, str]]:
    """(message, signature, namespace, allowed, reason): one changed thing each."""
    key, other = public_key_of(key_path), public_key_of(other_path)
    good = sign(MESSAGE, NS, key_path)
    changed = bytearray(MESSAGE)
    changed[10] ^= 0x01
    lines = good.splitlines()
    garbled = "\n".join([lines[0], lines[1][:5] + "*" + lines[1][6:], *lines[2:]])
    return [
        (bytes(changed), good, NS, [key], "does not match the message"),
        (
            MESSAGE,
            sign(MESSAGE, "git", key_path),
            NS,
            [key],
            "wrong namespace: the signature is for 'git'",
        ),
        (MESSAGE, good, NS, [other], f"not allowed: {key.fingerprint}"),
        (MESSAGE, "\n".join(lines[:2] + lines[-1:]), NS, [key], "malformed armor: its body is not"),
        (
            MESSAGE,
            "\n".join([lines[0], lines[1][:68], lines[-1]]),
            NS,
            [key],
            "malformed signature: it ends too early",
        ),
        (MESSAGE, "\n".join(lines[:-1]), NS, [key], "malformed armor: it does not end with"),
        (MESSAGE, garbled, NS, [key], "malformed armor: its body is not base64"),
        (MESSAGE, good[30:], NS, [key], "malformed armor: it does not start with"),
        (MESSAGE, _flip_inside_signature(good), NS, [key], "does not match the message"),
        (MESSAGE, sign(b"other bytes", NS, key_path), NS, [key], "does not match the message"),
        (MESSAGE, good.replace("\n", "\n\n", 2), NS, [key], "malformed armor: a blank line"),
    ]


@pytest.mark.parametrize("which", ["alice", "rsa_key"])
def test_each_tampered_signature_is_refused_with_its_reason(
    request: pytest.FixtureRequest, bob: Path, which: str
) -> None:
    for message, signature, namespace, allowed, reason in _cases(
        request.getfixturevalue(which), bob
    ):
        with pytest.raises(SignatureInvalid) as caught:
            verify(message, signature, namespace, allowed)
        assert reason in str(caught.value), reason


def test_pasted_armor_with_crlf_and_surrounding_spaces_verifies(alice: Path) -> None:
    signature = sign(MESSAGE, NS, alice)
    pasted = "  \r\n" + "\r\n".join(f" {line}  " for line in signature.splitlines()) + "\r\n\t "
    assert verify(MESSAGE, pasted, NS, [public_key_of(alice)]) == public_key_of(alice)


def test_signature_key_reads_the_key_without_trusting_it(alice: Path) -> None:
    assert signature_key(sign(b"anything", "other-namespace", alice)) == public_key_of(alice)
    for junk in ("", "hello", "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----"):
        with pytest.raises(SignatureInvalid, match="malformed"):
            signature_key(junk)


def test_signatures_nobody_should_accept_are_refused(alice: Path) -> None:
    """Hash, signature algorithm and key type are checked before any cryptography."""
    key = public_key_of(alice)
    private = serialization.load_ssh_private_key(alice.read_bytes(), None)
    md5 = _ssh_string(b"ssh-ed25519") + _ssh_string(private.sign(_signed_data(NS, MESSAGE, "md5")))
    with pytest.raises(SignatureInvalid, match="unsupported hash algorithm 'md5'"):
        verify(MESSAGE, _sshsig(key.blob, NS, "md5", md5), NS, [key])
    wrong_kind = _ssh_string(b"rsa-sha2-512") + _ssh_string(b"\0" * 64)
    with pytest.raises(SignatureInvalid, match="unsupported signature algorithm 'rsa-sha2-512'"):
        verify(MESSAGE, _sshsig(key.blob, NS, "sha512", wrong_kind), NS, [key])
    dsa = _ssh_string(b"ssh-dss") + _ssh_string(b"\x01" * 20)
    with pytest.raises(SignatureInvalid, match="DSA keys"):
        verify(MESSAGE, _sshsig(dsa, NS, "sha512", wrong_kind), NS, [key])
    not_sshsig = _armor(b"NOTSIG" + _blob(sign(MESSAGE, NS, alice))[6:])
    with pytest.raises(SignatureInvalid, match="no SSHSIG magic"):
        verify(MESSAGE, not_sshsig, NS, [key])
    version_2 = _blob(sign(MESSAGE, NS, alice))
    with pytest.raises(SignatureInvalid, match="version 2"):
        verify(MESSAGE, _armor(version_2[:6] + struct.pack(">I", 2) + version_2[10:]), NS, [key])


@pytest.mark.parametrize("namespace", ["", "two words", "naïve", "line\nbreak"])
def test_a_namespace_must_be_printable_ascii(alice: Path, namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        sign(MESSAGE, namespace, alice)
    with pytest.raises(ValueError, match="namespace"):
        verify(MESSAGE, sign(MESSAGE, NS, alice), namespace, [public_key_of(alice)])


def test_without_ssh_keygen_what_needs_it_is_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ecdsa_key: Path
) -> None:
    signature = sign(MESSAGE, NS, ecdsa_key)  # in-process: ECDSA signs without ssh-keygen
    encrypted = tmp_path / "id_locked"
    _encrypted_pem(encrypted, b"s3cret")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SignatureInvalid, match="without ssh-keygen"):
        verify(MESSAGE, signature, NS, [public_key_of(ecdsa_key)])
    with pytest.raises(SigningError, match=r"passphrase-protected.*ssh-keygen is not installed"):
        sign(MESSAGE, NS, encrypted)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("kind", "extra"), [("ed25519", ()), ("rsa", ("-b", "2048")), ("ecdsa", ())]
)
def test_signatures_interoperate_with_ssh_keygen(
    tmp_path: Path, ssh_keygen: str, kind: str, extra: tuple[str, ...]
) -> None:
    path = _new_ssh_key(tmp_path, kind, *extra)
    key = public_key_of(path)
    ours = sign(MESSAGE, NS, path)
    assert _ssh_keygen_verifies(tmp_path, key, ours, MESSAGE)
    assert not _ssh_keygen_verifies(tmp_path, key, ours, MESSAGE + b" ")  # the oracle can say no
    theirs = _keygen("-Y", "sign", "-n", NS, "-f", str(path), stdin=MESSAGE)
    assert verify(MESSAGE, theirs, NS, [key]) == key
    if kind == "ed25519":  # deterministic signatures: the very same bytes
        assert theirs == ours
    with pytest.raises(SignatureInvalid, match="does not match the message"):
        verify(MESSAGE + b" ", theirs, NS, [key])


@pytest.mark.integration
def test_an_ecdsa_tampered_message_is_refused_through_ssh_keygen(
    tmp_path: Path, ssh_keygen: str, ecdsa_key: Path
) -> None:
    key = public_key_of(ecdsa_key)
    signature = sign(MESSAGE, NS, ecdsa_key)
    assert verify(MESSAGE, signature, NS, [key]) == key
    with pytest.raises(
        SignatureInvalid,
        match=r"does not match the message: .* \(ssh-keygen: Signature verification failed",
    ):
        verify(MESSAGE[:-1], signature, NS, [key])


def _fido_signature(namespace: str, message: bytes, flags: int) -> tuple[str, PublicKey]:
    """An sk-ssh-ed25519 SSHSIG as a FIDO token makes it (OpenSSH's ssh-ed25519-sk.c): the token
    signs SHA-256(application) || flags || counter || SHA-256(signed data)."""
    private = ed25519.Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    algorithm, application, counter = b"sk-ssh-ed25519@openssh.com", b"ssh:", 7
    key_blob = _ssh_string(algorithm) + _ssh_string(raw) + _ssh_string(application)
    header = hashlib.sha256(application).digest() + bytes([flags]) + struct.pack(">I", counter)
    token = private.sign(header + hashlib.sha256(_signed_data(namespace, message)).digest())
    inner = (
        _ssh_string(algorithm) + _ssh_string(token) + bytes([flags]) + struct.pack(">I", counter)
    )
    return _sshsig(key_blob, namespace, "sha512", inner), PublicKey(algorithm.decode(), key_blob)


@pytest.mark.integration
def test_a_fido_key_signature_is_verified_through_ssh_keygen(ssh_keygen: str) -> None:
    signature, key = _fido_signature(NS, MESSAGE, flags=0x01)  # user present
    assert verify(MESSAGE, signature, NS, [key]) == key
    with pytest.raises(SignatureInvalid, match="does not match the message"):
        verify(MESSAGE + b"!", signature, NS, [key])
    untouched, key = _fido_signature(NS, MESSAGE, flags=0x00)  # nobody touched the token
    with pytest.raises(SignatureInvalid, match="lacks user presence"):
        verify(MESSAGE, untouched, NS, [key])


@pytest.fixture
def ssh_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ssh-agent on a socket of this test (stopped by its process id afterwards)."""
    program = shutil.which("ssh-agent")
    if program is None:
        pytest.skip("ssh-agent (the OpenSSH client) is not installed")
    folder = Path(tempfile.mkdtemp(prefix="das-agent-"))  # short: a socket path has a limit
    socket = folder / "agent.sock"
    agent = subprocess.Popen(
        [program, "-D", "-a", str(socket)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while not socket.exists():
            assert agent.poll() is None and time.monotonic() < deadline, "ssh-agent did not start"
            time.sleep(0.05)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket))
        yield socket
    finally:
        agent.terminate()
        agent.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.integration
def test_a_key_held_only_by_ssh_agent_signs_through_its_pub_file(
    tmp_path: Path, ssh_keygen: str, ssh_agent: Path
) -> None:
    path = _new_ssh_key(tmp_path, "ed25519")
    key = public_key_of(path)
    subprocess.run(["ssh-add", "-q", str(path)], check=True, capture_output=True, timeout=30)
    path.unlink()  # only the agent holds the private key now
    signature = sign(MESSAGE, NS, Path(f"{path}.pub"))
    assert verify(MESSAGE, signature, NS, [key]) == key
    assert _ssh_keygen_verifies(tmp_path, key, signature, MESSAGE)


@pytest.mark.integration
def test_a_passphrase_protected_key_signs_through_ssh_keygen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_keygen: str
) -> None:
    path = tmp_path / "id_locked"
    _keygen("-q", "-t", "ed25519", "-N", "open sesame", "-C", "locked", "-f", str(path))
    key = public_key_of(path)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    _askpass(tmp_path, monkeypatch, "open sesame")  # what a person types at the prompt
    signature = sign(MESSAGE, NS, path)
    assert verify(MESSAGE, signature, NS, [key]) == key
    _askpass(tmp_path, monkeypatch, "wrong")
    with pytest.raises(SigningError, match=r"ssh-keygen could not sign .*incorrect passphrase"):
        sign(MESSAGE, NS, path)


@pytest.mark.integration
def test_a_failure_of_ssh_keygen_is_reported_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_keygen: str, alice: Path
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    lone = tmp_path / "only.pub"
    lone.write_text(public_key_of(alice).openssh())
    with pytest.raises(SigningError, match=r'No private key found for public key ".*only\.pub"'):
        sign(MESSAGE, NS, lone)


# -- in-toto statements in DSSE envelopes ----------------------------------------------------------

PREDICATE = "https://das.example.org/release-approval/v1"


@pytest.fixture
def release() -> dict:
    return statement(
        {"out/us.csv": sha256_hex(b"us"), "out/ak.csv": sha256_hex(b"ak")},
        PREDICATE,
        {"ledger": "L1", "spend": {"US": "1/4"}, "approvers": ("alice", "bob")},
    )


def test_a_statement_lists_its_subjects_by_name(release: dict) -> None:
    assert release == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [
            {"name": "out/ak.csv", "digest": {"sha256": sha256_hex(b"ak")}},
            {"name": "out/us.csv", "digest": {"sha256": sha256_hex(b"us")}},
        ],
        "predicateType": PREDICATE,
        "predicate": {"ledger": "L1", "spend": {"US": "1/4"}, "approvers": ["alice", "bob"]},
    }
    assert release["_type"] == STATEMENT_TYPE
    assert PAYLOAD_TYPE == "application/vnd.in-toto+json"


@pytest.mark.parametrize(
    ("subjects", "predicate_type", "predicate", "error", "fragment"),
    [
        ({}, PREDICATE, {}, ValueError, "at least one subject"),
        ({"a": "ABC"}, PREDICATE, {}, ValueError, "64 lowercase hex"),
        ({"a": sha256_hex(b"a").upper()}, PREDICATE, {}, ValueError, "64 lowercase hex"),
        ({"": sha256_hex(b"a")}, PREDICATE, {}, ValueError, "non-empty string"),
        ({"a": sha256_hex(b"a")}, "", {}, ValueError, "predicate_type"),
        ({"a": sha256_hex(b"a")}, PREDICATE, {"epsilon": 0.5}, TypeError, "predicate.epsilon"),
    ],
)
def test_a_statement_that_could_not_be_signed_is_refused(
    subjects: dict, predicate_type: str, predicate: dict, error: type, fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        statement(subjects, predicate_type, predicate)


@pytest.mark.parametrize("which", ["alice", "rsa_key", "ecdsa_key"])
def test_an_envelope_round_trips(request: pytest.FixtureRequest, release: dict, which: str) -> None:
    key_path = request.getfixturevalue(which)
    key = public_key_of(key_path)
    envelope = json.loads(json.dumps(sign_envelope(release, key_path)))
    assert envelope["payloadType"] == PAYLOAD_TYPE
    assert base64.b64decode(envelope["payload"]) == canonical_json(release)
    assert [entry["keyid"] for entry in envelope["signatures"]] == [key.fingerprint]
    found, keys = verify_envelope(envelope, [key])
    assert found == release
    assert keys == [key] and keys[0].label == key.label


def _with_payload(envelope: dict, payload: bytes) -> dict:
    changed = copy.deepcopy(envelope)
    changed["payload"] = base64.b64encode(payload).decode()
    return changed


def test_a_changed_envelope_is_refused(release: dict, alice: Path, bob: Path) -> None:
    envelope = sign_envelope(release, alice)
    key = public_key_of(alice)
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[-5] ^= 0x01
    with pytest.raises(SignatureInvalid, match="0 of the 1 required trusted signatures"):
        verify_envelope(_with_payload(envelope, bytes(payload)), [key])
    retyped = {**envelope, "payloadType": "application/json"}
    with pytest.raises(SignatureInvalid, match="wrong payload type 'application/json'"):
        verify_envelope(retyped, [key])
    by_bob = sign_envelope(release, bob)
    with pytest.raises(SignatureInvalid) as caught:
        verify_envelope(by_bob, [key])
    assert f"signatures that no trusted key made: {public_key_of(bob).fingerprint}" in str(
        caught.value
    )
    with pytest.raises(SignatureInvalid, match="1 of the 2 required trusted signatures"):
        verify_envelope(envelope, [key, public_key_of(bob)], threshold=2)


def test_a_threshold_counts_distinct_trusted_signers(release: dict, alice: Path, bob: Path) -> None:
    carol = generate_key(alice.parent / "carol", "carol@example")
    both = sign_envelope(release, alice)
    both["signatures"] += sign_envelope(release, bob)["signatures"]
    trusted = [carol, public_key_of(bob), public_key_of(alice)]
    found, keys = verify_envelope(both, trusted, threshold=2)
    assert found == release
    assert keys == [public_key_of(bob), public_key_of(alice)]  # in the order of the trusted keys
    assert verify_envelope(both, [public_key_of(alice)])[1] == [public_key_of(alice)]
    twice = copy.deepcopy(both)
    twice["signatures"][1] = dict(twice["signatures"][0], keyid="another name")
    with pytest.raises(SignatureInvalid, match="1 of the 2 required"):
        verify_envelope(twice, trusted, threshold=2)
    with pytest.raises(ValueError, match="threshold"):
        verify_envelope(both, trusted, threshold=0)


def test_a_keyid_is_only_a_hint(release: dict, alice: Path) -> None:
    envelope = sign_envelope(release, alice)
    for keyid in ("", "SHA256:somebody-else"):
        relabelled = copy.deepcopy(envelope)
        relabelled["signatures"][0]["keyid"] = keyid
        assert verify_envelope(relabelled, [public_key_of(alice)])[1] == [public_key_of(alice)]
    del relabelled["signatures"][0]["keyid"]
    assert verify_envelope(relabelled, [public_key_of(alice)])[0] == release


def test_an_envelope_verifies_with_securesystemslib_and_by_the_dsse_spec(
    release: dict, alice: Path
) -> None:
    envelope = sign_envelope(release, alice)
    private = serialization.load_ssh_private_key(alice.read_bytes(), None)
    fingerprint = public_key_of(alice).fingerprint
    theirs = Envelope.from_dict(copy.deepcopy(envelope))
    accepted = theirs.verify([SSlibKey.from_crypto(private.public_key(), fingerprint)], 1)
    assert list(accepted) == [fingerprint]
    # The PAE of the DSSE specification's example, and a signature over it computed by hand.
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    payload = base64.b64decode(envelope["payload"])
    by_hand = b"DSSEv1 %d %s %d %s" % (
        len(PAYLOAD_TYPE),
        PAYLOAD_TYPE.encode(),
        len(payload),
        payload,
    )
    private.public_key().verify(base64.b64decode(envelope["signatures"][0]["sig"]), by_hand)


def _signed_payload(alice: Path, payload: bytes) -> dict:
    """An envelope a trusted key signed around any payload (sign_envelope signs statements only)."""
    private = serialization.load_ssh_private_key(alice.read_bytes(), None)
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(private, SSlibKey.from_crypto(private.public_key(), "alice")))
    return envelope.to_dict()


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        (b'{"_type": "https://in-toto.io/Statement/v0.1"}', "_type is"),
        (b"[1, 2]", "not a JSON object"),
        (b"not json", "the payload is not JSON"),
        (b'{"_type": "https://in-toto.io/Statement/v1", "_type": "x"}', "appears twice"),
        (b'{"x": NaN}', "NaN is not JSON"),
        (b'{"_type": "https://in-toto.io/Statement/v1", "subject": []}', "subject is not"),
        (
            b'{"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "a"}]}',
            "subject[0] has no digest",
        ),
        (
            b'{"_type": "https://in-toto.io/Statement/v1", '
            b'"subject": [{"name": "a", "digest": {"sha256": "00"}}]}',
            "predicateType",
        ),
    ],
)
def test_a_signed_payload_that_is_not_a_statement_is_refused(
    alice: Path, document: bytes, fragment: str
) -> None:
    with pytest.raises(SignatureInvalid) as caught:
        verify_envelope(_signed_payload(alice, document), [public_key_of(alice)])
    assert fragment in str(caught.value)


def _malformed(envelope: dict) -> list[tuple[object, str]]:
    def edit(**changes: object) -> dict:
        return {**copy.deepcopy(envelope), **changes}

    first = envelope["signatures"][0]
    return [
        ([envelope], "not a JSON object"),
        ({k: v for k, v in envelope.items() if k != "payload"}, "no payload"),
        (edit(payloadType=7), "payloadType is not a string"),
        (edit(payload="not base64!"), "payload is not valid base64"),
        (edit(signatures=[]), "signatures is not a non-empty list"),
        (edit(signatures=[{"keyid": "x"}]), "signatures[0] has no sig"),
        (edit(signatures=[dict(first, sig="***")]), "signatures[0].sig is not valid base64"),
        (edit(signatures=[dict(first, keyid=3)]), "signatures[0].keyid is not text"),
    ]


def test_a_malformed_envelope_is_refused(release: dict, alice: Path) -> None:
    envelope = sign_envelope(release, alice)
    for broken, fragment in _malformed(envelope):
        with pytest.raises(SignatureInvalid, match="malformed envelope") as caught:
            verify_envelope(broken, [public_key_of(alice)])  # type: ignore[arg-type]
        assert fragment in str(caught.value), fragment


def test_sign_envelope_needs_a_statement_and_an_unattended_key(
    tmp_path: Path, release: dict, alice: Path
) -> None:
    with pytest.raises(ValueError, match="not an in-toto Statement v1: _type"):
        sign_envelope({**release, "_type": "https://in-toto.io/Statement/v0.1"}, alice)
    locked = tmp_path / "locked"
    _encrypted_pem(locked, b"s3cret")
    with pytest.raises(SigningError, match=r"passphrase-protected.*unencrypted OpenSSH"):
        sign_envelope(release, locked)
    with pytest.raises(SigningError, match="is a public key"):
        sign_envelope(release, Path(f"{alice}.pub"))


# -- the package -----------------------------------------------------------------------------------


def test_signature_invalid_is_a_signing_error_is_a_value_error() -> None:
    assert issubclass(SignatureInvalid, SigningError) and issubclass(SigningError, ValueError)


def test_the_package_imports_only_the_standard_library_and_its_three_libraries() -> None:
    """The trust core's floor: nothing of das outside das.trust.signing, nothing else
    installed."""
    allowed = set(sys.stdlib_module_names) | {"cryptography", "sshsig", "securesystemslib"}
    for source in sorted((REPO / "das" / "trust" / "signing").glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{source.name}: relative import"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                inside = name == "das.trust.signing" or name.startswith("das.trust.signing.")
                assert inside or name.split(".")[0] in allowed, f"{source.name} imports {name}"
