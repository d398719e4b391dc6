"""Typed run configurations for SafeTab-P and PHSafe, read from the Census production `config.json`.

The production files key budgets by strings such as ``privacy_budget_p_level_2_county`` and
``"(COUNTY, 2)"``; they are parsed here, once, into typed keys (STYLE.md: no stringified tuples past
the edge). Budgets become exact ``Fraction`` objects (``0.159`` is exactly 159/1000), or
``math.inf`` for JSON ``Infinity`` (no noise: used by golden tests). Every problem in a file is
reported, one clear line each, in a single :class:`ConfigError`.

Budget limits (:mod:`das.privacy.limits`) are checked here, so that every path that reads a
config (``das budget report``, ``das validate``, ``das run``, the flows, the explorer) refuses
an absurd one: a finite budget above ``MAX_PASS_TOTAL`` or a positive per-query budget below
``MIN_QUERY_BUDGET`` (SafeTab-P: the level budget's stage-1 and stage-2 shares, f·B and
(1−f)·B), and the total of each pass the plan composes — SafeTab-P: the sum of the budgets of
the tabulated levels of each enabled pass (US, PR; a level costs its budget once, whatever its
stages); PHSafe: the config is one pass, the sum of its queries' budgets. ``Infinity`` and 0
are not limited. A JSON number too large for a double (``1e400``) would read as Infinity (no
noise) and is refused as well.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from das.privacy.exact import to_fraction
from das.privacy.limits import (
    pass_total_problem,
    query_ceiling_problem,
    query_floor_problem,
    show,
)

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
    """One line per problem; a validator that found several returns them one per line."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        problems.extend(f"  - {where}: {line}" for line in message.splitlines())
    header = f"{source}: invalid configuration ({len(problems)} problem(s))"
    return "\n".join([header, *problems])


def _raise_problems(problems: list[str]) -> None:
    """Report every problem a validator found, one per line (see :func:`_format_errors`)."""
    if problems:
        raise ValueError("\n".join(problems))


class _BeyondDouble(ValueError):
    """A JSON number beyond a double: too large, ``json`` would read it as Infinity (no noise);
    too small, as 0 (a level silently not measured)."""


def _finite_float(text: str) -> float:
    value = float(text)
    mantissa = text.lower().split("e")[0]
    if math.isinf(value) or (value == 0 and any(digit in mantissa for digit in "123456789")):
        raise _BeyondDouble(text)
    return value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"), parse_float=_finite_float)
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except _BeyondDouble as exc:
        raise ConfigError(
            f"{path}: the number {exc!s:.24} is beyond double precision and would read as "
            "Infinity (no noise) or as 0 (not measured); write Infinity or 0 to mean that, "
            "or a budget within the limits"
        ) from None
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

    # Each field's description (and, where the file's key differs, its "key") is what the
    # documentation's config reference shows: tests/test_docs.py requires both.
    max_race_codes: int = Field(
        ge=1,
        le=8,
        description="The most race codes a person record may carry (QRACE1–QRACE8): the "
        "sensitivity assumes it, and records with more are refused.",
    )
    # Validated before the budgets (pydantic validates in this order): their limits depend on
    # the definition, the stage split and the enabled passes.
    privacy_defn: PrivacyDefinition = Field(
        description="`zcdp` (budgets are ρ, discrete Gaussian noise) or `puredp` (budgets are "
        "ε, geometric noise)."
    )
    stage_1_fraction: Fraction = Field(
        description="The share f of each level's budget spent on stage 1 (the noisy total that "
        "chooses the workload); stage 2 gets 1 − f. Strictly between 0 and 1.",
        json_schema_extra={"key": "privacy_budget_p_stage_1_fraction"},
    )
    run_us: bool = Field(description="Whether the US pass (USA … AIANNH levels) runs.")
    run_pr: bool = Field(description="Whether the Puerto Rico pass (PR-* levels) runs.")
    budgets: dict[PopulationGroupLevel, Budget] = Field(
        description="The budget B of each population-group level (geography × iteration "
        "level 1 regional / 2 detailed): a JSON number ≥ 0, 0 = not tabulated, `Infinity` = "
        "no noise (golden tests; refused in production). Every key is required.",
        json_schema_extra={"key": "privacy_budget_p_level_<1|2>_<geography>", "json": "number"},
    )
    thresholds: dict[PopulationGroupLevel, tuple[int, int, int]] = Field(
        description="Three strictly increasing integers per tabulated level: the stage-1 noisy "
        "total against them chooses the stage-2 workload (total only, or 8, 18, 46 cells).",
        json_schema_extra={"key": "thresholds_p"},
    )
    # 0 ≤ p < 1 as the Census's SafeTab-P accepts it; 0 (or the key left out, as there) means
    # no zero suppression.
    zero_suppression_chance: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="p, 0 ≤ p < 1: below the sub-state levels' threshold T a true zero is "
        "suppressed with this probability; 0 (or the key absent) means no suppression.",
    )
    allow_negative_counts: bool = Field(
        description="Whether released counts may be negative (false clamps them at 0)."
    )
    state_filter_us: tuple[str, ...] = Field(
        description="The 2-digit FIPS codes of the states the US pass tabulates."
    )
    reader: Reader = Field(
        default="cef",
        description="The Census reader name (`cef` or `csv`); both read the same formats, "
        "kept for compatibility.",
    )

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
    def _parse_budgets(
        cls, value: dict[Any, Any], info: ValidationInfo
    ) -> dict[PopulationGroupLevel, Budget]:
        """Every budget parsed and within the limits; all problems reported, one per line."""
        parsed: dict[PopulationGroupLevel, Budget] = {}
        problems = []
        for level, raw in value.items():
            try:
                parsed[level] = _budget(raw)
            except ValueError as exc:
                problems.append(f"{_budget_key(level)}: {exc}")
        definition = info.data.get("privacy_defn")
        if definition is not None:  # otherwise the definition's own problem is reported
            runs = {"US": info.data.get("run_us"), "PR": info.data.get("run_pr")}
            problems += _safetab_limit_problems(
                parsed, definition, info.data.get("stage_1_fraction"), runs
            )
        _raise_problems(problems)
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
            raise ValueError('thresholds_p must be an object keyed like "(COUNTY, 2)"')
        parsed = {}
        for key, raw in value.items():
            match = _THRESHOLD_KEY.match(str(key))
            if match is None or match.group(1) not in SafeTabGeography.__members__.values():
                raise ValueError(f'thresholds_p key {key!r} is not like "(COUNTY, 2)"')
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

    def pass_totals(self) -> dict[str, Budget]:
        """Per enabled pass, the total its plan composes: each tabulated level costs its budget
        once (stage 1 + stage 2 and total-only are branches of one partition)."""
        return _safetab_pass_totals(self.budgets, {"US": self.run_us, "PR": self.run_pr})


