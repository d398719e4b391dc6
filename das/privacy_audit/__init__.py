"""Empirical privacy audit: lower bounds on the privacy loss of the release's own mechanisms.

The audit sits *above* the products it audits (it builds their neighbouring inputs and runs
their measurement code); nothing in ``das.privacy`` or in a release path imports it, so the
self-test's deliberately broken mechanisms (:mod:`das.privacy_audit.broken`) can never be
reached from ``das run``.

Layers: :mod:`bounds` (Clopper–Pearson and the ε / ρ bounds), :mod:`attack` (likelihood-ratio
statistic, threshold chosen on held-out trials), :mod:`neighbours` (what the added person moves,
drawn by the release's mechanisms), :mod:`audit` (rows and reports), :mod:`mechanism`,
:mod:`safetab_p`, :mod:`phsafe` (what is audited), :mod:`broken` (the self-test) and
:mod:`report` (Markdown).
"""
