"""Simulation (beyond the spreadsheets): the real engine, R times, on a synthetic population.

SafeTab-P, per replicate r (noise seeded with ``seed + r``: a simulation is never a release):

1. the release as configured: :func:`das.safetab_p.engine.run_safetab_p` → which rows the
   zero suppression removed;
2. the same noise again (every draw replayed) with suppression off → every group's noisy
   answers, so errors are measured on all of them and not only on the rows that survived;
3. the same stage-1 noise with no stage-2 and no total-only noise → the exact answers of the
   very workloads the noisy run chose (the device of ``tests/test_safetab_accuracy.py``).

From those: per level, errors of stage-2 cells (T2 cells and workload-0 totals) against the
predicted 95% MOE, and T1 totals by workload against their predicted MOE; the empirical
workload rates against the predicted curves (by true size n); the empirical suppression rate
of workload-0 sub-state groups against the predicted curve. Coterminous copies are included
as released (a member's rows come from its donor).

PHSafe, per replicate: :func:`das.phsafe.engine.run_phsafe` (seeded), then
:func:`das.postprocess.phsafe.postprocess_phsafe`, judged against an infinite-budget run by
:func:`das.postprocess.accuracy.evaluate` (within-MOE shares, credible-interval coverage) and, per
query, the empirical 90% error quantile against the predicted MOE.

Only aggregates leave this module (shares, quantiles, binned rates), never a cell. Work is
split in steps; a cancelled job stops at the next step.
"""

from __future__ import annotations

import math
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from das.io.phsafe import input_paths, read_geo, read_persons, read_units
from das.io.safetab_p import grf_c_path, person_records_path, read_grf_c, read_person_records
from das.phsafe.engine import run_phsafe
from das.phsafe.plan import PHSAFE_CONFIDENCE, plan_phsafe
from das.postprocess.accuracy import AccuracyReport, evaluate
from das.postprocess.phsafe import postprocess_phsafe
from das.privacy import calculators
from das.privacy.accounting import Measurement
from das.privacy.distributions import margin_of_error, suppression_threshold
from das.privacy.mechanisms import release_draw
from das.privacy.rng import seeded_rng
from das.safetab_p.coterminous import coterminous_sets
from das.safetab_p.engine import run_safetab_p
from das.safetab_p.iterations import iteration_filter
from das.safetab_p.keys import geography_entities, pass_blocks
from das.safetab_p.plan import SAFETAB_CONFIDENCE, plan_safetab_p
from das.safetab_p.stability import detailed_only_levels, stability
from das.specs.config import SafeTabGeography
from das.specs.race_specs import load_race_specs
from explorer.params import ParameterError, phsafe_config, safetab_p_config
from explorer.safetab import LEVEL_BY_KEY, WORKLOAD_CELLS

# A suppression chance this small puts T far below 0: nothing is suppressed (runs 2 and 3).
NO_SUPPRESSION = 1e-12
KEYS = ["REGION_ID", "REGION_TYPE", "ITERATION_CODE"]
CELL_KEYS = [*KEYS, "AGESTART", "AGEEND", "SEX"]
WORKLOAD_BY_CELLS = {0: 0, 8: 1, 18: 2, 46: 3}


class Cancelled(Exception):
    """The user cancelled the job; it stopped between two steps."""


Progress = Callable[[float, str], None]


# ------------------------------------------------------------------------------ jobs
@dataclass
class Job:
    """A long computation running in a thread, with a progress fraction and a cancel flag.

    ``message`` is the step under way; :meth:`summary` the sentence the page shows for the job
    (what runs and its step, or how it ended and how long it took).
    """

    kind: str
    title: str = "Simulation"
    detail: str = ""
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    status: str = "running"
    progress: float = 0.0
    message: str = "starting"
    result: Any = None
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event)

    @property
    def seconds(self) -> float:
        return round((self.finished or time.monotonic()) - self.started, 1)

    def summary(self) -> str:
        took = f"{self.seconds:.1f} s"
        if self.status == "done":
            return f"{self.title} finished: {self.detail} in {took}"
        if self.status == "cancelled":
            return f"{self.title} cancelled after {took} (during: {self.message})"
        if self.status == "failed":
            lines = (self.error or "").strip().splitlines()
            return f"{self.title} failed after {took}: {lines[0] if lines else 'no message'}"
        if self.cancel_event.is_set():
            return f"{self.title}: cancelling after the current step ({self.message})"
        return f"{self.title}, {self.detail}: {self.message} ({took})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "progress": self.progress,
            "message": self.message,
            "summary": self.summary(),
            "seconds": self.seconds,
            "result": self.result if self.status == "done" else None,
            "error": self.error,
        }


