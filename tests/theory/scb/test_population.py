"""SCB population quantities of the full (V, A) (theory/scb/population.py) against finite
differences, jax, Monte Carlo, the reduced systems and the discrete proximal map."""

import numpy as np

from theory import scb


def _random_task(N=4, T_=12, Q_=3, attention="dirichlet", seed=3):
    cfg = scb.SCBConfig(N=N, T=T_, Q=Q_, attention=attention, task_seed=seed)
    return scb.make_task(cfg)


def _manifold_point(task, zeta_v, omega_v, xis, betas):
    V = zeta_v * task.P_tilde + omega_v * np.outer(task.mu, np.ones(task.N))
    A = np.ones((task.T, 1)) * np.asarray(xis)[None, :] + task.Qm * np.asarray(betas)[None, :]
    return V, A


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
