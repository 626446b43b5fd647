"""SCB theory: the derivation against the spec's printed equations, against an independent numpy
population gradient of the full (V, A), against Monte Carlo, and the stage-1 analysis."""

import numpy as np
import pytest
import sympy as sp

from theory import scb
from theory.errors import ConfigError
from theory.scb import K, T, beta, eta_A, eta_V, m2, omega, rho, xi, zeta


def _random_task(N=4, T_=12, Q_=3, attention="dirichlet", seed=3):
    cfg = scb.SCBConfig(N=N, T=T_, Q=Q_, attention=attention, task_seed=seed)
    return scb.make_task(cfg)


# ---- the lemmas behind the Gram tables (papers/scb.md §3.3) --------------------------------------
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


# ---- derived right-hand sides equal the spec's printed equations ----------------------------------
def test_symmetric_rhs_equals_spec_equations():
    S = scb.symmetric_system()
    n = T * xi**2 + 2 * xi * beta + rho * beta**2
    c = xi + rho * beta
    s = T * xi + beta
    spec = [  # papers/scb.md §3.3 (symmetric case)
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


# ---- the reduced flow equals the full (V, A) preconditioned population flow ----------------------
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


def test_numpy_population_gradient_matches_finite_differences():
    task = _random_task(N=3, T_=6, Q_=2)
    rng = np.random.default_rng(4)
    V, A = rng.normal(size=(3, 3)), rng.normal(size=(6, 3)) * 0.3
    gV, gA = scb.population_gradient(V, A, task)
    h = 1e-6
    for (M, G) in ((V, gV), (A, gA)):
        for idx in [(0, 0), (1, 2), (2, 1)]:
            Mp, Mm = M.copy(), M.copy()
            Mp[idx] += h
            Mm[idx] -= h
            args_p = (Mp, A) if M is V else (V, Mp)
            args_m = (Mm, A) if M is V else (V, Mm)
            fd = (scb.population_loss(*args_p, task) - scb.population_loss(*args_m, task)) / (2 * h)
            assert abs(fd - G[idx]) < 1e-7


def test_population_formulas_share_numpy_and_jax():
    """population.py's one formula under xp=jax.numpy equals xp=numpy (the SDE drift uses jax)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    task = _random_task(N=3, T_=7, Q_=2, attention="dirichlet", seed=6)
    rng = np.random.default_rng(8)
    V, A = rng.normal(size=(3, 3)), rng.normal(size=(7, 3))
    arrays = scb.TaskArrays(*(jnp.asarray(x) for x in (task.P, task.mu, task.Qm, task.Sigma)))
    j = jax.jit(lambda V, A: (scb.population_loss(V, A, arrays, xp=jnp),
                              *scb.preconditioned_flow(V, A, arrays, 0.3, 0.7, xp=jnp)))
    loss_j, dV_j, dA_j = j(jnp.asarray(V), jnp.asarray(A))
    dV, dA = scb.preconditioned_flow(V, A, task, 0.3, 0.7)
    assert np.isclose(float(loss_j), scb.population_loss(V, A, task), rtol=1e-13)
    assert np.allclose(np.asarray(dV_j), dV, rtol=1e-12, atol=1e-13)
    assert np.allclose(np.asarray(dA_j), dA, rtol=1e-12, atol=1e-13)


def test_population_loss_matches_monte_carlo():
    """Exact population loss vs a Monte-Carlo estimate (spec Appendix), in units of its SE."""
    task = _random_task(N=3, T_=6, Q_=2, attention="dirichlet", seed=5)
    rng = np.random.default_rng(7)
    V = task.P + 0.3 * rng.normal(size=(3, 3))
    A = task.Qm + 0.1 * rng.normal(size=task.Qm.shape)
    n = 200_000
    x = rng.choice(3, size=(n, task.T), p=task.mu)
    k = rng.choice(3, size=n, p=task.mu)
    cum = np.cumsum(task.Qm.T[k], axis=1)
    pos = (rng.random((n, 1)) > cum).sum(1)
    xs = x[np.arange(n), pos]
    cumP = np.cumsum(task.P.T[xs], axis=1)
    y = np.minimum((rng.random((n, 1)) > cumP).sum(1), 2)
    Xa = np.zeros((n, 3))
    np.add.at(Xa, (np.repeat(np.arange(n), task.T), x.ravel()), A[:, k].T.ravel())
    r = Xa @ V.T - np.eye(3)[y]
    losses = 0.5 * (r**2).sum(1)
    se = losses.std() / np.sqrt(n)
    assert abs(losses.mean() - scb.population_loss(V, A, task)) < 4 * se


def test_reduced_loss_observable_equals_numpy_population_loss_on_manifold():
    task = _random_task(N=3, T_=10, Q_=2, attention="uniform")
    S = scb.symmetric_system()
    obs = S.observables_numpy()
    p = S.parameter_vector(scb.system_parameters(task.config, task))
    y = np.array([0.4, 1.1, 0.02, 0.7])
    V, A = _manifold_point(task, y[0], y[1], [y[2]] * 3, [y[3]] * 3)
    assert np.isclose(obs(y[None, :], p)["population_loss"][0], scb.population_loss(V, A, task), rtol=1e-12)
    # every observable computed from the full parameters equals the reduced one on the manifold
    full = scb.observables_from_parameters(V, A, task)
    red = obs(y[None, :], p)
    for name in red:
        assert np.isclose(full[name], red[name][0], rtol=1e-10, atol=1e-12), name


# ---- the proximal map -------------------------------------------------------------------------
def test_discrete_proximal_map_equals_full_discrete_proximal_gd():
    """Spec Appendix: full discrete preconditioned proximal GD vs the reduced u-w map, non-uniform
    q, lambda > 0."""
    N, Q_, T_ = 3, 3, 20
    task = _random_task(N=N, T_=T_, Q_=Q_, attention="dirichlet", seed=11)
    Ls = scb.l1_general_system(N, Q_)
    step = scb.proximal_map(Ls)
    lam_v, eV, eA = 2e-3, 0.2, 0.05
    p = {"T": T_, "K": task.K, "m2": task.m2, "eta_V": eV, "eta_A": eA}
    p.update({f"mu_{k+1}": task.mu[k] for k in range(N)})
    p.update({f"qbar_{k+1}_{j+1}": task.Qm[task.support[k][j], k] for k in range(N) for j in range(Q_)})
    pv = Ls.parameter_vector(p)
    V = np.outer(task.mu, np.ones(N))
    A = np.full((T_, N), 1.0 / T_)
    y = np.concatenate([[0.0, 1.0], np.concatenate([[1.0 / T_] + [1.0 / T_] * Q_ for _ in range(N)])])
    for _ in range(3000):
        dV, dA = scb.preconditioned_flow(V, A, task, eV, eA)
        V, A = V + dV, A + dA
        A = scb.soft_threshold(A, eA * lam_v)
        y = step(y, pv, lam_v)
    # compare
    zeta_hat = scb.observables_from_parameters(V, A, task)["value_transition_correlation"]
    assert abs(y[0] - zeta_hat) < 1e-10
    for k in range(N):
        off = np.setdiff1d(np.arange(T_), task.support[k])
        u_k, w_k = y[2 + k * (Q_ + 1)], y[3 + k * (Q_ + 1): 3 + k * (Q_ + 1) + Q_]
        assert np.allclose(A[off, k], u_k, atol=1e-10)
        assert np.allclose(A[task.support[k], k], w_k, atol=1e-10)
    assert np.all(A[np.setdiff1d(np.arange(T_), task.support[0]), 0] == 0)  # off-support exactly zero


# ---- stage 1 (spec §3.4) ------------------------------------------------------------------------
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


# ---- the config: variants, presets ----------------------------------------------------------------
def test_replace_keeps_an_explicit_transition_matrix():
    """``P`` defaults to None without being a per-variant default: replace() must keep it."""
    P = ((0.5, 0.2, 0.3), (0.25, 0.5, 0.25), (0.25, 0.3, 0.45))
    cfg = scb.SCBConfig(P=P)
    assert cfg.replace(eta_V=0.1).P == P
    assert cfg.replace(variant="sgd").P == P


def test_presets_are_the_regimes_the_figures_used():
    """The presets replace compare_regime/overlay_config and the inline configs of the figures and
    the l1 study; their settings are those (spec §6)."""
    C = scb.SCBConfig
    base = dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, steps=600, log_every=5)
    assert C.preset("compare") == C(**base, batch=4096)
    assert C.preset("compare", quick=False) == C(**base, batch=16384)
    assert C.preset("overlay") == C(N=3, T=8, Q=2, eta_V=0.1, eta_A=0.1, batch=32, steps=300, log_every=10)
    assert C.preset("overlay", quick=False) == C(**{**base, "log_every": 10}, batch=64)
    assert C.preset("softmax_vs_linear").batch == 256 and C.preset("softmax_vs_linear", quick=False).steps == 6000
    assert (C.preset("escape_time").batch, C.preset("escape_time", quick=False).batch) == (512, 2048)
    assert C.preset("transfer", T=8).task_seed == 1 and C.preset("l1_study").lam_switch == 2.0
    with pytest.raises(ConfigError, match="preset"):
        C.preset("nope")
