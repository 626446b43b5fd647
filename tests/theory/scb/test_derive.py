"""SCB derivation (theory/scb/derive.py): the derived systems against the spec's printed equations,
against an independent numpy population flow of the full (V, A), and the stage-1 analysis."""

import numpy as np
import pytest
import sympy as sp

from theory import scb
from theory.scb import K, T, beta, eta_A, eta_V, m2, omega, rho, xi, zeta


def _random_task(N=4, T_=12, Q_=3, attention="dirichlet", seed=3):
    cfg = scb.SCBConfig(N=N, T=T_, Q=Q_, attention=attention, task_seed=seed)
    return scb.make_task(cfg)


def test_gram_table_lemmas_hold_on_random_instances():
    task = _random_task()
    P, mu, Sig, Pt = task.P, task.mu, task.Sigma, task.P_tilde
    D = np.diag(mu)
    one = np.ones(task.N)
    U = np.outer(mu, one)  # mu 1^T
    assert np.allclose(P @ mu, mu)
    assert np.allclose(Sig @ one, 0)
    # SIGMA_FORM = [[K, 0], [0, 0]] on (P_tilde, mu1^T)
    assert np.isclose(np.trace(Pt @ Sig @ Pt.T), task.K)
    assert np.allclose([np.trace(Pt @ Sig @ U.T), np.trace(U @ Sig @ U.T)], 0)
    # MEAN_FORM = [[0, 0], [0, m2]]
    assert np.allclose(Pt @ mu, 0)
    assert np.isclose((U @ mu) @ (U @ mu), task.m2)
    # V_METRIC = [[K, 0], [0, m2]]
    assert np.isclose(np.trace(Pt @ D @ Pt.T), task.K)
    assert np.isclose(np.trace(Pt @ D @ U.T), 0)
    assert np.isclose(np.trace(U @ D @ U.T), task.m2)
    # moment identity E[X a b^T X^T] = <a,b> Sigma + (1^T a)(1^T b) mu mu^T, exactly by enumeration
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=3), rng.normal(size=3)
    N = task.N
    E = np.zeros((N, N))
    import itertools

    for toks in itertools.product(range(N), repeat=3):
        X = np.eye(N)[:, toks]
        E += np.prod(mu[list(toks)]) * (X @ np.outer(a, b) @ X.T)
    assert np.allclose(E, (a @ b) * Sig + a.sum() * b.sum() * np.outer(mu, mu))


def test_symmetric_rhs_equals_spec_equations():
    S = scb.symmetric_system()
    n = T * xi**2 + 2 * xi * beta + rho * beta**2
    c = xi + rho * beta
    s = T * xi + beta
    spec = [  # docs/papers/scb.md §3.3 (symmetric case)
        eta_V * (c - n * zeta),
        -eta_V * s * (s * omega - 1),
        -eta_A * (K * zeta**2 * xi + m2 * omega * (s * omega - 1)),
        eta_A * K * zeta * (1 - zeta * beta),
    ]
    assert S.state == (zeta, omega, xi, beta)
    for derived, printed in zip(S.expanded_rhs, spec):
        assert sp.simplify(derived - printed) == 0
    # the exported form keeps the spec's named quantities s = 1'a, n = |a|^2, c = <a,q> (§3.3)
    assert [str(d) for d, _ in S.definitions] == ["s", "n", "c"]
    assert {str(x) for r in S.rhs for x in r.free_symbols} >= {"s", "n", "c"}


def test_printed_form_is_checked_against_the_derivation():
    """The printed (named-quantity) rhs is accepted only if it equals the derived flow."""
    from theory.scb.derive import _printed, _symmetric_loss_and_flow, c_, n_, s_

    derived = _symmetric_loss_and_flow()[1]
    defs = ((s_, T * xi + beta), (n_, T * xi**2 + 2 * xi * beta + rho * beta**2), (c_, xi + rho * beta))
    good = scb.symmetric_system().rhs
    assert _printed("t", derived, good, defs) == tuple(good)
    wrong = (eta_V * (c_ - n_ * zeta * 2), *good[1:])  # a factor 2 typo in the zeta equation
    with pytest.raises(AssertionError, match="rhs 0"):
        _printed("t", derived, wrong, defs)


def test_symmetric_loss_matches_spec_reduced_loss():
    n = T * xi**2 + 2 * xi * beta + rho * beta**2
    c = xi + rho * beta
    s = T * xi + beta
    spec = K / 2 * (n * zeta**2 - 2 * c * zeta + rho) + m2 / 2 * (s * omega - 1) ** 2 + sp.Rational(1, 2) * (1 - m2 - K * rho)
    assert sp.simplify(scb.loss_symmetric() - spec) == 0


