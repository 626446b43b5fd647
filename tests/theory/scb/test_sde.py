"""SCB SDEs (theory/scb/sde.py): the reduced SDE of spec §3.6 against the full (V, A) one, and the
full SDE's drift and noise against torch per-sample gradients.

References are independent: the full preconditioned flow (theory.scb.preconditioned_flow), full
per-sample gradients written out here in numpy from spec §3.2, the exact population gradient, the
full SDE ensemble and torch's per-sample gradients.
"""

import numpy as np
import pytest
import torch

import simulate
from helpers.moments import moment_z_scores
from helpers.scb import set_up_experiment as _setup
from theory import scb
from theory.scb import sde as R


CFG = scb.SCBConfig(N=3, T=16, Q=2, eta_V=0.2, eta_A=0.2, batch=32, steps=120, log_every=40)


@pytest.fixture(scope="module")
def task():
    return scb.make_task(CFG)


def _random_full(task, rng, scale=0.3):
    V0, A0 = scb.initial_parameters(CFG, task)
    return V0 + scale * rng.standard_normal(V0.shape), A0 + scale / task.T * rng.standard_normal(A0.shape)


def _manifold_point(task, zeta, omega, xi, beta):
    V = zeta * task.P_tilde + omega * np.outer(task.mu, np.ones(task.N))
    A = xi[None, :] * np.ones((task.T, 1)) + beta[None, :] * task.Qm
    return V, A


def test_reduced_drift_is_the_projected_full_flow_off_the_manifold(task):
    """d/dt of the reduced coordinates along the full flow (central difference; the coordinates
    are linear or quadratic, so it is exact) equals the closed reduced drift."""
    rng = np.random.default_rng(1)
    for _ in range(3):
        V, A = _random_full(task, rng)
        dV, dA = scb.preconditioned_flow(V, A, task, CFG.eta_V, CFG.eta_A)
        eps = 1e-4
        fd = (R.reduced_coordinates(V + eps * dV, A + eps * dA, task)
              - R.reduced_coordinates(V - eps * dV, A - eps * dA, task)) / (2 * eps)
        y = R.reduced_coordinates(V, A, task)
        assert y[-(2 + task.N):].min() > 1e-4  # genuinely off the manifold
        np.testing.assert_allclose(R.reduced_drift_numpy(y, task, CFG.eta_V, CFG.eta_A), fd, rtol=1e-7, atol=1e-10)


def test_reduced_drift_on_manifold_is_the_general_ode(task):
    S = scb.general_system(task.N)
    rng = np.random.default_rng(2)
    xi, beta = 1 / task.T + 0.01 * rng.standard_normal(task.N), 0.3 * rng.random(task.N)
    y = np.concatenate([[0.4, 0.9], xi, beta, np.zeros(2 + task.N)])
    p = {"T": task.T, "K": task.K, "m2": task.m2, "eta_V": CFG.eta_V, "eta_A": CFG.eta_A,
         **{f"mu_{i+1}": task.mu[i] for i in range(task.N)}, **{f"rho_{i+1}": task.rho[i] for i in range(task.N)}}
    f = S.to_numpy()(0.0, y[: 2 + 2 * task.N], S.parameter_vector(p))
    np.testing.assert_allclose(R.reduced_drift_numpy(y, task, CFG.eta_V, CFG.eta_A)[: 2 + 2 * task.N], f, rtol=1e-10)


