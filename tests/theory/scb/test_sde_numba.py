"""The full SCB SDE's compiled step (theory/scb/sde_numba.py) against the derived model it compiles
(theory.scb.sde.FullMinibatchSDE on theory.scb.derive.full_system): the numpy preconditioned flow,
the increment covariance of the derived per-sample flows (drawn by the derived model's own
sampler, not the kernel's alias tables) and the jax engine's ensemble of the derived model."""

import numpy as np
import pytest
from numba import njit

import simulate
from helpers.moments import moment_z_scores
from theory import scb
from theory.counter_rng import splitmix64
from theory.scb import sde as R
from theory.scb import sde_numba as K


CFG = scb.SCBConfig(N=3, T=16, Q=2, eta_V=0.2, eta_A=0.2, batch=32, steps=100, log_every=25)

#: T = 7 with N = 4: one 6-token tuple and one single token per context (the remainder path)
CFG_ODD = scb.SCBConfig(N=4, T=7, Q=3, eta_V=0.1, eta_A=0.3, batch=16, attention="dirichlet", task_seed=3)


def _random_state(cfg, task, rng, scale=0.3):
    V0, A0 = scb.initial_parameters(cfg, task)
    V, A = V0 + scale * rng.standard_normal(V0.shape), A0 + scale / task.T * rng.standard_normal(A0.shape)
    return V, A, np.concatenate([V.ravel(), A.ravel()])


@pytest.mark.parametrize("cfg", [CFG, CFG_ODD])
def test_drift_kernel_is_the_preconditioned_population_flow(cfg):
    task = scb.make_task(cfg)
    p = K.kernel_params(task, cfg.eta_V, cfg.eta_A, cfg.batch)
    rng = np.random.default_rng(0)
    for _ in range(5):
        V, A, y = _random_state(cfg, task, rng, 0.5)
        out = np.empty_like(y)
        K.flow(y, task.N, task.T, *p[2:9], out)
        dV, dA = scb.preconditioned_flow(V, A, task, cfg.eta_V, cfg.eta_A)
        np.testing.assert_allclose(out, np.concatenate([dV.ravel(), dA.ravel()]), rtol=1e-12, atol=1e-14)


@njit
def _increments(increment, params, y, M, calls, seed):
    """``calls`` increments at ``y`` with h = 0 (noise only), fresh keys and fresh standard normal ``dW`` (M,)."""
    np.random.seed(seed)
    out = np.empty((calls, y.size))
    for c in range(calls):
        dW = np.random.standard_normal(M)
        increment(0.0, y, 0.0, dW, splitmix64(np.uint64(seed), np.uint64(c)), params, out[c])
    return out


@pytest.mark.parametrize("cfg", [CFG, CFG_ODD])
def test_step_noise_has_the_derived_increment_covariance(cfg):
    """With h = 0 and dW ~ N(0, I_M), one increment is ``scale sum_m (dW_m - mean dW) g_m`` with
    ``scale = 1/sqrt((M-1) B)``: mean 0, covariance ``(M-1) scale^2 Cov(g) = Cov(g)/B``. Its
    variance along random directions and along each coordinate block equals the derived model's
    (FullMinibatchSDE: the sympy per-sample flow on sequences from its own sampler, 64k samples)
    ``Cov(g)/B``, within 4 SE."""
    import jax
    import jax.numpy as jnp

    simulate.enable_x64()
    task = scb.make_task(cfg)
    M = 64
    model, _ = R.minibatch_sde(cfg, mc_samples=M)
    increment, params = model.numba_increment()
    _, _, y = _random_state(cfg, task, np.random.default_rng(1), 0.3)
    D = _increments(increment, params, y, M, 40_000, 7)
    keys = jax.random.split(jax.random.PRNGKey(3), 1000)
    args = model.args()
    F = jax.jit(jax.vmap(lambda kk: model.model.factor_matrix(0.0, jnp.asarray(y), args["p"], kk)))(keys)
    G = np.asarray(F).transpose(0, 2, 1).reshape(-1, y.size) * np.sqrt(M - 1.0)  # centred flows per key
    rng = np.random.default_rng(2)
    NN = task.N**2
    dirs = [rng.standard_normal(y.size) for _ in range(12)]
    dirs += [np.r_[np.ones(NN), np.zeros(y.size - NN)], np.r_[np.zeros(NN), np.ones(y.size - NN)]]
    dirs += [np.eye(y.size)[i] for i in (0, NN - 1, NN, y.size - 1)]
    for u in dirs:
        a, b = D @ u, (G @ u) / np.sqrt(cfg.batch)
        va, vb = a.var(), (b**2).mean() * M / (M - 1)  # b: centred within groups of M (M - 1 dof)
        se = np.sqrt((((a - a.mean())**4).mean() - va**2) / a.size + ((b**4).mean() - (b**2).mean()**2) / b.size)
        assert abs(va - vb) < 4 * se, (va, vb, se)
    assert np.abs(D.mean(0)).max() < 4 * D.std(0).max() / np.sqrt(len(D))  # centred: the mean is in the drift


def test_numba_ensemble_matches_the_jax_engine():
    """Mean and variance of zeta and <a,q> at t = 25..100: numba backend vs the jax engine (the
    derived model, FullMinibatchSDE; T = 8 to keep the jax run short), 400 paths each, within 3.5 SE."""
    t = np.linspace(0, CFG.steps, CFG.steps // CFG.log_every + 1)
    model, _ = R.minibatch_sde(CFG.replace(T=8), mc_samples=64)
    nb = simulate.solve_sde(model, t, paths=400, seed=11, backend="numba")
    jx = simulate.solve_sde(model, t, paths=400, seed=12)
    assert nb.attrs["backend"] == "em_numba" and nb.attrs["prng"] == "splitmix64"
    for name in ("value_transition_correlation", "attention_target_overlap"):
        for i in range(1, t.size):
            x, z = nb[name].values[:, i], jx[name].values[:, i]
            z_mean, z_var = moment_z_scores(x, z)
            print(f"{name} t={t[i]:.0f}: mean {x.mean():.5f} vs {z.mean():.5f} ({z_mean:+.1f} SE); "
                  f"var {x.var():.3e} vs {z.var():.3e} ({z_var:+.1f} SE)")
            assert abs(z_mean) < 3.5 and abs(z_var) < 3.5, (name, t[i], z_mean, z_var)
