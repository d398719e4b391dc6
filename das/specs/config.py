"""Typed run configurations for SafeTab-P and PHSafe, read from the Census production `config.json`.

The production files key budgets by strings such as ``privacy_budget_p_level_2_county`` and
``"(COUNTY, 2)"``; they are parsed here, once, into typed keys (STYLE.md: no stringified tuples past
the edge). Budgets become exact ``Fraction`` objects (``0.159`` is exactly 159/1000), or
``math.inf`` for JSON ``Infinity`` (no noise: used by golden tests). Every problem in a file is
reported, one clear line each, in a single :class:`ConfigError`.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from das.privacy.exact import to_fraction

Budget = Fraction | float  # a Fraction, or math.inf meaning "no noise"
# The Census readers: "cef" (production extract) and "csv" (its test files). Both name the same
# file formats, which das.io reads whichever is given; the key is kept for compatibility.
Reader = Literal["cef", "csv"]


class ConfigError(ValueError):
    """A configuration file is invalid; the message lists every problem, one per line."""


class PrivacyDefinition(StrEnum):
    ZCDP = "zcdp"
    PUREDP = "puredp"


_JSON_KINDS = {str: "string", list: "array", dict: "object", bool: "boolean", type(None): "null"}


def _not_json_numbers(values: dict[str, Any]) -> list[str]:
    """``name: problem`` for each value a production file must give as a JSON number
    (``0.5``, ``Infinity``) but does not: a budget written ``"0.5"`` is refused, not coerced.
    (Python callers of the models may pass exact decimal strings; files may not.)"""
    problems = []
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            kind = _JSON_KINDS.get(type(value), type(value).__name__)
            problems.append(f"{name}: must be a JSON number, not a JSON {kind} ({value!r:.24})")
    return problems


def _refuse_non_numbers(problems: list[str], source: str) -> None:
    if problems:
        lines = [f"{source}: invalid configuration ({len(problems)} problem(s))"]
        raise ConfigError("\n".join(lines + [f"  - {problem}" for problem in problems]))


def _budget(value: Any) -> Budget:
    """Parse a budget: a non-negative decimal, or Infinity (no noise)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    parsed = to_fraction(value, allow_infinite=True)
    if parsed < 0:
        raise ValueError("must be >= 0")
    return parsed


def _format_errors(source: str, error: ValidationError) -> str:
    lines = [f"{source}: invalid configuration ({error.error_count()} problem(s))"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"  - {where}: {message}")
    return "\n".join(lines)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level")
    return data


# --------------------------------------------------------------------------------------------
# SafeTab-P
# --------------------------------------------------------------------------------------------


class SafeTabGeography(StrEnum):
    """Geography summary levels of SafeTab-P, in release order (coarsest first within a pass)."""

    USA = "USA"
    STATE = "STATE"
    COUNTY = "COUNTY"
    TRACT = "TRACT"
    PLACE = "PLACE"
    AIANNH = "AIANNH"
    PR_STATE = "PR-STATE"
    PR_COUNTY = "PR-COUNTY"
    PR_TRACT = "PR-TRACT"
    PR_PLACE = "PR-PLACE"

    @property
    def config_suffix(self) -> str:
        """The suffix used by ``privacy_budget_p_level_N_<suffix>`` keys."""
        return self.value.lower().replace("-", "_")

    @property
    def pass_name(self) -> Literal["US", "PR"]:
        return "PR" if self.value.startswith("PR-") else "US"

    @property
    def is_state_or_above(self) -> bool:
        """USA, STATE, PR-STATE: detailed-only iterations get a total; coarse-only are dropped."""
        return self in (SafeTabGeography.USA, SafeTabGeography.STATE, SafeTabGeography.PR_STATE)


class PopulationGroupLevel(NamedTuple):
    """A (geography level, iteration level) pair: the unit of budget allocation in SafeTab-P."""

    geography: SafeTabGeography
    iteration_level: int  # 1 = regional, 2 = detailed

    def __str__(self) -> str:
        return f"({self.geography.value}, {self.iteration_level})"


SAFETAB_ITERATION_LEVELS = (1, 2)
_BUDGET_KEY = re.compile(r"^privacy_budget_p_level_(\d+)_([a-z_]+)$")
_THRESHOLD_KEY = re.compile(r"^\(\s*([A-Z-]+)\s*,\s*(\d+)\s*\)$")
_SUFFIX_TO_GEOGRAPHY = {g.config_suffix: g for g in SafeTabGeography}


