"""The numbers of the README's "Empirical privacy audit" section (secure source by default).

    .venv/bin/python benchmarks/privacy_audit.py [--trials 1000000] [--product-trials 100000]
                                                 [--census ../shared/census_specs] [--seed N]

1. Single mechanisms on their worst-case neighbour, 10⁶ trials: the geometric at ε = 1
   (tightness target: within 15% of the claim) and the discrete Gaussian at the 2020
   production noise levels of SafeTab-P and PHSafe.
2. The products with the 2020 production configs (SafeTab-P, PHSafe US and PR): the pass rows.
3. The self-test.
Each line gives claimed versus lower bound and the time per 10⁶ trials.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from das.privacy.noise import seeded_rng
from das.privacy_audit.audit import AuditRow
from das.privacy_audit.broken import run_self_test
from das.privacy_audit.mechanism import audit_mechanism
from das.privacy_audit.phsafe import audit_phsafe
from das.privacy_audit.safetab_p import audit_safetab_p

REPO = Path(__file__).resolve().parents[1]

# (label, mechanism, budget, sensitivity): the 2020 per-query noise levels.
MECHANISMS = (
    ("geometric ε = 1, Δ = 1", "geometric", "1", "1"),
    ("geometric ε = 1, Δ = 9", "geometric", "1", "9"),
    ("SafeTab-P stage 1, level 1 (ρ 0.0008, Δ 3)", "discrete-gaussian", "0.0008", "3"),
    ("SafeTab-P stage 2, county 2 (ρ 0.1431, Δ 3)", "discrete-gaussian", "0.1431", "3"),
    ("SafeTab-P stage 2, USA 2 (ρ 1.9206, Δ 3)", "discrete-gaussian", "1.9206", "3"),
    ("PHSafe PH1_num nation (ρ 0.002619, Δ 22)", "discrete-gaussian", "0.002619", "22"),
    ("PHSafe PH3 state A-G (ρ 0.662976, Δ 14)", "discrete-gaussian", "0.662976", "14"),
)


def _cells(row: AuditRow) -> str:
    if row.definition == "zcdp":
        return (
            f"ρ {float(row.claimed):.6g} | {row.realised:.4g} | {row.rho_lower_bound:.4g} "
            f"({row.rho_lower_bound / float(row.claimed):.0%}) | ε(δ) {row.claimed_epsilon:.4g} "
            f"| {row.epsilon_lower_bound:.4g} ({row.epsilon_lower_bound / row.claimed_epsilon:.0%})"
        )
    return (
        f"ε {float(row.claimed):.6g} | {row.realised:.4g} | {row.epsilon_lower_bound:.4g} "
        f"({row.epsilon_lower_bound / float(row.claimed):.0%}) | | "
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--product-trials", type=int, default=100_000)
    parser.add_argument("--census", type=Path, default=REPO.parent / "shared" / "census_specs")
    parser.add_argument("--seed", type=int, help="seeded trials (default: the secure source)")
    args = parser.parse_args()
    rng = None if args.seed is None else seeded_rng(args.seed)

    print("| Audit | claimed | this neighbour | lower bound (tight) | claimed ε at δ=1e-10 "
          "| lower bound (tight) | trials | s per 10⁶ trials |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, kind, budget, sensitivity in MECHANISMS:
        report = audit_mechanism(kind, budget, sensitivity, args.trials, rng=rng)
        print(f"| {label} | {_cells(report.rows[0])} | {report.trials:,} "
              f"| {report.seconds_per_million_trials:.2f} |")  # fmt: skip
    products = (
        ("SafeTab-P 2020", audit_safetab_p, args.census / "safetab_p/production_2020/config.json"),
        ("PHSafe 2020 US", audit_phsafe, args.census / "phsafe/production_2020/us/config.json"),
        ("PHSafe 2020 PR", audit_phsafe, args.census / "phsafe/production_2020/pr/config.json"),
    )
    for label, audit, config in products:
        if not config.is_file():
            print(f"| {label} | (config not found: {config}) |")
            continue
        started = time.perf_counter()
        report = audit(config, trials=args.product_trials, rng=rng)
        setup = time.perf_counter() - started - report.seconds
        for row in report.rows:
            if row.name.endswith(" pass"):
                print(f"| {label}, {row.name} ({row.cells_moved} answers) | {_cells(row)} "
                      f"| {report.trials:,} | {report.seconds_per_million_trials:.0f} "
                      f"(+{setup:.0f} s building D, D′) |")  # fmt: skip
    started = time.perf_counter()
    tested = run_self_test(rng=rng)
    print(f"\nself-test: {'all detected' if tested.ok else 'NOT ALL DETECTED'} in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    for variant in tested.variants:
        print(f"  {variant.name}: claimed {variant.claimed:.4g}, true {variant.realised:.4g}, "
              f"lower bound {variant.lower_bound:.4g}")  # fmt: skip


if __name__ == "__main__":
    main()
