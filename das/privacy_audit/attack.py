"""The distinguishing test: a likelihood-ratio statistic and a threshold chosen on held-out trials.

Statistic. For outputs x (the noisy answers minus the answers on D) of queries whose cells the
neighbour moves by d, the Neyman–Pearson optimal test between D and D′ thresholds the log
likelihood ratio ``Σ log p(x − d) − log p(x)`` of the *claimed* noise:

* discrete Gaussian N_ℤ(σ²): ``(2·x·d − d²) / (2σ²)`` per cell (linear in x);
* two-sided geometric, scale b: ``(|x| − |x − d|) / b`` per cell (clipped at ±|d|/b).

Any function of the outputs gives a valid test, so a mechanism that draws other noise than it
claims (the self-test's broken copies) is still audited soundly; the statistic is simply the
one an auditor who trusts the claim would use.

Threshold. The trials on D and on D′ are each split in two halves. On the first halves every
candidate threshold t (reject "D" when the statistic ≥ t) is scored by the bound it would give;
the best t is then applied once to the second halves, whose rates alone enter the bound. The
chosen t is independent of the evaluation trials, so the Clopper–Pearson bounds on the second
halves keep their stated confidence (no correction for the selection is needed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from das.privacy.mechanisms import DiscreteGaussianMechanism, GeometricMechanism, Mechanism
from das.privacy_audit.bounds import clopper_pearson_upper

# Candidate thresholds scored per test: an even grid over the pooled selection sample plus a
# geometric grid into both tails (where the ε bounds of the Gaussian are found).
_EVEN_CANDIDATES = 1024
_TAIL_CANDIDATES = 512

Objective = Callable[[NDArray, NDArray], NDArray]  # (FPR upper, FNR upper) -> bound


def log_likelihood_ratio(mechanism: Mechanism, x: NDArray, d: NDArray) -> NDArray:
    """Per-cell log P[x | D′] − log P[x | D] of the claimed noise (module docstring).

    ``x`` and ``d`` are int64 arrays of the same shape (``d`` = 0 gives 0). A mechanism
    without noise reveals the answer: the statistic is then +1 where x = d and −1 where x = 0.
    """
    x = np.asarray(x, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    if not mechanism.adds_noise:
        return (x == d).astype(np.float64) - (x == 0).astype(np.float64)
    if isinstance(mechanism, DiscreteGaussianMechanism):
        twice_variance = 2.0 * float(mechanism.sigma_squared)
        return (2.0 * x * d - d.astype(np.float64) ** 2) / twice_variance
    if isinstance(mechanism, GeometricMechanism):
        return (np.abs(x) - np.abs(x - d)).astype(np.float64) / float(mechanism.scale)
    raise TypeError(f"no likelihood ratio for {type(mechanism).__name__}")


@dataclass(frozen=True)
class ThresholdTest:
    """The chosen threshold and what it did on the evaluation halves."""

    threshold: float
    evaluation_trials: int  # per world (D and D′)
    false_positives: int  # D trials with statistic ≥ threshold
    false_negatives: int  # D′ trials with statistic < threshold
    fpr_upper: float
    fnr_upper: float
    bound: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "threshold": self.threshold,
            "evaluation_trials": self.evaluation_trials,
            "fpr": self.false_positives / self.evaluation_trials,
            "fnr": self.false_negatives / self.evaluation_trials,
            "fpr_upper": self.fpr_upper,
            "fnr_upper": self.fnr_upper,
        }


def _candidates(pooled_sorted: NDArray) -> NDArray:
    """Distinct thresholds at even and tail-geometric ranks of the pooled selection sample."""
    size = pooled_sorted.size
    even = np.linspace(0, size - 1, _EVEN_CANDIDATES)
    tail = np.geomspace(1, size, _TAIL_CANDIDATES) - 1
    ranks = np.unique(np.concatenate([even, tail, size - 1 - tail]).astype(np.int64))
    return np.unique(pooled_sorted[ranks])


def _errors(null_sorted: NDArray, alt_sorted: NDArray, thresholds: NDArray) -> tuple[NDArray, ...]:
    """(false positives, false negatives) of "reject D when statistic ≥ t" for each t."""
    false_positives = null_sorted.size - np.searchsorted(null_sorted, thresholds, side="left")
    false_negatives = np.searchsorted(alt_sorted, thresholds, side="left")
    return false_positives, false_negatives


def threshold_test(
    null: NDArray,
    alternative: NDArray,
    objective: Objective,
    confidence: float,
    ranking: Objective | None = None,
) -> ThresholdTest:
    """Select a threshold on the first halves, bound the rates on the second halves.

    ``null`` / ``alternative`` are the statistic over the trials on D / on D′ (i.i.d., equal
    numbers); ``objective`` turns upper bounds on (FPR, FNR) into the bound being sought
    (``ranking``, when given, is a cheaper version of it to rank the candidates);
    ``confidence`` is that of each one-sided Clopper–Pearson bound.
    """
    null = np.asarray(null, dtype=np.float64)
    alternative = np.asarray(alternative, dtype=np.float64)
    if null.size != alternative.size or null.size < 4:
        raise ValueError("need the same number (at least 4) of trials on D and on D′")
    half = null.size // 2
    selection_null = np.sort(null[:half])
    selection_alt = np.sort(alternative[:half])
    candidates = _candidates(np.sort(np.concatenate([selection_null, selection_alt])))
    fp, fn = _errors(selection_null, selection_alt, candidates)
    evaluation_size = null.size - half
    # Candidates are scored at a stricter confidence, as if every one of them had to hold:
    # the best of many noisy tail scores is otherwise a lucky one (winner's curse) that the
    # evaluation half then fails to confirm. (The evaluation keeps ``confidence``.)
    strict = 1.0 - (1.0 - confidence) / candidates.size
    scores = (ranking or objective)(
        clopper_pearson_upper(fp, half, strict), clopper_pearson_upper(fn, half, strict)
    )
    threshold = float(candidates[int(np.argmax(scores))])
    eval_fp = int(np.count_nonzero(null[half:] >= threshold))
    eval_fn = int(np.count_nonzero(alternative[half:] < threshold))
    fpr_upper = float(clopper_pearson_upper(eval_fp, evaluation_size, confidence))
    fnr_upper = float(clopper_pearson_upper(eval_fn, evaluation_size, confidence))
    bound = float(np.asarray(objective(np.array([fpr_upper]), np.array([fnr_upper])))[0])
    return ThresholdTest(
        threshold=threshold,
        evaluation_trials=evaluation_size,
        false_positives=eval_fp,
        false_negatives=eval_fn,
        fpr_upper=fpr_upper,
        fnr_upper=fnr_upper,
        bound=bound,
    )
