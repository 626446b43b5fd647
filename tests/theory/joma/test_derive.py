"""theory/joma/derive.py: the sympy derivation against the spec's printed equations (docs/papers/joma.md
§2): the block flow (listing, finite differences, named intermediates), exact invariants, the softmax
residual, Theorem 2's reduction and closed form (symbolic and integrated), the nonlinear ODEs'
anchors (§4 item 3), HBLT co-occurrence (Theorem 5)."""

import math

import numpy as np
import pytest
import sympy as sp
from scipy.special import erfinv

import simulate as sim
from helpers.joma import pack, random_point, spec_block_rhs
from theory import joma as J

BACKENDS = [("scipy", "DOP853"), ("diffrax", "Dopri8")]


@pytest.mark.parametrize("attention", J.ATTENTIONS)
@pytest.mark.parametrize("activation", J.ACTIVATIONS)
def test_block_flow_matches_spec_listing(attention, activation):
    Mc, K, N = 3, 2, 3
    rng = np.random.default_rng(1)
    X, G, V, s, z = random_point(rng, Mc, K, N)
    tau = 0.7 if attention != "linear" else 1.0
    sysm = J.block_system(attention, activation, Mc, K, N)
    assert sysm.state_names == J.state_names(Mc, K)
    y, params = pack(X, G, V, s, z, tau, Mc, K, N)
    got = sysm.to_numpy()(0.0, y, sysm.parameter_vector(params))
    Vdot, sdot, zdot = spec_block_rhs(attention, activation, X, G, V, s, z, tau)
    np.testing.assert_allclose(got, np.concatenate([zdot, Vdot.ravel(), sdot]), rtol=1e-12, atol=1e-13)


def test_block_flow_is_gradient_of_mean_objective_finite_differences():
    """The flow is +grad of (1/N) sum_n J_n: central differences of the numpy objective."""
    Mc, K, N = 3, 2, 2
    rng = np.random.default_rng(2)
    X, G, V, s, z = random_point(rng, Mc, K, N)

    def obj(y):
        zz, VV, ss = y[:Mc], y[Mc:Mc + K * Mc].reshape(K, Mc), y[Mc + K * Mc:]
        B = X * np.exp(zz) / (X * np.exp(zz)).sum(1, keepdims=True)
        return (G * np.tanh(B @ VV.T + ss)).sum() / N

    sysm = J.block_system("softmax", "tanh", Mc, K, N)
    y, params = pack(X, G, V, s, z, 1.0, Mc, K, N)
    got = sysm.to_numpy()(0.0, y, sysm.parameter_vector(params))
    h = 1e-6
    fd = np.array([(obj(y + h * e) - obj(y - h * e)) / (2 * h) for e in np.eye(y.size)])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("attention", ["linear", "exp"])
@pytest.mark.parametrize("activation", ["linear", "tanh"])
def test_exact_invariants_symbolically(attention, activation):
    """Theorem 1: the Lie derivative of each invariant simplifies to 0 for the N-sample block."""
    sysm = J.block_system(attention, activation, 3, 2, 2)
    assert len(sysm.invariants) == 3
    for expr in sysm.invariants.values():
        assert sp.simplify(sysm.time_derivative(expr)) == 0


def test_invariants_have_the_spec_form():
    z1 = sp.Symbol("z_1", real=True)
    v11, v21 = sp.Symbol("v_1_1", real=True), sp.Symbol("v_2_1", real=True)
    assert sp.expand(J.invariant_expressions("linear", 3, 2)["invariant_1"] - (z1**2 - v11**2 - v21**2)) == 0
    assert sp.expand(J.invariant_expressions("exp", 3, 2)["invariant_1"].subs(J.tau, 1)
                     - (z1 - (v11**2 + v21**2) / 2)) == 0


