"""simulate/: closed-form ODEs in units of the tolerance, backend agreement, SDE moments, I/O."""

import os

import numpy as np
import pytest
import sympy as sp

import simulate
from theory.core import ReducedSystem
from theory.errors import ConfigError, SolverError

x, y = sp.symbols("x y", real=True)
k, w = sp.symbols("k w", positive=True)
sig = sp.Symbol("sigma", positive=True)


def _oscillator():
    """Damped rotation: closed form e^{-kt} (cos wt, sin wt) from (1, 0)."""
    return ReducedSystem(name="damped_rotation", paper="test", state=(x, y), parameters=(k, w),
                         rhs=(-k * x - w * y, w * x - k * y), observables={"radius_sq": x**2 + y**2})


@pytest.mark.parametrize("backend", simulate.BACKENDS)
def test_solve_matches_closed_form_in_tolerance_units(backend):
    S = _oscillator()
    t = np.linspace(0, 5, 101)
    rtol, atol = 1e-8, 1e-10
    tr = simulate.solve(S, {"k": 0.3, "w": 2.0}, {"x": 1.0, "y": 0.0}, t, backend=backend, rtol=rtol, atol=atol)
    exact_x = np.exp(-0.3 * t) * np.cos(2 * t)
    exact_y = np.exp(-0.3 * t) * np.sin(2 * t)
    # global error in units of the tolerance on the solution's scale |(x, y)| = e^{-kt}
    err = np.max(np.hypot(tr.x - exact_x, tr.y - exact_y) / (atol + rtol * np.exp(-0.3 * t)))
    assert err < 100
    assert np.allclose(tr.radius_sq, np.exp(-0.6 * t), rtol=1e-6)
    assert tr.attrs["status"] == 0 and tr.attrs["backend"] == backend


def test_backends_agree_on_scb_in_tolerance_units():
    from theory import scb

    S = scb.symmetric_system()
    p = dict(T=50.0, rho=0.5, K=0.12, m2=0.4, eta_V=0.5, eta_A=0.5)
    y0 = dict(zeta=0.0, omega=1.0, xi=1 / 50, beta=0.0)
    t = np.linspace(0, 80, 161)
    rtol, atol = 1e-9, 1e-11
    a = simulate.solve(S, p, y0, t, backend="scipy", rtol=rtol, atol=atol)
    b = simulate.solve(S, p, y0, t, backend="diffrax", rtol=rtol, atol=atol)
    for n in S.state_names:
        diff = np.abs(a[n].values - b[n].values) / (atol + rtol * np.abs(a[n].values))
        assert diff.max() < 1000, n  # "a few" tolerance units over a stiff escape: < 1e3 with rtol 1e-9
        assert np.max(np.abs(a[n].values - b[n].values)) < 1e-6


def test_solver_failure_raises_with_time_and_partial():
    blow = ReducedSystem(name="blowup", paper="test", state=(x,), parameters=(k,), rhs=(k * x**2,))
    t = np.linspace(0, 2, 41)  # x(t) = 1/(1 - t) blows up at t = 1
    for backend in simulate.BACKENDS:
        with pytest.raises(SolverError) as info:
            simulate.solve(blow, {"k": 1.0}, {"x": 1.0}, t, backend=backend, max_steps=20000)
        err = info.value
        assert 0.9 <= err.t_reached <= 1.0
        assert err.partial is not None and err.partial.sizes["time"] >= 18
        assert np.allclose(err.partial.x.values[:10], 1 / (1 - t[:10]), rtol=1e-6)


def test_bad_inputs_name_the_field():
    S = _oscillator()
    with pytest.raises(ConfigError, match="^k:"):
        simulate.solve(S, {"w": 1.0}, {"x": 1.0, "y": 0.0}, [0, 1])
    with pytest.raises(ConfigError, match="^t:"):
        simulate.solve(S, {"k": 1.0, "w": 1.0}, {"x": 1.0, "y": 0.0}, [1, 0])
    with pytest.raises(ConfigError, match="^backend:"):
        simulate.solve(S, {"k": 1.0, "w": 1.0}, {"x": 1.0, "y": 0.0}, [0, 1], backend="euler")
    with pytest.raises(ConfigError, match="^y0:"):
        simulate.solve(S, {"k": 1.0, "w": 1.0}, {"x": float("nan"), "y": 0.0}, [0, 1])


