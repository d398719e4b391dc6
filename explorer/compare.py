"""Two parameter sets side by side (e.g. 2020 production against the edited one)."""

from __future__ import annotations

from typing import Any

from explorer import phsafe, safetab

SAFETAB_FIELDS = ("budget", "moe", "thresholds", "suppression_threshold")
PHSAFE_FIELDS = ("budget", "tau", "moe")
TOTAL_FIELDS = (
    "rho",
    "bounded_rho",
    "epsilon",
    "bounded_epsilon",
    "epsilon_analytic",
    "epsilon_optimal",
    "epsilon_rdp",
)


def _pair(a: Any, b: Any) -> dict[str, Any]:
    return {"a": a, "b": b, "differs": a != b}


def _totals(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    a, b = a or {}, b or {}
    return {key: _pair(a.get(key), b.get(key)) for key in TOTAL_FIELDS if key in a or key in b}


def compare(product: str, a: dict[str, Any], b: dict[str, Any], delta: float) -> dict[str, Any]:
    """Rows keyed by level (SafeTab-P) or pass/query (PHSafe), each field as a/b/differs."""
    if product == "safetab-p":
        left = safetab.evaluate(a, delta, curves=False)
        right = safetab.evaluate(b, delta, curves=False)
        rows_a = {row["key"]: row for row in left["levels"]}
        rows_b = {row["key"]: row for row in right["levels"]}
        rows = [
            {
                "key": key,
                **{
                    f: _pair(rows_a.get(key, {}).get(f), rows_b.get(key, {}).get(f))
                    for f in SAFETAB_FIELDS
                },
            }
            for key in dict.fromkeys([*rows_a, *rows_b])
        ]
        passes = dict.fromkeys([*left["report"]["passes"], *right["report"]["passes"]])
        totals = {
            name: _totals(left["report"]["passes"].get(name), right["report"]["passes"].get(name))
            for name in passes
        }
        settings = {
            "privacy_defn": _pair(left["privacy_defn"], right["privacy_defn"]),
            "stage_1_fraction": _pair(left["stage_1_fraction"], right["stage_1_fraction"]),
            "zero_suppression_chance": _pair(
                left["zero_suppression_chance"], right["zero_suppression_chance"]
            ),
            "stability": _pair(left["stability"], right["stability"]),
        }
        return {"product": product, "rows": rows, "totals": totals, "settings": settings}
    if product == "phsafe":
        left = phsafe.evaluate(a, delta, curves=False)
        right = phsafe.evaluate(b, delta, curves=False)
        rows = []
        totals = {}
        for name in dict.fromkeys([*left["passes"], *right["passes"]]):
            pass_a = left["passes"].get(name, {})
            pass_b = right["passes"].get(name, {})
            rows_a = {row["key"]: row for row in pass_a.get("rows", [])}
            rows_b = {row["key"]: row for row in pass_b.get("rows", [])}
            for key in dict.fromkeys([*rows_a, *rows_b]):
                rows.append(
                    {
                        "key": f"{name} {key}",
                        **{
                            f: _pair(rows_a.get(key, {}).get(f), rows_b.get(key, {}).get(f))
                            for f in PHSAFE_FIELDS
                        },
                    }
                )
            totals[name] = _totals(pass_a.get("totals"), pass_b.get("totals"))
        return {"product": product, "rows": rows, "totals": totals, "settings": {}}
    raise ValueError(f"unknown product {product!r}")
