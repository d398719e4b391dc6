"""SSHSIG signatures (OpenSSH's PROTOCOL.sshsig): what ``ssh-keygen -Y sign`` makes, and git
verifies for signed commits.

An approver signs a canonical statement at their own terminal with
``ssh-keygen -Y sign -n NAMESPACE -f ~/.ssh/id_ed25519 statement.json`` and pastes the armored
signature; :func:`verify` checks it against the keys the caller trusts. The namespace binds a
signature to one purpose, so an approval can never be replayed as, say, a git commit signature.

The signed data (PROTOCOL.sshsig)::

    "SSHSIG" || string namespace || string reserved || string "sha512" || string H(message)

and the signature blob, armored in base64 between ``-----BEGIN SSH SIGNATURE-----`` lines::

    "SSHSIG" || uint32 1 || string public_key || string namespace || string reserved
             || string "sha512" || string signature
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sshsig as sshsig_lib
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from das.trust.signing import _wire
from das.trust.signing.errors import SignatureInvalid, SigningError
from das.trust.signing.keys import PrivateKey, PublicKey, load_private_key, public_key_of_private

__all__ = ["sign", "signature_key", "verify"]

_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_END = "-----END SSH SIGNATURE-----"
_MAGIC = b"SSHSIG"
_VERSION = 1
_HASH = "sha512"
_LINE = 70  # ssh-keygen's armor line length
# The signature algorithms a key of each type may use (OpenSSH sshsig.c refuses ssh-rsa/SHA-1).
_SIGNATURE_ALGORITHMS = {
    "ssh-ed25519": ("ssh-ed25519",),
    "ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256"),
    "ecdsa-sha2-nistp256": ("ecdsa-sha2-nistp256",),
    "ecdsa-sha2-nistp384": ("ecdsa-sha2-nistp384",),
    "ecdsa-sha2-nistp521": ("ecdsa-sha2-nistp521",),
    "sk-ssh-ed25519@openssh.com": ("sk-ssh-ed25519@openssh.com",),
    "sk-ecdsa-sha2-nistp256@openssh.com": ("sk-ecdsa-sha2-nistp256@openssh.com",),
}
# What the sshsig library verifies in-process; the others go through `ssh-keygen -Y verify`.
_IN_PROCESS = ("ssh-ed25519", "ssh-rsa")
_ECDSA_HASHES: dict[str, hashes.HashAlgorithm] = {
    "secp256r1": hashes.SHA256(),
    "secp384r1": hashes.SHA384(),
    "secp521r1": hashes.SHA512(),
}
_USER_PRESENT = 0x01  # SSH_SK_USER_PRESENCE_REQD, the FIDO flag of a touched key
_NAMESPACE = re.compile(r"[!-~]+")  # printable ASCII, no spaces (ssh-keygen's -n argument)


@dataclass(frozen=True)
class _Parsed:
    """The fields of an SSHSIG blob."""

    blob: bytes
    key: PublicKey
    namespace: str
    hash_algorithm: str
    signature_algorithm: str
    fido_flags: int | None  # a FIDO (sk-) signature's flags; bit 0: the user touched the key


def sign(message: bytes, namespace: str, key: Path) -> str:
    """The armored SSHSIG signature of ``message`` in ``namespace`` by ``key`` (SHA-512), byte
    for byte the form ``ssh-keygen -Y sign`` writes.

    An unencrypted ed25519, RSA (``rsa-sha2-512``) or ECDSA OpenSSH private key file signs
    in-process. Anything else goes to ``ssh-keygen -Y sign -n NAMESPACE -f KEY``: a
    passphrase-protected key (ssh-keygen asks on the terminal), a key held by ssh-agent (``key``
    is then its ``.pub`` file), a FIDO security key. SigningError when neither can sign.
    """
    _check_namespace(namespace)
    if not isinstance(message, bytes):
        raise TypeError("sign() signs bytes (canonical_json(statement), for one)")
    key = Path(key)
    private, reason = load_private_key(key)
    if private is None:
        return _sign_with_ssh_keygen(message, namespace, key, reason)
    public = public_key_of_private(private, str(key))
    signed = _signed_data(namespace, _HASH, hashlib.sha512(message).digest())
    blob = (
        _MAGIC
        + _wire.uint32(_VERSION)
        + _wire.string(public.blob)
        + _wire.string(namespace.encode("ascii"))
        + _wire.string(b"")
        + _wire.string(_HASH.encode("ascii"))
        + _wire.string(_raw_signature(private, signed))
    )
    return _armor(blob)


def verify(
    message: bytes, signature: str, namespace: str, allowed: Iterable[PublicKey]
) -> PublicKey:
    """The key of ``allowed`` that signed ``message`` in ``namespace`` (with its label), or
    SignatureInvalid saying why not: malformed armor, wrong namespace, a key that is not allowed
    (by fingerprint), an unsupported key type, or a signature that does not match the message.

    Leading and trailing whitespace and CRLF line ends (armor pasted into a web form) are
    tolerated. ed25519 and RSA signatures are checked in-process by the sshsig library; ECDSA
    and FIDO (``sk-``) ones by ``ssh-keygen -Y verify``, and refused when it is not installed.
    """
    _check_namespace(namespace)
    if not isinstance(message, bytes):
        raise TypeError("verify() checks bytes (canonical_json(statement), for one)")
    trusted = list(allowed)
    parsed = _parse(_dearmor(signature))
    if parsed.namespace != namespace:
        raise SignatureInvalid(
            f"wrong namespace: the signature is for {parsed.namespace!r}, not {namespace!r} "
            f"(sign with `ssh-keygen -Y sign -n {namespace}`)"
        )
    match = next((candidate for candidate in trusted if candidate == parsed.key), None)
    if match is None:
        raise SignatureInvalid(
            f"signed by a key that is not allowed: {parsed.key.fingerprint} "
            f"({parsed.key.algorithm})"
        )
    _check_algorithms(parsed)
    if parsed.key.algorithm in _IN_PROCESS:
        _verify_in_process(message, parsed, namespace)
    else:
        _verify_with_ssh_keygen(message, parsed, namespace)
    return match


def signature_key(signature: str) -> PublicKey:
    """The public key a signature says made it, read without checking anything (for messages
    such as "signed by a key that is not in the charter: SHA256:...")."""
    return _parse(_dearmor(signature)).key


# -- armor and blob -------------------------------------------------------------------------------


def _armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode("ascii")
    lines = [text[start : start + _LINE] for start in range(0, len(text), _LINE)]
    return "\n".join([_BEGIN, *lines, _END]) + "\n"


def _dearmor(signature: str) -> bytes:
    """The blob inside armor; tolerant of surrounding whitespace and CR/CRLF line ends only."""
    if not isinstance(signature, str):
        raise SignatureInvalid("malformed armor: a signature is text (the armored block)")
    lines = [line.strip() for line in signature.strip().splitlines()]
    if not lines or lines[0] != _BEGIN:
        raise SignatureInvalid(f"malformed armor: it does not start with {_BEGIN}")
    if lines[-1] != _END or len(lines) < 3:
        raise SignatureInvalid(f"malformed armor: it does not end with {_END} (cut short?)")
    body = lines[1:-1]
    if any(not line for line in body):
        raise SignatureInvalid("malformed armor: a blank line inside it")
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureInvalid(
            "malformed armor: its body is not base64 (garbled, or lines missing)"
        ) from None


def _parse(blob: bytes) -> _Parsed:
    """The fields of an SSHSIG blob; SignatureInvalid when it is not one."""
    reader = _wire.Reader(blob)
    try:
        if reader.take(len(_MAGIC)) != _MAGIC:
            raise SignatureInvalid("malformed signature: not an SSH signature (no SSHSIG magic)")
        version = reader.uint32()
        if version != _VERSION:
            raise SignatureInvalid(f"malformed signature: SSHSIG version {version} is unknown")
        key_blob = reader.string()
        namespace = reader.string()
        reader.string()  # reserved
        hash_algorithm = reader.string()
        signature = reader.string()
        reader.end()
        inner = _wire.Reader(signature)
        signature_algorithm = inner.string()
        fido_flags = None
        if signature_algorithm.startswith(b"sk-"):
            inner.string()
            fido_flags = inner.byte()
            inner.uint32()  # the token's signature counter
            inner.end()
        elif signature_algorithm in (b"ssh-ed25519", b"rsa-sha2-512", b"rsa-sha2-256"):
            inner.string()
            inner.end()
        algorithm = _wire.Reader(key_blob).string()
    except _wire.WireError as exc:
        raise SignatureInvalid(f"malformed signature: {exc}") from None
    try:
        key = PublicKey(algorithm.decode("ascii"), key_blob)
    except (UnicodeDecodeError, SigningError) as exc:
        raise SignatureInvalid(f"the signature's key cannot be used: {exc}") from None
    try:
        return _Parsed(
            blob=blob,
            key=key,
            namespace=namespace.decode("ascii"),
            hash_algorithm=hash_algorithm.decode("ascii"),
            signature_algorithm=signature_algorithm.decode("ascii"),
            fido_flags=fido_flags,
        )
    except UnicodeDecodeError:
        raise SignatureInvalid("malformed signature: a name in it is not ASCII") from None


def _raw_signature(private: PrivateKey, signed: bytes) -> bytes:
    """The SSH signature (``string algorithm || signature``) of ``signed`` by ``private``."""
    if isinstance(private, ed25519.Ed25519PrivateKey):
        return _wire.string(b"ssh-ed25519") + _wire.string(private.sign(signed))
    if isinstance(private, rsa.RSAPrivateKey):
        raw = private.sign(signed, padding.PKCS1v15(), hashes.SHA512())
        return _wire.string(b"rsa-sha2-512") + _wire.string(raw)
    curve = private.curve.name
    algorithm = {"secp256r1": "nistp256", "secp384r1": "nistp384", "secp521r1": "nistp521"}[curve]
    r, s = decode_dss_signature(private.sign(signed, ec.ECDSA(_ECDSA_HASHES[curve])))
    return _wire.string(f"ecdsa-sha2-{algorithm}".encode("ascii")) + _wire.string(
        _wire.mpint(r) + _wire.mpint(s)
    )


def _check_algorithms(parsed: _Parsed) -> None:
    """Refuse hash and signature algorithms ssh-keygen would refuse (SHA-1 RSA, MD5...), and
    FIDO signatures made without a touch."""
    if parsed.hash_algorithm not in ("sha512", "sha256"):
        raise SignatureInvalid(
            f"unsupported hash algorithm {parsed.hash_algorithm[:20]!r} (sha512 or sha256)"
        )
    accepted = _SIGNATURE_ALGORITHMS[parsed.key.algorithm]
    if parsed.signature_algorithm not in accepted:
        raise SignatureInvalid(
            f"unsupported signature algorithm {parsed.signature_algorithm[:40]!r} for a "
            f"{parsed.key.algorithm} key (accepted: {', '.join(accepted)})"
        )
    # OpenSSH 9 `ssh-keygen -Y verify` does not refuse an untouched FIDO signature; an approval
    # must be a deliberate act, as sshd requires by default for sk- keys.
    if parsed.fido_flags is not None and not parsed.fido_flags & _USER_PRESENT:
        raise SignatureInvalid(
            f"the FIDO signature by {parsed.key.fingerprint} lacks user presence: the security "
            "key was not touched when signing"
        )


def _changed(parsed: _Parsed, detail: str = "") -> SignatureInvalid:
    return SignatureInvalid(
        f"the signature by {parsed.key.fingerprint} does not match the message: the message was "
        "changed after signing, or the signature is over other bytes"
        + (f" ({detail})" if detail else "")
    )


def _verify_in_process(message: bytes, parsed: _Parsed, namespace: str) -> None:
    """The cryptographic check by the sshsig library (ed25519, RSA)."""
    try:
        sshsig_lib.check_signature(message, _armor(parsed.blob), namespace)
    except sshsig_lib.InvalidSignature as exc:
        raise _changed(parsed, str(exc)) from None
    except NotImplementedError as exc:
        raise SignatureInvalid(f"unsupported signature: {exc}") from None
    except ValueError as exc:
        raise SignatureInvalid(f"malformed signature: {exc}") from None


def _verify_with_ssh_keygen(message: bytes, parsed: _Parsed, namespace: str) -> None:
    """The cryptographic check by ``ssh-keygen -Y verify`` (ECDSA, FIDO keys), against a
    temporary allowed-signers file that holds the one key already found allowed."""
    program = shutil.which("ssh-keygen")
    if program is None:
        raise SignatureInvalid(
            f"cannot verify a {parsed.key.algorithm} signature without ssh-keygen (install the "
            "OpenSSH client); ed25519 and RSA signatures are verified without it"
        )
    key_line = PublicKey(parsed.key.algorithm, parsed.key.blob).openssh()
    with tempfile.TemporaryDirectory(prefix="das-sshsig-") as folder:
        allowed = Path(folder) / "allowed_signers"
        allowed.write_text(f"approver {key_line}\n", encoding="ascii")
        signature = Path(folder) / "message.sig"
        signature.write_text(_armor(parsed.blob), encoding="ascii")
        command = [program, "-Y", "verify", "-f", str(allowed), "-I", "approver"]
        command += ["-n", namespace, "-s", str(signature)]
        try:
            done = subprocess.run(
                command, input=message, capture_output=True, timeout=60, check=False
            )
        except subprocess.TimeoutExpired:
            raise SignatureInvalid("ssh-keygen -Y verify did not answer within 60 s") from None
    if done.returncode != 0:
        detail = _first_line(done.stderr) or _first_line(done.stdout) or "no reason given"
        raise _changed(parsed, f"ssh-keygen: {detail}")


def _sign_with_ssh_keygen(message: bytes, namespace: str, key: Path, reason: str) -> str:
    """``ssh-keygen -Y sign`` with the message on its standard input. On a terminal its
    messages (a passphrase prompt, "confirm user presence" for a FIDO key) reach the person."""
    program = shutil.which("ssh-keygen")
    if program is None:
        raise SigningError(
            f"{key}: cannot sign in-process ({reason}) and ssh-keygen is not installed: "
            "install the OpenSSH client"
        )
    interactive = _on_terminal()
    done = subprocess.run(
        [program, "-Y", "sign", "-n", namespace, "-f", str(key)],
        input=message,
        stdout=subprocess.PIPE,
        stderr=None if interactive else subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0:
        detail = "see its message above" if interactive else _first_line(done.stderr)
        raise SigningError(
            f"ssh-keygen could not sign with {key} ({reason}): {detail or 'no reason given'}"
        )
    try:
        blob = _dearmor(done.stdout.decode("ascii", "replace"))
        parsed = _parse(blob)
    except SignatureInvalid as exc:
        raise SigningError(f"ssh-keygen signed with {key} but wrote no signature: {exc}") from None
    if parsed.namespace != namespace:
        raise SigningError(f"ssh-keygen signed with {key} in namespace {parsed.namespace!r}")
    return _armor(blob)


def _on_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _first_line(output: bytes | None) -> str:
    """The first line of a tool's message that says something (not ssh-keygen's "Signing data
    on standard input" notice)."""
    for line in (output or b"").decode("utf-8", "replace").splitlines():
        text = line.strip()
        if text and text != "Signing data on standard input":
            return text[:300]
    return ""


def _signed_data(namespace: str, hash_algorithm: str, digest: bytes) -> bytes:
    return (
        _MAGIC
        + _wire.string(namespace.encode("ascii"))
        + _wire.string(b"")
        + _wire.string(hash_algorithm.encode("ascii"))
        + _wire.string(digest)
    )


def _check_namespace(namespace: str) -> None:
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"namespace {namespace!r}: printable ASCII without spaces, not empty")
