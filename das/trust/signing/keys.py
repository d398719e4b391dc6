"""OpenSSH public keys: how an approver, and the run's service account, are identified.

An approver is a key, not a name (git's ``gpg.ssh.allowedSignersFile`` works the same way): a
:class:`PublicKey` is the SSH wire-format blob that ``ssh-keygen`` fingerprints, with a label
(the comment, or the allowed-signers principal) that is for people only and never makes two keys
different. Keys come from the lines people already have: ``~/.ssh/id_ed25519.pub`` or a line of
an allowed-signers file. Everything else — a private key pasted by mistake, a certificate,
junk, an allowed-signers line with options (what a key may sign is the charter's to say) — is
refused with the file and line, and no message ever quotes what was pasted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from sshsig.allowed_signers import AllowedSigner

from das.trust.signing import _wire
from das.trust.signing.errors import SigningError

__all__ = [
    "SUPPORTED_ALGORITHMS",
    "PublicKey",
    "generate_key",
    "load_keys_file",
    "parse_public_key",
    "public_key_of",
]

# What `ssh-keygen -Y sign` makes with an ordinary or a FIDO key. The sk- (hardware) keys and
# ECDSA are verified through ssh-keygen (see das.trust.signing.sshsig); DSA is gone from OpenSSH.
SUPPORTED_ALGORITHMS: tuple[str, ...] = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
# RSA moduli below this are refused: NIST SP 800-131A retired 1024-bit RSA signatures in 2013.
MIN_RSA_BITS = 2048

_CERT_SUFFIX = "-cert-v01@openssh.com"
_CURVES: dict[str, type[ec.EllipticCurve]] = {
    "nistp256": ec.SECP256R1,
    "nistp384": ec.SECP384R1,
    "nistp521": ec.SECP521R1,
}
# Names that are plainly an SSH key type even when unsupported (so the refusal says so).
_KEY_TYPE_SHAPE = re.compile(
    r"(ssh-[a-z0-9]+|ecdsa-sha2-[a-z0-9]+|sk-[a-z0-9-]+@openssh\.com|x509v3-[a-z0-9-]+"
    r"|[a-z0-9-]+-cert-v0[01]@openssh\.com)"
)
_PRIVATE_KEY_ADVICE = (
    "this is a private key, not a public key: do not share it; give the .pub file beside it "
    "(or what `ssh-keygen -y -f KEY` prints)"
)
_CHARTER_DECIDES = "the charter alone says what a key may do; give the key without options"
_NO_OPTIONS = "allowed-signers options are refused here: " + _CHARTER_DECIDES
_LINE_FORMS = (
    "expected an OpenSSH public key line ('ssh-ed25519 AAAA... comment') or an allowed-signers "
    "line ('principal ssh-ed25519 AAAA...')"
)


@dataclass(frozen=True)
class PublicKey:
    """An OpenSSH public key: its algorithm name and SSH wire-format blob (checked at
    construction), and a label for people (comment or principal) that equality ignores."""

    algorithm: str
    blob: bytes = field(repr=False)
    label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.algorithm, str) or not isinstance(self.blob, bytes):
            raise TypeError("PublicKey(algorithm: str, blob: bytes, label: str)")
        if not isinstance(self.label, str) or "\n" in self.label or "\r" in self.label:
            raise SigningError("a key label must be a string on one line")
        _check_algorithm(self.algorithm)
        _check_blob(self.algorithm, self.blob)

    @property
    def fingerprint(self) -> str:
        """``SHA256:`` and the unpadded base64 SHA-256 of the blob, as ``ssh-keygen -lf`` prints."""
        digest = hashlib.sha256(self.blob).digest()
        return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")

    def openssh(self) -> str:
        """The ``.pub`` line: ``<algorithm> <base64 blob>`` and the label when there is one."""
        line = f"{self.algorithm} {base64.b64encode(self.blob).decode('ascii')}"
        return f"{line} {self.label}" if self.label else line

    def to_dict(self) -> dict[str, str]:
        """The JSON form statements carry: ``{"key": "<algorithm> <base64>", "label": ...}``."""
        return {"key": PublicKey(self.algorithm, self.blob).openssh(), "label": self.label}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PublicKey:
        """The key of :meth:`to_dict`'s form; SigningError when it is not exactly that."""
        if not isinstance(data, Mapping) or not isinstance(data.get("key"), str):
            raise SigningError('a key entry must be {"key": "<algorithm> <base64>", "label": ...}')
        label = data.get("label", "")
        if not isinstance(label, str):
            raise SigningError("a key entry's label must be a string")
        extra = sorted(set(data) - {"key", "label"})
        if extra:
            raise SigningError(f"a key entry has unknown fields: {', '.join(map(str, extra))}")
        parts = data["key"].split()
        if len(parts) != 2:
            raise SigningError(
                "a key entry's key must be '<algorithm> <base64>' (the label goes in 'label')"
            )
        return _key_from_parts(parts[0], parts[1], label, "key entry")

    def __repr__(self) -> str:
        label = f" {self.label!r}" if self.label else ""
        return f"PublicKey({self.algorithm} {self.fingerprint}{label})"


