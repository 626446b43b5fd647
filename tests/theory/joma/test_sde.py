"""theory/joma/sde.py and the block's derived noise (docs/papers/joma.md §2.7, project extension): the
noise comes from the per-sample loss, its mean is the derived block flow, its covariance is the
covariance of the real network's per-row gradients, one Euler–Maruyama step has covariance
``Sigma dt``, the SDE is the earlier hand-built model within Monte-Carlo error, and the path
spread scales as ``sqrt(lr/B)``."""

import numpy as np
import pytest
import sympy as sp

import simulate as sim
from helpers.joma import RowCovarianceSDE, network_row_flows, random_point
from theory import joma as J
from theory.noise import check_drift, derive_noise

CASES = [("exp", "linear"), ("softmax", "tanh"), ("linear", "relu"), ("softmax", "linear")]


@pytest.mark.parametrize("attention,activation", CASES)
def test_block_noise_mean_is_the_derived_flow(attention, activation):
    """E_rows[g] of the per-sample loss equals the block ODE's rhs (symbolically)."""
    sysm = J.block_system(attention, activation, 3, 2, 3)
    assert sysm.noise.method == "finite" and sysm.noise.exact and sysm.noise.implicit_covariance
    check = check_drift(sysm)
    assert check.passed and check.symbolic, check


def test_drift_check_fails_for_a_wrong_map():
    """The check can fail: the same loss with the flow's map doubled is not the block flow."""
    sysm = J.block_system("exp", "linear", 2, 2, 2)
    loss, x, g = J.per_sample_loss("exp", "linear", 2, 2)
    wrong = derive_noise(loss, sysm.state, (*x, *g), J.rows_distribution(2, 2, 2), preconditioner=2,
                         simplify=False, covariance=False)
    assert not check_drift(sysm, wrong).passed


@pytest.mark.parametrize("attention,activation", CASES)
def test_sigma_is_the_covariance_of_the_networks_per_row_gradients(attention, activation):
    """``F F^T`` of the SDE model (the derived per-sample flows over the rows) equals the covariance
    over the rows of the torch network's per-row gradients (autograd, no sympy) — exact for the
    finite data set, so to 1e-10 — at random states and data."""
    rng = np.random.default_rng(3)
    Mc, K, N, tau = 3, 2, 4, 0.7
    cfg = J.JomaConfig(attention=attention, activation=activation, Mc=Mc, K=K, N=N, d=6, temperature=tau,
                       gradient="random", init_scale=0.01)
    model = J.sde_model(cfg)
    for _ in range(3):
        X, G, V, s, z = random_point(rng, Mc, K, N)
        F = network_row_flows(attention, activation, X, G, V, s, z, tau, d=6)
        want = (F - F.mean(0)).T @ (F - F.mean(0)) / N
        params = {**dict(model.params), **{f"x_{n + 1}_{l + 1}": X[n, l] for n in range(N) for l in range(Mc)},
                  **{f"g_{n + 1}_{k + 1}": G[n, k] for n in range(N) for k in range(K)}}
        m = type(model)(model.system, params, model.y0, model.step_time, model.batch, model.factor)
        got = m.per_sample_covariance(np.concatenate([z, V.ravel(), s]))
        assert np.abs(got - want).max() <= 1e-10 * max(1.0, np.abs(want).max())
        np.testing.assert_allclose(np.asarray(m.drift(0.0, np.concatenate([z, V.ravel(), s]), m.args())),
                                   F.mean(0), rtol=1e-10, atol=1e-12)


def test_one_step_increment_covariance_is_sigma_dt():
    """One Euler–Maruyama step of length ``h = lr`` (one optimiser step) from a random state:
    increments with mean ``f h`` and covariance ``lr Sigma h = lr^2 Cov/B`` — the covariance of
    one SGD step on ``B`` rows drawn with replacement — within Monte-Carlo error (z < 5 per entry)."""
    rng = np.random.default_rng(0)
    cfg = J.JomaConfig(Mc=3, K=2, N=3, d=6, gradient="random", lr=0.05, batch=2)
    X, G = J.make_data(cfg)
    _, _, V, s, z = random_point(rng, 3, 2, 3)
    y0 = np.concatenate([z, V.ravel(), s])
    F = network_row_flows("exp", "linear", X, G, V, s, z, 1.0, d=6)
    cov = cfg.lr**2 * (F - F.mean(0)).T @ (F - F.mean(0)) / 3 / cfg.batch
    P = 40000
    tr = sim.solve_sde(J.sde_model(cfg), np.array([0.0, cfg.lr]), paths=P, seed=2, y0=y0)
    inc = np.stack([tr[n].values[:, 1] for n in J.state_names(3, 2)], 1) - y0
    np.testing.assert_allclose(inc.mean(0), cfg.lr * F.mean(0), atol=6 * np.sqrt(cov.diagonal().max() / P))
    emp = np.cov(inc.T)
    se = np.sqrt((np.outer(cov.diagonal(), cov.diagonal()) + cov**2) / P) + 1e-18
    assert np.max(np.abs(emp - cov) / se) < 5


