"""The PHSafe flow measures its tables in a task per group (a table's draws cost less than the
task run): every table in exactly one group, in plan order, balanced by queries."""

from __future__ import annotations

import pytest
from toy_configs import phsafe_toy_config

from das.phsafe.engine import queries_by_table
from das.phsafe.plan import plan_phsafe
from das.specs.config import load_phsafe_config
from tasks.phsafe import table_groups


def test_table_groups_hold_every_table_once_in_plan_order_balanced_by_queries(tmp_path) -> None:
    queries = queries_by_table(plan_phsafe(load_phsafe_config(phsafe_toy_config("zcdp", tmp_path))))
    order = list(queries)
    sizes = {table: len(found) for table, found in queries.items()}
    assert len(order) > 4 and len(set(sizes.values())) > 1  # groups can differ: it can fail
    for groups in (1, 2, 3, len(order), 20):
        split = table_groups({t: tuple(q) for t, q in queries.items()}, groups)
        assert sorted(t for group in split for t in group) == sorted(order)
        assert len(split) == min(groups, len(order))
        assert all(group == sorted(group, key=order.index) for group in split)
        assert split == sorted(split, key=lambda group: order.index(group[0]))
        loads = [sum(sizes[t] for t in group) for group in split]
        assert max(loads) - min(loads) <= max(sizes.values()), (groups, loads)
    with pytest.raises(ValueError, match="at least 1"):
        table_groups({t: tuple(q) for t, q in queries.items()}, 0)