class SafeTabPConfig(BaseModel):
    """SafeTab-P run parameters (the production ``config.json`` keys, typed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    max_race_codes: int = Field(ge=1, le=8)
    budgets: dict[PopulationGroupLevel, Budget]
    stage_1_fraction: Fraction
    thresholds: dict[PopulationGroupLevel, tuple[int, int, int]]
    # 0 ≤ p < 1 as the Census's SafeTab-P accepts it; 0 (or the key left out, as there) means
    # no zero suppression.
    zero_suppression_chance: float = Field(default=0.0, ge=0, lt=1)
    allow_negative_counts: bool
    run_us: bool
    run_pr: bool
    state_filter_us: tuple[str, ...]
    privacy_defn: PrivacyDefinition
    reader: Reader = "cef"

    @model_validator(mode="before")
    @classmethod
    def _from_production_keys(cls, data: Any) -> Any:
        """Fold the flat production keys into typed mappings; unknown keys are rejected."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        budgets: dict[Any, Any] = {}
        for key in [k for k in data if k.startswith("privacy_budget_p_level_")]:
            match = _BUDGET_KEY.match(key)
            geography = _SUFFIX_TO_GEOGRAPHY.get(match.group(2)) if match else None
            if match is None or geography is None or int(match.group(1)) not in (1, 2):
                raise ValueError(f"unknown budget key {key!r}")
            budgets[PopulationGroupLevel(geography, int(match.group(1)))] = data.pop(key)
        missing = [
            f"privacy_budget_p_level_{level}_{g.config_suffix}"
            for g in SafeTabGeography
            for level in SAFETAB_ITERATION_LEVELS
            if PopulationGroupLevel(g, level) not in budgets
        ]
        if missing:
            raise ValueError(f"missing budget keys: {', '.join(missing)}")
        data["budgets"] = budgets
        if "privacy_budget_p_stage_1_fraction" in data:
            data["stage_1_fraction"] = data.pop("privacy_budget_p_stage_1_fraction")
        if "thresholds_p" in data:
            data["thresholds"] = data.pop("thresholds_p")
        return data

    @field_validator("budgets", mode="before")
    @classmethod
    def _parse_budgets(cls, value: dict[Any, Any]) -> dict[PopulationGroupLevel, Budget]:
        parsed = {}
        for level, raw in value.items():
            try:
                parsed[level] = _budget(raw)
            except ValueError as exc:
                name = f"privacy_budget_p_level_{level.iteration_level}_"
                raise ValueError(f"{name}{level.geography.config_suffix}: {exc}") from None
        return parsed

    @field_validator("stage_1_fraction", mode="before")
    @classmethod
    def _parse_fraction(cls, value: Any) -> Fraction:
        fraction = to_fraction(value)
        if not 0 < fraction < 1:
            raise ValueError("privacy_budget_p_stage_1_fraction must be strictly between 0 and 1")
        return fraction

    @field_validator("thresholds", mode="before")
    @classmethod
    def _parse_thresholds(cls, value: Any) -> dict[PopulationGroupLevel, tuple[int, int, int]]:
        if not isinstance(value, dict):
            raise ValueError("thresholds_p must be an object keyed like \"(COUNTY, 2)\"")
        parsed = {}
        for key, raw in value.items():
            match = _THRESHOLD_KEY.match(str(key))
            if match is None or match.group(1) not in SafeTabGeography.__members__.values():
                raise ValueError(f"thresholds_p key {key!r} is not like \"(COUNTY, 2)\"")
            level = PopulationGroupLevel(SafeTabGeography(match.group(1)), int(match.group(2)))
            if level.iteration_level not in SAFETAB_ITERATION_LEVELS:
                raise ValueError(f"thresholds_p key {key!r}: iteration level must be 1 or 2")
            ok = (
                isinstance(raw, list)
                and len(raw) == 3
                and all(isinstance(t, int) and not isinstance(t, bool) for t in raw)
                and raw[0] < raw[1] < raw[2]
            )
            if not ok:
                raise ValueError(f"thresholds_p {key!r} must be 3 strictly increasing integers")
            parsed[level] = tuple(raw)
        return parsed

    @field_validator("state_filter_us", mode="before")
    @classmethod
    def _parse_states(cls, value: Any) -> tuple[str, ...]:
        return _state_codes(value, "state_filter_us")

    @model_validator(mode="after")
    def _thresholds_where_needed(self) -> SafeTabPConfig:
        """Every level that runs stage 1 needs thresholds (they choose the stage-2 workload)."""
        missing = [
            str(level)
            for level, budget in self.budgets.items()
            if budget > 0 and level not in self.thresholds and self.runs(level.geography)
        ]
        if missing:
            raise ValueError(f"thresholds_p missing for tabulated levels: {', '.join(missing)}")
        return self

    def runs(self, geography: SafeTabGeography) -> bool:
        """Whether the pass this geography belongs to is enabled (``run_us`` / ``run_pr``)."""
        return self.run_pr if geography.pass_name == "PR" else self.run_us

    def tabulated_levels(self) -> list[PopulationGroupLevel]:
        """Population-group levels with a positive budget in an enabled pass, in config order."""
        return [
            level
            for level, budget in self.budgets.items()
            if budget > 0 and self.runs(level.geography)
        ]