def test_projected_per_sample_gradient_matches_full_gradient(task):
    """Sufficient-statistics projection == the full per-sample gradient (spec §3.2, written out
    here from explicit sequences) mapped through the exact reduced coordinates."""
    rng = np.random.default_rng(3)
    c = R._constants(task, CFG.eta_V, CFG.eta_A, CFG.batch)
    N, T_ = task.N, task.T
    zeta, omega, xi, beta = 0.3, 1.1, 1 / T_ + 0.02 * rng.standard_normal(N), 0.2 * rng.random(N)
    V, A = _manifold_point(task, zeta, omega, xi, beta)
    y = R.reduced_coordinates(V, A, task)
    for _ in range(5):
        x = rng.choice(N, size=T_, p=task.mu)
        k = rng.choice(N, p=task.mu)
        yt = rng.integers(N)
        X = np.eye(N)[x].T  # (N, T) one-hot columns
        h = X @ A[:, k]
        r = V @ h - np.eye(N)[yt]
        gV = CFG.eta_V * np.outer(r, h) / task.mu[None, :]
        gA = np.zeros_like(A)
        gA[:, k] = CFG.eta_A * X.T @ V.T @ r / task.mu[k]
        want = R.reduced_coordinates(V + gV, A + gA, task) - y
        g, off = R.projected_per_sample(y, np.eye(N)[k], X @ task.Qm[:, k], X.sum(1), np.eye(N)[yt], c)
        np.testing.assert_allclose(g, want[: 2 + 2 * N], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(off, want[2 + 2 * N:], rtol=1e-8, atol=1e-12)


def test_fast_full_sampler_has_the_population_mean_and_the_reference_covariance(task):
    """FastMinibatchSDE's per-sample gradients: mean = exact population gradient (within 4 SE),
    second moment = theory.scb.MinibatchSDE's (within 4 SE)."""
    import jax
    import jax.numpy as jnp

    simulate.enable_x64()
    rng = np.random.default_rng(4)
    V, A = _random_full(task, rng, 0.2)
    theta = jnp.asarray(np.concatenate([V.ravel(), A.ravel()]))
    fast = R.FastMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, mc_samples=64)
    ref = scb.MinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, mc_samples=64)
    keys = jax.random.split(jax.random.PRNGKey(0), 400)
    Gf = np.asarray(jax.vmap(lambda kk: fast.per_sample_gradients(theta, fast.args(), kk))(keys)).reshape(-1, theta.size)
    Gr = np.asarray(jax.vmap(lambda kk: ref.per_sample_gradients(theta, ref.args(), kk))(keys)).reshape(-1, theta.size)
    dV, dA = scb.preconditioned_flow(V, A, task, CFG.eta_V, CFG.eta_A)
    exact = -np.concatenate([dV.ravel(), dA.ravel()])
    se = Gf.std(0) / np.sqrt(len(Gf))
    assert np.all(np.abs(Gf.mean(0) - exact) <= 4 * se + 1e-12)
    m2f, m2r = (Gf**2).mean(0), (Gr**2).mean(0)
    se2 = np.sqrt(((Gf**2).var(0) + (Gr**2).var(0)) / len(Gf))
    assert np.mean(np.abs(m2f - m2r) <= 4 * se2 + 1e-12) > 0.99


@pytest.mark.slow
def test_reduced_sde_matches_full_sde_moments(task):
    """Mean and variance of zeta (Sigma-projection) and <a,q> at t = 40, 80, 120 steps: the
    reduced SDE vs the full (V, A) SDE, 1000 paths each, within 4 standard errors."""
    t = np.linspace(0, CFG.steps, CFG.steps // CFG.log_every + 1)
    full = simulate.solve_sde(R.FastMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 64), t,
                              paths=1000, seed=11, keep_state=True)
    red = simulate.solve_sde(R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2), t, paths=1000, seed=12)
    yf = R.reduced_coordinates(full["V"].values, full["A"].values, task)
    N = task.N
    pairs = {
        "zeta": (yf[..., 0], red["zeta"].values),
        "overlap": ((yf[..., 2:2 + N] + task.rho * yf[..., 2 + N:2 + 2 * N]).mean(-1),
                    red["attention_target_overlap"].values),
    }
    for name, (a, b) in pairs.items():
        for i in range(1, t.size):
            x, z = a[:, i], b[:, i]
            z_mean, z_var = moment_z_scores(x, z)
            print(f"{name} t={t[i]:.0f}: mean {x.mean():.4f} vs {z.mean():.4f} ({z_mean:+.1f} SE); "
                  f"var {x.var():.3e} vs {z.var():.3e} ({z_var:+.1f} SE)")
            assert abs(z_mean) < 4 and abs(z_var) < 4, (name, t[i], z_mean, z_var)


def test_alias_draw_reproduces_the_probabilities():
    """theory.sampling: on a uniform grid of 2^20 points each outcome's frequency is its
    probability up to the grid spacing times n (Walker's alias method is exact)."""
    import jax.numpy as jnp

    from theory.sampling import alias_draw, alias_table

    simulate.enable_x64()
    p = np.random.default_rng(5).dirichlet(np.full(37, 0.3))
    prob, alias = alias_table(p)
    u = (np.arange(2**20) + 0.5) / 2**20
    idx = np.asarray(alias_draw(jnp.asarray(u), jnp.asarray(prob), jnp.asarray(alias)))
    freq = np.bincount(idx, minlength=p.size) / u.size
    np.testing.assert_allclose(freq, p, atol=2 * p.size / 2**20)


