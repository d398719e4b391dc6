"""Text a person typed (a note, a reason, a key's label, a file's name), shown so that it cannot
pretend to be something else: a newline or a terminal escape typed into an approval must not
print as a fake line of `das ledger show` or recolour the operator's terminal, and a file named
``ESC[1A ESC[2K CR r6: PROVEN …`` must not make a NOT PROVEN release look PROVEN."""

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


def printable(text: object) -> str:
    """``text`` with its control and format characters (and line separators) escaped as
    :func:`shown` does, nothing else: for a whole line about to be printed, whatever its parts
    came from (a name already :func:`shown` is left as it is, backslashes too)."""
    return "".join(
        char.encode("unicode_escape").decode("ascii")
        if unicodedata.category(char)[0] == "C" or unicodedata.category(char) in ("Zl", "Zp")
        else char
        for char in str(text)
    )