class JobManager:
    """One job at a time (the machine has few cores); finished jobs are kept for the page."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(
        self,
        kind: str,
        work: Callable[[Progress, Callable[[], None]], Any],
        title: str = "Simulation",
        detail: str = "",
    ) -> Job:
        with self._lock:
            if any(job.status == "running" for job in self._jobs.values()):
                raise ParameterError("a simulation is already running: wait or cancel it")
            job = Job(kind, title, detail)
            self._jobs[job.id] = job

        def progress(fraction: float, message: str) -> None:
            job.progress, job.message = max(0.0, min(1.0, fraction)), message

        def checkpoint() -> None:
            if job.cancel_event.is_set():
                raise Cancelled

        def run() -> None:
            try:
                job.result = work(progress, checkpoint)
                job.progress, job.status = 1.0, "done"
            except Cancelled:
                job.status = "cancelled"
            except (ParameterError, ValueError, ArithmeticError, FileNotFoundError) as exc:
                job.status, job.error = "failed", str(exc)
            except Exception as exc:  # shown on the page; the traceback names no data value
                job.status = "failed"
                job.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
            finally:
                job.finished = time.monotonic()

        threading.Thread(target=run, name=f"explorer-{kind}-{job.id}", daemon=True).start()
        return job

    def get(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise ParameterError(f"no job {job_id!r}") from None

    def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        job.cancel_event.set()
        return job


# ------------------------------------------------------------------------------ noise providers
class _Recorder:
    """Noise provider: seeded draws, kept by measurement name for the replays (no ledger)."""

    def __init__(self, seed: int) -> None:
        self.rng = seeded_rng(seed)
        self.draws: dict[str, np.ndarray] = {}

    def noise_for(self, measurement: Measurement, size: int, accountant: Any) -> np.ndarray:
        noise = release_draw(measurement.mechanism, size, self.rng)  # as a release draws
        self.draws[measurement.name] = noise
        return noise


class _Replay:
    """Replays the recorded draws; the stages named in ``silent`` get no noise at all."""

    def __init__(self, recorded: _Recorder, silent: tuple[str, ...] = ()) -> None:
        self.recorded = recorded
        self.silent = silent

    def noise_for(self, measurement: Measurement, size: int, accountant: Any) -> np.ndarray:
        if measurement.metadata["stage"] in self.silent:
            return np.zeros(size, dtype=np.int64)
        noise = self.recorded.draws[measurement.name]
        if noise.size != size:
            raise RuntimeError(f"{measurement.name}: replay size differs from the recorded draw")
        return noise


# ------------------------------------------------------------------------------ SafeTab-P
def _size_bins(top: float, around: tuple[int, ...] = ()) -> np.ndarray:
    """Bin edges over [0, top]: log-spaced, with edges at each threshold."""
    edges = np.unique(np.r_[0, np.geomspace(1, max(top, 2), 40).round(), list(around)])
    return edges.astype(np.float64)


def _binned(
    sizes: np.ndarray, outcome: np.ndarray, predicted: np.ndarray, edges: np.ndarray
) -> dict[str, list]:
    """Per bin of true size: groups, empirical mean outcome, mean predicted probability."""
    index = np.clip(np.digitize(sizes, edges) - 1, 0, edges.size - 2)
    groups = np.bincount(index, minlength=edges.size - 1)
    keep = groups > 0
    centre = np.bincount(index, weights=sizes, minlength=edges.size - 1)
    out: dict[str, list] = {
        "n": (centre[keep] / groups[keep]).tolist(),
        "groups": groups[keep].tolist(),
    }
    out["empirical"] = []
    out["predicted"] = []
    for column in range(outcome.shape[1]):
        empirical = np.bincount(index, weights=outcome[:, column], minlength=edges.size - 1)
        predicted_sum = np.bincount(index, weights=predicted[:, column], minlength=edges.size - 1)
        out["empirical"].append((empirical[keep] / groups[keep]).tolist())
        out["predicted"].append((predicted_sum[keep] / groups[keep]).tolist())
    return out


@dataclass
class _LevelStats:
    cell_errors: list[np.ndarray] = field(default_factory=list)
    total_errors: dict[int, list[np.ndarray]] = field(default_factory=dict)
    sizes: list[np.ndarray] = field(default_factory=list)
    workloads: list[np.ndarray] = field(default_factory=list)
    w0_sizes: list[np.ndarray] = field(default_factory=list)
    w0_suppressed: list[np.ndarray] = field(default_factory=list)


def _workloads(t1: pd.DataFrame, t2: pd.DataFrame) -> np.ndarray:
    """Each T1 group's workload, from the number of its T2 cells (none: workload 0)."""
    cells = t2.loc[t2["AGESTART"] != "*", KEYS]
    counts = cells.groupby(KEYS, sort=False).size().rename("cells").reset_index()
    merged = t1[KEYS].merge(counts, on=KEYS, how="left")
    n_cells = merged["cells"].fillna(0).to_numpy().astype(np.int64)
    return np.vectorize(WORKLOAD_BY_CELLS.get, otypes=[np.int64])(n_cells)


