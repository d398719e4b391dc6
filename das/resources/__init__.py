"""The files the package ships — Great Expectations suites, demo specs, parameter presets — and
the one place that finds them, through :mod:`importlib.resources`.

The folders stay at the top of the repository (``expectations/``, ``data_specs/``:
docs/explanation/architecture.md#layout);
``setup.py`` maps them into this package as ``das.resources.expectations`` and
``das.resources.data_specs``. A wheel (or ``pip install .``) copies them inside the installed
package; an editable install maps the same names to the checkout's folders. Either way the
readers below return real directories, never paths relative to a checkout or to the working
directory. A wheel also carries ``build-info.json`` (the commit it was built from), written by
``setup.py``; a checkout has none (:func:`das.runs.audit.code_version` asks git there).
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Literal

EXPECTATIONS_PACKAGE = "das.resources.expectations"
DATA_SPECS_PACKAGE = "das.resources.data_specs"
BUILD_INFO = "build-info.json"

Product = Literal["safetab_p", "phsafe"]


def _directory(package: str) -> Path:
    """The folder of a shipped data package; it must be on the file system (the readers and
    GX open files by path, and ``das synth`` copies whole folders)."""
    root = files(package)
    if not isinstance(root, Path) or not root.is_dir():
        raise RuntimeError(
            f"{package} is not a folder on the file system ({root!r}): install das-pipeline "
            "from its wheel or source, not from a zip archive"
        )
    return root


def expectations_dir() -> Path:
    """``expectations/``: the reviewed GX suites, one ``<input file>.json`` each."""
    return _directory(EXPECTATIONS_PACKAGE)


def data_specs_dir() -> Path:
    """``data_specs/``: the spec files and configs the project ships."""
    return _directory(DATA_SPECS_PACKAGE)


def demo_specs(product: Product) -> Path:
    """``data_specs/<product>/demo/``: SafeTab-P's parameters directory (config.json and the
    four spec files) or PHSafe's demo config folder."""
    return data_specs_dir() / product / "demo"


def build_info() -> dict[str, str]:
    """What the wheel recorded when it was built (``{"git": <describe>}``); empty in a
    source checkout or when the build had no git."""
    path = files("das.resources").joinpath(BUILD_INFO)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(key): str(value) for key, value in data.items()} if isinstance(data, dict) else {}