def parse_public_key(line: str, *, source: str = "") -> PublicKey:
    """The key on one line: an OpenSSH public key (``ssh-ed25519 AAAA... comment``, the comment
    becomes the label) or an allowed-signers line (``principal[,principal2] ssh-ed25519
    AAAA...``, read by the sshsig library's parser, which follows OpenSSH's; the principals
    become the label). SigningError naming ``source`` otherwise.

    An allowed-signers line with options (``namespaces=``, ``valid-after=``, ``valid-before=``,
    ``cert-authority``) is refused, never accepted and ignored: each restricts what the key may
    sign, and here the charter alone decides that — who approves, who runs, and a key retired
    by a new charter — so a restriction on the line would be one nobody enforces.
    """
    if not isinstance(line, str):
        raise TypeError("parse_public_key takes one line of text")
    text = line.strip()
    if not text:
        _fail(source, "no public key (an empty line)")
    if "PRIVATE KEY" in text and "-----" in text:
        _fail(source, _PRIVATE_KEY_ADVICE)
    if text.startswith("----"):
        if "SSH2 PUBLIC KEY" in text:
            _fail(source, "an RFC 4716 (SSH2) public key: convert it with `ssh-keygen -i -f FILE`")
        _fail(source, f"a PEM block, not an OpenSSH public key; {_LINE_FORMS}")
    parts = text.split(maxsplit=2)
    if _is_key_type(parts[0], parts[1] if len(parts) > 1 else ""):
        comment = parts[2].strip() if len(parts) > 2 else ""
        return _key_from_parts(parts[0], parts[1] if len(parts) > 1 else "", comment, source)
    try:
        signer = AllowedSigner.parse(text)
    except ValueError as exc:
        tokens = text.split()
        has_key = any(_is_key_type(a, b) for a, b in itertools.pairwise(tokens))
        if "option" in str(exc).lower() and has_key:
            _fail(source, f"an allowed-signers option it cannot read; {_NO_OPTIONS}")
        _fail(source, f"not a public key; {_LINE_FORMS}")
    if signer.options:
        _refuse_options(signer.options, source)
    if not _is_key_type(signer.key_type, signer.base64_key):
        after = (signer.comment or "").split(maxsplit=1)
        if _is_key_type(signer.base64_key, after[0] if after else ""):  # "principal OPTION key"
            name = signer.key_type.lower()
            shown = repr(name) if re.fullmatch(r"[a-z-]{1,30}", name) else "(unreadable)"
            _fail(source, f"unknown allowed-signers option {shown}; {_NO_OPTIONS}")
        _fail(source, f"not a public key; {_LINE_FORMS}")
    return _key_from_parts(signer.key_type, signer.base64_key, signer.principals, source)


