"""The Census's PHSafe toy configs, within the budget limits of ``das.privacy.limits``.

The toy zCDP config spends ρ 22.96 on its one pass, above ``MAX_PASS_TOTAL`` (ρ 10), and is
refused like any other config over the ceiling. The tests run it with every budget scaled by
2/5 (ρ 9.184): the same queries, the same allocation between them, a little more noise. The
pure-DP toy config (ε 22.96 ≤ 30) is used as it is.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOY_PHSAFE = SHARED / "census_specs" / "phsafe" / "toy"
TOY_ZCDP_SCALE = Fraction(2, 5)


def phsafe_toy_config(definition: str, folder: Path) -> Path:
    """The toy config of ``definition`` ("zcdp" or "puredp"), within the limits.

    zCDP: a copy written to ``folder/config_zcdp.json`` with every budget × 2/5 (exact
    decimals: 0.33 → 0.132). Pure DP: the Census file itself.
    """
    source = TOY_PHSAFE / f"config_{definition}.json"
    if definition == "puredp":
        return source
    data = json.loads(source.read_text())
    data["privacy_budget"] = {
        table: {key: float(Fraction(str(value)) * TOY_ZCDP_SCALE) for key, value in levels.items()}
        for table, levels in data["privacy_budget"].items()
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config_zcdp.json"
    path.write_text(json.dumps(data, indent=1))
    return path