def test_softmax_residual_vanishes_when_conditions_hold_and_not_otherwise():
    """Per sample (N = 1, bbar = b at the current point) conditions (i)-(ii) hold exactly and the
    residual is 0 (spec Appendix); with heterogeneous x and random g it is O(1)."""
    Mc, K = 3, 2
    rng = np.random.default_rng(3)
    for N, expect_zero in ((1, True), (3, False)):
        X, G, V, s, z = random_point(rng, Mc, K, N)
        res = J.softmax_invariant_residual(Mc, K, N)
        sysm = J.block_system("softmax", "linear", Mc, K, N)
        y, params = pack(X, G, V, s, z, 1.0, Mc, K, N)
        if expect_zero:
            b = X[0] * np.exp(z) / (X[0] * np.exp(z)).sum()
            params.update({f"bbar_{l + 1}": b[l] for l in range(Mc)})
        subs = dict(zip(sysm.state, y))
        subs.update({p: params[str(p)] for p in sysm.parameters})
        vals = np.array([float(sp.N(r.subs(subs))) for r in res])
        Vdot = spec_block_rhs("softmax", "linear", X, G, V, s, z)[0]
        scale = np.abs(V * Vdot).sum()
        if expect_zero:
            assert np.abs(vals).max() < 1e-12 * max(scale, 1)
        else:
            assert np.abs(vals).max() > 1e-3 * scale


def test_named_intermediates_round_trip_through_json():
    """Softmax/tanh block: A_n and u_n_k are definitions (spec §1.1); JSON -> load_system gives an
    equivalent system, and the numeric rhs (definitions expanded) equals the spec listing."""
    import json

    from theory import load_system, systems_to_json

    sysm = J.block_system("softmax", "tanh", 3, 2, 2)
    assert [str(s) for s, _ in sysm.definitions] == ["A_1", "A_2", "u_1_1", "u_1_2", "u_2_1", "u_2_2"]
    back = load_system(json.loads(systems_to_json("joma", [sysm]))["systems"][0])
    assert back.equivalent(sysm)
    X, G, V, s, z = random_point(np.random.default_rng(9), 3, 2, 2)
    y, params = pack(X, G, V, s, z, 1.0, 3, 2, 2)
    got = back.to_numpy()(0.0, y, back.parameter_vector(params))
    Vdot, sdot, zdot = spec_block_rhs("softmax", "tanh", X, G, V, s, z, 1.0)
    np.testing.assert_allclose(got, np.concatenate([zdot, Vdot.ravel(), sdot]), rtol=1e-12, atol=1e-13)


def test_theorem2_reduction_and_closed_form_symbolically():
    sysm = J.theorem2_system(3, 2)
    v1, D1 = sysm.state[0], sysm.parameters[0]
    assert sp.simplify(sysm.rhs[0] - D1 * sp.exp(v1**2 / 2)) == 0  # spec §2.4 printed equation
    vt = sysm.closed_forms["v_1"]
    assert sp.simplify(sp.diff(vt, J.t_sym) - D1 * sp.exp(vt**2 / 2)) == 0
    assert vt.subs(J.t_sym, 0) == 0
    # blow-up: the erfinv argument reaches 1 at t* = sqrt(pi/2)/|Delta|
    tstar = sysm.closed_forms["blow_up_1"].subs(D1, sp.Rational(3, 10))
    assert sp.simplify(sp.sqrt(2 / sp.pi) * sp.Rational(3, 10) * tstar - 1) == 0


