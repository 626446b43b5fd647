"""simulate/sde.py: solve_sde on a ReducedSystem's diffusion (exact OU moments, same seed -> same
numbers) and the partial ensemble kept when a path diverges."""

import numpy as np
import pytest
import sympy as sp

import simulate
from helpers.systems import LinearSDE
from theory.core import ReducedSystem
from theory.errors import SolverError

x = sp.Symbol("x", real=True)
k = sp.Symbol("k", positive=True)
sig = sp.Symbol("sigma", positive=True)


def test_sde_ornstein_uhlenbeck_moments_and_determinism():
    """dX = -k X dt + sigma dW from X0 = 1: mean e^{-kt}, var sigma^2 (1 - e^{-2kt})/(2k)."""
    S = ReducedSystem(name="ou", paper="test", state=(x,), parameters=(k, sig), rhs=(-k * x,),
                      diffusion=sp.Matrix([[sig]]))
    model = simulate.ReducedSDE(S, {"k": 1.0, "sigma": 0.5}, {"x": 1.0})
    t = np.linspace(0, 2, 21)
    ens = simulate.solve_sde(model, t, paths=4000, seed=3, dt=0.01)
    m, v = ens.x.mean("path").values, ens.x.var("path").values
    exact_m = np.exp(-t)
    exact_v = 0.25 * (1 - np.exp(-2 * t)) / 2
    se_m = np.sqrt(exact_v / 4000) + 1e-12
    assert np.all(np.abs(m - exact_m) < 4 * se_m + 0.01 * exact_m)  # Euler bias O(dt) + MC error
    assert np.allclose(v[5:], exact_v[5:], rtol=0.1)
    again = simulate.solve_sde(model, t, paths=4000, seed=3, dt=0.01)
    assert np.array_equal(again.x.values, ens.x.values)
    other = simulate.solve_sde(model, t, paths=4000, seed=4, dt=0.01)
    assert not np.array_equal(other.x.values, ens.x.values)


def test_sde_engine_returns_partial_result_on_divergence():
    class Blow(LinearSDE):
        def drift(self, t, y, a):
            return y**2

    with pytest.raises(SolverError) as err:
        simulate.solve_sde(Blow(), np.linspace(0, 3, 31), paths=4, seed=0, dt=0.01)
    part = err.value.partial
    assert 0 < part.sizes["time"] < 31
    assert part["time"].values[-1] < 1.0  # y' = y^2, y(0) = 1 blows up at t = 1
