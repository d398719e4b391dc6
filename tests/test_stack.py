"""The pinned stack imports together: a dependency break shows here first."""

import importlib.metadata as metadata
import os

import pytest


def test_prefect_server_imports() -> None:
    import prefect.server.api.server as server

    assert hasattr(server, "create_app")


@pytest.mark.parametrize(
    ("package", "major"),
    [
        ("prefect", "3"),
        ("great-expectations", "1"),
        ("pydantic", "2"),
        ("pandas", "3"),
        ("numpy", "2"),
    ],
)
def test_pinned_major_versions(package: str, major: str) -> None:
    assert metadata.version(package).split(".")[0] == major


def test_engine_never_imports_prefect() -> None:
    from pathlib import Path

    engine = Path(__file__).resolve().parents[1] / "das"
    offenders = [
        str(path.relative_to(engine.parent))
        for path in engine.rglob("*.py")
        if any(
            line.lstrip().startswith(("import prefect", "from prefect"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_telemetry_disabled_for_tests() -> None:
    assert os.environ["DO_NOT_TRACK"] == "1"
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"


# --- Layering (issue 13): the foundation never imports the products, the engine never the explorer
FOUNDATION = ("privacy", "io", "specs")
PRODUCTS = ("safetab_p", "phsafe", "postprocess", "swapping", "synth")


def _imported_modules(path) -> set[str]:
    """Every module a file imports, at top level or inside a function (lazy imports count)."""
    import ast

    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def _offenders(folders: list, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{path.name}: {module}"
        for folder in folders
        for path in folder.rglob("*.py")
        for module in _imported_modules(path)
        if module.split(".")[0] in forbidden
        or (module.startswith("das.") and module.split(".")[1] in forbidden)
    )


def test_foundation_never_imports_a_product() -> None:
    from pathlib import Path

    engine = Path(__file__).resolve().parents[1] / "das"
    assert _offenders([engine / name for name in FOUNDATION], PRODUCTS) == []


def test_engine_never_imports_the_explorer() -> None:
    from pathlib import Path

    engine = Path(__file__).resolve().parents[1] / "das"
    cli = engine / "cli"
    folders = [folder for folder in engine.iterdir() if folder.is_dir() and folder != cli]
    assert _offenders(folders, ("explorer",)) == []