def test_nonlinear_exp_entropy_anchor_values():
    """Spec §4 item 3 (derived anchors): min entropy ~0.150 at t ~0.47, end H(softmax(mu^2/2)) = 1.106."""
    from scipy.integrate import solve_ivp

    mu = np.array(J.FIG4_MU)
    sysm = J.nonlinear_exp_system(len(mu))
    # cross-derivation: Theorem 2's rhs (derived from the block flow) with Delta_l -> mu_l - v_l
    th2 = J.theorem2_system(len(mu), 1)
    for l in range(len(mu)):
        sub = {th2.parameters[l]: sysm.parameters[l] - sysm.state[l], th2.state[l]: sysm.state[l]}
        assert sp.simplify(th2.rhs[l].xreplace(sub) - sysm.rhs[l]) == 0
    f = sysm.to_numpy()
    t = np.linspace(0, 6, 6001)
    sol = solve_ivp(lambda tt, y: f(tt, y, mu), (0, 6), np.zeros(len(mu)), t_eval=t, rtol=1e-10, atol=1e-12, method="LSODA")
    H = sysm.observables_numpy()(sol.y.T, mu)["attention_entropy"]
    i = int(np.argmin(H))
    assert H[0] == pytest.approx(math.log(10), abs=1e-12)
    assert H[i] == pytest.approx(0.150, abs=0.002)
    assert t[i] == pytest.approx(0.47, abs=0.01)
    assert J.fixed_point_entropy(mu, temperature=2.0) == pytest.approx(1.106, abs=1e-3)
    assert H[-1] == pytest.approx(J.fixed_point_entropy(mu), abs=1e-3)
    # exact convergence times t_j(eps) against the ODE's first crossing of (1 - eps) mu_j
    eps = 0.05
    for j in (0, 9):
        tj = J.convergence_time(mu[j], eps)
        cross = t[np.argmax(sol.y[j] >= (1 - eps) * mu[j])]
        assert cross == pytest.approx(tj, abs=2e-3)
    times = [J.convergence_time(m, eps) for m in mu]
    assert np.all(np.diff(times) < 0)  # salient components converge first


def test_cooccurrence_matches_spec_formula():
    E, P = J.cooccurrence_formula()
    rho, rho0 = sp.symbols("rho rho0", real=True)
    H = sp.Symbol("H", positive=True, integer=True)
    spec = (1 + 2 * rho**H * rho0 + rho ** (2 * H)) / (2 * (1 + rho**H * rho0))
    assert sp.simplify(P - spec) == 0
    assert sp.simplify(E - rho ** (2 * H)) == 0
    assert sp.simplify(P.subs(rho0, 0) - (1 + rho ** (2 * H)) / 2) == 0
    assert np.all(np.diff(J.cooccurrence_probability(0.6, [1, 2, 3])) < 0)


@pytest.mark.parametrize("backend,method", BACKENDS)
def test_theorem2_ode_matches_erfinv_closed_form(backend, method):
    Delta = {"Delta_1": 0.3, "Delta_2": -0.2, "Delta_3": 0.1}
    D = np.array(list(Delta.values()))
    tstar = J.blow_up_times(D).min()
    t = np.linspace(0.0, 0.95 * tstar, 96)
    tr = sim.solve(J.theorem2_system(3, 1), Delta, [0.0, 0.0, 0.0], t, backend=backend, method=method,
                   rtol=1e-13, atol=1e-15)
    for l, d in enumerate(D):
        closed = np.sqrt(2) * erfinv(np.sqrt(2 / np.pi) * d * t)
        rel = np.abs(tr[f"v_{l + 1}"].values - closed).max() / np.abs(closed).max()
        assert rel < 1e-6, (l, rel)
    v_end = np.abs([tr[f"v_{l + 1}"].values[-1] for l in range(3)])
    assert int(np.argmax(v_end)) == 0  # the most salient component leads
    # Linear activation: the attention entropy decreases monotonically (spec §4 item 2)
    assert np.all(np.diff(tr["attention_entropy"].values) < 0)


@pytest.mark.parametrize("backend,method", [BACKENDS[0], pytest.param(*BACKENDS[1], marks=pytest.mark.slow)])
def test_nonlinear_entropy_drops_then_bounces_to_fixed_point(backend, method):
    mu = np.array(J.FIG4_MU)
    params = {f"mu_{j + 1}": m for j, m in enumerate(mu)}
    t = np.linspace(0.0, 8.0, 401)
    tr = sim.solve(J.nonlinear_exp_system(10), params, np.zeros(10), t, backend=backend, method=method,
                   rtol=1e-9, atol=1e-11)
    H = tr["attention_entropy"].values
    assert J.drops_then_bounces(H, tol=1e-7)  # one turning point: down, then up
    assert len(J.slope_sign_changes(H, tol=1e-7)) == 1
    assert 0.4 < t[np.argmin(H)] < 0.55
    assert H[-1] == pytest.approx(J.fixed_point_entropy(mu), abs=1e-3)
    assert H.min() < H[-1] < H[0]