def _iteration_levels(specs: Any) -> dict[str, int]:
    return {
        f"{int(code):04d}": int(level)
        for code, level in zip(specs.iteration_code, specs.level, strict=True)
    }


def _total_only_codes(specs: Any) -> set[str]:
    codes = set()
    for level in (1, 2):
        selected = iteration_filter(specs, level, True)
        chosen = specs.iteration_code[selected.index[selected.total_only]]
        codes.update(f"{int(code):04d}" for code in chosen)
    return codes


def _coterminous_regions(config: Any, grfc: pd.DataFrame) -> pd.DataFrame:
    """(REGION_TYPE, REGION_ID) of every entity in a coterminous set, as the engine finds them.

    Their rows are copied from a donor after suppression, so their workload and suppression
    are the donor's: the rate statistics leave them out (their errors are kept).
    """
    parts = []
    for pass_name in ("US", "PR"):
        levels = [lv for lv in config.tabulated_levels() if lv.geography.pass_name == pass_name]
        if not levels:
            continue
        blocks = pass_blocks(grfc, config, pass_name)
        geographies = [g for g in SafeTabGeography if any(lv.geography is g for lv in levels)]
        sets = coterminous_sets([geography_entities(blocks, g) for g in geographies])
        parts.append(sets[["REGION_TYPE", "REGION_ID"]].astype(str))
    if not parts:
        return pd.DataFrame({"REGION_TYPE": [], "REGION_ID": []})
    return pd.concat(parts, ignore_index=True).drop_duplicates()