def test_general_rhs_equals_spec_equations():
    N = 3
    G = scb.general_system(N)
    sym = {s.name: s for s in G.state + G.parameters}
    zeta_, omega_ = sym["zeta"], sym["omega"]
    spec_zeta, spec_omega = 0, 0
    spec_att = []
    for k in range(1, N + 1):
        x, e, mu_k, r = sym[f"xi_{k}"], sym[f"beta_{k}"], sym[f"mu_{k}"], sym[f"rho_{k}"]
        s = T * x + e
        n = T * x**2 + 2 * x * e + r * e**2
        c = x + r * e
        spec_zeta += eta_V * mu_k * (c - n * zeta_)
        spec_omega += -eta_V * mu_k * s * (s * omega_ - 1)
        spec_att.append((-eta_A * (K * zeta_**2 * x + m2 * omega_ * (s * omega_ - 1)), eta_A * K * zeta_ * (1 - zeta_ * e)))
    rhs = G.rhs_dict
    assert sp.simplify(rhs[zeta_] - spec_zeta) == 0
    assert sp.simplify(rhs[omega_] - spec_omega) == 0
    for k in range(1, N + 1):
        assert sp.simplify(rhs[sym[f"xi_{k}"]] - spec_att[k - 1][0]) == 0
        assert sp.simplify(rhs[sym[f"beta_{k}"]] - spec_att[k - 1][1]) == 0


def test_l1_uw_rhs_equals_spec_equations():
    L1 = scb.l1_symmetric_system()
    u, w, Q = scb.u, scb.w, scb.Q
    s = (T - Q) * u + Q * w
    spec_u = -eta_A * (K * zeta**2 * u + m2 * omega * (s * omega - 1))
    spec_w = -eta_A * (K * zeta**2 * w - K * zeta / Q + m2 * omega * (s * omega - 1))  # q_bar = 1/Q
    rhs = L1.rhs_dict
    assert sp.simplify(rhs[u] - spec_u) == 0
    assert sp.simplify(rhs[w] - spec_w) == 0


def _manifold_point(task, zeta_v, omega_v, xis, betas):
    V = zeta_v * task.P_tilde + omega_v * np.outer(task.mu, np.ones(task.N))
    A = np.ones((task.T, 1)) * np.asarray(xis)[None, :] + task.Qm * np.asarray(betas)[None, :]
    return V, A


def test_symmetric_flow_equals_numpy_full_population_flow():
    task = _random_task(N=4, T_=12, Q_=3, attention="uniform")
    S = scb.symmetric_system()
    f = S.to_numpy()
    rng = np.random.default_rng(1)
    for _ in range(5):
        y = rng.normal(size=4) * np.array([1.0, 1.0, 0.2, 1.0]) + np.array([0.0, 1.0, 0.0, 0.0])
        p = dict(T=task.T, rho=float(task.rho[0]), K=task.K, m2=task.m2, eta_V=0.7, eta_A=0.3)
        dy = f(0.0, y, S.parameter_vector(p))
        V, A = _manifold_point(task, y[0], y[1], [y[2]] * task.N, [y[3]] * task.N)
        dV, dA = scb.preconditioned_flow(V, A, task, 0.7, 0.3)
        dV_red, dA_red = _manifold_point(task, dy[0], dy[1], [dy[2]] * task.N, [dy[3]] * task.N)
        assert np.max(np.abs(dV - dV_red)) < 1e-8 * max(1, np.abs(dV).max())
        assert np.max(np.abs(dA - dA_red)) < 1e-8 * max(1, np.abs(dA).max())


def test_general_flow_equals_numpy_full_population_flow_nonuniform_q():
    task = _random_task(N=3, T_=10, Q_=3, attention="dirichlet")
    G = scb.general_system(3)
    f = G.to_numpy()
    rng = np.random.default_rng(2)
    p = {"T": task.T, "K": task.K, "m2": task.m2, "eta_V": 0.5, "eta_A": 0.8}
    p.update({f"mu_{k+1}": task.mu[k] for k in range(3)})
    p.update({f"rho_{k+1}": task.rho[k] for k in range(3)})
    for _ in range(5):
        z, o = rng.normal(), 1 + 0.3 * rng.normal()
        xis, betas = 0.1 * rng.normal(size=3), rng.normal(size=3)
        y = np.concatenate([[z, o], xis, betas])
        dy = f(0.0, y, G.parameter_vector(p))
        V, A = _manifold_point(task, z, o, xis, betas)
        dV, dA = scb.preconditioned_flow(V, A, task, 0.5, 0.8)
        dV_red, dA_red = _manifold_point(task, dy[0], dy[1], dy[2:5], dy[5:8])
        assert np.max(np.abs(dV - dV_red)) < 1e-8
        assert np.max(np.abs(dA - dA_red)) < 1e-8