def test_derived_sde_equals_the_hand_built_row_covariance_model():
    """Same diffusion as the earlier hand-built model at random states (to rounding), and the same
    ensemble statistics within Monte-Carlo error (independent seeds)."""
    import jax.numpy as jnp

    cfg = J.JomaConfig(lr=0.01, steps=400, log_every=40, batch=2)
    new, t = J.minibatch_sde(cfg)
    old = RowCovarianceSDE(cfg)
    rng = np.random.default_rng(1)
    for _ in range(3):
        y = jnp.asarray(rng.standard_normal(new.dim) * 0.5)
        np.testing.assert_allclose(np.asarray(new.diffusion(0.0, y, new.args(), None)),
                                   np.asarray(old.diffusion(0.0, y, old.args(), None)), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.asarray(new.drift(0.0, y, new.args())),
                                   np.asarray(old.drift(0.0, y, old.args())), rtol=1e-12, atol=1e-15)
    P = 2000
    a = sim.solve_sde(new, t, paths=P, seed=5)
    b = sim.solve_sde(old, t, paths=P, seed=6, dt=cfg.lr)
    for name in ("z_1", "v_1_1", "v_3_6", "s_2"):
        x, y = a[name].values[:, 1:], b[name].values[:, 1:]
        z_mean = np.abs(x.mean(0) - y.mean(0)) / np.sqrt(x.var(0) / P + y.var(0) / P)
        assert z_mean.max() < 4.5, name
        ratio = x.std(0) / y.std(0)
        assert np.all(np.abs(np.log(ratio)) < 5 / np.sqrt(P)), name  # sd of the log of the ratio: sqrt(1/P)


def test_minibatch_sde_noise_scales_as_one_over_sqrt_batch_and_mean_follows_ode():
    """Spec §2.7 (project extension): path spread ~ sqrt(lr/B); the ensemble mean follows the ODE."""
    stds, means = {}, {}
    for B in (1, 4):
        cfg = J.JomaConfig(Mc=3, K=2, N=2, d=5, gradient="random", batch=B, lr=0.01, steps=200, log_every=50)
        sde, t = J.minibatch_sde(cfg)
        np.testing.assert_array_equal(t, cfg.ode_times())
        assert sde.dt == pytest.approx(cfg.lr)  # one optimiser step (theory.noise.step_time)
        tr = sim.solve_sde(sde, t, paths=128, seed=1)
        stds[B] = float(tr["v_1_1"].std("path").values[-1])
        means[B] = float(tr["v_1_1"].mean("path").values[-1])
    ode = sim.solve(J.problem(cfg), backend="scipy")
    assert 1.6 < stds[1] / stds[4] < 2.5
    for B in (1, 4):
        assert abs(means[B] - float(ode["v_1_1"].values[-1])) < 4 * stds[B] / np.sqrt(128) + 1e-3


def test_exported_block_system_carries_its_noise():
    """`tdyn derive joma` exports the noise (JSON round trip; LaTeX rows of the implicit form)."""
    import json

    from theory.export import systems_to_json
    from theory.load import load_system

    sysm = J.block_system("exp", "linear", 2, 2, 2)
    back = load_system(json.loads(systems_to_json("joma", [sysm]))["systems"][0])
    assert back.noise is not None and back.noise.implicit_covariance and back.equivalent(sysm)
    assert check_drift(back).passed
    text = sysm.to_latex()
    assert r"\Sigma(\theta) &= \frac{1}{B} \sum_{k} p_{k}" in text
    assert r"g_{v_{1 2}} &= g_{1} x_{2} e^{\frac{z_{2}}{\tau}}" in text
    assert sp.Rational(1, 2) in J.rows_distribution(2, 2, 2).probabilities
