"""simulate/sweep.py: one compiled solve vmapped over a parameter grid equals the solves one by one."""

import numpy as np

import simulate
from helpers.systems import oscillator


def test_diffrax_sweep_equals_individual_solves():
    S = oscillator()
    t = np.linspace(0, 2, 21)
    ds = simulate.sweep(S, {"k": 0.1, "w": 1.0}, {"k": [0.1, 0.5], "w": [1.0, 2.0, 3.0]}, {"x": 1.0, "y": 0.0}, t,
                        backend="diffrax")
    assert ds.x.shape == (2, 3, 21) and ds.attrs["backend"] == "diffrax"
    one = simulate.solve(S, {"k": 0.5, "w": 3.0}, {"x": 1.0, "y": 0.0}, t, backend="scipy", rtol=1e-10, atol=1e-12)
    assert np.allclose(ds.x.sel(k=0.5, w=3.0).values, one.x.values, atol=1e-6)
    assert np.allclose(ds.radius_sq.sel(k=0.5, w=3.0).values, np.exp(-t), atol=1e-6)


def test_numba_sweep_equals_individual_scipy_solves():
    S = oscillator()
    t = np.linspace(0, 2, 21)
    ds = simulate.sweep(S, {"k": 0.1, "w": 1.0}, {"k": [0.1, 0.5], "w": [1.0, 2.0, 3.0]}, {"x": 1.0, "y": 0.0}, t)
    assert ds.x.shape == (2, 3, 21) and ds.attrs["backend"] == "numba"  # the default
    for kk in (0.1, 0.5):
        for ww in (1.0, 3.0):
            one = simulate.solve(S, {"k": kk, "w": ww}, {"x": 1.0, "y": 0.0}, t, backend="scipy", rtol=1e-10,
                                 atol=1e-12)
            np.testing.assert_allclose(ds.x.sel(k=kk, w=ww).values, one.x.values, atol=1e-7)
            np.testing.assert_allclose(ds.radius_sq.sel(k=kk, w=ww).values, np.exp(-2 * kk * t), rtol=1e-6)


def test_a_sweep_without_observables_has_the_same_states_and_no_observables():
    S = oscillator()
    t = np.linspace(0, 2, 21)
    args = ({"k": 0.1, "w": 1.0}, {"k": [0.1, 0.5]}, {"x": 1.0, "y": 0.0}, t)
    full = simulate.sweep(S, *args, backend="numba")
    bare = simulate.sweep(S, *args, backend="numba", observables=False)
    assert "radius_sq" in full and set(bare.data_vars) == {"x", "y"}
    np.testing.assert_array_equal(bare.x.values, full.x.values)
