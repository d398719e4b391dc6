"""Synthetic populations at any scale for SafeTab-P and PHSafe (the real inputs are confidential).

- :mod:`das.synth.geography`: states -> counties -> tracts -> blocks, places, AIANNH areas.
- :mod:`das.synth.households`: housing units, group quarters and their persons (CEF codes).
- :mod:`das.synth.race`: major race groups, CENRACE, detailed race codes, QSPAN.
- :mod:`das.synth.population`: the seeded, chunked stream shared by both products.
- :mod:`das.synth.safetab_p` / :mod:`das.synth.phsafe`: the input folders, written atomically.
- :mod:`das.synth.encode`: vectorized text/Parquet rendering.
"""

from das.synth.phsafe import generate_phsafe
from das.synth.population import SynthSummary, random_seed
from das.synth.safetab_p import generate_safetab_p

__all__ = ["SynthSummary", "generate_phsafe", "generate_safetab_p", "random_seed"]
