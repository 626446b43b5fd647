"""The numba SDE backend (simulate/_numba_em.py) and the full SCB SDE step in numba
(theory/scb/sde_numba.py).

References are independent: the numpy preconditioned flow (theory.scb.preconditioned_flow), the
per-sample gradients of the jax MinibatchSDE (Gumbel categorical sampler), the jax engine's
ensemble of the same model, and the jax engine's divergence report.
"""

import numpy as np
import pytest
from numba import njit

import simulate
from helpers.moments import moment_z_scores
from theory import scb
from theory.counter_rng import normals, splitmix64
from theory.errors import ConfigError, SolverError
from theory.scb import sde as R
from theory.scb import sde_numba as K

CFG = scb.SCBConfig(N=3, T=16, Q=2, eta_V=0.2, eta_A=0.2, batch=32, steps=100, log_every=25)
#: T = 7 with N = 4: one 6-token tuple and one single token per context (the remainder path)
CFG_ODD = scb.SCBConfig(N=4, T=7, Q=3, eta_V=0.1, eta_A=0.3, batch=16, attention="dirichlet", task_seed=3)


def _random_state(cfg, task, rng, scale=0.3):
    V0, A0 = scb.initial_parameters(cfg, task)
    V, A = V0 + scale * rng.standard_normal(V0.shape), A0 + scale / task.T * rng.standard_normal(A0.shape)
    return V, A, np.concatenate([V.ravel(), A.ravel()])


@njit
def _normal_stats(n_keys, M, edges):
    """Histogram of ``n_keys * M`` engine normals over ``edges`` (plus the two outer bins) and the
    mean of ``|z| - r`` beyond ``r = edges[-1]``, streamed (no array of draws)."""
    counts = np.zeros(edges.size + 1, np.int64)
    out = np.empty(M)
    tail_sum, tail_n = 0.0, 0
    for k in range(n_keys):
        normals(splitmix64(np.uint64(9), np.uint64(k)), 1.0, out)
        for z in out:
            counts[np.searchsorted(edges, z)] += 1
            if abs(z) > edges[-1]:
                tail_sum += abs(z) - edges[-1]
                tail_n += 1
    return counts, tail_sum / tail_n, tail_n


def test_engine_normals_are_standard_normal():
    """The ziggurat's draws (the Brownian increments), 1.3e7 of them: chi-square over 160 bins of
    N(0, 1) probability (0.1% level), and beyond the ziggurat's base r = 3.4426 (its tail branch)
    the mean excess ``E[|z| - r | |z| > r]`` equals the normal's within 4 SE."""
    from scipy import stats

    r = 3.442619855899
    edges = np.concatenate([[-r], np.linspace(-3.4, 3.4, 159), [r]])
    counts, excess, n_tail = _normal_stats(200_000, 63, edges)  # odd M: every position of a step's draws
    p = np.diff(np.concatenate([[0.0], stats.norm.cdf(edges), [1.0]]))
    assert stats.chisquare(counts, p * counts.sum()).pvalue > 1e-3
    exact = stats.norm.pdf(r) / stats.norm.sf(r) - r
    sd = np.sqrt(stats.truncnorm(r, np.inf).var())
    assert abs(excess - exact) < 4 * sd / np.sqrt(n_tail), (excess, exact, n_tail)


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
def test_step_noise_has_the_reference_per_sample_gradient_covariance(cfg):
    """With h = 0 and dW ~ N(0, I_M), one increment is ``scale sum_m (dW_m - mean dW) g_m`` with
    ``scale = 1/sqrt((M-1) B)``: mean 0, covariance ``(M-1) scale^2 Cov(g) = Cov(g)/B``. Its variance along
    random directions and along each coordinate block equals Cov(g)/B from 100k per-sample
    gradients of the jax MinibatchSDE (another sampler), within 4 SE."""
    import jax
    import jax.numpy as jnp

    simulate.ode._enable_x64()
    task = scb.make_task(cfg)
    M = 64
    model = scb.MinibatchSDE(task, cfg.eta_V, cfg.eta_A, cfg.batch, mc_samples=M)
    increment, params = model.numba_increment()
    _, _, y = _random_state(cfg, task, np.random.default_rng(1), 0.3)
    D = _increments(increment, params, y, M, 40_000, 7)
    keys = jax.random.split(jax.random.PRNGKey(3), 1600)
    G = np.asarray(jax.vmap(lambda kk: model.per_sample_gradients(jnp.asarray(y), model.args(), kk))(keys))
    G = G.reshape(-1, y.size)
    rng = np.random.default_rng(2)
    NN = task.N**2
    dirs = [rng.standard_normal(y.size) for _ in range(12)]
    dirs += [np.r_[np.ones(NN), np.zeros(y.size - NN)], np.r_[np.zeros(NN), np.ones(y.size - NN)]]
    dirs += [np.eye(y.size)[i] for i in (0, NN - 1, NN, y.size - 1)]
    for u in dirs:
        a, b = D @ u, (G @ u) / np.sqrt(cfg.batch)
        va, vb = a.var(), b.var()
        se = np.sqrt((((a - a.mean())**4).mean() - va**2) / a.size + (((b - b.mean())**4).mean() - vb**2) / b.size)
        assert abs(va - vb) < 4 * se, (va, vb, se)
    assert np.abs(D.mean(0)).max() < 4 * D.std(0).max() / np.sqrt(len(D))  # centred: the mean is in the drift