def test_netcdf_roundtrip_and_atomic_write(tmp_path):
    S = _oscillator()
    tr = simulate.solve(S, {"k": 0.3, "w": 2.0}, {"x": 1.0, "y": 0.0}, np.linspace(0, 1, 11), backend="scipy")
    path = tmp_path / "traj.nc"
    simulate.save(tr, path)
    back = simulate.load(path)
    assert np.array_equal(back.x.values, tr.x.values)
    assert simulate.parameters_of(back)["k"] == 0.3
    assert back.attrs["paper"] == "test" and "versions" in back.attrs
    # a failing writer leaves neither the target nor a temp file behind

    def bad_writer(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        simulate.atomic_write(tmp_path / "other.nc", bad_writer)
    assert sorted(os.listdir(tmp_path)) == ["traj.nc"]


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


def test_sweep_equals_individual_solves():
    S = _oscillator()
    t = np.linspace(0, 2, 21)
    ds = simulate.sweep(S, {"k": 0.1, "w": 1.0}, {"k": [0.1, 0.5], "w": [1.0, 2.0, 3.0]}, {"x": 1.0, "y": 0.0}, t)
    assert ds.x.shape == (2, 3, 21)
    one = simulate.solve(S, {"k": 0.5, "w": 3.0}, {"x": 1.0, "y": 0.0}, t, backend="scipy", rtol=1e-10, atol=1e-12)
    assert np.allclose(ds.x.sel(k=0.5, w=3.0).values, one.x.values, atol=1e-6)
    assert np.allclose(ds.radius_sq.sel(k=0.5, w=3.0).values, np.exp(-t), atol=1e-6)


def test_first_crossing_interpolates():
    import xarray as xr

    ds = xr.Dataset({"v": ("time", np.array([0.0, 0.2, 0.6, 1.0]))}, coords={"time": [0.0, 1.0, 2.0, 3.0]})
    assert simulate.first_crossing(ds, "v", 0.4) == pytest.approx(1.5)
    assert np.isnan(simulate.first_crossing(ds, "v", 2.0))


class _LinearSDE:
    """dy = -y dt + s dW (1-D OU) with a key-consuming diffusion, for the engine's contract tests."""

    paper, name, noise_dim = "test", "ou", 1

    def args(self):
        import jax.numpy as jnp

        return jnp.asarray(0.5)

    def initial_state(self):
        return np.array([1.0])

    def drift(self, t, y, a):
        return -y

    def diffusion(self, t, y, a, key):
        return a * np.ones((1, 1))

    def observables(self, Y):
        return {"y": Y[..., 0]}


def test_sde_engine_chunking_does_not_change_numbers_and_grid_need_not_be_aligned():
    m = _LinearSDE()
    t = np.linspace(0.0, 2.0, 5)
    a = simulate.solve_sde(m, t, paths=300, seed=5, dt=0.05)  # one chunk of 3 PRNG blocks
    b = simulate.solve_sde(m, t, paths=300, seed=5, dt=0.05, chunk=8)  # three chunks of one block
    np.testing.assert_array_equal(a["y"].values, b["y"].values)
    few = simulate.solve_sde(m, t, paths=37, seed=5, dt=0.05)  # a path's numbers: whoever runs beside it
    np.testing.assert_array_equal(few["y"].values, a["y"].values[:37])
    assert len(np.unique(a["y"].values[:, -1])) == 300  # every path its own noise
    # uneven output grid (varying steps per interval): exact OU moments at the output times
    t2 = np.array([0.0, 0.13, 0.5, 1.37, 2.0])
    c = simulate.solve_sde(m, t2, paths=20000, seed=1, dt=0.01)
    mean, var = np.exp(-t2), 0.25 * (1 - np.exp(-2 * t2)) / 2
    y = c["y"].values
    se_m = np.sqrt(var / y.shape[0])
    assert np.all(np.abs(y.mean(0) - mean)[1:] < 4 * se_m[1:] + 0.01 * mean[1:])  # EM bias O(dt)


def test_sde_engine_returns_partial_result_on_divergence():
    class Blow(_LinearSDE):
        def drift(self, t, y, a):
            return y**2

    with pytest.raises(SolverError) as err:
        simulate.solve_sde(Blow(), np.linspace(0, 3, 31), paths=4, seed=0, dt=0.01)
    part = err.value.partial
    assert 0 < part.sizes["time"] < 31
    assert part["time"].values[-1] < 1.0  # y' = y^2, y(0) = 1 blows up at t = 1


def test_sde_engine_key_models_are_chunk_independent_under_every_prng():
    """A model that draws its own noise from a key (under vmap) gets the same numbers whatever the
    chunk, for each PRNG implementation (rbg's batched draws would use the first key only)."""
    class Keyed(_LinearSDE):
        def diffusion(self, t, y, a, key):
            import jax

            return a * (1.0 + jax.random.uniform(key, (1, 1)))

    m, t = Keyed(), np.linspace(0.0, 1.0, 3)
    for prng in ("rbg", "threefry2x32"):
        a = simulate.solve_sde(m, t, paths=16, seed=1, dt=0.1, prng=prng)["y"].values  # one chunk, 2 blocks
        b = simulate.solve_sde(m, t, paths=16, seed=1, dt=0.1, prng=prng, chunk=8)["y"].values  # 2 chunks
        np.testing.assert_array_equal(a, b)
        c = simulate.solve_sde(m, t, paths=9, seed=1, dt=0.1, prng=prng)["y"].values
        np.testing.assert_array_equal(c, a[:9])