def load_keys_file(path: str | Path) -> list[PublicKey]:
    """The keys of a file, one per line in either form of :func:`parse_public_key`; blank lines
    and ``#`` comments skipped, a key listed twice kept once (its first label). An error names the
    file and line; a file with no key is an error, since trusting nobody is never meant."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SigningError(f"{path}: not a text file of public keys (not UTF-8)") from None
    except OSError as exc:
        raise SigningError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    keys = _keys_of_lines(text, path)
    if not keys:
        raise SigningError(f"no public key in {path}: add one line per key (a .pub file's line)")
    return keys


def _keys_of_lines(text: str, path: Path) -> list[PublicKey]:
    """Each line's key (blank lines and ``#`` comments skipped; a key listed twice kept once, its
    first label); an error names the file and the line."""
    keys: dict[PublicKey, PublicKey] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            key = parse_public_key(stripped, source=f"{path} line {number}")
            keys.setdefault(key, key)
    return list(keys.values())


def public_key_of(key_path: Path) -> PublicKey:
    """The public half of an OpenSSH private key file, or the key of a ``.pub`` file given directly
    (the form that names a key held by ssh-agent or a FIDO token).

    An unencrypted key is read with cryptography; an OpenSSH-format key that is passphrase-
    protected (or a FIDO key) carries its public key in clear in its header, which is read without
    asking for the passphrase; other formats go to ``ssh-keygen -y -f`` (which may prompt for the
    passphrase on the terminal), and last to the ``.pub`` file beside the key.
    """
    key_path = Path(key_path)
    data = _read_key_file(key_path)
    beside = _pub_beside(key_path)
    if b"PRIVATE KEY-----" not in data:
        keys = _keys_of_text(data, key_path)
        if len(keys) != 1:
            raise SigningError(f"{key_path}: holds {len(keys)} public keys; give a file with one")
        return keys[0]
    try:
        loaded = _load_crypto_private_key(data)
    except (TypeError, UnsupportedAlgorithm):
        loaded = None
    except ValueError:
        raise SigningError(f"{key_path}: not a valid private key file (damaged?)") from None
    if loaded is not None:
        key = _from_crypto_public(loaded.public_key(), str(key_path))
        return _labelled(key, beside)
    header_blob = _openssh_header_public_blob(data)
    if header_blob is not None:
        algorithm = _wire.Reader(header_blob).string().decode("ascii", "replace")
        key = _key_from_blob(algorithm, header_blob, "", str(key_path))
        return _labelled(key, beside)
    derived = _ssh_keygen_public(key_path)
    if derived is not None:
        return _labelled(derived, beside)
    if beside is not None:
        return beside
    raise SigningError(
        f"{key_path}: cannot read its public key (passphrase-protected, and no {key_path}.pub "
        "beside it): write it with `ssh-keygen -y -f KEY > KEY.pub`"
    )


def generate_key(path: Path, comment: str) -> PublicKey:
    """A new unencrypted ed25519 key pair: ``path`` (mode 0600) and ``path.pub`` (0644), in the
    OpenSSH formats ``ssh-keygen`` reads. For demos, tests and a run's service-account key; never
    overwrites either file."""
    path = Path(path)
    pub_path = _pub_path(path)
    if "\n" in comment or "\r" in comment:
        raise SigningError("a key comment must be one line")
    for target in (path, pub_path):
        if target.exists() or target.is_symlink():
            raise SigningError(f"{target} already exists: not overwriting a key; choose a new path")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = ed25519.Ed25519PrivateKey.generate()
    key = _from_crypto_public(private.public_key(), str(path))
    key = PublicKey(key.algorithm, key.blob, comment)
    secret = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    _write_new(path, secret, 0o600)
    try:
        _write_new(pub_path, (key.openssh() + "\n").encode("utf-8"), 0o644)
    except BaseException:
        path.unlink()
        raise
    return key


# -- private helpers shared with sshsig and dsse ---------------------------------

PrivateKey = ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def load_private_key(path: Path) -> tuple[PrivateKey | None, str]:
    """The in-process signing key of ``path`` and ``""``, or ``None`` and why it cannot be used
    in-process (passphrase-protected, a FIDO key, a ``.pub`` file naming an agent's key).
    SigningError when the file is missing or holds no key at all."""
    data = _read_key_file(path)
    if b"PRIVATE KEY-----" not in data:
        _keys_of_text(data, path)
        return None, "it is a public key (the private half is expected in ssh-agent)"
    try:
        loaded = _load_crypto_private_key(data)
    except TypeError:
        return None, "it is passphrase-protected"
    except UnsupportedAlgorithm:
        return None, "cryptography cannot use its key type (a FIDO security key?)"
    except ValueError:
        raise SigningError(f"{path}: not a valid private key file (damaged?)") from None
    if isinstance(loaded, ec.EllipticCurvePrivateKey) and loaded.curve.name not in {
        curve.name for curve in _CURVES.values()
    }:
        return None, f"its curve {loaded.curve.name} is not an OpenSSH one"
    if isinstance(loaded, PrivateKey):
        return loaded, ""
    return None, f"its key type ({type(loaded).__name__}) is not supported"


CryptoPublicKey = ed25519.Ed25519PublicKey | rsa.RSAPublicKey | ec.EllipticCurvePublicKey


def crypto_public_key(key: PublicKey) -> CryptoPublicKey:
    """The cryptography object of an ed25519, RSA or ECDSA key (not of a FIDO key: its
    signatures cover more than the message, and cryptography drops its application)."""
    if key.algorithm.startswith("sk-"):
        raise SigningError(f"{key.fingerprint}: a FIDO ({key.algorithm}) key cannot be used here")
    line = PublicKey(key.algorithm, key.blob).openssh().encode("ascii")
    loaded = serialization.load_ssh_public_key(line)
    if not isinstance(loaded, CryptoPublicKey):
        raise SigningError(f"{key.fingerprint}: cryptography read it as {type(loaded).__name__}")
    return loaded


def public_key_of_private(private: PrivateKey, source: str) -> PublicKey:
    """The PublicKey of a loaded private key."""
    return _from_crypto_public(private.public_key(), source)


def _fail(source: str, message: str) -> NoReturn:
    raise SigningError(f"{source}: {message}" if source else message)


def _check_algorithm(algorithm: str) -> None:
    """Refuse a key type we do not verify, saying what to use instead."""
    if algorithm in SUPPORTED_ALGORITHMS:
        return
    if algorithm.endswith(_CERT_SUFFIX) or algorithm.endswith("-cert-v00@openssh.com"):
        raise SigningError(
            f"OpenSSH certificates ({algorithm}) are not supported: give the plain public key"
        )
    if algorithm == "ssh-dss":
        raise SigningError(
            "DSA keys (ssh-dss) are not supported (OpenSSH has dropped them): make an ed25519 "
            "key with `ssh-keygen -t ed25519`"
        )
    raise SigningError(
        f"unsupported key type {algorithm!r}; supported: {', '.join(SUPPORTED_ALGORITHMS)}"
    )


def _check_blob(algorithm: str, blob: bytes) -> None:
    """Refuse a blob that is not a well-formed public key of ``algorithm``: cryptography reads
    it (every field, the key's length, the curve and its point, the RSA numbers, the FIDO
    application; nothing may follow), after the name inside it is checked against the line's."""
    try:
        name = _wire.Reader(blob).string()
    except _wire.WireError as exc:
        raise SigningError(f"the {algorithm} key data is malformed: {exc}") from None
    if name != algorithm.encode("ascii"):
        shown = name.decode("ascii", "replace")[:60]
        raise SigningError(
            f"the key is marked {algorithm} but its data is of type {shown!r} "
            "(a damaged or edited line?)"
        )
    line = f"{algorithm} {base64.b64encode(blob).decode('ascii')}".encode("ascii")
    try:
        loaded = serialization.load_ssh_public_key(line)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"the {algorithm} key data is malformed: {exc}") from None
    if isinstance(loaded, rsa.RSAPublicKey) and loaded.key_size < MIN_RSA_BITS:
        raise SigningError(
            f"the RSA key has {loaded.key_size} bits, fewer than {MIN_RSA_BITS}: "
            "make an ed25519 key with `ssh-keygen -t ed25519`"
        )


