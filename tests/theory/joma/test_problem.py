"""theory/joma/problem.py through simulate.solve on both backends: Theorem 1's exact invariants to
1e-8 relative, the integrated-out dynamics, the softmax invariant error as the integral of the
derived residual, and block_flow_problem (the data-set block flow) against the sympy problem."""

import numpy as np
import pytest

import simulate as sim
from theory import joma as J

BACKENDS = [("scipy", "DOP853"), ("diffrax", "Dopri8")]


def _invariant_relative_error(tr, attention, Mc, K):
    z = np.stack([tr[f"z_{l + 1}"].values for l in range(Mc)])
    sq = np.stack([sum(tr[f"v_{k + 1}_{l + 1}"].values ** 2 for k in range(K)) for l in range(Mc)])
    inv = np.stack([tr[f"invariant_{l + 1}"].values for l in range(Mc)])
    scale = (z**2 + sq) if attention == "linear" else (np.abs(z) + sq / 2)
    return float(np.abs(inv - inv[:, :1]).max() / scale.max())


@pytest.mark.parametrize("backend,method", BACKENDS)
@pytest.mark.parametrize("attention,activation,init", [("exp", "tanh", 0.0), ("linear", "linear", 0.3)])
def test_exact_invariants_along_the_ode(backend, method, attention, activation, init):
    cfg = J.JomaConfig(attention=attention, activation=activation, Mc=3, K=2, N=2, d=6, init_scale=init,
                       gradient="random", lr=0.05, steps=600, log_every=10)
    tr = sim.solve(J.problem(cfg), backend=backend, method=method, rtol=1e-12, atol=1e-14)
    assert np.ptp(tr["v_1_1"].values) > 0.1  # the state actually moved
    err = _invariant_relative_error(tr, attention, 3, 2)
    assert err < 1e-8, err


def test_integrated_out_dynamics_reproduce_the_block_flow_exactly_for_exp():
    """docs/papers/joma.md §2.3: substituting the invariant into v_dot gives MLP-only dynamics whose (v, s) equal
    the full block's (exact for exp attention), and whose implied z equals the block's z."""
    cfg = J.JomaConfig(Mc=3, K=2, N=2, d=5, activation="tanh", gradient="random", lr=0.05, steps=600, log_every=20)
    run = J.problem(cfg)
    blk = sim.solve(run, backend="scipy", rtol=1e-12, atol=1e-14)
    integ = J.integrated_system("exp", "tanh", 3, 2, 2)
    y0 = {n: v for n, v in run.y0.items() if not n.startswith("z_")}
    params = {**run.params, **{f"c_{l + 1}": 0.0 for l in range(3)}}
    red = sim.solve(integ, params, y0, run.t, backend="scipy", method="DOP853", rtol=1e-12, atol=1e-14)
    for n in [*y0, "z_1", "z_2", "z_3"]:
        np.testing.assert_allclose(red[n].values, blk[n].values, rtol=1e-7, atol=1e-9)


def test_softmax_invariant_error_is_the_integral_of_the_derived_residual():
    """Spec §2.2: along the softmax block flow, (z - zhat)(t) - (z - zhat)(0) equals the time integral
    of the exact residual d/dt(z - zhat) (derive.softmax_invariant_residual) — two independent routes
    (ODE solution vs symbolic residual + quadrature); and the residual is far from 0 here (random G)."""
    from scipy.integrate import cumulative_trapezoid

    cfg = J.JomaConfig(attention="softmax", Mc=3, K=3, N=3, d=5, gradient="random", lr=0.05, steps=600, log_every=1)
    run = J.problem(cfg)
    blk = sim.solve(run, backend="scipy", rtol=1e-12, atol=1e-14)
    sysm = run.system
    res = J.softmax_invariant_residual(3, 3, 3)
    import sympy as sp

    f = sp.lambdify((sysm.state, sysm.parameters), list(res), "numpy")
    Y = np.stack([blk[n].values for n in sysm.state_names], 1)
    p = sysm.parameter_vector(run.params)
    R = np.array([f(y, p) for y in Y])  # (n_t, Mc)
    t = blk["time"].values
    inv = np.stack([blk[f"invariant_{l + 1}"].values for l in range(3)], 1)
    integral = cumulative_trapezoid(R, t, axis=0, initial=0.0)
    scale = np.abs(inv - inv[0]).max()
    assert scale > 1e-2  # the approximate invariant really drifts with random G
    np.testing.assert_allclose(inv - inv[0], -integral, atol=1e-4 * scale)  # residual = d/dt(zhat - z)


@pytest.mark.parametrize("attention,activation", [("softmax", "tanh"), ("exp", "relu")])
def test_block_flow_problem_matches_the_sympy_problem(attention, activation):
    """The population-formula system (used for hundreds of sequences) vs the derived ReducedSystem
    for the same data, both through simulate.solve: two independent routes to the same ODE."""
    cfg = J.JomaConfig(attention=attention, activation=activation, Mc=3, K=2, N=3, d=5, gradient="random", init_scale=0.3,
                       lr=0.05, steps=400, log_every=20)
    prob = J.problem(cfg)
    ref = sim.solve(prob, backend="scipy", rtol=1e-11, atol=1e-13)
    X, G = J.make_data(cfg)
    W0, z0 = J.initial_parameters(cfg)
    out = sim.solve(J.block_flow_problem(cfg, X, G, prob.t, z0=z0, V0=W0[:3].T, s0=W0[3]), backend="scipy")
    assert out.attrs["system"] == f"block_{attention}_{activation}_data"
    for n in ("z_1", "z_2", "z_3", "v_2_3", "s_1"):
        np.testing.assert_allclose(out[n].values, ref[n].values, rtol=1e-7, atol=1e-9)


def test_block_flow_problem_on_both_backends_and_bad_data():
    """The diffrax backend integrates the same system (block_flow with jax.numpy) as scipy; data of
    the wrong shape and an implicit method are one-field ConfigErrors."""
    from theory.errors import ConfigError

    cfg = J.JomaConfig(attention="softmax", activation="tanh", Mc=3, K=2, N=5, d=5, gradient="random", init_scale=0.3,
                       lr=0.05, steps=200, log_every=20)
    X, G = J.make_data(cfg)
    prob = J.block_flow_problem(cfg, X, G)
    a, b = sim.solve(prob, backend="scipy"), sim.solve(prob, backend="diffrax")
    assert np.ptp(a["v_1_1"].values) > 0.01  # it moved
    for n in J.state_names(3, 2):
        np.testing.assert_allclose(b[n].values, a[n].values, rtol=1e-7, atol=1e-9)
    with pytest.raises(ConfigError) as e:
        J.block_flow_problem(cfg, X[:, :2], G)
    assert e.value.field == "X"
    with pytest.raises(ConfigError) as e:
        J.block_flow_problem(cfg, X, G[:3])
    assert e.value.field == "G"
    with pytest.raises(ConfigError) as e:
        sim.solve(prob, backend="scipy", method="Radau")
    assert e.value.field == "method"
