"""A swap run on a PHSafe-style folder: load → swap → check invariants → write → report.

Each step is a plain function (the Prefect tasks in ``tasks/swap.py`` wrap them one to one);
:func:`run_swap` chains them for the command line. The swapped folder is written atomically
and refuses to replace an existing one: two independent swaps of the same data, both
released, would cost 2ε (composition), so a finished run is never silently redrawn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.io.atomic import atomic_output_dir, atomic_write_text
from das.io.writers import file_sha256
from das.privacy.calculators import swap_epsilon
from das.privacy.rng import RandomSource, default_source, seeded_rng
from das.swapping.analysis import (
    InvariantReport,
    check_invariants,
    contingency_table,
    largest_stratum,
    mean_absolute_percentage_error,
    varying_within_strata,
)
from das.swapping.definitions import DEFAULT_DELTA, side_by_side
from das.swapping.files import UnitData, read_unit_data, write_frame_like, write_swapped_units
from das.swapping.outcome import SwapOutcome
from das.swapping.permutation import (
    SwapScheme,
    parse_rate,
    permutation_swap,
    stratum_codes,
)
from das.swapping.swap_report import build_report, render_markdown

CONTINGENCY_STEM = "contingency"
DEFAULT_TWO_WAY_COLUMN = "TEN"
GEOGRAPHY_HIERARCHY = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")


class InvariantViolation(RuntimeError):
    """The swapped data broke a swapping invariant: nothing is written (a bug, not bad data)."""


@dataclass(frozen=True)
class SwapRequest:
    """What the curator asked for: variable roles, swap rate, the MAPE table, the seed."""

    match: tuple[str, ...]
    swap: tuple[str, ...]
    rate: Fraction
    hold: tuple[str, ...] | None = None
    two_way: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    seed: int | None = None
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", parse_rate(self.rate))
        object.__setattr__(self, "match", tuple(self.match))
        object.__setattr__(self, "swap", tuple(self.swap))
        if self.hold is not None:
            object.__setattr__(self, "hold", tuple(self.hold))

    def source(self) -> RandomSource:
        """The secure source, or a seeded one (tests/demos only) when a seed was given."""
        return default_source() if self.seed is None else seeded_rng(self.seed)


def resolve_scheme(data: UnitData, request: SwapRequest) -> SwapScheme:
    """Check the variable names against the files; holding = every other variable by default.

    MAFID is the join key, not a variable: it stays with its household, as do all holding
    variables.
    """
    known = set(data.variables)
    hold = request.hold
    if hold is None:
        roles = set(request.match) | set(request.swap)
        hold = tuple(name for name in data.variables if name not in roles)
    unknown = [name for name in (*request.match, *request.swap, *hold) if name not in known]
    if unknown:
        raise KeyError(
            f"unknown variable(s) {', '.join(unknown)}; the unit files have "
            f"{', '.join(data.variables)}"
        )
    return SwapScheme(request.match, request.swap, hold)


def default_two_way(scheme: SwapScheme) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Geography × TEN, as Table 5.1's county × tenure: the census hierarchy columns (state,
    county, tract, block) among the matching and swapping variables, against TEN (or the first
    holding variable). Without hierarchy columns the rows are the swapping variables."""
    roles = set(scheme.match) | set(scheme.swap)
    rows = tuple(name for name in GEOGRAPHY_HIERARCHY if name in roles) or scheme.swap
    column = DEFAULT_TWO_WAY_COLUMN if DEFAULT_TWO_WAY_COLUMN in scheme.hold else scheme.hold[0]
    return rows, (column,)


def load(data_dir: str | Path) -> UnitData:
    """Step 1: read and join the unit files."""
    return read_unit_data(data_dir)


def swap(data: UnitData, request: SwapRequest) -> SwapOutcome:
    """Step 2: Algorithm 5.1 on the unit records; b and ε (Theorem 5.6) of this data and p."""
    started = time.perf_counter()
    scheme = resolve_scheme(data, request)
    two_way = request.two_way or default_two_way(scheme)
    for name in (*two_way[0], *two_way[1]):
        if name not in data.records.columns:
            raise KeyError(f"two-way table: unknown variable {name}")
    source = request.source()
    swapped, draw = permutation_swap(data.records, scheme, request.rate, source)
    swapped_at = time.perf_counter()
    b = largest_stratum(data.records, scheme)
    held_geography = [name for name in data.geo_variables if name in scheme.hold]
    codes = stratum_codes(data.records, scheme.match)
    strata = int(codes.max()) + 1 if codes.size else 0
    return SwapOutcome(
        scheme=scheme,
        rate=request.rate,
        swapped=swapped,
        draw=draw,
        strata=strata,
        b=b,
        epsilon=swap_epsilon(b, request.rate),
        randomness={
            "secure": bool(source.is_secure),
            "seed": request.seed,
            "description": source.describe(),
        },
        two_way=two_way,
        geography_held_varying=varying_within_strata(data.records, scheme.match, held_geography),
        timings={"swap": swapped_at - started, "b": time.perf_counter() - swapped_at},
    )


