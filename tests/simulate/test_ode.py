"""simulate/ode.py: the ODE method tables (one per backend, scipy ``METHODS`` style) and the
helpers the other simulate modules share."""

import inspect

import numpy as np
import pytest
import sympy as sp

import simulate
from simulate import ode
from theory.core import ReducedSystem
from theory.errors import ConfigError
from theory.refs import resolve_ref

x, y = sp.symbols("x y", real=True)
k, w = sp.symbols("k w", positive=True)


def _oscillator():
    return ReducedSystem(name="damped_rotation", paper="test", state=(x, y), parameters=(k, w),
                         rhs=(-k * x - w * y, w * x - k * y))


def test_tables_name_public_solver_classes():
    import diffrax
    import scipy.integrate

    assert simulate.BACKENDS == tuple(simulate.ODE_METHODS) == ("diffrax", "scipy")
    assert simulate.ODE_METHODS is ode.ODE_METHODS and simulate.METHODS is not ode.ODE_METHODS  # SDE table apart
    for name, m in ode.ODE_METHODS["scipy"].items():
        cls = resolve_ref(m.solver)
        assert m.solver.startswith("scipy.integrate:") and cls is getattr(scipy.integrate, name)
        assert issubclass(cls, scipy.integrate.OdeSolver)
    for name, m in ode.ODE_METHODS["diffrax"].items():
        assert resolve_ref(m.solver) is getattr(diffrax, name)
        assert issubclass(resolve_ref(m.solver), diffrax.AbstractSolver)
    # the defaults are the first entries, and the stiff ones
    assert [next(iter(t)) for t in ode.ODE_METHODS.values()] == ["Kvaerno5", "Radau"]
    assert "integrate._ivp" not in inspect.getsource(ode)  # no import of scipy's private package


@pytest.mark.parametrize("backend, method", [(b, m) for b, t in simulate.ODE_METHODS.items() for m in t])
def test_every_method_meets_the_closed_form(backend, method):
    t = np.linspace(0, 3, 31)
    rtol, atol = 1e-8, 1e-10
    tr = simulate.solve(_oscillator(), {"k": 0.3, "w": 2.0}, {"x": 1.0, "y": 0.0}, t, backend=backend,
                        method=method, rtol=rtol, atol=atol)
    r = np.hypot(tr.x - np.exp(-0.3 * t) * np.cos(2 * t), tr.y - np.exp(-0.3 * t) * np.sin(2 * t))
    # global error in units of the tolerance on the solution's scale e^{-kt}
    assert np.max(r / (atol + rtol * np.exp(-0.3 * t))) < 1000, (backend, method)
    assert tr.attrs["status"] == 0


@pytest.mark.parametrize("backend", simulate.BACKENDS)
def test_unknown_method_names_the_field(backend):
    with pytest.raises(ConfigError, match="method"):
        simulate.solve(_oscillator(), {"k": 0.3, "w": 2.0}, [1.0, 0.0], [0.0, 1.0], backend=backend, method="Euler")


def test_check_times_and_the_compiled_solver_are_shared():
    np.testing.assert_array_equal(ode.check_times([0, 1, 2]), [0.0, 1.0, 2.0])
    for bad in ([0.0], [0.0, 0.0], [0.0, np.inf], [[0.0, 1.0]]):
        with pytest.raises(ConfigError, match="^t: "):
            ode.check_times(bad)
    S = _oscillator()
    run = ode.diffrax_solver(S, "Tsit5", 1e-8, 1e-10, 1000)
    assert ode.diffrax_solver(S, "Tsit5", 1e-8, 1e-10, 1000) is run  # compiled once per system
    with pytest.raises(ConfigError, match="method"):
        ode.diffrax_solver(S, "Euler", 1e-8, 1e-10, 1000)
