"""SCB SDEs on the derived noise (theory/scb/sde.py): the reduced SDE's drift against the full
(V, A) flow projected, its per-sample flow against full per-sample gradients written out here,
its increments' covariance against the exact covariance summed over the outcome tables, and —
slow — both SDEs against today's hand-built engines (tests/helpers/scb_sde_reference.py) and
against each other, in the mean and variance of zeta and <a,q> within Monte-Carlo error.

References are independent: the full preconditioned flow (theory.scb.preconditioned_flow), full
per-sample gradients written out here in numpy from docs/papers/scb.md §3.2, exact sums over the outcome
tables, the hand-built engines and the full SDE ensemble."""

import numpy as np
import pytest

import simulate
from helpers import scb_sde_reference as ref
from helpers.moments import moment_z_scores
from theory import ConfigError, scb
from theory.scb import derive as D
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


def _closure(task):
    C = D.closure_system(task.N)
    return C.to_numpy(), C.parameter_vector(R.closure_parameters(task, CFG.eta_V, CFG.eta_A))


def test_reduced_drift_is_the_projected_full_flow_off_the_manifold(task):
    """d/dt of the reduced coordinates along the full flow (central difference; the coordinates
    are linear or quadratic, so it is exact) equals the derived closure's drift."""
    f, p = _closure(task)
    rng = np.random.default_rng(1)
    for _ in range(3):
        V, A = _random_full(task, rng)
        dV, dA = scb.preconditioned_flow(V, A, task, CFG.eta_V, CFG.eta_A)
        eps = 1e-4
        fd = (R.reduced_coordinates(V + eps * dV, A + eps * dA, task)
              - R.reduced_coordinates(V - eps * dV, A - eps * dA, task)) / (2 * eps)
        y = R.reduced_coordinates(V, A, task)
        assert y[-(2 + task.N):].min() > 1e-4  # genuinely off the manifold
        np.testing.assert_allclose(f(0.0, y, p), fd, rtol=1e-7, atol=1e-10)


def test_derived_flow_is_the_projected_full_per_sample_gradient(task):
    """The derived per-sample flow (and its off-manifold norms) == the full per-sample gradient
    (spec §3.2, written out here from explicit sequences) mapped through the exact reduced
    coordinates: ``coords(theta + G) - coords(theta)``, linear parts exact, energies quadratic."""
    rng = np.random.default_rng(3)
    N, T_ = task.N, task.T
    pn = D.noise_system(N).parameter_vector(R.noise_parameters(task, CFG.eta_V, CFG.eta_A))
    terms = R._reduced_terms(N, "numpy")
    zeta, omega, xi, beta = 0.3, 1.1, 1 / T_ + 0.02 * rng.standard_normal(N), 0.2 * rng.random(N)
    V, A = _manifold_point(task, zeta, omega, xi, beta)
    y = R.reduced_coordinates(V, A, task)
    for _ in range(5):
        x = rng.choice(N, size=T_, p=task.mu)
        k = rng.choice(N, p=task.mu)
        yt = rng.integers(N)
        X = np.eye(N)[x].T  # (N, T) one-hot columns
        h = X @ A[:, k]
        r = np.eye(N)[yt] - V @ h  # the flow: minus the gradient of |y - V h|^2 / 2
        GV = CFG.eta_V * np.outer(r, h) / task.mu[None, :]
        GA = np.zeros_like(A)
        GA[:, k] = CFG.eta_A * X.T @ V.T @ r / task.mu[k]
        want = R.reduced_coordinates(V + GV, A + GA, task) - y
        feats = np.concatenate([np.eye(N)[k], X @ task.Qm[:, k], X.sum(1), np.eye(N)[yt]])
        vals = np.array([float(v) for v in terms(tuple(y[:2 + 2 * N]), pn, list(feats))])
        np.testing.assert_allclose(vals[:2 + 2 * N], want[:2 + 2 * N], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(vals[2 + 2 * N:], want[2 + 2 * N:], rtol=1e-8, atol=1e-12)


def test_reduced_increments_have_the_derived_covariance(task):
    """One step of the reduced SDE with fresh uniforms and dW ~ N(0, I_M): the increments' mean is
    the drift plus the energies' Itô terms ``E|g_off|^2/B`` and their covariance ``Cov_x[g]/B``
    (Δτ = 1), both summed exactly over the outcome tables — within 4 SE, and the energies get no
    noise."""
    import jax
    import jax.numpy as jnp

    simulate.enable_x64()
    N, d = task.N, 2 + 2 * task.N
    sde = R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, mc_samples=2)
    args = sde.args()
    rng = np.random.default_rng(5)
    y = np.concatenate([[0.4, 0.9], 1 / task.T + 0.02 * rng.standard_normal(N), 0.3 * rng.random(N),
                        0.01 * rng.random(2 + N)])
    n = 40_000
    key_u, key_w = jax.random.split(jax.random.key(0))
    U = jax.random.uniform(key_u, (n, sde.uniforms_per_step), dtype=jnp.float64)
    W = jax.random.normal(key_w, (n, sde.noise_dim), dtype=jnp.float64)
    step = jax.jit(jax.vmap(lambda u, w: (lambda fg: fg[0] + fg[1] @ w)(
        sde.drift_and_diffusion(0.0, jnp.asarray(y), args, u))))
    inc = np.asarray(step(U, W))
    mean, cov, off = sde.exact_moments(y)
    f, p = _closure(task)
    want_mean = f(0.0, y, p)
    want_mean[d:] += off / CFG.batch
    se = inc.std(0) / np.sqrt(n)
    assert np.all(np.abs(inc.mean(0) - want_mean) <= 4 * se + 1e-13)
    np.testing.assert_allclose(mean, f(0.0, np.r_[y[:d], np.zeros(2 + N)], p)[:d], rtol=1e-11, atol=1e-14)
    np.testing.assert_array_equal(inc[:, d:], np.asarray(step(U, 0 * W))[:, d:])  # energies: no Brownian term
    dev = inc[:, :d] - want_mean[:d]
    emp = dev.T @ dev / n
    se_c = np.sqrt(((dev[:, :, None] * dev[:, None, :] - emp) ** 2).mean(0) / n)
    assert np.all(np.abs(emp - cov / CFG.batch) <= 4 * se_c + 1e-14)


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