def _key_from_parts(algorithm: str, b64: str, label: str, source: str) -> PublicKey:
    try:
        _check_algorithm(algorithm)
    except SigningError as exc:
        _fail(source, str(exc))
    if not b64:
        _fail(source, f"{algorithm} is followed by no key data")
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        _fail(source, "the key's base64 data does not decode (a truncated or damaged line?)")
    return _key_from_blob(algorithm, blob, label, source)


def _key_from_blob(algorithm: str, blob: bytes, label: str, source: str) -> PublicKey:
    try:
        return PublicKey(algorithm, blob, label)
    except SigningError as exc:
        raise SigningError(f"{source}: {exc}" if source else str(exc)) from None


def _from_crypto_public(public: Any, source: str) -> PublicKey:
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    algorithm, b64 = line.decode("ascii").split()[:2]
    return _key_from_parts(algorithm, b64, "", source)


def _is_key_type(token: str, following: str) -> bool:
    """Whether ``token`` names a key type: a known one, or one of a key type's shape followed by
    base64 data that says so (an unknown principal such as ``ssh-team`` stays a principal)."""
    if token in SUPPORTED_ALGORITHMS or token == "ssh-dss" or token.endswith(_CERT_SUFFIX):
        return True
    if not _KEY_TYPE_SHAPE.fullmatch(token):
        return False
    try:
        blob = base64.b64decode(following, validate=True)
        return _wire.Reader(blob).string() == token.encode("ascii")
    except (binascii.Error, ValueError):
        return False


