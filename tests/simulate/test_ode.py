"""simulate/ode.py: closed-form ODEs in units of the tolerance, backend agreement, failures with
partial results, the ODE method tables (one per backend, scipy ``METHODS`` style) and the helpers
the other simulate modules share."""

import inspect

import numpy as np
import pytest
import sympy as sp

import simulate
from helpers.systems import oscillator
from simulate import _numba_ode as ode_numba
from simulate import ode
from theory.core import ReducedSystem
from theory.errors import ConfigError, SolverError
from theory.refs import resolve_ref

x = sp.Symbol("x", real=True)
k = sp.Symbol("k", positive=True)


@pytest.mark.parametrize("backend", simulate.BACKENDS)
def test_solve_matches_closed_form_in_tolerance_units(backend):
    S = oscillator()
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
    S = oscillator()
    with pytest.raises(ConfigError, match="^k:"):
        simulate.solve(S, {"w": 1.0}, {"x": 1.0, "y": 0.0}, [0, 1])
    with pytest.raises(ConfigError, match="^t:"):
        simulate.solve(S, {"k": 1.0, "w": 1.0}, {"x": 1.0, "y": 0.0}, [1, 0])
    with pytest.raises(ConfigError, match="^backend:"):
        simulate.solve(S, {"k": 1.0, "w": 1.0}, {"x": 1.0, "y": 0.0}, [0, 1], backend="euler")
    with pytest.raises(ConfigError, match="^y0:"):
        simulate.solve(S, {"k": 1.0, "w": 1.0}, {"x": float("nan"), "y": 0.0}, [0, 1])


def test_first_crossing_interpolates():
    import xarray as xr

    ds = xr.Dataset({"v": ("time", np.array([0.0, 0.2, 0.6, 1.0]))}, coords={"time": [0.0, 1.0, 2.0, 3.0]})
    assert simulate.first_crossing(ds, "v", 0.4) == pytest.approx(1.5)
    assert np.isnan(simulate.first_crossing(ds, "v", 2.0))


def test_tables_name_public_solver_classes():
    import diffrax
    import scipy.integrate

    assert simulate.BACKENDS == tuple(simulate.ODE_METHODS) == ("diffrax", "scipy", "numba")
    assert simulate.ODE_METHODS is ode.ODE_METHODS and simulate.METHODS is not ode.ODE_METHODS  # SDE table apart
    for name, m in ode.ODE_METHODS["scipy"].items():
        cls = resolve_ref(m.solver)
        assert m.solver.startswith("scipy.integrate:") and cls is getattr(scipy.integrate, name)
        assert issubclass(cls, scipy.integrate.OdeSolver)
    for name, m in ode.ODE_METHODS["diffrax"].items():
        assert resolve_ref(m.solver) is getattr(diffrax, name)
        assert issubclass(resolve_ref(m.solver), diffrax.AbstractSolver)
    for name, m in ode.ODE_METHODS["numba"].items():
        assert resolve_ref(m.solver) is ode_numba.dop853  # "auto" starts with it (then LSODA once stiff)
    # the defaults are the first entries, and the stiff ones
    assert [next(iter(t)) for t in ode.ODE_METHODS.values()] == ["Kvaerno5", "Radau", "auto"]
    assert "integrate._ivp" not in inspect.getsource(ode)  # no import of scipy's private package


@pytest.mark.parametrize("backend, method", [(b, m) for b, t in simulate.ODE_METHODS.items() for m in t])
def test_every_method_meets_the_closed_form(backend, method):
    t = np.linspace(0, 3, 31)
    rtol, atol = 1e-8, 1e-10
    tr = simulate.solve(oscillator(), {"k": 0.3, "w": 2.0}, {"x": 1.0, "y": 0.0}, t, backend=backend,
                        method=method, rtol=rtol, atol=atol)
    r = np.hypot(tr.x - np.exp(-0.3 * t) * np.cos(2 * t), tr.y - np.exp(-0.3 * t) * np.sin(2 * t))
    # global error in units of the tolerance on the solution's scale e^{-kt}
    assert np.max(r / (atol + rtol * np.exp(-0.3 * t))) < 1000, (backend, method)
    assert tr.attrs["status"] == 0


@pytest.mark.parametrize("backend", simulate.BACKENDS)
def test_unknown_method_names_the_field(backend):
    with pytest.raises(ConfigError, match="method"):
        simulate.solve(oscillator(), {"k": 0.3, "w": 2.0}, [1.0, 0.0], [0.0, 1.0], backend=backend, method="Euler")


def test_check_times_and_the_compiled_solver_are_shared():
    np.testing.assert_array_equal(ode.check_times([0, 1, 2]), [0.0, 1.0, 2.0])
    for bad in ([0.0], [0.0, 0.0], [0.0, np.inf], [[0.0, 1.0]]):
        with pytest.raises(ConfigError, match="^t: "):
            ode.check_times(bad)
    S = oscillator()
    run = ode.diffrax_solver(S, "Tsit5", 1e-8, 1e-10, 1000)
    assert ode.diffrax_solver(S, "Tsit5", 1e-8, 1e-10, 1000) is run  # compiled once per system
    with pytest.raises(ConfigError, match="method"):
        ode.diffrax_solver(S, "Euler", 1e-8, 1e-10, 1000)


@pytest.mark.parametrize("backend, method", [
    pytest.param("diffrax", None, marks=pytest.mark.xfail(
        strict=True, raises=SolverError, reason="Kvaerno5's chord iteration fails at the fixed point (dtmin)")),
    ("scipy", None), ("scipy", "LSODA"), ("numba", "auto")])
def test_backends_agree_on_a_very_stiff_scb_flow(backend, method):
    """SCB at eta_V = eta_A = 1e4 (docs/papers/scb.md §3.4 "Stiffness"): the flow is the eta = 1 flow
    with time rescaled by 1e4 (both rates scale the whole right-hand side), so a backend must reach
    the eta = 1 solution at 1e4 t; it does not diverge."""
    from theory import scb

    fast = scb.problem(scb.SCBConfig(eta_V=1e4, eta_A=1e4))
    slow = scb.problem(scb.SCBConfig(eta_V=1.0, eta_A=1.0))
    t = np.asarray(fast.t)[:21]
    ref = simulate.solve(slow, backend="scipy", t=t * 1e4, rtol=1e-11, atol=1e-13)
    tr = simulate.solve(fast, backend=backend, method=method, t=t)
    assert tr.attrs["status"] == 0
    for n in fast.system.state_names:
        np.testing.assert_allclose(tr[n].values, ref[n].values, rtol=1e-6, atol=1e-8, err_msg=n)
