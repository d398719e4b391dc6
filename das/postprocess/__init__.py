"""Statistical postprocessing of noisy releases: nonnegative estimates and credible intervals."""
