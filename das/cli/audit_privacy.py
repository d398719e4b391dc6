"""`das audit-privacy`: empirical lower bounds on the privacy loss of the released mechanisms.

```
das audit-privacy mechanism --mechanism {geometric,discrete-gaussian} --budget B
                  --sensitivity S --trials N [--confidence C] [--delta D] [--json]
das audit-privacy {safetab-p|phsafe} --config FILE [--trials N] [--json]
das audit-privacy self-test [--json]
```

Exit status: 0 when every lower bound is within its claim (self-test: every broken variant
detected), 1 when not, 2 on bad input. ``--report FILE`` also writes the Markdown report;
``--seed`` makes the trials reproducible (tests and demos; the default is the secure source).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from das.cli.arguments import positive_int, resolved_path, seed_int
from das.privacy.exact import to_fraction
from das.privacy_audit.audit import DEFAULT_CONFIDENCE, DEFAULT_DELTA, DEFAULT_PRODUCT_TRIALS
from das.specs.config import ConfigError
from das.specs.race_specs import SpecFileError


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError("must lie strictly between 0 and 1")
    return value


def _trials(text: str) -> int:
    value = positive_int(text)
    if value < 100:
        raise argparse.ArgumentTypeError("need at least 100 trials")
    return value


def _common(parser: argparse.ArgumentParser, trials_default: int | None) -> None:
    if trials_default is not None:
        parser.add_argument(
            "--trials",
            type=_trials,
            default=trials_default,
            help=f"releases simulated on D and on D′ (default {trials_default:,})",
        )
    parser.add_argument(
        "--confidence",
        type=_probability,
        default=DEFAULT_CONFIDENCE,
        help=f"of all bounds together (default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument(
        "--delta",
        type=_probability,
        default=DEFAULT_DELTA,
        help=f"δ of the zCDP (ε, δ) figures (default {DEFAULT_DELTA:g})",
    )
    parser.add_argument(
        "--seed", type=seed_int, help="reproducible trials (tests/demos; default: secure source)"
    )
    parser.add_argument("--report", type=resolved_path, help="also write the Markdown report here")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser(
        "audit-privacy",
        help="empirical lower bounds on the privacy loss of the released mechanisms",
        description=(
            "Run the release's own mechanisms on neighbouring inputs many times and derive a "
            "lower bound on the privacy loss (Clopper–Pearson, stated confidence); it must "
            "never exceed what the ledger claims. Exit codes: 0 every lower bound within its "
            "claim (self-test: every broken variant caught), 1 not, 2 bad input."
        ),
    )
    targets = audit.add_subparsers(dest="audit_target", required=True)

    mechanism = targets.add_parser("mechanism", help="one noise mechanism, worst-case neighbour")
    mechanism.add_argument(
        "--mechanism",
        required=True,
        choices=("geometric", "discrete-gaussian"),
        help="the noise mechanism to audit",
    )
    mechanism.add_argument("--budget", required=True, help="ε (geometric) or ρ (discrete Gaussian)")
    mechanism.add_argument(
        "--sensitivity", required=True, help="L1 (geometric) or L2 (discrete Gaussian)"
    )
    mechanism.add_argument("--trials", type=_trials, required=True, help="releases on D and D′")
    _common(mechanism, None)
    mechanism.set_defaults(handler=_mechanism)

    for name, what in (
        ("safetab-p", "SafeTab-P config (its four spec files beside it)"),
        ("phsafe", "PHSafe config (one pass)"),
    ):
        product = targets.add_parser(name, help=f"every query family of a {name} config")
        product.add_argument("--config", required=True, type=resolved_path, help=what)
        _common(product, DEFAULT_PRODUCT_TRIALS)
        product.set_defaults(handler=_product, product=name)

    self_test = targets.add_parser(
        "self-test", help="audit deliberately broken mechanisms; each must be caught"
    )
    _common(self_test, None)
    self_test.set_defaults(handler=_self_test)


def _rng(args: argparse.Namespace) -> Any:
    if args.seed is None:
        return None
    from das.privacy.noise import seeded_rng

    return seeded_rng(args.seed)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def _emit(args: argparse.Namespace, payload: dict[str, Any], markdown: str, ok: bool) -> int:
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(markdown + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(_json_safe(payload), allow_nan=False))
    else:
        print(markdown)
    return 0 if ok else 1


def _mechanism(args: argparse.Namespace) -> int:
    from das.privacy_audit.markdown import audit_markdown
    from das.privacy_audit.mechanism import audit_mechanism

    try:
        report = audit_mechanism(
            args.mechanism,
            args.budget,
            args.sensitivity,
            args.trials,
            confidence=args.confidence,
            delta=args.delta,
            rng=_rng(args),
        )
    except (ValueError, TypeError) as exc:
        print(f"das audit-privacy mechanism: error: {exc}", file=sys.stderr)
        return 2
    row = report.rows[0]
    payload = {
        "mechanism": args.mechanism,
        "claimed": row.claimed_epsilon,
        "lower_bound": row.epsilon_lower_bound,
        "confidence": report.confidence,
        "trials": report.trials,
        "unit": "epsilon" if row.definition == "puredp" else "epsilon_at_delta",
        "delta": row.delta,
        "budget": float(row.claimed),
        "sensitivity": float(to_fraction(args.sensitivity)),
        "realised": row.realised,
        "exceeded": row.exceeded,
        "seconds": report.seconds,
        "seconds_per_million_trials": report.seconds_per_million_trials,
        "randomness": report.randomness,
    }
    if row.definition == "zcdp":
        payload["rho"] = float(row.claimed)
        payload["rho_lower_bound"] = row.rho_lower_bound
    return _emit(args, payload, audit_markdown(report), report.ok)


def _product(args: argparse.Namespace) -> int:
    from das.privacy_audit.markdown import audit_markdown

    if args.product == "safetab-p":
        from das.privacy_audit.safetab_p import audit_safetab_p as audit
    else:
        from das.privacy_audit.phsafe import audit_phsafe as audit
    try:
        report = audit(
            args.config,
            trials=args.trials,
            confidence=args.confidence,
            delta=args.delta,
            rng=_rng(args),
        )
    except (ConfigError, SpecFileError, FileNotFoundError, ValueError) as exc:
        print(f"das audit-privacy {args.product}: error: {exc}", file=sys.stderr)
        return 2
    return _emit(args, report.to_dict(), audit_markdown(report), report.ok)


def _self_test(args: argparse.Namespace) -> int:
    from das.privacy_audit.broken import run_self_test
    from das.privacy_audit.markdown import self_test_markdown

    report = run_self_test(confidence=args.confidence, delta=args.delta, rng=_rng(args))
    return _emit(args, report.to_dict(), self_test_markdown(report), report.ok)