def parse_safetab_p_config(data: dict[str, Any], source: str) -> SafeTabPConfig:
    """Validate production keys already read (e.g. edited in the tuning explorer)."""
    try:
        return SafeTabPConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def load_safetab_p_config(path: str | Path) -> SafeTabPConfig:
    """Read and validate a SafeTab-P ``config.json``; :class:`ConfigError` lists problems."""
    data = _read_json(Path(path))
    numeric = {
        key: value
        for key, value in data.items()
        if key.startswith("privacy_budget_p_") or key == "zero_suppression_chance"
    }
    _refuse_non_numbers(_not_json_numbers(numeric), str(path))
    return parse_safetab_p_config(data, str(path))


# --------------------------------------------------------------------------------------------
# PHSafe
# --------------------------------------------------------------------------------------------


class PHSafeGeography(StrEnum):
    USA = "usa"
    STATE = "state"


class PHSafeIterationLevel(StrEnum):
    """Iteration levels of PHSafe: unattributed, major races A–G, and H (Hispanic) / I."""

    TOTAL = "*"
    RACE = "A-G"
    ETHNICITY = "H,I"


PHSAFE_MEASURED_TABLES = (
    "PH1_num",
    "PH1_denom",
    "PH2",
    "PH3",
    "PH4",
    "PH5_denom",
    "PH6",
    "PH7",
    "PH8_denom",
)
# Tables built by joining persons to units: they need a truncation threshold tau.
PHSAFE_JOINED_TABLES = ("PH1_num", "PH2", "PH3", "PH4", "PH6", "PH7")
# Tables tabulated on `*` only.
PHSAFE_TOTAL_ONLY_TABLES = ("PH2", "PH6")


class PHSafeQueryKey(NamedTuple):
    table: str
    geography: PHSafeGeography
    iteration_level: PHSafeIterationLevel

    @property
    def config_key(self) -> str:
        return f"{self.geography.value}_{self.iteration_level.value}"