def test_outcome_tables_give_the_exact_population_gradient_and_the_sampled_second_moment(task):
    """The alias tables (spec §1.2 sufficient statistics): probabilities sum to 1; the exact mean of
    the projected per-sample gradient over the table equals the population gradient (minus the
    reduced drift on the manifold, spec §3.3); its second moment equals the key sampler's
    (inverse-CDF draws of every token) within 4 SE."""
    import jax
    import jax.numpy as jnp

    simulate.enable_x64()
    sde = R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2)
    (p, F), = R.sample_tables(task)  # one joint table at N=3, T=16, Q=2
    assert abs(p.sum() - 1) < 1e-12
    c = R._constants(task, CFG.eta_V, CFG.eta_A, CFG.batch)
    rng = np.random.default_rng(6)
    N = task.N
    y = np.concatenate([[0.4, 0.9], 1 / task.T + 0.02 * rng.standard_normal(N), 0.3 * rng.random(N), np.zeros(2 + N)])
    g = np.array([R.projected_per_sample(y, *np.split(f, 4), c)[0] for f in F])  # (outcomes, 2+2N)
    exact_mean = -R.reduced_drift_numpy(y, task, CFG.eta_V, CFG.eta_A)[: 2 + 2 * N]
    np.testing.assert_allclose(p @ g, exact_mean, rtol=1e-10, atol=1e-14)
    second = (p[:, None] * g).T @ g
    keys = jax.random.split(jax.random.PRNGKey(7), 20000)
    G, _ = jax.vmap(lambda kk: sde._samples(jnp.asarray(y), sde.args(), kk))(keys)
    G = np.asarray(G).reshape(-1, 2 + 2 * N)
    outer = G[:, :, None] * G[:, None, :]
    se = outer.std(0) / np.sqrt(len(G))
    assert np.all(np.abs(outer.mean(0) - second) <= 4 * se + 1e-14)


def test_unrolled_step_equals_the_array_step(task):
    """sde.reduced_terms_unrolled (the fast path) == drift + projected_per_sample arrays."""
    import jax.numpy as jnp

    from theory.scb.sde import reduced_terms_unrolled

    simulate.enable_x64()
    sde = R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2)
    args = sde.args()
    (_, F), = R.sample_tables(task)
    rng = np.random.default_rng(8)
    N = task.N
    y = np.concatenate([[0.4, 0.9], 1 / task.T + 0.02 * rng.standard_normal(N), 0.3 * rng.random(N),
                        0.01 * rng.random(2 + N)])
    Fm = F[rng.integers(len(F), size=2)]
    c = {"mu": task.mu.tolist(), "rho": task.rho.tolist(), "Pt": task.P_tilde.tolist(), "T": float(task.T),
         "K": float(task.K), "m2": float(task.m2), "lr_V": args["lr_V"], "lr_A": args["lr_A"], "batch": args["batch"]}
    f, g = reduced_terms_unrolled(jnp.asarray(y), jnp.asarray(Fm), c, N, 2)
    c_np = R._constants(task, CFG.eta_V, CFG.eta_A, CFG.batch)
    y_on = y.copy()
    y_on[2 + 2 * N:] = 0
    Gs, offs = zip(*(R.projected_per_sample(y_on, *np.split(fm, 4), c_np) for fm in Fm))
    mean = -R.reduced_drift_numpy(y_on, task, CFG.eta_V, CFG.eta_A)[: 2 + 2 * N]
    want_g = np.concatenate([-(np.array(Gs) - mean).T / np.sqrt(2 * CFG.batch), np.zeros((2 + N, 2))])
    want_f = R.reduced_drift_numpy(y, task, CFG.eta_V, CFG.eta_A)
    want_f[2 + 2 * N:] += np.mean(offs, axis=0) / CFG.batch
    np.testing.assert_allclose(np.asarray(g), want_g, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(np.asarray(f), want_f, rtol=1e-10, atol=1e-15)


def test_reduced_observables_equal_the_full_ones_off_the_manifold(task):
    """ReducedMinibatchSDE.observables at the exact reduced coordinates of random full (V, A) ==
    theory.scb.population_loss and the overlap computed on (V, A) (spec §3.3, §4)."""
    rng = np.random.default_rng(9)
    sde = R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2)
    for _ in range(3):
        V, A = _random_full(task, rng)
        obs = sde.observables(R.reduced_coordinates(V, A, task)[None])
        assert np.isclose(obs["population_loss"][0], scb.population_loss(V, A, task), rtol=1e-10)
        assert np.isclose(obs["attention_target_overlap"][0], (A * task.Qm).sum(0).mean(), rtol=1e-10)


