"""The files each deployment of ``deploy/prefect.yaml`` reads under ``<root>`` (``das_root``).

`das deploy` checks them before it registers anything: a deployment whose config or records
are missing would otherwise register fine and fail at its first run, days later, on a message
that names one file. Here every missing or unusable file is named at once, by path.

Deployments come in *products* that read the same files (a release and its validate-only
twin); the operator may register only some of them (``--products``). The privacy audit reads
no input and is always registered. ``tests/test_deploy_layout.py`` holds this table to the YAML.
`das layout` (:mod:`das.cli.layout`) builds a root from this table, then checks it here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from das.io.phsafe import GEO, PERSONS, UNITS
from das.io.safetab_p import GRF_C, PERSON_RECORDS
from das.io.tables import TableSpec, not_a_regular_file
from das.specs.race_specs import SPEC_FILES


@dataclass(frozen=True)
class Product:
    """Deployments that read the same files under the root, and those files."""

    name: str
    deployments: tuple[str, ...]
    data: str  # the records folder, relative to the root
    records: tuple[TableSpec, ...]  # required: ``<stem><text suffix>`` or ``<stem>.parquet``
    optional: tuple[TableSpec, ...] = ()  # read when present (then it must be a regular file)
    config: str | None = None  # config.json, relative to the root
    spec_files: bool = False  # the four SafeTab-P spec files beside the config
    pass_name: str | None = None  # the PHSafe pass its config must be: US, or PR (["72"])


PRODUCTS: tuple[Product, ...] = (
    Product(
        "safetab-p",
        ("safetab-p-us-pr", "validate-safetab-p"),
        data="safetab-p/input",
        records=(PERSON_RECORDS, GRF_C),
        config="safetab-p/params/config.json",
        spec_files=True,
    ),
    Product(
        "phsafe-us",
        ("phsafe-us", "validate-phsafe-us"),
        data="phsafe/us/input",
        records=(PERSONS, UNITS, GEO),
        config="phsafe/us/config.json",
        pass_name="US",
    ),
    Product(
        "phsafe-pr",
        ("phsafe-pr", "validate-phsafe-pr"),
        data="phsafe/pr/input",
        records=(PERSONS, UNITS, GEO),
        config="phsafe/pr/config.json",
        pass_name="PR",
    ),
    Product(
        "swap",
        ("swap-households",),
        data="swap/input",
        records=(UNITS, GEO),
        optional=(PERSONS,),  # copied beside the swapped files when present
    ),
)
PREFECT_FILE = Path("deploy") / "prefect.yaml"  # the deployments, relative to the checkout


def checkout_root() -> Path | None:
    """The checkout holding ``deploy/prefect.yaml``: the working directory or one of its
    parents, else the one this package was installed from (editable installs)."""
    here = Path.cwd().resolve()
    package_root = Path(__file__).resolve().parents[2]
    for candidate in (here, *here.parents, package_root):
        if (candidate / PREFECT_FILE).is_file():
            return candidate
    return None


# Deployments that read nothing under the root (synthetic inputs, the ledger's approvals):
# always registered.
INPUT_FREE_DEPLOYMENTS = ("approval-sweep", "privacy-audit")
PRODUCT_NAMES = tuple(product.name for product in PRODUCTS)


def select_products(names: Iterable[str] | None) -> tuple[Product, ...]:
    """The products named (all when None), in the table's order; ValueError for an unknown
    name."""
    if names is None:
        return PRODUCTS
    wanted = {name.strip() for name in names if name.strip()}
    unknown = sorted(wanted - set(PRODUCT_NAMES))
    if unknown or not wanted:
        raise ValueError(
            f"unknown product {', '.join(unknown) or '(none given)'}: choose from "
            f"{', '.join(PRODUCT_NAMES)}"
        )
    return tuple(product for product in PRODUCTS if product.name in wanted)


def deployment_names(products: Sequence[Product]) -> list[str]:
    """The deployments registered for ``products``: theirs and the input-free ones."""
    return [name for product in products for name in product.deployments] + list(
        INPUT_FREE_DEPLOYMENTS
    )


def _file_problem(path: Path) -> str | None:
    if (problem := not_a_regular_file(path)) is not None:
        return problem
    return None if path.is_file() else f"{path} is missing"


def _records_problems(folder: Path, spec: TableSpec, required: bool) -> list[str]:
    """One input as the readers find it (``das.io.tables.resolve_input``): exactly one of
    ``<stem><text suffix>`` and ``<stem>.parquet``, a regular file."""
    candidates = (folder / f"{spec.stem}{spec.text_suffix}", folder / f"{spec.stem}.parquet")
    problems = [p for path in candidates if (p := not_a_regular_file(path)) is not None]
    present = [path for path in candidates if path.is_file()]
    if len(present) > 1:
        problems.append(f"{present[0]} and {present[1].name} both exist: keep only one")
    elif not present and not problems and required:
        problems.append(f"{candidates[0]} (or {candidates[1].name}) is missing")
    return problems


def product_problems(root: Path, product: Product) -> list[str]:
    """Every file of ``product`` under ``root`` that is missing or not a regular file, one
    line each naming its path (empty: the product's deployments can run)."""
    problems: list[str] = []
    if product.config is not None:
        config = root / product.config
        problems += [p for p in [_file_problem(config)] if p]
        if product.spec_files:
            problems += [p for name in SPEC_FILES if (p := _file_problem(config.parent / name))]
    folder = root / product.data
    if os.path.lexists(folder) and not folder.is_dir():
        return [*problems, f"{folder} is not a folder"]
    for spec in product.records:
        problems += _records_problems(folder, spec, required=True)
    for spec in product.optional:
        problems += _records_problems(folder, spec, required=False)
    return problems


def layout_problems(root: Path, products: Sequence[Product]) -> list[str]:
    """:func:`product_problems` of every product in ``products``; a root that is not a
    folder is one line."""
    if not root.is_dir():
        return [f"{root} is not a folder" if os.path.lexists(root) else f"{root} does not exist"]
    return [problem for product in products for problem in product_problems(root, product)]
