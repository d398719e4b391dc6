"""Text a person typed (a note, a reason, a key's label), shown so that it cannot pretend to be
something else: a newline or a terminal escape typed into an approval must not print as a fake
line of `das ledger show` or recolour the operator's terminal."""

from __future__ import annotations

import unicodedata


def shown(text: object, limit: int | None = 200) -> str:
    """``text`` on one line: control characters (newlines, ESC, bidirectional overrides...)
    written as ``\\n``, ``\\x1b``, ``\\u202e``; cut to ``limit`` characters with an ellipsis."""
    out = []
    for char in str(text):
        category = unicodedata.category(char)
        if char == "\\":
            out.append("\\\\")
        elif category[0] == "C" or category in ("Zl", "Zp"):
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    result = "".join(out)
    if limit is not None and len(result) > limit:
        result = result[: limit - 1] + "…"
    return result
