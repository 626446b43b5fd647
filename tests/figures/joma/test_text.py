"""figures/joma/text.py (and empirical/joma/text.py's per-layer summary): the drop-and-bounce
decision of the real-text claims on known curves."""

import numpy as np
import pytest

from empirical.joma import text as JT


def test_per_layer_summary_and_drop_bounce_decision():
    import xarray as xr

    from figures.joma.text import DROP_BOUNCE_NATS, drop_bounce

    steps = np.arange(0, 60, 10.0)
    bounce = np.array([2.6, 2.0, 1.5, 1.6, 1.7, 1.8])  # drops 1.1, bounces 0.3
    monotone = np.array([2.6, 2.4, 2.2, 2.1, 2.05, 2.0])  # never bounces
    traj = xr.Dataset({"entropy_layer0": ("time", bounce), "entropy_layer1": ("time", monotone),
                       "step": ("time", steps)}, coords={"time": steps})
    s = JT.per_layer_summary(traj)
    assert s["min_step"].tolist() == [20, 50]
    assert s["drop"].tolist() == pytest.approx([1.1, 0.6]) and s["bounce"].tolist() == pytest.approx([0.3, 0.0])
    assert drop_bounce(s, DROP_BOUNCE_NATS).tolist() == [True, False]