def _refuse_options(options: Mapping[str, str], source: str) -> NoReturn:
    """Refuse an allowed-signers line with options, saying what each would have restricted and
    what decides it here instead."""
    if "cert-authority" in options:
        _fail(
            source,
            "certificate authorities (cert-authority) are not supported: list each approver's "
            "own public key",
        )
    meaning = {
        "namespaces": "what the key may sign (the charter decides: approver or runner)",
        "valid-after": "from when the key counts (the charter in force decides)",
        "valid-before": "until when the key counts (retire a key with a new charter: "
        "das ledger charter propose)",
    }
    named = ", ".join(f"{name}= ({meaning[name]})" for name in sorted(options) if name in meaning)
    _fail(source, f"an allowed-signers line with options is refused, not ignored: {named}; "
          + _CHARTER_DECIDES)  # fmt: skip


def _read_key_file(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"{path}: cannot read the key file ({exc.strerror or exc})") from None


def _keys_of_text(data: bytes, path: Path) -> list[PublicKey]:
    """The keys of a public key file's bytes (as :func:`load_keys_file`)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SigningError(f"{path}: neither an OpenSSH private key nor a public key") from None
    keys = _keys_of_lines(text, path)
    if not keys:
        raise SigningError(f"no public key in {path}")
    return keys


def _load_crypto_private_key(data: bytes) -> Any:
    """cryptography's private key of an OpenSSH or PEM file, unencrypted; TypeError when it needs
    a passphrase, UnsupportedAlgorithm or ValueError when it cannot be read."""
    if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
        return serialization.load_ssh_private_key(data, password=None)
    return serialization.load_pem_private_key(data, password=None)


def _openssh_header_public_blob(data: bytes) -> bytes | None:
    """The public key an ``openssh-key-v1`` file keeps in clear ahead of its (possibly encrypted)
    private part (OpenSSH's PROTOCOL.key), or None when the file is not in that format."""
    text = data.decode("ascii", "replace")
    match = re.search(
        r"-----BEGIN OPENSSH PRIVATE KEY-----(.*?)-----END OPENSSH PRIVATE KEY-----", text, re.S
    )
    if match is None:
        return None
    try:
        raw = base64.b64decode("".join(match.group(1).split()), validate=True)
        magic = b"openssh-key-v1\x00"
        if not raw.startswith(magic):
            return None
        reader = _wire.Reader(raw[len(magic) :])
        reader.string()  # cipher name
        reader.string()  # KDF name
        reader.string()  # KDF options
        if reader.uint32() < 1:
            return None
        return reader.string()
    except (binascii.Error, ValueError):
        return None


def _ssh_keygen_public(key_path: Path) -> PublicKey | None:
    """``ssh-keygen -y -f KEY`` (which may ask for the passphrase on the terminal), or None."""
    program = shutil.which("ssh-keygen")
    if program is None:
        return None
    done = subprocess.run(
        [program, "-y", "-f", str(key_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return parse_public_key(done.stdout.strip(), source=f"ssh-keygen -y -f {key_path}")


def _pub_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def _pub_beside(key_path: Path) -> PublicKey | None:
    """The key of ``KEY.pub`` when it is there and readable, else None."""
    candidate = _pub_path(key_path)
    if not candidate.is_file():
        return None
    try:
        keys = _keys_of_text(candidate.read_bytes(), candidate)
    except (OSError, SigningError):
        return None
    return keys[0] if len(keys) == 1 else None


def _labelled(key: PublicKey, beside: PublicKey | None) -> PublicKey:
    """``key`` with the comment of the ``.pub`` beside it when that file holds the same key."""
    if beside is not None and beside == key:
        return beside
    return key


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Write a file that must not exist yet, with exactly ``mode`` (whatever the umask)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "wb") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(data)
