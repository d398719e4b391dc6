"""The tuning explorer: `das explore`, a local page for choosing SafeTab-P and PHSafe parameters.

It sits above the engine (the engine never imports it) and computes every number it shows with
the engine's own functions: the planners (:mod:`das.safetab_p.plan`, :mod:`das.phsafe.plan`),
the budget report (:mod:`das.budget.config_report`), the calculators, conversions and distributions
of :mod:`das.privacy`, and for simulations the engines themselves.
"""
