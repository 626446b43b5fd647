"""The numba SDE backend (simulate/_numba_em.py): its normals, determinism, divergence report and
input checks, on SCB's full SDE as a model (the SCB kernel itself: tests/theory/scb/test_sde_numba.py).

References are independent: the normal distribution, the jax engine's divergence report.
"""

import numpy as np
import pytest
from numba import njit

import simulate
from theory import scb
from theory.counter_rng import normals, splitmix64
from theory.errors import ConfigError, SolverError
from theory.scb import sde as R

#: T = 7 with N = 4: one 6-token tuple and one single token per context (the remainder path)
CFG_ODD = scb.SCBConfig(N=4, T=7, Q=3, eta_V=0.1, eta_A=0.3, batch=16, attention="dirichlet", task_seed=3)


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


def test_numbers_depend_only_on_seed_path_and_step():
    model, _ = scb.minibatch_sde(CFG_ODD, mc_samples=16)
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
    model, _ = scb.minibatch_sde(CFG_ODD, mc_samples=8)
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
