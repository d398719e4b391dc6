"""The deployments' entrypoints: every flow, imported from its package module.

Prefect's worker loads an entrypoint *file* as a top-level module named after the file: with
``flows/safetab_p.py:safetab_p_flow`` the flow's module is ``safetab_p``. What a task sends to
Dask refers to that module by name, and the processes of an existing Dask cluster (its scheduler
unpickles the task graph) cannot import it: a deployment run on ``DAS_DASK_ADDRESS`` failed at
its first task with "No module named 'safetab_p'". Loaded through this file, each flow stays in
its package module (``flows.safetab_p``), importable wherever the checkout is installed.
"""

from flows.approval_sweep import approval_sweep_flow
from flows.audit_privacy import audit_privacy_flow
from flows.phsafe import phsafe_flow
from flows.safetab_p import safetab_p_flow
from flows.swap import swap_flow
from flows.validate import validate_flow

__all__ = [
    "approval_sweep_flow",
    "audit_privacy_flow",
    "phsafe_flow",
    "safetab_p_flow",
    "swap_flow",
    "validate_flow",
]
