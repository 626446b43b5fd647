"""Two-sample moment comparisons for SDE ensemble tests (imported as ``helpers.moments``)."""

from __future__ import annotations

import numpy as np


def moment_z_scores(x: np.ndarray, z: np.ndarray) -> tuple[float, float]:
    """``(z_mean, z_var)``: the differences of the means and of the variances of two independent
    samples ``x``, ``z`` (1-D), in standard errors (the variance's SE from the fourth moments)."""
    n, m = len(x), len(z)
    z_mean = (x.mean() - z.mean()) / np.sqrt(x.var() / n + z.var() / m)
    var_se = np.sqrt(((x - x.mean())**4).mean() / n - x.var()**2 / n + ((z - z.mean())**4).mean() / m - z.var()**2 / m)
    return float(z_mean), float((x.var() - z.var()) / var_se)