def test_jacobian_at_saddle_equals_spec():
    lin = scb.stage1_linearisation()
    spec_J = sp.Matrix([[-1 / T, 0, 1, rho], [0, -1, -T, -1], [0, -m2, -T * m2, -m2], [K, 0, 0, 0]])
    rates = sp.diag(eta_V, eta_V, eta_A, eta_A)
    assert sp.simplify(lin["jacobian"] - rates * spec_J) == sp.zeros(4, 4)
    assert sp.simplify(lin["drift"] - sp.Matrix([eta_V / T, 0, 0, 0])) == sp.zeros(4, 1)
    # the rescaled slow block tends to [[0,1],[1,0]]; b = sqrt(eta_V/rho)
    assert sp.limit(lin["rescaled_block"][0, 0], T, sp.oo) == 0
    assert sp.simplify(lin["rescaled_block"] - sp.Matrix([[lin["rescaled_block"][0, 0], 1], [1, 0]])) == sp.zeros(2, 2)
    assert sp.simplify(lin["b"] - sp.sqrt(eta_V / rho)) == 0


def test_mean_block_eigenvalues():
    lin = scb.stage1_linearisation()
    J = lin["jacobian"].subs({eta_V: 1, eta_A: 1})
    mean_block = sp.Matrix([[J[1, 1], J[1, 2]], [J[2, 1], J[2, 2]]])
    ev = sorted(mean_block.eigenvals().keys(), key=lambda e: sp.simplify(e) != 0)
    assert set(sp.simplify(e) for e in ev) == {0, sp.simplify(-(1 + T * m2))}


def test_stage1_closed_form_solves_the_linear_system():
    lin = scb.stage1_linearisation()
    tau, b = lin["tau"], lin["b"]
    x, y = lin["x"], lin["y"]
    assert sp.simplify(sp.diff(x, tau) - (y + b / T)) == 0  # x' = y + b/T
    assert sp.simplify(sp.diff(y, tau) - x) == 0  # y' = x
    assert x.subs(tau, 0) == 0 and sp.simplify(y.subs(tau, 0)) == 0


def test_escape_time_closed_form_numpy_equals_sympy_formula():
    """Figures read the escape time from closed_forms_numpy(); it is the sympy formula's value."""
    S = scb.symmetric_system()
    p = dict(T=321.0, rho=0.25, K=0.07, m2=0.4, eta_V=0.3, eta_A=0.2)
    got = S.closed_forms_numpy()(0.0, S.parameter_vector(p))["escape_time"]
    want = float(scb.escape_time_formula().subs({T: 321, rho: sp.Rational(1, 4), K: sp.Rational(7, 100),
                                                eta_V: sp.Rational(3, 10), eta_A: sp.Rational(1, 5)}))
    assert abs(float(got) - want) < 1e-12 * want


@pytest.mark.parametrize("backend", ["scipy", "diffrax"])
def test_escape_times_within_10_percent_of_formula(backend):
    """Acceptance 4: ODE escape (beta reaches 1/2) for T = 1e2, 1e3, 1e4 vs log(T sqrt(rho))/sqrt(eta_V eta_A rho K)."""
    import simulate

    S = scb.symmetric_system()
    formula = scb.escape_time_formula()
    for Tv in (1e2, 1e3, 1e4):
        p = dict(T=Tv, rho=1 / 3, K=0.1, m2=1 / 3, eta_V=1.0, eta_A=1.0)
        tr = simulate.solve(S, p, dict(zeta=0.0, omega=1.0, xi=1 / Tv, beta=0.0), np.linspace(0, 100, 5001),
                            backend=backend)
        t_ode = simulate.first_crossing(tr, "beta", scb.ESCAPE_LEVEL)
        t_formula = float(formula.subs({T: Tv, rho: sp.Rational(1, 3), K: sp.Rational(1, 10), eta_V: 1, eta_A: 1}))
        assert abs(t_ode - t_formula) / t_formula < 0.10, (Tv, t_ode, t_formula)


def test_fixed_points_are_rescaled_ground_truth():
    """Spec §3.5: xi = 0, zeta*beta = 1, s*omega = 1 is a fixed point for every scale c."""
    S = scb.symmetric_system()
    c = sp.Symbol("c", positive=True)
    pt = {zeta: 1 / c, omega: 1 / c, xi: 0, beta: c}
    assert all(sp.simplify(r.subs(pt)) == 0 for r in S.expanded_rhs)
