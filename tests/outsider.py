"""The outsider's check that does not rest on our code: the bash block of
docs/how-to/verify-a-release.md marked ``<!-- test: outsider -->`` (sha256sum, ssh-keygen -Y
verify, openssl pkeyutl, python3's standard library), run exactly as printed."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "verify-a-release.md"
MARKER = re.compile(r"^<!-- test: outsider -->\n```bash\n(.*?)\n```", re.M | re.S)


def procedure() -> str:
    """The page's procedure, as printed."""
    (found,) = MARKER.findall(PAGE.read_text())
    return found


def outsider_check(root: Path, release: Path, digest: str | None = None) -> tuple[bool, str]:
    """Run the procedure on ``release`` with the trust root ``root`` and the digest published
    beside it (by default the root's own); (proven, what it printed)."""
    published = digest or hashlib.sha256(root.read_bytes()).hexdigest()
    environment = {
        "PATH": "/usr/bin:/bin",  # the system's tools, not this project's virtualenv
        "HOME": os.environ.get("HOME", "/tmp"),
        "LC_ALL": "C.UTF-8",
        "ROOT": str(root),
        "ROOT_SHA256": published,
        "RELEASE": str(release),
    }
    done = subprocess.run(
        ["bash", "-c", procedure()],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    proven = done.returncode == 0 and output.startswith("PROVEN: ")
    assert proven or "NOT PROVEN: " in output, f"the procedure failed otherwise:\n{output}"
    return proven, output