@pytest.mark.parametrize("make", ["minibatch_sde_reduced", "minibatch_sde"])
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


@pytest.mark.parametrize("override", ["variant='sgd'", "lam=0.01", "normalise='step'", "query='last'"])
def test_settings_the_sdes_do_not_model_are_refused(override):
    cfg = scb.SCBConfig().with_overrides([override])
    for make in (R.minibatch_sde_reduced, R.minibatch_sde):
        with pytest.raises(ConfigError):
            make(cfg)


def test_sde_observables_build_no_callable_per_call(task, monkeypatch):
    """The SDE models' observables are plain numpy formulas: evaluating them never lambdifies."""
    import sympy

    sde = R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2)
    full, _ = R.minibatch_sde(CFG, mc_samples=2)
    D.closure_system(task.N)  # built (and cached) before lambdify is forbidden
    monkeypatch.setattr(sympy, "lambdify", lambda *a, **k: pytest.fail("observables lambdified"))
    Y = np.tile(sde.initial_state(), (3, 1))
    assert np.allclose(sde.observables(Y)["value_mean_scale"], 1.0)
    Yf = np.tile(full.initial_state(), (3, 1))
    assert np.allclose(full.observables(Yf)["value_mean_scale"], 1.0)


def _assert_same_moments(a: dict, b: dict, t, k=4.0):
    for name in a:
        for i in range(1, t.size):
            x, z = a[name][:, i], b[name][:, i]
            z_mean, z_var = moment_z_scores(x, z)
            print(f"{name} t={t[i]:.0f}: mean {x.mean():.4f} vs {z.mean():.4f} ({z_mean:+.1f} SE); "
                  f"var {x.var():.3e} vs {z.var():.3e} ({z_var:+.1f} SE)")
            assert abs(z_mean) < k and abs(z_var) < k, (name, t[i], z_mean, z_var)


def _zeta_overlap(ens) -> dict:
    return {n: ens[n].values for n in ("value_transition_correlation", "attention_target_overlap")}


@pytest.mark.slow
def test_reduced_sde_matches_todays_reduced_engine(task):
    """Mean and variance of zeta and <a,q> at t = 40, 80, 120 steps: the derived reduced SDE vs
    today's hand-built reduced engine, 2000 paths each, within 4 standard errors."""
    t = CFG.ode_times()
    new = simulate.solve_sde(R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2), t, paths=2000, seed=11)
    old = simulate.solve_sde(ref.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2), t, paths=2000, seed=12)
    _assert_same_moments(_zeta_overlap(new), _zeta_overlap(old), t)


@pytest.mark.slow
def test_full_sde_matches_todays_full_engine():
    """The derived full (V, A) SDE (jax) vs today's hand-built jax engine (Gumbel sampling of every
    token), N=3, T=8, 300 paths each: zeta and <a,q> within 4 SE."""
    cfg = CFG.replace(T=8)
    sde, t = R.minibatch_sde(cfg, mc_samples=64)
    new = simulate.solve_sde(sde, t, paths=300, seed=21)
    old = simulate.solve_sde(ref.MinibatchSDE(sde.task, cfg.eta_V, cfg.eta_A, cfg.batch, 64), t, paths=300, seed=22)
    _assert_same_moments(_zeta_overlap(new), _zeta_overlap(old), t)


@pytest.mark.slow
def test_reduced_sde_matches_full_sde_moments(task):
    """Mean and variance of zeta (Sigma-projection) and <a,q> at t = 40, 80, 120 steps: the
    reduced SDE vs the full (V, A) SDE (its numba step), 1000 paths each, within 4 standard errors."""
    t = CFG.ode_times()
    full_sde, _ = R.minibatch_sde(CFG, mc_samples=64)
    full = simulate.solve_sde(full_sde, t, paths=1000, seed=11, keep_state=True, backend="numba")
    red = simulate.solve_sde(R.ReducedMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 2), t, paths=1000, seed=12)
    yf = R.reduced_coordinates(full["V"].values, full["A"].values, task)
    N = task.N
    a = {"zeta": yf[..., 0], "overlap": (yf[..., 2:2 + N] + task.rho * yf[..., 2 + N:2 + 2 * N]).mean(-1)}
    b = {"zeta": red["zeta"].values, "overlap": red["attention_target_overlap"].values}
    _assert_same_moments(a, b, t)
