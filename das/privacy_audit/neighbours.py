"""What the added person moves, and trials of exactly those answers, drawn by the release's code.

An audit compares a release on D with one on D′ = D + one person. Every noisy answer the
person does not move has the same distribution on both (same exact count, same mechanism) and
is drawn independently of the others, so its likelihood ratio is 1: it carries no information
about which input was used and need not be redrawn. A trial therefore draws only the moved
answers, with the *same mechanism objects a release draws with*, through the *same draw path*:
:func:`das.privacy.mechanisms.release_draw`, the blocks of ``mechanism.sample_blocks`` that the
noise store streams to disk or joins in memory (never ``mechanism.sample``, which no release
uses). It keeps one number per trial: the log-likelihood-ratio statistic of
:mod:`das.privacy_audit.attack`.

Two shapes of moved answers:

* :class:`MovedQuery` — one measurement whose cells move by a fixed integer vector ``delta``
  (PHSafe queries, SafeTab-P total-only groups, a single mechanism).
* :class:`AdaptiveGroups` — SafeTab-P's two stages for the groups the person is in. Each trial
  draws the stage-1 totals, picks each group's workload exactly as the engine does
  (``np.digitize`` on the noisy total with the level's thresholds), then draws the stage-2
  answers the person moves *in that workload*. The workload is a function of the stage-1
  answer, so the statistic of the whole transcript is the stage-1 term plus the stage-2 term
  of the chosen workload.

What moves, and by how much, is found by running the engine's own measurement functions on D
and on D′ with :class:`ExactAnswers`, a noise provider that adds nothing. It lives here, in
the audit package, so no release path can reach it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from das.privacy.accounting import Measurement
from das.privacy.mechanisms import PUREDP, Mechanism, release_draw
from das.privacy_audit.attack import log_likelihood_ratio

TRIAL_CHUNK = 1 << 17  # trials drawn per round: bounded memory at any number of trials
N_WORKLOADS = 4  # SafeTab-P stat levels 0..3


class ExactAnswers:
    """Noise provider (``draw_noise`` protocol) that draws nothing: the engine's exact answers.

    For the audit only, to see which answers a neighbour moves; it charges no accountant.
    """

    def noise_for(self, measurement: Measurement, size: int, accountant: Any) -> NDArray:
        return np.zeros(size, dtype=np.int64)


def _norm(values: NDArray, definition: str) -> float:
    """The sensitivity a move realises: L1 under pure DP, L2 under zCDP."""
    values = np.asarray(values, dtype=np.float64)
    if definition == PUREDP:
        return float(np.abs(values).sum())
    return math.sqrt(float((values**2).sum()))


def _loss(mechanism: Mechanism, norm: float) -> float:
    """The privacy loss of a move of the given norm, as the mechanism itself computes it."""
    return float(mechanism.privacy_function(norm)) if norm > 0 else 0.0


@dataclass(frozen=True)
class MovedQuery:
    """A measurement whose moved cells change by ``delta`` (D′ − D) when the person is added.

    ``mechanism`` is the claimed one (the plan's); ``draw`` replaces it for drawing in the
    self-test's broken copies, and is None for every audit of a real release path.
    """

    name: str
    mechanism: Mechanism
    delta: NDArray
    draw: Mechanism | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta", np.asarray(self.delta, dtype=np.int64).ravel())

    @property
    def drawing(self) -> Mechanism:
        return self.mechanism if self.draw is None else self.draw

    @property
    def cells_moved(self) -> int:
        return int(np.count_nonzero(self.delta))

    @property
    def measurements_moved(self) -> int:
        """Ledger measurements whose answers move: this one (if any cell moves)."""
        return int(self.cells_moved > 0)

    @property
    def realised_loss(self) -> float:
        """The exact loss of this move for the mechanism that draws: ρ = ‖d‖²/(2σ²), ε = ‖d‖₁/b."""
        return _loss(self.drawing, _norm(self.delta, self.drawing.definition))

    def statistic(self, world: int, trials: int, rng: Any) -> NDArray:
        """Per trial, the log-likelihood ratio of the moved answers (world 0 = D, 1 = D′)."""
        width = self.delta.size
        noise = release_draw(self.drawing, trials * width, rng).reshape(trials, width)
        answers = noise + world * self.delta
        return log_likelihood_ratio(self.mechanism, answers, self.delta).sum(axis=1)


@dataclass(frozen=True)
class AdaptiveGroups:
    """SafeTab-P's two-stage measurement of the ``k`` groups one level's person is in.

    ``totals`` (k) are the exact group totals on D, ``total_delta`` (k) their moves;
    ``cell_delta`` (k, 4, m) the moves of the stage-2 answers of each group under each
    workload 0..3 (workload 0 measures the total; zero-padded to m cells).
    """

    name: str
    stage_1: Mechanism
    stage_2: Mechanism
    thresholds: NDArray
    totals: NDArray
    total_delta: NDArray
    cell_delta: NDArray
    draw_stage_1: Mechanism | None = None
    draw_stage_2: Mechanism | None = None
    _groups: NDArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("thresholds", "totals", "total_delta", "cell_delta"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        k = self.totals.size
        if self.total_delta.shape != (k,) or self.cell_delta.shape[:2] != (k, N_WORKLOADS):
            raise ValueError("totals, total_delta and cell_delta disagree on the groups")
        object.__setattr__(self, "_groups", np.arange(k)[None, :])

    @property
    def drawing_1(self) -> Mechanism:
        return self.stage_1 if self.draw_stage_1 is None else self.draw_stage_1

    @property
    def drawing_2(self) -> Mechanism:
        return self.stage_2 if self.draw_stage_2 is None else self.draw_stage_2

    @property
    def groups(self) -> int:
        return int(self.totals.size)

    @property
    def cells_moved(self) -> int:
        """Stage-1 totals moved plus one stage-2 answer set per group (its largest workload)."""
        stage_2 = np.count_nonzero(self.cell_delta, axis=2).max(axis=1)
        return int(np.count_nonzero(self.total_delta) + stage_2.sum())

    @property
    def measurements_moved(self) -> int:
        """Ledger measurements whose answers move: stage 1 and stage 2."""
        stage_2 = bool(np.any(self.cell_delta))
        return int(bool(np.any(self.total_delta))) + int(stage_2)

    @property
    def realised_loss(self) -> float:
        """Exact loss of the transcript in the worst workloads (stage 1 + stage 2)."""
        definition = self.drawing_1.definition
        if definition == PUREDP:
            per_group = np.abs(self.cell_delta).sum(axis=2).max(axis=1)
            stage_2_norm = float(per_group.sum())
        else:
            per_group = (self.cell_delta.astype(np.float64) ** 2).sum(axis=2).max(axis=1)
            stage_2_norm = math.sqrt(float(per_group.sum()))
        return _loss(self.drawing_1, _norm(self.total_delta, definition)) + _loss(
            self.drawing_2, stage_2_norm
        )

    def statistic(self, world: int, trials: int, rng: Any) -> NDArray:
        k = self.groups
        noise_1 = release_draw(self.drawing_1, trials * k, rng).reshape(trials, k)
        stage_1 = noise_1 + world * self.total_delta
        workload = np.digitize(self.totals + stage_1, self.thresholds)
        result = log_likelihood_ratio(self.stage_1, stage_1, self.total_delta).sum(axis=1)
        moves = self.cell_delta[self._groups, workload]  # (trials, k, m)
        width = moves.shape[2]
        noise_2 = release_draw(self.drawing_2, trials * k * width, rng)
        noise_2 = noise_2.reshape(trials, k, width)
        stage_2 = noise_2 + world * moves
        return result + log_likelihood_ratio(self.stage_2, stage_2, moves).sum(axis=(1, 2))


Moves = MovedQuery | AdaptiveGroups


def simulate(moves: tuple[Moves, ...], world: int, trials: int, rng: Any) -> NDArray:
    """The statistic of ``trials`` independent releases on D (world 0) or D′ (world 1)."""
    out = np.zeros(trials, dtype=np.float64)
    for start in range(0, trials, TRIAL_CHUNK):
        size = min(TRIAL_CHUNK, trials - start)
        for move in moves:
            out[start : start + size] += move.statistic(world, size, rng)
    return out