class PHSafeConfig(BaseModel):
    """PHSafe run parameters: one pass (US, or PR when ``state_filter`` is ``["72"]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    privacy_budget: dict[PHSafeQueryKey, Budget]
    tau: dict[str, int]
    state_filter: tuple[str, ...]
    privacy_defn: PrivacyDefinition
    reader: Reader = "cef"

    @field_validator("privacy_budget", mode="before")
    @classmethod
    def _parse_budgets(cls, value: Any) -> dict[PHSafeQueryKey, Budget]:
        if not isinstance(value, dict):
            raise ValueError("must be an object keyed by table name")
        parsed: dict[PHSafeQueryKey, Budget] = {}
        for table, levels in value.items():
            if table not in PHSAFE_MEASURED_TABLES:
                allowed = ", ".join(PHSAFE_MEASURED_TABLES)
                raise ValueError(f"unknown table {table!r} (expected one of {allowed})")
            if not isinstance(levels, dict):
                raise ValueError(f"{table}: must be an object keyed like \"state_A-G\"")
            for key, raw in levels.items():
                geography, _, iteration = str(key).partition("_")
                try:
                    query = PHSafeQueryKey(
                        table, PHSafeGeography(geography), PHSafeIterationLevel(iteration)
                    )
                except ValueError:
                    raise ValueError(
                        f"{table}: unknown level {key!r} (expected usa_* / usa_A-G / usa_H,I / "
                        "state_* / state_A-G / state_H,I)"
                    ) from None
                if (
                    table in PHSAFE_TOTAL_ONLY_TABLES
                    and query.iteration_level is not PHSafeIterationLevel.TOTAL
                ):
                    raise ValueError(f"{table}: is tabulated on '*' only, got {key!r}")
                try:
                    parsed[query] = _budget(raw)
                except ValueError as exc:
                    raise ValueError(f"{table}.{key}: {exc}") from None
        return parsed

    @field_validator("tau", mode="before")
    @classmethod
    def _parse_tau(cls, value: Any) -> dict[str, int]:
        if not isinstance(value, dict):
            raise ValueError("must be an object keyed by table name")
        for table, tau in value.items():
            if table not in PHSAFE_JOINED_TABLES:
                joined = ", ".join(PHSAFE_JOINED_TABLES)
                raise ValueError(f"tau given for {table!r}, which is not a joined table ({joined})")
            if not isinstance(tau, int) or isinstance(tau, bool) or tau < 1:
                raise ValueError(f"tau for {table} must be a positive integer")
        return value

    @field_validator("state_filter", mode="before")
    @classmethod
    def _parse_states(cls, value: Any) -> tuple[str, ...]:
        return _state_codes(value, "state_filter")

    @model_validator(mode="after")
    def _tau_where_needed(self) -> PHSafeConfig:
        needed = sorted(
            {
                key.table
                for key, budget in self.privacy_budget.items()
                if budget > 0 and key.table in PHSAFE_JOINED_TABLES and key.table not in self.tau
            }
        )
        if needed:
            raise ValueError(f"tau missing for measured joined tables: {', '.join(needed)}")
        if "72" in self.state_filter and len(self.state_filter) > 1:
            raise ValueError("state_filter mixes Puerto Rico (72) with US states: run two passes")
        return self

    @property
    def pass_name(self) -> Literal["US", "PR"]:
        return "PR" if self.state_filter == ("72",) else "US"

    def measured_queries(self) -> list[PHSafeQueryKey]:
        """Queries with a positive budget (a budget of 0 skips the query), in config order."""
        return [key for key, budget in self.privacy_budget.items() if budget > 0]


def parse_phsafe_config(data: dict[str, Any], source: str) -> PHSafeConfig:
    """Validate the production keys of one PHSafe pass already read."""
    try:
        return PHSafeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def load_phsafe_config(path: str | Path) -> PHSafeConfig:
    """Read and validate a PHSafe ``config.json``; raise :class:`ConfigError` listing problems."""
    data = _read_json(Path(path))
    budgets = data.get("privacy_budget")
    if isinstance(budgets, dict):
        numeric = {
            f"privacy_budget.{table}.{key}": value
            for table, levels in budgets.items()
            if isinstance(levels, dict)
            for key, value in levels.items()
        }
        _refuse_non_numbers(_not_json_numbers(numeric), str(path))
    return parse_phsafe_config(data, str(path))


def detect_product(path: str | Path) -> Literal["safetab-p", "phsafe"]:
    """Tell which product a production ``config.json`` belongs to, from its keys."""
    data = _read_json(Path(path))
    if "privacy_budget" in data:
        return "phsafe"
    if any(key.startswith("privacy_budget_p_") for key in data):
        return "safetab-p"
    raise ConfigError(f"{path}: neither a SafeTab-P nor a PHSafe configuration")


def _state_codes(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{name} must be a non-empty list of 2-digit state FIPS codes")
    bad = [v for v in value if not (isinstance(v, str) and re.fullmatch(r"\d\d", v))]
    if bad:
        raise ValueError(f"{name} has entries that are not 2-digit FIPS codes: {bad[:5]}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} lists a state twice")
    return tuple(value)


def is_infinite(budget: Budget) -> bool:
    """True for the ``Infinity`` budget, which means "measure without noise"."""
    return isinstance(budget, float) and math.isinf(budget)