def simulate_safetab_p(
    state: dict[str, Any],
    data_dir: Path,
    replicates: int,
    seed: int,
    progress: Progress,
    checkpoint: Callable[[], None],
) -> dict[str, Any]:
    """R replicates of the SafeTab-P engine on the population in ``data_dir`` (see module doc)."""
    config = safetab_p_config(state["config"])
    progress(0.0, "reading the synthetic population")
    specs = load_race_specs(data_dir)
    persons = read_person_records(person_records_path(data_dir))
    grfc = read_grf_c(grf_c_path(data_dir))
    stability_value = stability(specs, config.max_race_codes)
    plan = plan_safetab_p(config, stability_value, detailed_only_levels(specs))
    by_partition: dict[str, dict[str, Measurement]] = {}
    for item in plan:
        by_partition.setdefault(str(item.partition), {})[str(item.metadata["stage"])] = item
    quiet = config.model_copy(update={"zero_suppression_chance": NO_SUPPRESSION})
    level_of_code = _iteration_levels(specs)
    total_only_codes = _total_only_codes(specs)
    state_or_above = {g.value for g in SafeTabGeography if g.is_state_or_above}
    coterminous = _coterminous_regions(config, grfc).assign(COTERMINOUS=True)
    stats: dict[str, _LevelStats] = {}
    steps = 3 * replicates
    for replicate in range(replicates):
        recorder = _Recorder(seed + replicate)
        runs = {}
        for step, (name, run_config, rng) in enumerate(
            (
                ("release", config, recorder),
                ("unsuppressed", quiet, _Replay(recorder)),
                ("exact", quiet, _Replay(recorder, ("stage-2", "total-only"))),
            )
        ):
            checkpoint()
            progress(
                (3 * replicate + step) / steps,
                f"replicate {replicate + 1}/{replicates}: {name} run",
            )
            runs[name] = run_safetab_p(run_config, specs, persons, grfc, rng=rng)
        noisy, exact, release = runs["unsuppressed"], runs["exact"], runs["release"]
        t1 = exact.t1[[*KEYS, "COUNT"]].rename(columns={"COUNT": "TRUE"})
        t1 = t1.merge(noisy.t1[[*KEYS, "COUNT"]], on=KEYS, how="inner")
        t1["WORKLOAD"] = _workloads(t1, noisy.t2)
        released = release.t1[KEYS].assign(RELEASED=True)
        t1 = t1.merge(released, on=KEYS, how="left")
        t1["RELEASED"] = t1["RELEASED"].fillna(False).astype(bool)
        t1["LEVEL"] = t1["ITERATION_CODE"].map(level_of_code)
        t1 = t1.merge(coterminous, on=["REGION_TYPE", "REGION_ID"], how="left")
        t1["COTERMINOUS"] = t1["COTERMINOUS"].fillna(False).astype(bool)
        t1["TOTAL_ONLY"] = t1["REGION_TYPE"].isin(state_or_above) & t1["ITERATION_CODE"].isin(
            total_only_codes
        )
        cells = noisy.t2.loc[noisy.t2["AGESTART"] != "*", [*CELL_KEYS, "COUNT"]]
        cells = cells.merge(
            exact.t2[[*CELL_KEYS, "COUNT"]].rename(columns={"COUNT": "TRUE"}),
            on=CELL_KEYS,
            how="inner",
        )
        cells["LEVEL"] = cells["ITERATION_CODE"].map(level_of_code)
        for (geography, level), part in t1.groupby(["REGION_TYPE", "LEVEL"], sort=False):
            key = f"({geography}, {int(level)})"
            entry = stats.setdefault(key, _LevelStats())
            adaptive = part.loc[~part["TOTAL_ONLY"]]
            error = (adaptive["COUNT"] - adaptive["TRUE"]).to_numpy()
            workload = adaptive["WORKLOAD"].to_numpy()
            for w in range(4):
                entry.total_errors.setdefault(w, []).append(np.abs(error[workload == w]))
            entry.cell_errors.append(np.abs(error[workload == 0]))
            alone = adaptive.loc[~adaptive["COTERMINOUS"]]
            entry.sizes.append(alone["TRUE"].to_numpy())
            entry.workloads.append(alone["WORKLOAD"].to_numpy())
            if geography not in state_or_above:
                zero = alone.loc[alone["WORKLOAD"] == 0]
                entry.w0_sizes.append(zero["TRUE"].to_numpy())
                entry.w0_suppressed.append(~zero["RELEASED"].to_numpy())
        for (geography, level), part in cells.groupby(["REGION_TYPE", "LEVEL"], sort=False):
            key = f"({geography}, {int(level)})"
            stats.setdefault(key, _LevelStats()).cell_errors.append(
                np.abs((part["COUNT"] - part["TRUE"]).to_numpy())
            )
    checkpoint()
    progress(0.99, "summarizing the replicates")
    levels = {}
    for key, entry in stats.items():
        geography = key[1:-1].split(",")[0]
        level = int(key[-2])
        pass_name = SafeTabGeography(geography).pass_name
        stages = by_partition.get(f"{pass_name}/{geography}/{level}")
        if stages is None or "stage-2" not in stages:
            continue
        levels[key] = _summarize_level(
            config, stages, entry, config.thresholds.get(LEVEL_BY_KEY[key])
        )

    return {
        "product": "safetab-p",
        "replicates": replicates,
        "seed": seed,
        "stability": stability_value,
        "levels": levels,
    }


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _error_summary(errors: np.ndarray, moe: float, confidence: float) -> dict[str, Any]:
    if errors.size == 0:
        return {"count": 0, "within_moe": None, "quantile": None, "predicted_moe": moe}
    return {
        "count": int(errors.size),
        "within_moe": float(np.mean(errors <= moe)),
        "quantile": float(np.quantile(errors, confidence)),
        "predicted_moe": moe,
    }


def _summarize_level(
    config: Any, stages: dict[str, Measurement], entry: _LevelStats, thresholds: Any
) -> dict[str, Any]:
    stage_2 = stages["stage-2"].mechanism
    moe = float(margin_of_error(stage_2.distribution, SAFETAB_CONFIDENCE))
    totals = {}
    for w, parts in entry.total_errors.items():
        predicted = float(
            calculators.sum_moe(stage_2.variance, WORKLOAD_CELLS[w], SAFETAB_CONFIDENCE)
        )
        totals[str(w)] = _error_summary(_concat(parts), predicted, SAFETAB_CONFIDENCE)
    out: dict[str, Any] = {
        "cells": _error_summary(_concat(entry.cell_errors), moe, SAFETAB_CONFIDENCE),
        "totals_by_workload": totals,
    }
    sizes = _concat(entry.sizes)
    workloads = _concat(entry.workloads).astype(np.int64)
    if sizes.size and thresholds is not None and "stage-1" in stages:
        stage_1 = stages["stage-1"].mechanism.distribution
        predicted = calculators.threshold_class_probabilities(stage_1, thresholds, sizes)
        outcome = np.eye(4)[workloads]
        edges = _size_bins(1.5 * thresholds[-1], tuple(thresholds))
        out["workload"] = _binned(sizes, outcome, predicted, edges)
    w0_sizes = _concat(entry.w0_sizes)
    if w0_sizes.size:
        threshold = suppression_threshold(stage_2.distribution, config.zero_suppression_chance)
        suppressed = _concat(entry.w0_suppressed).astype(np.float64)[:, None]
        predicted = calculators.suppression_probability(stage_2.distribution, threshold, w0_sizes)
        edges = np.unique(
            np.r_[np.linspace(0, 3 * max(threshold, 1), 31).round(), w0_sizes.max() + 1]
        )
        out["suppression"] = {
            "threshold": threshold,
            **_binned(w0_sizes, suppressed, predicted[:, None], edges),
        }
    return out


