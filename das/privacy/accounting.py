"""The per-run privacy accountant: every measurement, what it cost, and the refusal to overspend.

(Not the privacy ledger, :mod:`das.trust`, which records every run's spend across runs.)

A :class:`Measurement` is a typed record (name, budget, sensitivity, mechanism, free metadata).
Its cost is *asked of the mechanism* — ``mechanism.privacy_function(sensitivity)`` — and must
equal the requested budget exactly, so a wrong noise formula cannot hide behind a hand-copied
number (STYLE.md, after Tumult Core).

:class:`PrivacyAccountant` composes the costs of one pass under one definition:

* sequential composition is the exact sum, for zCDP (Bun–Steinke Lemma 2.3) and pure DP;
* parallel composition across passes (US and PR hold disjoint people) is decided by the caller,
  who gives each pass its own accountant and total;
* within a pass, measurements may share a *partition* split into *branches*: the partition
  costs the max over its branches of each branch's sum. This is the generalised parallel
  composition of the SafeTab-P papers (Lemma 2 there): within a population-group level a
  record's ≤ s rows fall some into two-stage groups (branch "adaptive": stage 1 + stage 2) and
  the rest into TotalOnly groups (branch "total-only"); every measurement's loss is linear in
  the share of the record it sees (ρ = ‖v‖²/(2σ²) with ‖v‖² = rows seen; ε = ‖v‖₁/b), so the
  worst case puts all rows in one branch. It requires that the branches see disjoint rows and
  that every measurement of the partition carries the sensitivity of the whole level (enforced:
  equal sensitivities).

A measurement is refused *before any noise is drawn* when it would exceed the total (exact
``Fraction`` comparison: no floating overshoot) or reuse a name. A ledger written to JSON and
read back lets a rerun reuse measurements already drawn instead of drawing them again.

Bounded DP (change one record) is reported as 2× the unbounded loss: SafeTab-P (Theorem 2 of
its paper) and PHSafe (its bounded theorem) prove bounded 2ρ-zCDP for their algorithms; under
pure DP, changing a record is removing one and adding one, and group privacy gives 2ε.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from das.io.arrays import open_npy, write_npy_blocks
from das.privacy import conversions
from das.privacy.mechanisms import (
    DEFINITIONS,
    PUREDP,
    ZCDP,
    Budget,
    DiscreteGaussianMechanism,
    GeometricMechanism,
    Mechanism,
    budget_value,
    exact,
    fraction_text,
    mechanism_for,
    mechanism_from_dict,
    parse_fraction_text,
    release_draw,
)

LEDGER_FORMAT = "das-privacy-ledger/1"
_SCALARS = (str, int, float, bool, type(None))


class BudgetExceededError(ValueError):
    """A measurement would spend more than the accountant's total; nothing was drawn."""


class DuplicateMeasurementError(ValueError):
    """A measurement name is already in the ledger (drawing it again would spend twice)."""


def exact_to_json(value: Budget) -> dict[str, Any]:
    """``{"exact": "n/d", "float": x}``; ∞ is ``{"exact": "Infinity", "float": null}``."""
    as_float = float(value)
    return {"exact": fraction_text(value), "float": None if math.isinf(as_float) else as_float}


def exact_from_json(data: Mapping[str, Any] | str) -> Budget:
    """Inverse of :func:`exact_to_json` (also accepts the bare ``"n/d"`` string)."""
    text = data if isinstance(data, str) else data["exact"]
    return parse_fraction_text(text)


def bounded_budget(budget: Budget) -> Budget:
    """The bounded-neighbour (change one record) loss of an unbounded one: exactly 2×.

    SafeTab-P paper Theorem 2 and the PHSafe bounded theorem (bounded 2ρ-zCDP); for pure DP,
    group privacy over the removal + addition that make up a change.
    """
    return math.inf if isinstance(budget, float) else 2 * Fraction(budget)


def _definition(value: str) -> str:
    key = str(getattr(value, "value", value)).lower()
    if key not in DEFINITIONS:
        raise ValueError(f"Invalid privacy definition: {value!r} (use 'zcdp' or 'puredp')")
    return key


