"""The architecture's import contracts (pyproject's [tool.importlinter]; the layers are explained
in docs/explanation/architecture.md): they hold on the code, and they fail when a forbidden
import is added — a contract that could not fail would prove nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("das", "flows", "tasks", "explorer")
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.integration


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def copy_of_the_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages and pyproject in a folder of their own, to break on purpose."""
    root = tmp_path_factory.mktemp("architecture")
    for name in PACKAGES:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_code_keeps_every_contract() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the foundation reaching up to an interface
        ("das/privacy/noise.py", "import das.cli.run", "Layers"),
        # the engine importing Prefect
        ("das/trust/ledger/spending.py", "import prefect", "The engine never imports Prefect"),
        # a flow importing the command line (the cycle this wave removed)
        ("flows/validate.py", "import das.cli.validate", "Layers"),
        # two rooms of one floor that must stay apart
        ("das/phsafe/tables.py", "import das.safetab_p.keys", "Layers"),
        # a cycle inside one package
        ("das/trust/ledger/amounts.py", "import das.trust.ledger.spending", "No import cycle"),
        # the run lifecycle, or a task, reaching past the trust core's face
        ("das/runs/lifecycle.py", "import das.trust.ledger.store", "through its face"),
        ("tasks/approval.py", "from das.trust.signing import sshsig", "through its face"),
        # the trust core reaching into the run lifecycle
        ("das/trust/verifier.py", "import das.runs.folder", "imports nothing of the run"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    copy_of_the_code: Path, module: str, line: str, contract: str
) -> None:
    path = copy_of_the_code / module
    original = path.read_text()
    path.write_text(original + f"\n{line}  # added by the test\n")
    try:
        done = _lint(copy_of_the_code)
    finally:
        path.write_text(original)
    assert done.returncode != 0, f"{line} in {module} broke no contract"
    broken = done.stdout[done.stdout.index("Broken contracts") :]
    assert contract in broken, broken[:2000]


def test_the_trust_face_imports_no_data_frame_nor_orchestration_library() -> None:
    """``import das.trust`` is what every ledger and verify command pays first: pandas, pyarrow,
    Prefect and Dask are loaded only where a function needs them (das.io's package imports
    pandas, so the trust core imports its modules inside the functions that hash or write)."""
    heavy = ("pandas", "pyarrow", "prefect", "distributed", "dask")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, das.trust; print([m for m in {heavy!r} if m in sys.modules])",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr[-2000:]
