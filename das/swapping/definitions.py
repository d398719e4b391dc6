"""Side-by-side privacy definitions: swapping next to the 2020 DP products (paper Tables 6.1/6.2).

A budget is only meaningful inside its definition (data universe D, input divergence d_X with
its privacy unit, output divergence d_T): swapping is pure ε-DP (MULT) *conditional on its
invariants* with households as units, while TopDown, SafeTab-P and PHSafe are ρ-zCDP (D_nor)
with persons as units. The (ε, δ) column puts the zCDP budgets on a common scale at
δ = 10⁻¹⁰, with the Bun–Steinke bound ε = ρ + 2√(ρ ln(1/δ)) the paper and the Census Bureau
use (Table 6.2) and with the optimal Rényi conversion; a pure ε-DP mechanism is (ε, 0)-DP,
hence (ε, δ)-DP for every δ.

Budgets of the DP products:

* SafeTab-P, 2020 production (Detailed DHC-A): the sum of the level budgets of
  ``census_specs/safetab_p/production_2020/config.json``: ρ = 4.944 (US pass) and 2.643
  (Puerto Rico pass), unbounded zCDP over persons; the passes cover disjoint people.
* PHSafe, 2020 production (S-DHC): the sum of ``privacy_budget`` of
  ``census_specs/phsafe/production_2020/{us,pr}/config.json``: ρ = 1.257281 (US) and 1.226649
  (PR). Privacy unit: one person record of the base person dataframe (PHSafe paper §5); the
  household tables enter through the unit view, a 2-stable transformation of it.
* TopDown (Theorem 6.1, Table 6.2): ρ = 2.63 for the P.L. 94-171 file, ρ = 15.29 for the DHC
  (which includes the PL budget); ε = 52.83 at δ = 10⁻¹⁰. Bounded neighbours over persons.

The tests recompute the SafeTab-P and PHSafe sums from the configuration files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from das.privacy.conversions import zcdp_to_approx_dp_analytic, zcdp_to_approx_dp_optimal

DEFAULT_DELTA = 1e-10

SAFETAB_P_2020_RHO = {"US": Fraction("4.944"), "PR": Fraction("2.643")}
PHSAFE_2020_RHO = {"US": Fraction("1.257281"), "PR": Fraction("1.226649")}
TOPDOWN_RHO = {"PL": Fraction("2.63"), "DHC": Fraction("15.29")}


@dataclass(frozen=True)
class PrivacyDefinition:
    """One row of the side-by-side table."""

    mechanism: str
    release: str
    output_divergence: str
    privacy_unit: str
    invariants: str
    budget: str
    epsilon_at_delta: float
    epsilon_at_delta_optimal: float
    source: str

    def as_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "release": self.release,
            "output_divergence": self.output_divergence,
            "privacy_unit": self.privacy_unit,
            "invariants": self.invariants,
            "budget": self.budget,
            "epsilon_at_delta": _json_number(self.epsilon_at_delta),
            "epsilon_at_delta_optimal": _json_number(self.epsilon_at_delta_optimal),
            "source": self.source,
        }


def _json_number(value: float) -> float | str:
    """JSON has no infinity: an infinite ε is written as the string "inf"."""
    return "inf" if math.isinf(value) else round(value, 4)


def _zcdp_row(
    mechanism: str,
    release: str,
    rho: Fraction,
    unit: str,
    invariants: str,
    source: str,
    delta: float,
) -> PrivacyDefinition:
    return PrivacyDefinition(
        mechanism=mechanism,
        release=release,
        output_divergence="D_nor (rho-zCDP)",
        privacy_unit=unit,
        invariants=invariants,
        budget=f"rho = {float(rho):g}",
        epsilon_at_delta=zcdp_to_approx_dp_analytic(rho, delta),
        epsilon_at_delta_optimal=zcdp_to_approx_dp_optimal(rho, delta),
        source=source,
    )


def side_by_side(
    swap_epsilon: float, swap_invariants: str, delta: float = DEFAULT_DELTA
) -> list[PrivacyDefinition]:
    """Rows for this swap run, SafeTab-P and PHSafe (2020 production), and TopDown."""
    rows = [
        PrivacyDefinition(
            mechanism="Swapping (Algorithm 5.1)",
            release="this run: all products tabulated from the swapped file",
            output_divergence="MULT (pure epsilon-DP given the invariants)",
            privacy_unit="household",
            invariants=swap_invariants,
            budget=f"epsilon = {swap_epsilon:.4g}",
            epsilon_at_delta=swap_epsilon,
            epsilon_at_delta_optimal=swap_epsilon,
            source="Theorem 5.6; b and p of this run",
        )
    ]
    for name, rho in SAFETAB_P_2020_RHO.items():
        rows.append(
            _zcdp_row(
                "SafeTab-P",
                f"Detailed DHC-A, {name} pass",
                rho,
                "person",
                "none",
                "2020 production config (sum of level budgets)",
                delta,
            )
        )
    for name, rho in PHSAFE_2020_RHO.items():
        rows.append(
            _zcdp_row(
                "PHSafe",
                f"S-DHC, {name} pass",
                rho,
                "person (household tables via the 2-stable unit view)",
                "none",
                "2020 production config (sum of privacy_budget)",
                delta,
            )
        )
    topdown_invariants = (
        "state population; housing units and occupied group quarters by type per block; "
        "structural zeros"
    )
    for name, rho in TOPDOWN_RHO.items():
        release = "P.L. 94-171" if name == "PL" else "DHC (includes the PL budget)"
        rows.append(
            _zcdp_row(
                "TopDown",
                release,
                rho,
                "person",
                topdown_invariants,
                "Theorem 6.1, Tables 6.1/6.2",
                delta,
            )
        )
    return rows