def _budget_key(level: PopulationGroupLevel) -> str:
    return f"privacy_budget_p_level_{level.iteration_level}_{level.geography.config_suffix}"


def _sum_budgets(budgets: list[Budget]) -> Budget:
    """Exact sum of positive budgets; Infinity when any is infinite (no noise)."""
    if any(is_infinite(budget) for budget in budgets):
        return math.inf
    return sum((Fraction(budget) for budget in budgets if budget > 0), Fraction(0))


def _safetab_pass_totals(
    budgets: dict[PopulationGroupLevel, Budget], runs: dict[str, bool | None]
) -> dict[str, Budget]:
    return {
        pass_name: _sum_budgets(
            [b for level, b in budgets.items() if level.geography.pass_name == pass_name]
        )
        for pass_name, enabled in runs.items()
        if enabled
    }


def _safetab_limit_problems(
    budgets: dict[PopulationGroupLevel, Budget],
    definition: str,
    fraction: Fraction | None,
    runs: dict[str, bool | None],
) -> list[str]:
    """Per level: the budget against the ceiling and its smaller stage share (f·B or (1−f)·B)
    against the floor; per enabled pass: the composed total against the ceiling."""
    problems = []
    over_ceiling = set()
    for level, budget in budgets.items():
        name = _budget_key(level)
        if is_infinite(budget) or budget <= 0:
            continue
        problem = query_ceiling_problem(definition, budget, name)
        if problem is not None:
            problems.append(problem)
            over_ceiling.add(level.geography.pass_name)
            continue
        what, smallest = name, Fraction(budget)
        if fraction is not None:
            stage, share = (
                ("stage-1", fraction) if fraction <= 1 - fraction else ("stage-2", 1 - fraction)
            )
            what = f"{name} ({show(budget)}), its {stage} query ({show(share)} of it)"
            smallest = budget * share
        problem = query_floor_problem(definition, smallest, what)
        if problem is not None:
            problems.append(problem)
    for pass_name, total in _safetab_pass_totals(budgets, runs).items():
        if pass_name not in over_ceiling:
            what = f"{pass_name} pass (its tabulated levels' budgets summed)"
            problem = pass_total_problem(definition, total, what)
            if problem is not None:
                problems.append(problem)
    return problems


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

    # Validated before the budgets (pydantic validates in this order): their limits depend on it.
    privacy_defn: PrivacyDefinition = Field(
        description="`zcdp` (budgets are ρ, discrete Gaussian noise) or `puredp` (budgets are "
        "ε, geometric noise)."
    )
    privacy_budget: dict[PHSafeQueryKey, Budget] = Field(
        description="Per measured table (PH1_num, PH1_denom, PH2, PH3, PH4, PH5_denom, PH6, "
        "PH7, PH8_denom), per level `usa_*`, `usa_A-G`, `usa_H,I`, `state_*`, `state_A-G`, "
        "`state_H,I` (PH2 and PH6: `*` only): the query's budget, a JSON number ≥ 0 (0 = "
        "skipped, `Infinity` = no noise, refused in production)."
    )
    tau: dict[str, int] = Field(
        description="The truncation threshold τ ≥ 1 of each measured joined table (PH1_num, "
        "PH2, PH3, PH4, PH6, PH7): households keep at most τ persons; Δ = 2τ + 2."
    )
    state_filter: tuple[str, ...] = Field(
        description='The pass\'s states (2-digit FIPS): `["72"]` is the Puerto Rico pass '
        "(state level only), anything else the US pass (nation and states)."
    )
    reader: Reader = Field(
        default="cef",
        description="The Census reader name (`cef` or `csv`); both read the same formats, "
        "kept for compatibility.",
    )

    @field_validator("privacy_budget", mode="before")
    @classmethod
    def _parse_budgets(cls, value: Any, info: ValidationInfo) -> dict[PHSafeQueryKey, Budget]:
        if not isinstance(value, dict):
            raise ValueError("must be an object keyed by table name")
        parsed, problems = _phsafe_budgets(value)
        definition = info.data.get("privacy_defn")
        if definition is not None:  # otherwise the definition's own problem is reported
            problems += _phsafe_limit_problems(parsed, definition)
        _raise_problems(problems)
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

    def pass_total(self) -> Budget:
        """The total the plan composes: the sum of the measured queries' budgets."""
        return _sum_budgets(list(self.privacy_budget.values()))


