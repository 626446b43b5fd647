"""simulate.solve(..., method="auto"): the numba backend's stiffness-aware choice (compiled DOP853
while the flow is not stiff, scipy LSODA once it is), checked against closed forms, an independent
scipy Radau solve at rtol 1e-10 on each paper's reduced ODE, and the other backends."""

import numpy as np
import pytest
import sympy as sp
from scipy.integrate import solve_ivp

import simulate
from helpers.systems import oscillator
from simulate import _numba_ode
from theory.core import ReducedSystem

u, v = sp.symbols("u v", real=True)
lam = sp.Symbol("lam", positive=True)


def stiff_linear() -> ReducedSystem:
    """u' = -u, v' = -lam v + u: eigenvalues -1 and -lam; from (1, v0) the closed form
    u = e^{-t}, v = (v0 - 1/(lam - 1)) e^{-lam t} + e^{-t}/(lam - 1)."""
    return ReducedSystem(name="stiff_linear", paper="test", state=(u, v), parameters=(lam,),
                         rhs=(-u, -lam * v + u))


def test_auto_is_explicit_on_a_non_stiff_flow():
    t = np.linspace(0, 5, 101)
    rtol, atol = 1e-8, 1e-10
    tr = simulate.solve(oscillator(), {"k": 0.3, "w": 2.0}, {"x": 1.0, "y": 0.0}, t, method="auto", rtol=rtol,
                        atol=atol)
    assert tr.attrs["backend"] == "numba" and tr.attrs["method_used"] == "DOP853"
    r = np.hypot(tr.x - np.exp(-0.3 * t) * np.cos(2 * t), tr.y - np.exp(-0.3 * t) * np.sin(2 * t))
    assert np.max(r / (atol + rtol * np.exp(-0.3 * t))) < 100


