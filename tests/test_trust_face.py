"""The trust core's face (das/trust/__init__.py) is its one door, and it is no wider than its use.

The import contracts (pyproject's [tool.importlinter], tests/test_architecture.py) keep the rest
of the code from reaching past the face; this checks the other side: every name the face
exports is imported from it somewhere, so a reviewer reading the face reads what is used.
"""

from __future__ import annotations

import ast
from pathlib import Path

import das.trust

REPO = Path(__file__).resolve().parents[1]
USERS = ("das", "flows", "tasks", "explorer", "deploy", "benchmarks", "docs/_hooks", "tests")


def _imported_from_the_face() -> dict[str, str]:
    """Name → the first file outside das/trust that imports it with ``from das.trust import``."""
    found: dict[str, str] = {}
    for folder in USERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            text = path.read_text()
            if (REPO / "das" / "trust") in path.parents or "from das.trust import" not in text:
                continue
            for node in ast.walk(ast.parse(text, filename=str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "das.trust":
                    for alias in node.names:
                        found.setdefault(alias.name, str(path.relative_to(REPO)))
    return found


def test_the_face_exports_exactly_the_names_imported_from_it() -> None:
    used = _imported_from_the_face()
    assert sorted(set(used) - set(das.trust.__all__)) == []
    unused = sorted(set(das.trust.__all__) - set(used))
    assert unused == [], f"on the face but imported by nobody: {unused}"


def test_every_name_of_the_face_is_bound() -> None:
    assert [name for name in das.trust.__all__ if not hasattr(das.trust, name)] == []
    assert len(set(das.trust.__all__)) == len(das.trust.__all__)
