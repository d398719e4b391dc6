"""The two refusals of the signing layer: a key or file that cannot be used, and a signature
that does not verify.

Callers catch :class:`SignatureInvalid` to tell "this approval is not valid" from "this key file
is unusable"; both are ``ValueError`` so that a bad input never passes as a crash. Messages name
the file, line or key fingerprint and what to do; they never quote key material.
"""

from __future__ import annotations


class SigningError(ValueError):
    """A key, key file or signing tool that cannot be used; the message names it and the fix."""


class SignatureInvalid(SigningError):
    """A signature that does not verify; the message says precisely why (wrong namespace, a key
    that is not allowed, changed message, malformed armor, unsupported key type...)."""
