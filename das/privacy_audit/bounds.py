"""From error counts of a distinguishing test to lower bounds on the privacy loss.

A test that tells D from its neighbour D′ rejects "D" on some set S of outputs. Its rates
FPR = P[M(D) ∈ S] and FNR = P[M(D′) ∉ S] are estimated from trials; Clopper–Pearson gives
one-sided upper bounds on both that hold with a stated confidence. Definitions then forbid
small pairs of rates:

* (ε, δ)-DP requires ``1 − FNR ≤ e^ε·FPR + δ`` and ``1 − FPR ≤ e^ε·FNR + δ`` (apply the
  definition to S and to its complement), hence

      ε ≥ max( ln((1 − δ − FNR)/FPR), ln((1 − δ − FPR)/FNR) ).

  The right side decreases in both rates, so plugging in their *upper* bounds gives a lower
  bound on ε that holds whenever the two Clopper–Pearson bounds hold.
* ρ-zCDP requires ``D_α(M(D′) ‖ M(D)) ≤ ρα`` and ``D_α(M(D) ‖ M(D′)) ≤ ρα`` for every α > 1;
  the test's decision is a post-processing, so by data processing the same holds for the two
  Bernoulli laws of the decision, Bern(1 − FNR) and Bern(FPR). Hence

      ρ ≥ sup_α max( D_α(Bern(p) ‖ Bern(q)), D_α(Bern(q) ‖ Bern(p)) ) / α,
      p = 1 − FNR, q = FPR.

  For p > q both divergences grow as p rises or q falls, so p = 1 − FNR_upper and
  q = FPR_upper give a valid lower bound. Every α gives a valid bound, so maximising over a
  finite grid of α is conservative. This needs no assumption about the mechanism (unlike a
  bound read off the Gaussian trade-off curve, which assumes the mechanism *is* Gaussian: a
  ρ-zCDP mechanism may beat that curve, and the discrete Gaussian at small σ does).

Several bounds in one report hold simultaneously at confidence C when each Clopper–Pearson
bound is taken at ``1 − (1 − C)/(2·statements)`` (Bonferroni; two rates per statement).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

# α − 1 on a log grid from 1e-4 to 1e4: the sup over α of the binary Rényi bound is reached
# inside it for every rate pair the audits meet (and any α is a valid bound).
RENYI_ORDERS: NDArray[np.float64] = 1.0 + np.logspace(-4.0, 4.0, 641)
# A coarser grid ranks candidate thresholds (the final bound uses RENYI_ORDERS).
COARSE_RENYI_ORDERS: NDArray[np.float64] = 1.0 + np.logspace(-4.0, 4.0, 81)


def _check_confidence(confidence: float) -> float:
    value = float(confidence)
    if not 0.0 < value < 1.0:
        raise ValueError(f"Invalid confidence: {confidence} (need 0 < confidence < 1)")
    return value


def _counts(successes: ArrayLike, trials: int) -> tuple[NDArray[np.float64], int]:
    n = int(trials)
    if n < 1:
        raise ValueError(f"Invalid number of trials: {trials} (need >= 1)")
    k = np.atleast_1d(np.asarray(successes, dtype=np.float64))
    if np.any(k < 0) or np.any(k > n) or np.any(k != np.floor(k)):
        raise ValueError("successes must be whole numbers between 0 and the number of trials")
    return k, n


def clopper_pearson_upper(successes: ArrayLike, trials: int, confidence: float) -> NDArray:
    """One-sided upper bound on a Bernoulli rate: P[rate ≤ bound] ≥ confidence.

    The exact (Clopper–Pearson) bound ``Beta⁻¹(confidence; k + 1, n − k)``, and 1 when k = n.
    """
    confidence = _check_confidence(confidence)
    k, n = _counts(successes, trials)
    inner = k < n
    bound = np.ones_like(k)
    from scipy.stats import beta  # here: scipy.stats costs every das process 0.5 s

    bound[inner] = beta.ppf(confidence, k[inner] + 1.0, n - k[inner])
    return bound.reshape(np.shape(successes))


def clopper_pearson_lower(successes: ArrayLike, trials: int, confidence: float) -> NDArray:
    """One-sided lower bound on a Bernoulli rate: P[rate ≥ bound] ≥ confidence (0 when k = 0)."""
    confidence = _check_confidence(confidence)
    k, n = _counts(successes, trials)
    inner = k > 0
    bound = np.zeros_like(k)
    from scipy.stats import beta

    bound[inner] = beta.ppf(1.0 - confidence, k[inner], n - k[inner] + 1.0)
    return bound.reshape(np.shape(successes))


def per_bound_confidence(confidence: float, statements: int) -> float:
    """Confidence of each Clopper–Pearson bound so that ``statements`` bounds (each resting on
    two rates) hold together with probability ≥ ``confidence`` (Bonferroni)."""
    confidence = _check_confidence(confidence)
    if statements < 1:
        raise ValueError(f"Invalid number of statements: {statements} (need >= 1)")
    return 1.0 - (1.0 - confidence) / (2 * statements)


def _rates(fpr: ArrayLike, fnr: ArrayLike) -> tuple[NDArray, NDArray]:
    f, g = np.broadcast_arrays(np.asarray(fpr, dtype=np.float64), np.asarray(fnr, np.float64))
    if np.any((f < 0) | (f > 1) | (g < 0) | (g > 1)) or np.any(np.isnan(f) | np.isnan(g)):
        raise ValueError("error rates must lie in [0, 1]")
    return f, g


def epsilon_lower_bound(fpr_upper: ArrayLike, fnr_upper: ArrayLike, delta: float = 0.0) -> NDArray:
    """max(0, ln((1 − δ − FNR)/FPR), ln((1 − δ − FPR)/FNR)) from upper bounds on the rates."""
    if not 0.0 <= float(delta) < 1.0:
        raise ValueError(f"Invalid delta: {delta} (need 0 <= delta < 1)")
    f, g = _rates(fpr_upper, fnr_upper)
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.log(np.maximum(1.0 - delta - g, 0.0)) - np.log(f)
        two = np.log(np.maximum(1.0 - delta - f, 0.0)) - np.log(g)
    bound = np.fmax(np.nan_to_num(one, nan=-np.inf), np.nan_to_num(two, nan=-np.inf))
    return np.maximum(bound, 0.0)


def _bernoulli_renyi(p: NDArray, q: NDArray, alpha: NDArray) -> NDArray:
    """D_α(Bern(p) ‖ Bern(q)) for 0 < p, q < 1 (broadcast), computed in log space."""
    am1 = alpha - 1.0
    log_terms = np.logaddexp(
        alpha * np.log(p) - am1 * np.log(q), alpha * np.log1p(-p) - am1 * np.log1p(-q)
    )
    return log_terms / am1


def _bernoulli_kl(p: NDArray, q: NDArray) -> NDArray:
    """KL(Bern(p) ‖ Bern(q)) = D_1, the α → 1 end of the Rényi bound."""
    return p * (np.log(p) - np.log(q)) + (1.0 - p) * (np.log1p(-p) - np.log1p(-q))


def rho_lower_bound(
    fpr_upper: ArrayLike, fnr_upper: ArrayLike, orders: NDArray = RENYI_ORDERS
) -> NDArray:
    """max over ``orders`` α (and α → 1) of the binary Rényi divergence / α: a bound on ρ."""
    f, g = _rates(fpr_upper, fnr_upper)
    p = 1.0 - g
    q = f
    useful = (p > q) & (q > 0.0) & (p < 1.0)
    out = np.zeros(p.shape, dtype=np.float64)
    if not np.any(useful):
        return out
    pu, qu = p[useful][:, None], q[useful][:, None]
    alpha = np.asarray(orders, dtype=np.float64)[None, :]
    forward = _bernoulli_renyi(pu, qu, alpha) / alpha
    backward = _bernoulli_renyi(qu, pu, alpha) / alpha
    best = np.maximum(forward.max(axis=1), backward.max(axis=1))
    at_one = np.maximum(_bernoulli_kl(pu, qu), _bernoulli_kl(qu, pu))[:, 0]
    out[useful] = np.maximum(np.maximum(best, at_one), 0.0)
    return out
