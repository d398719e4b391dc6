"""Who acted, and the ledger's keyed names for datasets and noise.

Dataset ids and noise ids are HMAC-SHA-256 under the ledger's secret key: shown in artifacts
and audits, they let no one test a guess about the records (a record file's fingerprint, or a
short noise vector's digest, could be inverted by trying every small value). They mean nothing
outside their ledger.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import os
import socket

DATASET_TAG = "das-dataset/1"
NOISE_TAG = "das-noise/1"


def who() -> str:
    """The operating-system user and host that acted (for run entries; an approval is made by
    a key, not by this name)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def keyed_id(secret: bytes, tag: str, value: str) -> str:
    """``value``'s name under the ledger's ``secret`` in the namespace ``tag``."""
    return hmac.new(secret, f"{tag}\n{value}".encode(), hashlib.sha256).hexdigest()
