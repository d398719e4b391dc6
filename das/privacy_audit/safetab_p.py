"""Audit SafeTab-P: a synthetic population D, D′ = D + the person the stability is built for.

The neighbour. Stability Δ = h_r·max(2, max_race_codes) + h_e counts a person who, at one
(iteration level, geography filter), is in one *alone-or-in-any-combination* iteration per race
code and one ethnicity iteration. The added person is searched for in the spec files: race
codes chosen greedily (the code adding the most budget-weighted combination iterations over
the tabulated (iteration level, filter) pairs, up to ``max_race_codes``), then the QSPAN code
adding the most. With the 2020 specs (and the demo specs) this person is in 9 groups at every
tabulated level — exactly Δ. They live in a block inside a place and an AIANNH area when the
synthetic geography has one, so every tabulated geography level sees them. Age and sex are
fixed (they choose which stage-2 cell moves, not how many).

What moves, per population-group level, comes from the engine itself: ``measure_level`` is run
on D and on D′ with :class:`~das.privacy_audit.neighbours.ExactAnswers` (no noise) and with
thresholds that force every group into workload w, for w = 0 (the totals, i.e. the stage-1
query) over the whole key set, and for w = 1, 2, 3 (the stage-2 cells) over the entities where a
total moved — an added person moves a group's cells only if it moves the group's total (the
cells partition the group). Trials then redraw exactly those answers, stage 1 and stage 2 with
the workload each trial's stage-1 answer selects.

Rows: one per population-group level (claim: the level's budget, composed as the ledger does)
and one per pass (all its levels; claim: the pass total). US and PR are audited with their own
added person (the passes hold disjoint people).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das.io.safetab_p import (
    NOT_IN_AIANNH,
    NOT_IN_PLACE,
    RACE_COLUMNS,
    block_id,
    read_grf_c,
    read_person_records,
)
from das.privacy.accounting import Measurement, compose
from das.privacy.mechanisms import Mechanism
from das.privacy_audit.audit import (
    DEFAULT_CONFIDENCE,
    DEFAULT_DELTA,
    DEFAULT_PRODUCT_TRIALS,
    AuditReport,
    Composite,
    Family,
    audited,
)
from das.privacy_audit.neighbours import (
    N_WORKLOADS,
    AdaptiveGroups,
    ExactAnswers,
    MovedQuery,
    Moves,
)
from das.safetab_p.iterations import IterationFilter, combination_incidence, iteration_filter
from das.safetab_p.keys import GeographyEntities, geography_entities, pass_blocks
from das.safetab_p.measure import (
    N_BINS,
    N_SEX,
    AggregatedPersons,
    LevelMeasurement,
    aggregate_persons,
    measure_level,
)
from das.safetab_p.plan import plan_safetab_p
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import PopulationGroupLevel, SafeTabPConfig, load_safetab_p_config
from das.specs.race_specs import SPEC_FILES, TRUE, RaceEthnicitySpecs, load_race_specs
from das.synth.safetab_p import CONFIG_FILE, generate_safetab_p

DEFAULT_PERSONS = 3_000  # synthetic population D: small, but with places and AIANNH areas
POPULATION_SEED = 2020  # D is synthetic and public; a fixed seed makes the neighbour repeatable
PERSON_AGE = 30
PERSON_SEX = 2
PASSES = ("US", "PR")

# Thresholds that put every group in workload w whatever its (non-negative, exact) total.
_FAR = 10**15
FORCED_THRESHOLDS = ((_FAR, _FAR + 1, _FAR + 2), (-1, _FAR, _FAR + 1), (-2, -1, _FAR), (-3, -2, -1))

DrawOverride = Callable[[Measurement], Mechanism]


@dataclass(frozen=True)
class AddedPerson:
    """The person added to D: race codes (0 = Null), QSPAN, age, sex."""

    race_codes: tuple[int, ...]
    qspan: int
    age: int = PERSON_AGE
    sex: int = PERSON_SEX

    def record(self, block: pd.Series, columns: pd.Index, dtypes: pd.Series) -> pd.DataFrame:
        """One person-records row (engine form) living in ``block``."""
        codes = list(self.race_codes) + [0] * (len(RACE_COLUMNS) - len(self.race_codes))
        values: dict[str, Any] = {
            "QAGE": self.age,
            "QSEX": self.sex,
            "HOUSEHOLDER": False,
            "TABBLKST": block["TABBLKST"],
            "TABBLKCOU": block["TABBLKCOU"],
            "TABTRACTCE": block["TABTRACTCE"],
            "TABBLK": block["TABBLK"],
            "CENRACE": 63,  # not read by SafeTab-P's measurement
            "QSPAN": self.qspan,
            **dict(zip(RACE_COLUMNS, codes, strict=True)),
        }
        frame = pd.DataFrame({name: [values[name]] for name in columns})
        return frame.astype(dtypes.to_dict())


def _group_counts(
    specs: RaceEthnicitySpecs,
    race_codes: np.ndarray,
    qspan: np.ndarray,
    weights: dict[tuple[int, bool], float],
    *,
    combination_only: bool,
) -> np.ndarray:
    """Budget-weighted number of groups of each candidate (rows) over the weighted filters."""
    score = np.zeros(race_codes.shape[0])
    for (iteration_level, state_or_above), weight in weights.items():
        selected = iteration_filter(specs, iteration_level, state_or_above)
        incidence = combination_incidence(specs, race_codes, qspan, selected).tocsc()
        if combination_only:
            incidence = incidence[:, specs.alone[selected.index] != TRUE]
        score += weight * np.asarray(incidence.sum(axis=1)).ravel()
    return score


def worst_case_person(
    specs: RaceEthnicitySpecs, weights: dict[tuple[int, bool], float], max_codes: int
) -> AddedPerson:
    """Greedy search for the person in the most (budget-weighted) population groups."""
    all_codes = specs.code.astype(np.int64)
    slots = len(RACE_COLUMNS)
    chosen: list[int] = []
    best_score = 0.0
    no_ethnicity = np.zeros(all_codes.size, dtype=np.int16)
    for _ in range(min(max_codes, slots)):
        candidates = all_codes[~np.isin(all_codes, chosen)]
        rows = np.zeros((candidates.size, slots), dtype=np.int16)
        rows[:, : len(chosen)] = chosen
        rows[:, len(chosen)] = candidates
        score = _group_counts(
            specs, rows, no_ethnicity[: candidates.size], weights, combination_only=True
        )
        pick = int(np.argmax(score))
        if score[pick] <= best_score:
            break
        best_score = float(score[pick])
        chosen.append(int(candidates[pick]))
    rows = np.zeros((all_codes.size, slots), dtype=np.int16)
    rows[:, : len(chosen)] = chosen
    score = _group_counts(specs, rows, all_codes.astype(np.int16), weights, combination_only=False)
    return AddedPerson(race_codes=tuple(chosen), qspan=int(all_codes[int(np.argmax(score))]))


def _block_score(blocks: pd.DataFrame, levels: list[PopulationGroupLevel]) -> np.ndarray:
    """How many tabulated geography levels each block is in (places and AIANNH areas vary)."""
    geographies = {level.geography.value.removeprefix("PR-") for level in levels}
    score = np.zeros(len(blocks), dtype=np.int64)
    if "PLACE" in geographies:
        score += (blocks["PLACEFP"].to_numpy() != NOT_IN_PLACE).astype(np.int64)
    if "AIANNH" in geographies:
        score += (blocks["AIANNHCE"].to_numpy() != NOT_IN_AIANNH).astype(np.int64)
    return score


def synthetic_population(
    config_path: Path, specs_dir: Path, persons: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """D: ``das synth safetab-p`` output for this config and its specs, read back (engine form)."""
    with tempfile.TemporaryDirectory(prefix="das-audit-") as scratch:
        parameters = Path(scratch) / "parameters"
        parameters.mkdir()
        for name in SPEC_FILES:
            shutil.copyfile(specs_dir / name, parameters / name)
        shutil.copyfile(config_path, parameters / CONFIG_FILE)
        data = Path(scratch) / "data"
        generate_safetab_p(data, persons, seed, parameters)
        return read_person_records(data / "person-records.txt"), read_grf_c(data / "GRF-C.txt")


def _restrict(entities: GeographyEntities, keep: np.ndarray) -> GeographyEntities:
    """The same geography limited to the entities ``keep`` (indices, sorted), re-indexed."""
    new_index = np.full(entities.size, -1, dtype=np.int64)
    new_index[keep] = np.arange(keep.size)
    mapped = np.where(entities.block_entity >= 0, new_index[entities.block_entity], -1)
    return GeographyEntities(entities.geography, entities.region_ids[keep], mapped)


@dataclass(frozen=True)
class _World:
    """One input (D or D′) of a pass, aggregated as the engine does, incidences cached."""

    agg: AggregatedPersons
    incidences: dict[tuple[int, bool], Any]

    def incidence(
        self, specs: RaceEthnicitySpecs, key: tuple[int, bool], selected: IterationFilter
    ) -> Any:
        if key not in self.incidences:
            self.incidences[key] = combination_incidence(
                specs, self.agg.race_codes, self.agg.qspan, selected
            )
        return self.incidences[key]


def _exact(
    world: _World,
    specs: RaceEthnicitySpecs,
    key: tuple[int, bool],
    selected: IterationFilter,
    entities: GeographyEntities,
    stages: dict[str, Measurement],
    workload: int,
) -> LevelMeasurement:
    """The engine's measurement of one level with no noise, every group forced into
    ``workload`` (0: the totals, i.e. the stage-1 query; 1–3: the stage-2 cells)."""
    codes = specs.iteration_code[selected.index].astype(np.int64)
    return measure_level(
        world.agg,
        entities,
        selected,
        codes,
        world.incidence(specs, key, selected),
        stages,
        FORCED_THRESHOLDS[workload],
        ExactAnswers(),
        None,
    )


def level_moves(
    config: SafeTabPConfig,
    specs: RaceEthnicitySpecs,
    level: PopulationGroupLevel,
    stages: dict[str, Measurement],
    blocks: pd.DataFrame,
    worlds: tuple[_World, _World],
    draw: DrawOverride | None = None,
) -> tuple[list[Moves], int]:
    """The answers of one level the person moves (engine on D and D′), and the groups moved."""
    geography = level.geography
    key = (level.iteration_level, geography.is_state_or_above)
    selected = iteration_filter(specs, *key)
    entities = geography_entities(blocks, geography)
    before, after = (_exact(w, specs, key, selected, entities, stages, 0).total for w in worlds)
    moved = np.flatnonzero(after != before)
    total_only = np.tile(selected.total_only, entities.size)
    moves: list[Moves] = []
    only = moved[total_only[moved]]
    if only.size:
        measurement = stages["total-only"]
        moves.append(
            MovedQuery(
                measurement.name,
                measurement.mechanism,
                after[only] - before[only],
                None if draw is None else draw(measurement),
            )
        )
    adaptive = moved[~total_only[moved]]
    if adaptive.size:
        stage_2 = _stage_2_moves(specs, stages, entities, worlds, key, selected, adaptive)
        stage_1, stage_2_measurement = stages["stage-1"], stages["stage-2"]
        moves.append(
            AdaptiveGroups(
                name=str(stage_1.partition),
                stage_1=stage_1.mechanism,
                stage_2=stage_2_measurement.mechanism,
                thresholds=np.asarray(config.thresholds[level], dtype=np.int64),
                totals=before[adaptive],
                total_delta=after[adaptive] - before[adaptive],
                cell_delta=stage_2,
                draw_stage_1=None if draw is None else draw(stage_1),
                draw_stage_2=None if draw is None else draw(stage_2_measurement),
            )
        )
    return moves, int(moved.size)


def _stage_2_moves(
    specs: RaceEthnicitySpecs,
    stages: dict[str, Measurement],
    entities: GeographyEntities,
    worlds: tuple[_World, _World],
    key: tuple[int, bool],
    selected: IterationFilter,
    adaptive: np.ndarray,
) -> np.ndarray:
    """(k, 4, m) moves of the stage-2 answers of the k adaptive groups, per forced workload.

    Workload 0 measures the total (its move is the total's); workloads 1–3 are computed by the
    engine on the entities holding the groups (the rest of the key set does not move).
    """
    n_columns = selected.size
    entity, column = adaptive // n_columns, adaptive % n_columns
    kept = np.unique(entity)
    restricted = _restrict(entities, kept)
    local_adaptive = np.flatnonzero(~np.tile(selected.total_only, kept.size))
    rows = np.searchsorted(local_adaptive, np.searchsorted(kept, entity) * n_columns + column)
    changes = []
    for workload in range(N_WORKLOADS):
        before, after = (
            _exact(w, specs, key, selected, restricted, stages, workload) for w in worlds
        )
        if workload == 0:
            change = (after.total - before.total)[local_adaptive][rows][:, None]
        else:
            width = int(N_SEX * N_BINS[workload])
            change = (after.cell_count - before.cell_count).reshape(-1, width)[rows]
        changes.append(change)
    width = max(int(np.count_nonzero(change, axis=1).max()) for change in changes)
    cell_delta = np.zeros((adaptive.size, N_WORKLOADS, max(width, 1)), dtype=np.int64)
    for workload, change in enumerate(changes):
        # Moved cells first (a stable sort of "is zero"), then cut to the common width.
        order = np.argsort(change == 0, axis=1, kind="stable")
        packed = np.take_along_axis(change, order, axis=1)[:, : cell_delta.shape[2]]
        cell_delta[:, workload, : packed.shape[1]] = packed
    return cell_delta


def _plan_by_level(plan: list[Measurement]) -> dict[str, dict[str, Measurement]]:
    grouped: dict[str, dict[str, Measurement]] = {}
    for measurement in plan:
        grouped.setdefault(str(measurement.partition), {})[str(measurement.metadata["stage"])] = (
            measurement
        )
    return grouped


def _filter_weights(
    config: SafeTabPConfig, levels: list[PopulationGroupLevel]
) -> dict[tuple[int, bool], float]:
    """Budget per (iteration level, state-or-above filter) of the levels: the search's weights."""
    weights: dict[tuple[int, bool], float] = {}
    for level in levels:
        key = (level.iteration_level, level.geography.is_state_or_above)
        weights[key] = weights.get(key, 0.0) + float(config.budgets[level])
    return weights


def _describe(
    person: AddedPerson, specs: RaceEthnicitySpecs, block: pd.Series, pass_name: str
) -> dict[str, Any]:
    names = dict(zip(specs.code.tolist(), specs.code_name.tolist(), strict=True))
    frame = block.to_frame().T
    return {
        "pass": pass_name,
        "race_codes": [f"{code:04d}" for code in person.race_codes],
        "race_code_names": [names.get(code, "?") for code in person.race_codes],
        "qspan": f"{person.qspan:04d}",
        "qspan_name": names.get(person.qspan, "?"),
        "age": person.age,
        "sex": person.sex,
        "block": str(block_id(frame)[0]),
        "place": f"{int(block['PLACEFP']):05d}",
        "aiannh": f"{int(block['AIANNHCE']):04d}",
    }


def audit_safetab_p(
    config_path: str | Path,
    *,
    trials: int = DEFAULT_PRODUCT_TRIALS,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    rng: Any = None,
    specs_dir: str | Path | None = None,
    persons: int = DEFAULT_PERSONS,
    population_seed: int = POPULATION_SEED,
    stability_override: int | None = None,
    draw: DrawOverride | None = None,
) -> AuditReport:
    """Claimed versus lower bound for every tabulated level and pass of a SafeTab-P config.

    The spec files sit beside the config (or in ``specs_dir``). ``stability_override`` and
    ``draw`` exist for the self-test's broken copies (a planner told the wrong stability, a
    mechanism drawing other noise than it claims); a real audit leaves them None.
    """
    config_path = Path(config_path)
    directory = Path(specs_dir) if specs_dir is not None else config_path.parent
    config = load_safetab_p_config(config_path)
    specs = load_race_specs(directory)
    true_stability = stability(specs, config.max_race_codes)
    plan = plan_safetab_p(
        config,
        true_stability if stability_override is None else stability_override,
        detailed_only_levels(specs),
    )
    by_level = _plan_by_level(plan)
    people, grfc = synthetic_population(config_path, directory, persons, population_seed)

    families: list[Family] = []
    composites: list[Composite] = []
    neighbours: list[dict[str, Any]] = []
    people_by_weights: dict[tuple, AddedPerson] = {}
    for pass_name in PASSES:
        levels = [lv for lv in config.tabulated_levels() if lv.geography.pass_name == pass_name]
        blocks = pass_blocks(grfc, config, pass_name)
        if not levels or len(blocks) == 0:
            continue
        weights = _filter_weights(config, levels)
        key = tuple(sorted(weights.items()))
        if key not in people_by_weights:  # the PR pass usually has the US pass's weights
            people_by_weights[key] = worst_case_person(specs, weights, config.max_race_codes)
        person = people_by_weights[key]
        block = blocks.iloc[int(np.argmax(_block_score(blocks, levels)))]
        added = person.record(block, people.columns, people.dtypes)
        worlds = (
            _World(aggregate_persons(people, blocks), {}),
            _World(aggregate_persons(pd.concat([people, added], ignore_index=True), blocks), {}),
        )
        groups: dict[str, int] = {}
        names: list[str] = []
        for level in levels:
            name = f"{pass_name}/{level.geography.value}/{level.iteration_level}"
            stages = by_level[name]
            moves, groups[name] = level_moves(config, specs, level, stages, blocks, worlds, draw)
            families.append(
                Family(name, config.privacy_defn.value, compose(stages.values()), tuple(moves),
                       measurements=len(stages))
            )  # fmt: skip
            names.append(name)
        pass_plan = [m for m in plan if m.metadata["pass"] == pass_name]
        composites.append(Composite(f"{pass_name} pass", tuple(names), compose(pass_plan)))
        description = _describe(person, specs, block, pass_name)
        description["groups_per_level"] = groups
        description["stability"] = true_stability
        neighbours.append(description)

    by_name = {family.name: family for family in families}
    for description in neighbours:
        members = [f for name, f in by_name.items() if name.startswith(f"{description['pass']}/")]
        description["levels_moved"] = sum(1 for f in members if f.cells_moved)
        description["measurements_moved"] = sum(f.measurements_moved for f in members)
        description["cells_moved"] = sum(f.cells_moved for f in members)
    return audited(
        "safetab-p",
        f"Privacy audit: SafeTab-P, {config_path}",
        families,
        composites,
        trials=trials,
        confidence=confidence,
        delta=delta,
        rng=rng,
        neighbours=neighbours,
        notes=(
            f"D: {persons} synthetic persons (das synth, seed {population_seed}); D′ = D plus "
            "the person described above, per pass. Stage-1 and stage-2 answers of every group "
            "they are in are redrawn per trial, the stage-2 workload chosen from the trial's "
            "stage-1 answer exactly as the engine does.",
        ),
    )