@pytest.mark.parametrize("lam_value, expected", [(1e4, "LSODA"), (3.0, "DOP853")])
def test_auto_is_stiff_when_the_jacobian_says_so(lam_value, expected):
    t = np.linspace(0, 100, 201)
    rtol, atol = 1e-8, 1e-10
    tr = simulate.solve(stiff_linear(), {"lam": lam_value}, {"u": 1.0, "v": 2.0}, t, method="auto", rtol=rtol,
                        atol=atol)
    assert tr.attrs["method_used"] == expected
    exact_v = (2.0 - 1 / (lam_value - 1)) * np.exp(-lam_value * t) + np.exp(-t) / (lam_value - 1)
    np.testing.assert_allclose(tr.u.values, np.exp(-t), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(tr.v.values, exact_v, rtol=1e-5, atol=1e-9)


def test_auto_falls_back_when_stiffness_develops_after_the_start():
    # v relaxes to cos(t) at rate lam u^2, and u = t: not stiff at t = 0, stiff (rate 1e4 t^2) later
    S = ReducedSystem(name="late_stiff", paper="test", state=(u, v), parameters=(lam,),
                      rhs=(sp.Integer(1), -lam * u**2 * (v - sp.cos(u))))
    t = np.linspace(0, 50, 101)
    tr = simulate.solve(S, {"lam": 1e4}, {"u": 0.0, "v": 0.0}, t, method="auto", rtol=1e-8, atol=1e-10)
    assert tr.attrs["method_used"] == "LSODA"
    f = S.to_numpy()
    p = np.array([1e4])
    ref = solve_ivp(lambda tt, yy: f(tt, yy, p), (0, 50), [0.0, 0.0], method="Radau", t_eval=t, rtol=1e-11,
                    atol=1e-13, jac=lambda tt, yy: S.jacobian_numpy()(tt, yy, p))
    np.testing.assert_allclose(tr.v.values, ref.y[1], rtol=1e-6, atol=1e-8)


def test_compiled_rhs_equals_the_numpy_rhs():
    from theory import scb

    S = scb.symmetric_system()
    f = _numba_ode.rhs_kernel(S)
    rng = np.random.default_rng(0)
    p = S.parameter_vector(dict(T=50.0, rho=0.5, K=0.12, m2=0.4, eta_V=0.5, eta_A=0.7))
    out = np.empty(4)
    for _ in range(5):
        y = rng.normal(size=4)
        f(0.0, y, p, out)
        np.testing.assert_allclose(out, S.to_numpy()(0.0, y, p), rtol=1e-14, atol=1e-14)


def test_compiled_finite_difference_jacobian_equals_the_symbolic_jacobian():
    from theory import scb

    S = scb.symmetric_system()
    J = _numba_ode.jacobian(S)
    p = S.parameter_vector(dict(T=50.0, rho=0.5, K=0.12, m2=0.4, eta_V=0.5, eta_A=0.7))
    rng = np.random.default_rng(1)
    for _ in range(3):
        y = rng.normal(size=4)
        np.testing.assert_allclose(J(0.0, y, p), S.jacobian_numpy()(0.0, y, p), rtol=1e-7, atol=1e-8)
    lam_true = np.max(np.abs(np.linalg.eigvals(S.jacobian_numpy()(0.0, y, p))))
    assert abs(_numba_ode.fastest_rate(S, 0.0, y, p) - lam_true) <= 1e-6 * lam_true
    # below a bound the row-sum norm answers (>= every |lambda|), above it the eigenvalues do
    norm = np.max(np.abs(S.jacobian_numpy()(0.0, y, p)).sum(axis=1))
    assert norm > 1.01 * lam_true
    assert abs(_numba_ode.fastest_rate(S, 0.0, y, p, below=2 * norm) - norm) <= 1e-6 * norm
    assert abs(_numba_ode.fastest_rate(S, 0.0, y, p, below=0.99 * norm) - lam_true) <= 1e-6 * lam_true


def _problems():
    from theory import joma, scan_snap, scb, topic

    return {"scb": lambda: scb.problem(scb.SCBConfig()),
            "scan-snap": lambda: scan_snap.problem(scan_snap.ScanSnapConfig()),
            "joma": lambda: joma.problem(joma.JomaConfig()), "topic": lambda: topic.problem(topic.TopicConfig())}


@pytest.mark.parametrize("paper", ["scb", "scan-snap", "joma", "topic"])
def test_auto_agrees_with_tight_radau_on_each_papers_ode(paper):
    P = _problems()[paper]()
    S = P.system
    p, y0, t = S.parameter_vector(P.params), S.state_vector(P.y0), np.asarray(P.t, dtype=float)
    f = S.to_numpy()
    ref = solve_ivp(lambda tt, yy: f(tt, yy, p), (t[0], t[-1]), y0, method="Radau", t_eval=t, rtol=1e-10,
                    atol=1e-12).y.T
    tr = simulate.solve(P, method="auto", rtol=1e-8, atol=1e-10, observables=False)
    Y = np.stack([tr[n].values for n in S.state_names], axis=1)
    scale = np.maximum(np.max(np.abs(ref), axis=0), 1e-6 * np.max(np.abs(ref)))
    assert np.max(np.abs(Y - ref) / scale) < 1e-6, paper


@pytest.mark.parametrize("method, backend, used", [(None, "numba", "LSODA"), ("Kvaerno5", "diffrax", None),
                                                    ("Radau", "scipy", None)])
def test_no_backend_means_stiffness_aware_auto_or_the_backend_that_has_the_method(method, backend, used):
    """The default solve is the stiffness-aware ``auto`` (here: a stiff flow, so LSODA); a method
    named without a backend picks the backend whose table holds it. Each meets the closed form."""
    t = np.linspace(0, 2, 41)
    lam_value, rtol, atol = 1e5, 1e-8, 1e-10
    tr = simulate.solve(stiff_linear(), {"lam": lam_value}, {"u": 1.0, "v": 2.0}, t, method=method, rtol=rtol,
                        atol=atol)
    assert tr.attrs["backend"] == backend and tr.attrs.get("method_used") == used
    exact_v = (2.0 - 1 / (lam_value - 1)) * np.exp(-lam_value * t) + np.exp(-t) / (lam_value - 1)
    np.testing.assert_allclose(tr.u, np.exp(-t), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(tr.v, exact_v, rtol=1e-4, atol=1e-8)