# ------------------------------------------------------------------------------ PHSafe
def _phsafe_level(frame: pd.DataFrame) -> pd.Series:
    geography = frame["REGION_TYPE"].map({"USA": "usa", "STATE": "state"})
    if "ITERATION_CODE" not in frame:
        return geography + "_*"
    code = frame["ITERATION_CODE"]
    group = np.where(code == "*", "*", np.where(code.isin(["H", "I"]), "H,I", "A-G"))
    return geography + "_" + pd.Series(group, index=frame.index)


def simulate_phsafe(
    state: dict[str, Any],
    data_dir: Path,
    replicates: int,
    seed: int,
    pass_name: str,
    interval: str,
    progress: Progress,
    checkpoint: Callable[[], None],
) -> dict[str, Any]:
    """R replicates of PHSafe and its postprocessing on the population in ``data_dir``."""
    raw = state["passes"].get(pass_name)
    if raw is None:
        raise ParameterError(f"no {pass_name} pass in the PHSafe parameters")
    config = phsafe_config(raw, f"PHSafe {pass_name}")
    progress(0.0, "reading the synthetic population")
    paths = input_paths(data_dir)
    persons, units, geo = (
        read_persons(paths["persons"]),
        read_units(paths["units"]),
        read_geo(paths["geo"]),
    )
    exact_config = config.model_copy(
        update={
            "privacy_budget": {
                key: (math.inf if budget > 0 else budget)
                for key, budget in config.privacy_budget.items()
            }
        }
    )
    checkpoint()
    progress(0.02, "exact (infinite-budget) run")
    exact = run_phsafe(exact_config, persons, units, geo)
    measurements = {
        (m.metadata["table"], f"{m.metadata['geography']}_{m.metadata['iteration_level']}"): m
        for m in plan_phsafe(config)
    }
    report: AccuracyReport | None = None
    errors: dict[tuple[str, str], list[np.ndarray]] = {}
    for replicate in range(replicates):
        checkpoint()
        progress(
            0.05 + 0.95 * replicate / replicates, f"replicate {replicate + 1}/{replicates}: engine"
        )
        noisy = run_phsafe(config, persons, units, geo, rng=seeded_rng(seed + replicate))
        checkpoint()
        progress(
            0.05 + 0.95 * (replicate + 0.3) / replicates,
            f"replicate {replicate + 1}/{replicates}: postprocessing",
        )
        estimates = postprocess_phsafe(
            noisy.tables, config, seed=seed + replicate, interval=interval
        )
        figures = evaluate(exact.tables, noisy.tables, estimates)
        report = figures if report is None else report + figures
        for table, frame in noisy.tables.items():
            if (table, "usa_*") not in measurements and (table, "state_*") not in measurements:
                continue  # derived tables repeat measured noise
            keys = [
                c for c in frame.columns if c not in ("COUNT", "NOISE_DISTRIBUTION", "VARIANCE")
            ]
            joined = frame.merge(
                exact.tables[table][[*keys, "COUNT"]], on=keys, suffixes=("", "_EXACT")
            )
            joined["LEVEL"] = _phsafe_level(joined)
            for level, part in joined.groupby("LEVEL", sort=False):
                errors.setdefault((table, str(level)), []).append(
                    np.abs((part["COUNT"] - part["COUNT_EXACT"]).to_numpy())
                )
    progress(0.99, "summarizing the replicates")
    queries = []
    for (table, level), parts in errors.items():
        measurement = measurements.get((table, level))
        if measurement is None:
            continue
        moe = float(margin_of_error(measurement.mechanism.distribution, PHSAFE_CONFIDENCE))
        queries.append(
            {"key": f"{table}/{level}", **_error_summary(_concat(parts), moe, PHSAFE_CONFIDENCE)}
        )
    assert report is not None
    figures = report.to_dict()
    return {
        "product": "phsafe",
        "pass": pass_name,
        "replicates": replicates,
        "seed": seed,
        "interval": interval,
        "queries": queries,
        "accuracy": figures,
    }
