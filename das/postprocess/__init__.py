"""Statistical postprocessing of noisy releases: nonnegative estimates and credible intervals."""

from typing import Literal

# Here, not in .counts: `das run` offers them as choices without importing SciPy and pandas.
Interval = Literal["equal-tailed", "hpd"]
INTERVALS: tuple[Interval, ...] = ("equal-tailed", "hpd")