def test_numba_ensemble_matches_the_jax_engine():
    """Mean and variance of zeta and <a,q> at t = 25..100: numba backend vs the jax engine (the
    same model, FastMinibatchSDE), 400 paths each, within 3.5 SE."""
    task = scb.make_task(CFG)
    t = np.linspace(0, CFG.steps, CFG.steps // CFG.log_every + 1)
    model = R.FastMinibatchSDE(task, CFG.eta_V, CFG.eta_A, CFG.batch, 64)
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


def test_numbers_depend_only_on_seed_path_and_step():
    task = scb.make_task(CFG_ODD)
    model = scb.MinibatchSDE(task, CFG_ODD.eta_V, CFG_ODD.eta_A, CFG_ODD.batch, 16)
    t = np.array([0.0, 3.0, 7.5, 10.0])  # uneven: 3, 5 and 3 steps of dt <= 1
    run = lambda **kw: simulate.solve_sde(model, t, seed=kw.pop("seed", 4), backend="numba", keep_state=True, **kw)
    a = run(paths=24)
    np.testing.assert_array_equal(a["V"].values, run(paths=24)["V"].values)
    np.testing.assert_array_equal(a["A"].values, run(paths=24, chunk=5)["A"].values)
    np.testing.assert_array_equal(a["A"].values[:3], run(paths=3)["A"].values)  # alone vs in an ensemble
    np.testing.assert_array_equal(a["V"].values, run(paths=24, chunk=1)["V"].values)  # 24 chunks on the threads
    np.testing.assert_array_equal(a["V"].values, run(paths=24, chunk=24)["V"].values)  # one chunk, one thread
    assert len(np.unique(a["V"].values[:, -1, 0, 0])) == 24  # every path its own noise
    assert not np.array_equal(a["V"].values, run(paths=24, seed=5)["V"].values)


class _Blow:
    """y' = y^2 (blows up at t = 1 from y = 1) with zero noise, in both backends."""

    paper, name, noise_dim, dim = "test", "blow", 2, 1

    def args(self):
        import jax.numpy as jnp

        return jnp.asarray(0.0)

    def initial_state(self):
        return np.array([1.0])

    def drift(self, t, y, a):
        return y**2

    def diffusion(self, t, y, a, key):
        return a * np.ones((1, 2))

    def numba_increment(self):
        return _blow_increment, (0.0,)

    def observables(self, Y):
        return {"y": Y[..., 0]}


@njit
def _blow_increment(t, y, h, dW, key, params, dy):
    dy[0] = y[0] * y[0] * h + params[0] * (dW[0] + dW[1])


def test_divergence_gives_the_same_partial_result_as_the_jax_engine():
    t = np.linspace(0, 3, 31)
    errs = {}
    for backend in ("jax", "numba"):
        with pytest.raises(SolverError) as err:
            simulate.solve_sde(_Blow(), t, paths=4, seed=0, dt=0.01, backend=backend)
        errs[backend] = err.value
    a, b = errs["jax"].partial, errs["numba"].partial
    y, n = 1.0, 0  # the Euler recursion y <- y + y^2 h in numpy: the last output time still finite
    with np.errstate(over="ignore"):
        while np.isfinite(y):
            y, n = y + y * y * 0.01, n + 1
    assert b.sizes["time"] == (n - 1) // 10 + 1 < 31
    assert b.sizes["time"] == a.sizes["time"] and b.attrs["message"] == a.attrs["message"]
    assert b.attrs["status"] == a.attrs["status"] == -1
    np.testing.assert_allclose(b["y"].values, a["y"].values, rtol=1e-12)  # deterministic: the same Euler path
    assert str(errs["numba"]) == str(errs["jax"])


def test_bad_input_raises_config_error():
    task = scb.make_task(CFG_ODD)
    model = scb.MinibatchSDE(task, CFG_ODD.eta_V, CFG_ODD.eta_A, CFG_ODD.batch, 8)
    t = np.array([0.0, 2.0])
    cases = [({"backend": "cuda"}, "backend"), ({"backend": "numba", "method": "milstein"}, "method"),
             ({"backend": "numba", "prng": "rbg"}, "prng"), ({"backend": "numba", "paths": 0}, "paths")]
    for kw, field in cases:
        with pytest.raises(ConfigError) as err:
            simulate.solve_sde(model, t, **{"paths": 2, **kw})
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        simulate.solve_sde(R.ReducedMinibatchSDE(task, 0.1, 0.1, 16), t, paths=2, backend="numba")
    assert err.value.field == "backend"
    with pytest.raises(ConfigError) as err:  # a state of the wrong size (the kernel would read out of bounds)
        simulate.solve_sde(model, t, paths=2, backend="numba", y0=np.zeros(model.dim - 1))
    assert err.value.field == "y0"