@dataclass(frozen=True)
class Measurement:
    """One noisy query of a run: what it measures, with what, and what it costs.

    ``sensitivity`` is the L2 sensitivity under zCDP and the L1 sensitivity under pure DP.
    ``metadata`` is free JSON-scalar context (conventionally ``pass``, ``geography``,
    ``iteration_level``, ``table``, ``stage``). ``partition``/``branch`` opt into the parallel
    composition described in the module docstring. ``max_cell_change`` (L∞ sensitivity: the
    most one record moves a single cell; 1 for counts over a flatmap) only tightens the Rényi
    analysis of pure-DP ledgers; unknown (None) is taken as the whole sensitivity.
    """

    name: str
    budget: Budget
    sensitivity: Fraction
    mechanism: Mechanism
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    partition: str | None = None
    branch: str | None = None
    max_cell_change: Fraction | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Invalid measurement name: need a non-empty string")
        if not isinstance(self.mechanism, DiscreteGaussianMechanism | GeometricMechanism):
            raise TypeError(f"{self.name}: unknown mechanism {type(self.mechanism).__name__}")
        budget = budget_value(self.budget)
        sensitivity = exact(self.sensitivity, "sensitivity")
        if sensitivity <= 0:
            raise ValueError(f"{self.name}: invalid sensitivity {sensitivity} (need > 0)")
        charge = self.mechanism.privacy_function(sensitivity)
        if charge != budget:
            raise ValueError(
                f"{self.name}: the mechanism spends {fraction_text(charge)} at sensitivity "
                f"{sensitivity}, not the requested budget {fraction_text(budget)}"
            )
        if (self.partition is None) != (self.branch is None):
            raise ValueError(f"{self.name}: give both a partition and a branch, or neither")
        for label, value in (("partition", self.partition), ("branch", self.branch)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{self.name}: invalid {label} {value!r}")
        cell = self.max_cell_change
        if cell is not None:
            cell = exact(cell, "max_cell_change")
            if cell <= 0:
                raise ValueError(f"{self.name}: invalid max_cell_change {cell} (need > 0)")
        metadata = dict(self.metadata)
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, _SCALARS):
                raise TypeError(f"{self.name}: metadata {key!r} must map a string to a scalar")
        object.__setattr__(self, "budget", budget)
        object.__setattr__(self, "sensitivity", sensitivity)
        object.__setattr__(self, "max_cell_change", cell)
        object.__setattr__(self, "metadata", metadata)

    @classmethod
    def create(
        cls,
        name: str,
        definition: str,
        budget: Any,
        sensitivity: Any,
        *,
        partition: str | None = None,
        branch: str | None = None,
        max_cell_change: Any = None,
        **metadata: Any,
    ) -> Measurement:
        """Build the measurement and its mechanism from (definition, budget, sensitivity);
        a budget outside :mod:`das.privacy.limits` is refused with the measurement's name."""
        mechanism = mechanism_for(_definition(definition), budget, sensitivity, what=name)
        return cls(
            name=name,
            budget=budget_value(budget),
            sensitivity=exact(sensitivity, "sensitivity"),
            mechanism=mechanism,
            metadata=metadata,
            partition=partition,
            branch=branch,
            max_cell_change=max_cell_change,
        )

    @property
    def definition(self) -> str:
        return self.mechanism.definition

    @property
    def charge(self) -> Budget:
        """The loss, as the mechanism computes it (equal to ``budget`` by construction)."""
        return self.mechanism.privacy_function(self.sensitivity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "definition": self.definition,
            "budget": exact_to_json(self.budget),
            "sensitivity": exact_to_json(self.sensitivity),
            "mechanism": self.mechanism.to_dict(),
            "partition": self.partition,
            "branch": self.branch,
            "max_cell_change": (
                None if self.max_cell_change is None else exact_to_json(self.max_cell_change)
            ),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        cell = data.get("max_cell_change")
        return cls(
            name=data["name"],
            budget=exact_from_json(data["budget"]),
            sensitivity=exact_from_json(data["sensitivity"]),
            mechanism=mechanism_from_dict(data["mechanism"]),
            metadata=data.get("metadata", {}),
            partition=data.get("partition"),
            branch=data.get("branch"),
            max_cell_change=None if cell is None else exact_from_json(cell),
        )


@dataclass(frozen=True)
class LedgerEntry:
    """A charged measurement and, once its noise is drawn and stored, the digest of the result."""

    measurement: Measurement
    noise_digest: str | None = None

    @property
    def drawn(self) -> bool:
        return self.noise_digest is not None


def compose(measurements: Iterable[Measurement]) -> Budget:
    """Total loss: sequential sum, each partition counted as the max of its branch sums."""
    sequential: Budget = Fraction(0)
    branches: dict[str, dict[str, Budget]] = {}
    for item in measurements:
        if item.partition is None:
            sequential += item.budget
        else:
            sums = branches.setdefault(item.partition, {})
            sums[item.branch] = sums.get(item.branch, Fraction(0)) + item.budget
    for sums in branches.values():
        sequential += max(sums.values())
    return sequential


def noise_digest(noise: np.ndarray) -> str:
    """sha256 of the int64 bytes of a noise vector: what the ledger records (never the values)."""
    return hashlib.sha256(np.ascontiguousarray(noise, dtype=np.int64).tobytes()).hexdigest()


def draw_noise(
    measurement: Measurement, size: int, rng: Any, accountant: PrivacyAccountant | None
) -> np.ndarray:
    """``size`` int64 noise values of ``measurement``: charged first, recorded once drawn.

    ``rng`` may be a *noise provider* (an object with ``noise_for(measurement, size,
    accountant)``, e.g. :class:`das.runs.noise_store.NoiseStore`) that owns the whole
    charge/draw/record step, so that a rerun reuses noise already drawn instead of drawing it
    again. Without an ``accountant`` the draw is not recorded (engine tests and library use).
    """
    provider = getattr(rng, "noise_for", None)
    if provider is not None:
        return np.asarray(provider(measurement, size, accountant), dtype=np.int64)
    if accountant is not None:
        accountant.charge(measurement)
    noise = release_draw(measurement.mechanism, size, rng)  # the blocks of sample_blocks
    if accountant is not None:
        accountant.record(measurement, noise_digest(noise))
    return noise


def draw_noise_file(
    measurement: Measurement,
    size: int,
    rng: Any,
    accountant: PrivacyAccountant | None,
    path: str | Path,
) -> np.ndarray:
    """:func:`draw_noise` for vectors too large to hold: streamed to ``path`` (``.npy``).

    Returns a read-only memory map of the ``size`` int64 values. The draws are exactly those
    of :func:`draw_noise` for the same source state (the sampler is streamed block by block,
    see ``Mechanism.sample_blocks``), and the recorded digest is the same
    (:func:`noise_digest`, computed while the blocks are written). A noise provider with
    ``noise_file_for(measurement, size, accountant)`` (the persisted
    :class:`das.runs.noise_store.NoiseStore`) owns the whole step instead, and ``path`` is
    then unused (the provider keeps its own files).
    """
    provider = getattr(rng, "noise_file_for", None)
    if provider is not None:
        return provider(measurement, size, accountant)
    if getattr(rng, "noise_for", None) is not None:  # an in-memory provider: keep its draw
        noise = draw_noise(measurement, size, rng, accountant)
        write_npy_blocks(path, (noise,), size)
        return open_npy(path)
    if accountant is not None:
        accountant.charge(measurement)
    digest = write_npy_blocks(path, measurement.mechanism.sample_blocks(size, rng), size)
    if accountant is not None:
        accountant.record(measurement, digest)
    return open_npy(path)


class PrivacyAccountant:
    """The ledger of one pass under one privacy definition, with an exact budget limit.

    Typical use, per query: ``accountant.charge(m)`` (refuses before any noise is drawn), draw
    with ``release_draw(m.mechanism, ...)``, persist the noisy values, then
    ``accountant.record(m, digest)``. On a rerun, load the ledger (:meth:`from_dict`) and call
    :meth:`reuse` for a query already drawn: it returns the entry (whose digest identifies the
    stored values) instead of letting the query be drawn — and charged — twice. A measurement
    charged but never recorded (a crash between draw and persist) left no output, so it may be
    drawn on the rerun without a second charge: persist values and record the digest together.
    """

    def __init__(self, definition: str, total: Any) -> None:
        self.definition = _definition(definition)
        self.total: Budget = budget_value(total, "total")
        self._entries: dict[str, LedgerEntry] = {}

    # ------------------------------------------------------------------ queries of the ledger
    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        return tuple(self._entries.values())

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(entry.measurement for entry in self._entries.values())

    @property
    def pending(self) -> tuple[str, ...]:
        """Names charged whose noise has not been recorded as drawn."""
        return tuple(name for name, entry in self._entries.items() if not entry.drawn)

    def has(self, name: str) -> bool:
        return name in self._entries

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str) -> LedgerEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"No measurement named {name!r} in the ledger") from None

    @property
    def spent(self) -> Budget:
        """Unbounded loss of everything charged (see :func:`compose`)."""
        return compose(self.measurements)

    @property
    def remaining(self) -> Budget:
        if isinstance(self.total, float):
            return math.inf
        spent = self.spent
        return Fraction(0) if isinstance(spent, float) else self.total - spent

    def bounded_total(self) -> Budget:
        """Bounded (change one record) loss of everything charged: 2 × :attr:`spent`."""
        return bounded_budget(self.spent)

    def bounded_limit(self) -> Budget:
        """Bounded equivalent of the configured total: 2 × :attr:`total`."""
        return bounded_budget(self.total)

    # ------------------------------------------------------------------ charging
    def check(self, measurement: Measurement) -> Budget:
        """Raise unless ``measurement`` may be charged; return what would then be spent."""
        if not isinstance(measurement, Measurement):
            raise TypeError("Charge a Measurement (its cost comes from its mechanism)")
        if measurement.definition != self.definition:
            raise ValueError(
                f"{measurement.name}: a {measurement.definition} measurement cannot be charged "
                f"to a {self.definition} ledger"
            )
        if measurement.name in self._entries:
            raise DuplicateMeasurementError(
                f"{measurement.name}: already in the ledger; reuse it instead of drawing again"
            )
        if measurement.partition is not None:
            for other in self.measurements:
                if (
                    other.partition == measurement.partition
                    and other.sensitivity != measurement.sensitivity
                ):
                    raise ValueError(
                        f"{measurement.name}: partition {measurement.partition!r} mixes "
                        f"sensitivities {other.sensitivity} and {measurement.sensitivity}"
                    )
        after = compose((*self.measurements, measurement))
        if after > self.total:
            raise BudgetExceededError(
                f"{measurement.name}: charging {fraction_text(measurement.budget)} would spend "
                f"{fraction_text(after)}, over the total {fraction_text(self.total)}"
            )
        return after

    def charge(self, measurement: Measurement) -> LedgerEntry:
        """Charge ``measurement`` (call before drawing its noise); refuses as :meth:`check`."""
        self.check(measurement)
        entry = LedgerEntry(measurement)
        self._entries[measurement.name] = entry
        return entry

    def record(self, measurement: Measurement, noise_digest: str) -> LedgerEntry:
        """Record that ``measurement`` was drawn; ``noise_digest`` identifies the stored values.

        Charges it first if :meth:`charge` was not called. Refuses a second draw of a name.
        """
        if not isinstance(noise_digest, str) or not noise_digest:
            raise ValueError(f"{measurement.name}: the noise digest must be a non-empty string")
        existing = self._entries.get(measurement.name)
        if existing is None:
            self.charge(measurement)
        elif existing.measurement != measurement:
            raise ValueError(f"{measurement.name}: differs from the measurement charged earlier")
        elif existing.drawn:
            raise DuplicateMeasurementError(
                f"{measurement.name}: already drawn; reuse it instead of drawing again"
            )
        entry = LedgerEntry(measurement, noise_digest)
        self._entries[measurement.name] = entry
        return entry

    def revert_draw(self, name: str) -> LedgerEntry:
        """Mark a recorded draw as charged but not drawn: the system of record (the privacy
        ledger of a release run) does not hold it, so it never happened and is drawn again."""
        entry = LedgerEntry(self.get(name).measurement)
        self._entries[name] = entry
        return entry

    def reuse(self, measurement: Measurement) -> LedgerEntry:
        """The entry of a measurement already drawn with exactly these parameters (reruns)."""
        entry = self.get(measurement.name)
        if entry.measurement != measurement:
            raise ValueError(
                f"{measurement.name}: the ledger holds different parameters for this name; "
                "a changed configuration cannot reuse earlier noise"
            )
        if not entry.drawn:
            raise ValueError(f"{measurement.name}: charged but never recorded as drawn")
        return entry

    # ------------------------------------------------------------------ Rényi analysis
    def rdp_curve(self, alpha: float | np.ndarray) -> float | np.ndarray:
        """Rényi DP τ(α) of a pure-DP ledger, with the *exact* geometric divergence.

        Per measurement: the worst shift pattern (``geometric_worst_case_rdp``) for L1
        sensitivity Δ and L∞ sensitivity ``max_cell_change`` (default Δ). Sequential
        measurements add (RDP composition). A partition counts the max of its branches when all
        its measurements have unit cell changes (the per-row linearity argument); otherwise,
        conservatively, the sum.
        """
        if self.definition != PUREDP:
            raise ValueError("rdp_curve applies to pure-DP ledgers (zCDP is already Rényi)")
        alphas = np.asarray(alpha, dtype=float)
        sequential = np.zeros_like(alphas)
        partitions: dict[str, list[Measurement]] = {}
        for item in self.measurements:
            if item.partition is None:
                sequential = sequential + _measurement_rdp(alphas, item)
            else:
                partitions.setdefault(item.partition, []).append(item)
        for members in partitions.values():
            curves = [_measurement_rdp(alphas, item) for item in members]
            if all(item.max_cell_change == 1 for item in members):
                sums: dict[str, np.ndarray] = {}
                for item, curve in zip(members, curves, strict=True):
                    sums[item.branch] = sums.get(item.branch, 0.0) + curve
                sequential = sequential + np.maximum.reduce(list(sums.values()))
            else:
                sequential = sequential + np.sum(curves, axis=0)
        return float(sequential) if np.ndim(sequential) == 0 else sequential

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready ledger: exact values as ``"n/d"`` strings, with floats for display."""
        return {
            "format": LEDGER_FORMAT,
            "definition": self.definition,
            "total": exact_to_json(self.total),
            "spent": exact_to_json(self.spent),
            "bounded_spent": exact_to_json(self.bounded_total()),
            "measurements": [
                {**entry.measurement.to_dict(), "noise_digest": entry.noise_digest}
                for entry in self._entries.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyAccountant:
        """Rebuild a ledger, re-validating every measurement and the total it claims."""
        if data.get("format") != LEDGER_FORMAT:
            raise ValueError(f"Not a privacy ledger of format {LEDGER_FORMAT}")
        accountant = cls(data["definition"], exact_from_json(data["total"]))
        for item in data["measurements"]:
            measurement = Measurement.from_dict(item)
            if item.get("noise_digest") is None:
                accountant.charge(measurement)
            else:
                accountant.record(measurement, item["noise_digest"])
        if "spent" in data and exact_from_json(data["spent"]) != accountant.spent:
            raise ValueError("The ledger's recorded total does not match its measurements")
        return accountant


def _measurement_rdp(alpha: np.ndarray, item: Measurement) -> np.ndarray:
    mechanism = item.mechanism
    if not isinstance(mechanism, GeometricMechanism):
        raise TypeError(f"{item.name}: the Rényi analysis covers geometric noise only")
    if not mechanism.adds_noise:
        return np.full_like(alpha, math.inf)
    cell = item.sensitivity if item.max_cell_change is None else item.max_cell_change
    if item.sensitivity.denominator != 1 or cell.denominator != 1:
        raise ValueError(f"{item.name}: the Rényi analysis needs integer sensitivities")
    return np.asarray(
        conversions.geometric_worst_case_rdp(
            alpha, mechanism.scale, int(item.sensitivity), int(min(cell, item.sensitivity))
        )
    )


@dataclass(frozen=True)
class PrivacySummary:
    """Totals of a ledger for reports and audits.

    ``unbounded``/``bounded`` are exact (ρ under zCDP, ε under pure DP). The (ε, δ) figures are
    floats: ``epsilon_analytic`` (ρ + 2√(ρ ln 1/δ)), ``epsilon_optimal`` (eq. 7, continuous
    minimisation over α) and ``epsilon_optimal_grid`` (the paper's α grid) under zCDP;
    ``epsilon_rdp`` (exact geometric Rényi divergence, then eq. 6) under pure DP.
    """

    definition: str
    unbounded: Budget
    bounded: Budget
    delta: float
    epsilon_analytic: float | None = None
    epsilon_optimal: float | None = None
    epsilon_optimal_grid: float | None = None
    epsilon_rdp: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON numbers (null for ∞), keyed as `das budget report` prints them."""
        unit = "rho" if self.definition == ZCDP else "epsilon"
        result: dict[str, Any] = {
            "privacy_defn": self.definition,
            unit: _json_number(self.unbounded),
            f"bounded_{unit}": _json_number(self.bounded),
            f"{unit}_exact": fraction_text(self.unbounded),
            f"bounded_{unit}_exact": fraction_text(self.bounded),
            "delta": self.delta,
        }
        if self.definition == ZCDP:
            result["epsilon_analytic"] = _json_number(self.epsilon_analytic)
            result["epsilon_optimal"] = _json_number(self.epsilon_optimal)
            result["epsilon_optimal_grid"] = _json_number(self.epsilon_optimal_grid)
        else:
            result["epsilon_rdp"] = _json_number(self.epsilon_rdp)
        return result


def _json_number(value: Budget | float | None) -> float | None:
    if value is None:
        return None
    as_float = float(value)
    return None if math.isinf(as_float) else as_float


def summarize(accountant: PrivacyAccountant, delta: float = 1e-10) -> PrivacySummary:
    """Unbounded and bounded totals of the ledger, and its (ε, δ) conversions at ``delta``."""
    spent = accountant.spent
    bounded = bounded_budget(spent)
    infinite = isinstance(spent, float)
    if accountant.definition == ZCDP:
        if infinite:
            return PrivacySummary(ZCDP, spent, bounded, delta, math.inf, math.inf, math.inf)
        return PrivacySummary(
            ZCDP,
            spent,
            bounded,
            delta,
            epsilon_analytic=conversions.zcdp_to_approx_dp_analytic(spent, delta),
            epsilon_optimal=conversions.zcdp_to_approx_dp_optimal(spent, delta, "continuous"),
            epsilon_optimal_grid=conversions.zcdp_to_approx_dp_optimal(spent, delta, "grid"),
        )
    if infinite:
        rdp = math.inf
    elif spent == 0:
        rdp = 0.0
    else:
        rdp = conversions.minimize_over_alpha(
            lambda alpha: np.asarray(
                conversions.rdp_to_approx_dp_epsilon(accountant.rdp_curve(alpha), alpha, delta)
            )
        )
    return PrivacySummary(PUREDP, spent, bounded, delta, epsilon_rdp=rdp)


def combine_accountants(
    definition: str, plan: Iterable[Measurement], partitions: Iterable[Mapping[str, Any]]
) -> PrivacyAccountant:
    """One pass's accountant from its partitions' persisted accountants (``to_dict``), under the
    plan's total; refuses, exactly as one accountant would, an overspend or a duplicate."""
    accountant = PrivacyAccountant(definition, compose(plan))
    for partition in partitions:
        for entry in PrivacyAccountant.from_dict(partition).entries:
            if entry.noise_digest is None:
                accountant.charge(entry.measurement)
            else:
                accountant.record(entry.measurement, entry.noise_digest)
    return accountant
