"""Parameter sets the page works on: presets, parameters folders, config files, and export.

A parameter set travels between the page and the server as plain JSON:

* SafeTab-P: ``{"config": <production config.json keys>, "stability": 9,
  "detailed_only_iteration_levels": [1, 2], "specs": <folder of the four spec files or null>,
  "source": <where it came from>}``. The stability and the detailed-only levels come from the
  spec files (computed, as `das budget report` does) or, for a preset, from its manifest.
* PHSafe: ``{"passes": {"US": <config.json keys>, "PR": <...>}, "source": ...}``: one
  production config per pass.

The production keys are kept as the user's file had them (same keys, same order), so an export
has the Census layout; an edit only changes values. JSON has no Infinity: an infinite budget
(no noise, for golden tests) travels as the string ``"Infinity"``, which the config loader
accepts, and is written back as the JSON literal ``Infinity`` that the Census files use.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from das.resources import data_specs_dir
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import (
    ConfigError,
    PHSafeConfig,
    SafeTabPConfig,
    parse_phsafe_config,
    parse_safetab_p_config,
)
from das.specs.race_specs import SPEC_FILES, load_race_specs
from explorer.files import MAX_PARAMETER_FILE_BYTES, FileRefused, describe, read_small_text

PRESETS_DIR = data_specs_dir() / "presets"
DEFAULT_PRESET = "production_2020"
PRESET_MANIFEST = "preset.json"
PHSAFE_PASSES = ("US", "PR")


class ParameterError(ValueError):
    """A parameter set cannot be used; the message says why, one problem per line."""


# ------------------------------------------------------------------------------ JSON transport
def to_transport(value: Any) -> Any:
    """Infinite numbers become the strings "Infinity" / "-Infinity" and NaN becomes null
    (JSON has none of them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: to_transport(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_transport(item) for item in value]
    return value


def from_transport(value: Any) -> Any:
    """The inverse of :func:`to_transport`: "Infinity" becomes ``math.inf``."""
    if value == "Infinity":
        return math.inf
    if isinstance(value, dict):
        return {key: from_transport(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_transport(item) for item in value]
    return value


# ------------------------------------------------------------------------------ validation
def safetab_p_config(raw: dict[str, Any], source: str = "SafeTab-P parameters") -> SafeTabPConfig:
    """The typed config of production keys; every problem on its own line."""
    try:
        return parse_safetab_p_config(from_transport(raw), source)
    except ConfigError as exc:
        raise ParameterError(str(exc)) from None


def phsafe_config(raw: dict[str, Any], source: str = "PHSafe parameters") -> PHSafeConfig:
    """The typed config of one PHSafe pass."""
    try:
        return parse_phsafe_config(from_transport(raw), source)
    except ConfigError as exc:
        raise ParameterError(str(exc)) from None


def product_of(raw: dict[str, Any]) -> str:
    """Which product a production config belongs to, from its keys (as das.specs.config does)."""
    if "privacy_budget" in raw:
        return "phsafe"
    if any(str(key).startswith("privacy_budget_p_") for key in raw):
        return "safetab-p"
    raise ParameterError("neither a SafeTab-P nor a PHSafe configuration")


# ------------------------------------------------------------------------------ loading
def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a small regular file (pipes, devices and big files refused)."""
    try:
        data = json.loads(read_small_text(path))
    except FileRefused as exc:
        raise ParameterError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise ParameterError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ParameterError(f"{path}: expected a JSON object")
    return data


def spec_structure(specs_dir: Path, max_race_codes: int) -> dict[str, Any]:
    """Stability and detailed-only iteration levels computed from a folder's four spec files.

    The files are read as :func:`explorer.files.read_small_text` reads (no pipe, no device,
    capped) into a private copy, and parsed there: what is parsed is what was checked.
    """
    missing = [name for name in SPEC_FILES if not os.path.lexists(specs_dir / name)]
    if missing:
        raise ParameterError(
            f"{specs_dir}: SafeTab-P spec files missing ({', '.join(missing)}); the stability "
            "is computed from them"
        )
    with tempfile.TemporaryDirectory(prefix="das-explore-specs-") as copy:
        copy_spec_files(specs_dir, Path(copy))
        specs = load_race_specs(copy)
    return {
        "stability": stability(specs, max_race_codes),
        "detailed_only_iteration_levels": sorted(detailed_only_levels(specs)),
        "specs": str(specs_dir.resolve()),
    }


def copy_spec_files(specs_dir: Path, target: Path, names: tuple[str, ...] = SPEC_FILES) -> None:
    """Copy small parameter files (spec files, config.json) read safely into ``target``."""
    for name in names:
        try:
            text = read_small_text(specs_dir / name)
        except FileRefused as exc:
            raise ParameterError(str(exc)) from None
        (target / name).write_text(text, encoding="utf-8")


def list_presets() -> list[dict[str, str]]:
    """Every preset folder under data_specs/presets: id, name, description."""
    presets = []
    for manifest in sorted(PRESETS_DIR.glob(f"*/{PRESET_MANIFEST}")):
        data = _read_json(manifest)
        presets.append(
            {
                "id": manifest.parent.name,
                "name": data["name"],
                "description": data.get("description", ""),
            }
        )
    return presets


def load_preset(preset_id: str = DEFAULT_PRESET) -> dict[str, Any]:
    """Both products' parameter sets of a preset (the page opens on the 2020 production one)."""
    known = {preset["id"] for preset in list_presets()}
    if preset_id not in known:
        raise ParameterError(f"unknown preset {preset_id!r} (known: {', '.join(sorted(known))})")
    folder = PRESETS_DIR / preset_id
    manifest = _read_json(folder / PRESET_MANIFEST)
    safetab = manifest["safetab_p"]
    config = _read_json(folder / safetab["config"])
    safetab_p_config(config, f"preset {preset_id}")
    specs = (folder / safetab["specs"]).resolve() if safetab.get("specs") else None
    out: dict[str, Any] = {
        "preset": {"id": preset_id, "name": manifest["name"], "totals": manifest.get("totals")},
        "safetab_p": {
            "config": to_transport(config),
            "stability": int(safetab["stability"]),
            "detailed_only_iteration_levels": list(safetab["detailed_only_iteration_levels"]),
            "specs": None if specs is None else str(specs),
            "source": f"preset: {manifest['name']}",
        },
        "phsafe": {"passes": {}, "source": f"preset: {manifest['name']}"},
    }
    for pass_name, relative in manifest["phsafe"].items():
        raw = _read_json(folder / relative)
        phsafe_config(raw, f"preset {preset_id} {pass_name}")
        out["phsafe"]["passes"][pass_name] = to_transport(raw)
    return out


def _phsafe_pass_name(raw: dict[str, Any], source: str) -> str:
    return phsafe_config(raw, source).pass_name


def load_path(path: str | Path) -> dict[str, Any]:
    """A parameter set from disk: a SafeTab-P parameters folder (config.json + spec files), a
    PHSafe config.json, a PHSafe production folder (``us/`` and ``pr/``), or a config file.

    Only small regular files are read (see :mod:`explorer.files`): a pipe, a device, a dangling
    link or a directory where a file is expected is refused by name, at once.
    """
    target = Path(path).expanduser()
    problem = None if target.is_dir() else describe(target)
    if problem is not None:
        raise ParameterError(problem)
    if target.is_dir() and not os.path.lexists(target / "config.json"):
        passes = {}
        for sub in ("us", "pr"):
            candidate = target / sub / "config.json"
            if os.path.lexists(candidate):
                raw = _read_json(candidate)
                passes[_phsafe_pass_name(raw, str(candidate))] = to_transport(raw)
        if not passes:
            raise ParameterError(f"{target}: no config.json here (nor us/ or pr/ subfolders)")
        return {"phsafe": {"passes": passes, "source": str(target)}}
    config_file = target / "config.json" if target.is_dir() else target
    raw = _read_json(config_file)
    if product_of(raw) == "phsafe":
        name = _phsafe_pass_name(raw, str(config_file))
        return {"phsafe": {"passes": {name: to_transport(raw)}, "source": str(config_file)}}
    config = safetab_p_config(raw, str(config_file))
    structure = spec_structure(config_file.parent, config.max_race_codes)
    return {"safetab_p": {"config": to_transport(raw), **structure, "source": str(config_file)}}


def import_text(text: str, name: str, current_safetab_p: dict[str, Any] | None) -> dict[str, Any]:
    """A config.json uploaded from the page. A SafeTab-P config keeps the spec structure
    (stability, detailed-only levels) of the current parameter set: a file alone has none."""
    if len(text) > MAX_PARAMETER_FILE_BYTES:
        raise ParameterError(
            f"{name}: over the {MAX_PARAMETER_FILE_BYTES:,}-byte cap of a parameters file"
        )
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParameterError(f"{name}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(raw, dict):
        raise ParameterError(f"{name}: expected a JSON object")
    if product_of(raw) == "phsafe":
        pass_name = _phsafe_pass_name(raw, name)
        return {"phsafe_pass": {"pass": pass_name, "config": to_transport(raw), "source": name}}
    safetab_p_config(raw, name)
    if current_safetab_p is None:
        raise ParameterError(f"{name}: a SafeTab-P config needs spec files; load a folder")
    return {
        "safetab_p": {
            **{key: current_safetab_p.get(key) for key in ("stability", "specs")},
            "detailed_only_iteration_levels": current_safetab_p["detailed_only_iteration_levels"],
            "config": to_transport(raw),
            "source": f"{name} (spec structure of {current_safetab_p.get('source')})",
        }
    }


# ------------------------------------------------------------------------------ export
def export_text(product: str, raw: dict[str, Any]) -> str:
    """A production config.json: the same keys in the same order, validated first.

    Numbers are written by Python's shortest round-trip repr, so the file reads back to the
    exact budgets the page computed its totals from; infinite budgets are ``Infinity``.
    """
    if product == "safetab-p":
        safetab_p_config(raw, "export")
    elif product == "phsafe":
        phsafe_config(raw, "export")
    else:
        raise ParameterError(f"unknown product {product!r}")
    return json.dumps(from_transport(raw), indent=2) + "\n"


def config_error_text(exc: Exception) -> str:
    """What the page shows for parameters it cannot use: a ParameterError or ConfigError as
    is (one problem per line), an arithmetic failure of the engine explained."""
    if isinstance(exc, ParameterError | ConfigError | FileRefused):
        return str(exc)
    if isinstance(exc, ArithmeticError):
        return (
            "cannot evaluate these parameters: a noise scale or a total is out of "
            f"floating-point range ({type(exc).__name__}). A budget or MOE far outside the usual "
            "range (such as 1e308 or 1e-300) gives figures no float can hold."
        )
    return f"cannot evaluate these parameters ({type(exc).__name__}: {exc})"