def _phsafe_budgets(value: dict[Any, Any]) -> tuple[dict[PHSafeQueryKey, Budget], list[str]]:
    """The budgets of the ``privacy_budget`` object that parse, and a line per problem."""
    parsed: dict[PHSafeQueryKey, Budget] = {}
    problems = []
    for table, levels in value.items():
        if table not in PHSAFE_MEASURED_TABLES:
            allowed = ", ".join(PHSAFE_MEASURED_TABLES)
            problems.append(f"unknown table {table!r} (expected one of {allowed})")
            continue
        if not isinstance(levels, dict):
            problems.append(f'{table}: must be an object keyed like "state_A-G"')
            continue
        for key, raw in levels.items():
            geography, _, iteration = str(key).partition("_")
            try:
                query = PHSafeQueryKey(
                    table, PHSafeGeography(geography), PHSafeIterationLevel(iteration)
                )
            except ValueError:
                problems.append(
                    f"{table}: unknown level {key!r} (expected usa_* / usa_A-G / usa_H,I / "
                    "state_* / state_A-G / state_H,I)"
                )
                continue
            if (
                table in PHSAFE_TOTAL_ONLY_TABLES
                and query.iteration_level is not PHSafeIterationLevel.TOTAL
            ):
                problems.append(f"{table}: is tabulated on '*' only, got {key!r}")
                continue
            try:
                parsed[query] = _budget(raw)
            except ValueError as exc:
                problems.append(f"{table}.{key}: {exc}")
    return parsed, problems


def _phsafe_limit_problems(budgets: dict[PHSafeQueryKey, Budget], definition: str) -> list[str]:
    """Every query's budget against the ceiling and the floor; the pass (the whole config:
    the sum of its queries' budgets) against the ceiling."""
    problems = []
    over_ceiling = False
    for key, budget in budgets.items():
        what = f"{key.table}.{key.config_key}"
        problem = query_ceiling_problem(definition, budget, what)
        over_ceiling = over_ceiling or problem is not None
        problem = problem or query_floor_problem(definition, budget, what)
        if problem is not None:
            problems.append(problem)
    if not over_ceiling:  # a query over the ceiling already puts the pass over it
        total = _sum_budgets(list(budgets.values()))
        problem = pass_total_problem(definition, total, "the pass (its queries' budgets summed)")
        if problem is not None:
            problems.append(problem)
    return problems


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
