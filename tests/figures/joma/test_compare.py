"""figures/joma/compare.py: the measurement helpers on curves with known answers."""

import numpy as np
import pytest

from figures.joma.compare import break_time, half_times


def test_break_time_on_a_known_curve():
    t = np.linspace(0, 10, 101)
    theory = np.stack([np.ones_like(t), np.zeros_like(t)], 1)
    practice = theory + np.stack([0.02 * t, 0 * t], 1)  # relative error 0.02 t: crosses 0.105 after t = 5.25
    assert break_time(t, practice, theory, 0.105) == pytest.approx(5.3)
    assert break_time(t, theory, theory, 0.1) is None


def test_half_times_on_a_known_curve():
    """half_times against closed forms: x(t) = 1 - exp(-t/tau) reaches half of x(T) at
    t = -tau log(1 - x(T)/2)."""
    import xarray as xr

    t = np.linspace(0, 10, 100_001)
    taus = np.array([0.5, 2.0])
    ds = xr.Dataset({f"z_{i + 1}": ("time", 1 - np.exp(-t / tau)) for i, tau in enumerate(taus)}, coords={"time": t})
    want = -taus * np.log(1 - (1 - np.exp(-10 / taus)) / 2)
    np.testing.assert_allclose(half_times(ds, "z", 2), want, atol=2e-4)