@pytest.mark.parametrize("make", ["minibatch_sde_reduced", "minibatch_sde_fast", "minibatch_sde"])
def test_sde_times_are_the_config_ode_times(make):
    """The SDE entry points (the paper table's ``sde`` slot among them) sample the SDE on
    ``config.ode_times()``, the grid the Trainer logs on: log_every=3 does not divide steps=10,
    so the grid is 0, 3, 6, 9 and the last step 10 (a linspace would give 0, 3.33, 6.67, 10)."""
    from figures.papers import get

    cfg = scb.SCBConfig(steps=10, log_every=3)
    _, t = getattr(R, make)(cfg)
    np.testing.assert_array_equal(t, [0.0, 3.0, 6.0, 9.0, 10.0])
    np.testing.assert_array_equal(t, cfg.ode_times())
    np.testing.assert_array_equal(get("scb").slot("sde")(cfg)[1], cfg.ode_times())


def test_sde_observables_build_no_callable_per_call(task, monkeypatch):
    """The SDE models' observables are plain numpy formulas: evaluating them never lambdifies."""
    import sympy

    sde = R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2)
    full = scb.MinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2)
    monkeypatch.setattr(sympy, "lambdify", lambda *a, **k: pytest.fail("observables lambdified"))
    Y = np.tile(sde.initial_state(), (3, 1))
    assert np.allclose(sde.observables(Y)["value_mean_scale"], 1.0)
    Yf = np.tile(full.initial_state(), (3, 1))
    assert np.allclose(full.observables(Yf)["value_mean_scale"], 1.0)


def test_minibatch_sde_drift_and_noise_match_sgd_statistics():
    """The SDE's drift is the preconditioned population flow and its diffusion covariance equals
    lr^2 Cov(per-sample preconditioned gradient)/B (checked against torch per-sample gradients)."""
    cfg = scb.SCBConfig(N=3, T=6, Q=2, batch=16)
    task = scb.make_task(cfg)
    sde, _ = scb.minibatch_sde(cfg, mc_samples=20000)
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    V, A = task.P + 0.1 * rng.normal(size=(3, 3)), task.Qm + 0.05
    yv = jnp.asarray(np.concatenate([V.ravel(), A.ravel()]))
    drift = np.asarray(sde.drift(0.0, yv, sde.args()))
    dV, dA = scb.preconditioned_flow(V, A, task, cfg.eta_V, cfg.eta_A)
    assert np.allclose(drift, np.concatenate([dV.ravel(), dA.ravel()]), atol=1e-12)
    G = np.asarray(sde.per_sample_gradients(yv, sde.args(), jax.random.PRNGKey(0)))
    assert np.allclose(-G.mean(0), drift, atol=0.02 * np.abs(drift).max() + 2e-3)
    # variances from torch per-sample gradients (independent implementation, same law), compared
    # in units of their Monte-Carlo standard errors
    exp = _setup(cfg, seed=1)
    x, k, y = exp.sampler.sample(20000)
    params = {"V": torch.as_tensor(V), "A": torch.as_tensor(A)}

    def one_loss(p, xb, kb, yb):
        a = (p["A"] * (torch.arange(3) == kb).to(p["A"].dtype)).sum(1)
        Xa = torch.zeros(3, dtype=a.dtype).scatter_add(0, xb, a)
        r = p["V"] @ Xa - (torch.arange(3) == yb).to(p["A"].dtype)
        return 0.5 * (r**2).sum()

    g = torch.func.vmap(torch.func.grad(one_loss), in_dims=(None, 0, 0, 0))(params, x, k, y)
    mu = torch.as_tensor(task.mu)
    grads = torch.cat([(cfg.eta_V * g["V"] / mu).flatten(1), (cfg.eta_A * g["A"] / mu).flatten(1)], 1).numpy()

    def var_and_se(M):
        d2 = (M - M.mean(0)) ** 2
        return d2.mean(0), d2.std(0) / np.sqrt(M.shape[0])

    v_t, se_t = var_and_se(grads)
    v_s, se_s = var_and_se(G)
    big = v_s > 1e-6 * v_s.max()
    assert big.sum() > 20
    assert np.all(np.abs(v_t[big] - v_s[big]) < 5 * (se_t[big] + se_s[big]))