def check(data: UnitData, outcome: SwapOutcome) -> InvariantReport:
    """Step 3: the invariant margins of X and Z, tabulated independently and compared exactly;
    also the MAPE of the two-way table. Raises :class:`InvariantViolation` on any difference."""
    started = time.perf_counter()
    invariants = check_invariants(data.records, outcome.swapped, outcome.scheme)
    outcome.invariants = invariants
    outcome.mape = mean_absolute_percentage_error(data.records, outcome.swapped, *outcome.two_way)
    outcome.timings["check"] = time.perf_counter() - started
    if not invariants.exact:
        broken = [margin.name for margin in invariants.margins if not margin.exact]
        raise InvariantViolation(f"swapping invariants not preserved: {', '.join(broken)}")
    return invariants


def write(
    data: UnitData,
    outcome: SwapOutcome,
    output: str | Path,
    *,
    overwrite: bool = False,
    delta: float = DEFAULT_DELTA,
    extra_timings: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Step 4: write the swapped units, ``contingency.csv`` (H(Z)), ``report.json`` and
    ``report.md`` into ``output`` atomically; return the report."""
    if outcome.invariants is None or outcome.mape is None:
        raise RuntimeError("check() must run before write()")
    started = time.perf_counter()
    output = Path(output)
    with atomic_output_dir(output, overwrite=overwrite) as folder:
        written = write_swapped_units(data, outcome.swapped, outcome.scheme.swap, folder)
        table = contingency_table(outcome.swapped, outcome.scheme.columns)
        written["contingency"] = write_frame_like(
            table, folder, CONTINGENCY_STEM, Path(f"{CONTINGENCY_STEM}.csv")
        )
        rows = {"units": data.units.rows, "geo": data.geo.rows, "contingency": len(table)}
        outputs = {
            path.name: {"sha256": file_sha256(path), "rows": rows.get(key)}
            for key, path in written.items()
        }
        timings = dict(extra_timings or {})
        timings.update(outcome.timings)
        timings["write"] = time.perf_counter() - started
        definitions = side_by_side(outcome.epsilon, invariants_text(outcome.scheme), delta)
        report = build_report(
            data=data,
            outcome=outcome,
            definitions=definitions,
            delta=delta,
            outputs=outputs,
            output_dir=output,
            timings=timings,
        )
        atomic_write_text(folder / "report.json", report_json(report))
        atomic_write_text(folder / "report.md", render_markdown(report))
    return report


def invariants_text(scheme: SwapScheme) -> str:
    """The swapping invariants of this scheme in words (Definition 5.4)."""
    match = " x ".join(scheme.match) if scheme.match else "(all records)"
    return (
        f"counts by {match} x {' x '.join(scheme.swap)} (n_jk) and by "
        f"{match} x holding variables (n_jl)"
    )


def report_json(report: dict[str, Any]) -> str:
    """Strict JSON: an infinite ε is ``null`` there, with the reason beside it."""
    return json.dumps(report, indent=2, allow_nan=False) + "\n"


def run_swap(
    data_dir: str | Path,
    output: str | Path,
    request: SwapRequest,
    *,
    overwrite: bool = False,
) -> dict[str, Any]:
    """The whole run, as the command line does it; returns the report."""
    started = time.perf_counter()
    data = load(data_dir)
    loaded = time.perf_counter() - started
    outcome = swap(data, request)
    check(data, outcome)
    return write(
        data,
        outcome,
        output,
        overwrite=overwrite,
        delta=request.delta,
        extra_timings={"load": loaded},
    )


def parse_columns(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"A,B"`` → ``("A", "B")`` (spaces ignored; an empty string is no column)."""
    if not isinstance(text, str):
        return tuple(text)
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_two_way(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``"ROW,COL"``; each side may join variables with ``+`` (``TABBLKST+TABBLKCOU,TEN``)."""
    sides = [part.strip() for part in text.split(",")]
    if len(sides) != 2 or not all(sides):
        raise ValueError(f"--two-way needs ROW,COL (use + to combine variables), got {text!r}")
    rows, cols = (tuple(name.strip() for name in side.split("+") if name.strip()) for side in sides)
    return rows, cols
