"""simulate/_em.py, the SDE engine: numbers independent of the chunking (and of the paths run
beside a path), uneven output grids, key-drawing models; and its schemes (METHODS): measured
strong order against geometric Brownian motion, whose exact solution on the same Brownian path is
known in closed form (Kloeden & Platen §4.4):

    dX = a X dt + b X dW,   X_T = X_0 exp((a - b^2/2) T + b W_T).

Euler–Maruyama has strong order 1/2 for this multiplicative noise, Milstein 1; the scheme is the
engine's own step (``integrate_increments`` shares it with ``solve_sde``), driven by one fine
Brownian path summed into coarser increments.
"""

import numpy as np
import pytest
import sympy as sp

import simulate
from helpers.systems import LinearSDE
from simulate._em import METHODS, integrate_increments
from theory.core import ReducedSystem
from theory.errors import ConfigError

xs = sp.Symbol("x", real=True)
a, b = sp.symbols("a b", real=True)
A_, B_, T_END = 0.5, 0.8, 1.0


def _gbm():
    S = ReducedSystem(name="gbm", paper="test", state=(xs,), parameters=(a, b), rhs=(a * xs,),
                      diffusion=sp.Matrix([[b * xs]]))
    return simulate.ReducedSDE(S, {"a": A_, "b": B_}, {"x": 1.0})


def _strong_errors(method, paths=4000, fine=2**10, levels=(2**3, 2**4, 2**5, 2**6, 2**7)):
    rng = np.random.default_rng(0)
    h_fine = T_END / fine
    dW = rng.standard_normal((paths, fine, 1)) * np.sqrt(h_fine)
    exact = np.exp((A_ - 0.5 * B_**2) * T_END + B_ * dW.sum((1, 2)))
    hs, errs = [], []
    for n in levels:
        coarse = dW.reshape(paths, n, fine // n, 1).sum(2)  # the same Brownian path at step T/n
        XT = integrate_increments(_gbm(), [1.0], 0.0, T_END / n, coarse, method=method)[:, 0]
        hs.append(T_END / n)
        errs.append(np.mean(np.abs(XT - exact)))
    return np.array(hs), np.array(errs)


@pytest.mark.parametrize("method", ["euler_maruyama", "milstein"])
def test_measured_strong_order_matches_theory(method):
    hs, errs = _strong_errors(method)
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    print(method, "errors", errs, "slope", slope)
    assert abs(slope - METHODS[method].strong_order) < 0.15, (method, slope)


def test_milstein_is_more_accurate_and_solve_sde_uses_it():
    """solve_sde(method='milstein'): the ensemble mean of GBM is exp(a t) (within 4 SE), and its
    pathwise error at the coarsest step is below Euler–Maruyama's."""
    _, e_em = _strong_errors("euler_maruyama", levels=(2**3,))
    _, e_mil = _strong_errors("milstein", levels=(2**3,))
    assert e_mil[0] < 0.5 * e_em[0]
    t = np.linspace(0, T_END, 5)
    ens = simulate.solve_sde(_gbm(), t, paths=20000, seed=2, dt=1 / 64, method="milstein")
    X = ens.x.values
    se = X.std(0) / np.sqrt(X.shape[0])
    assert np.all(np.abs(X.mean(0) - np.exp(A_ * t)) < 4 * se + 1e-12)
    assert ens.attrs["method"] == "milstein"


def test_milstein_refuses_sampled_diffusions():
    from theory import scb

    sde, t = scb.minibatch_sde_reduced(scb.SCBConfig(steps=10, log_every=5))
    with pytest.raises(ConfigError, match="method"):
        simulate.solve_sde(sde, t, paths=2, method="milstein")
    with pytest.raises(ConfigError, match="method"):
        simulate.solve_sde(_gbm(), t, paths=2, method="rk4")


def test_sde_engine_chunking_does_not_change_numbers_and_grid_need_not_be_aligned():
    m = LinearSDE()
    t = np.linspace(0.0, 2.0, 5)
    a = simulate.solve_sde(m, t, paths=300, seed=5, dt=0.05)  # one chunk of 3 PRNG blocks
    b = simulate.solve_sde(m, t, paths=300, seed=5, dt=0.05, chunk=8)  # three chunks of one block
    np.testing.assert_array_equal(a["y"].values, b["y"].values)
    few = simulate.solve_sde(m, t, paths=37, seed=5, dt=0.05)  # a path's numbers: whoever runs beside it
    np.testing.assert_array_equal(few["y"].values, a["y"].values[:37])
    assert len(np.unique(a["y"].values[:, -1])) == 300  # every path its own noise
    # uneven output grid (varying steps per interval): exact OU moments at the output times
    t2 = np.array([0.0, 0.13, 0.5, 1.37, 2.0])
    c = simulate.solve_sde(m, t2, paths=20000, seed=1, dt=0.01)
    mean, var = np.exp(-t2), 0.25 * (1 - np.exp(-2 * t2)) / 2
    y = c["y"].values
    se_m = np.sqrt(var / y.shape[0])
    assert np.all(np.abs(y.mean(0) - mean)[1:] < 4 * se_m[1:] + 0.01 * mean[1:])  # EM bias O(dt)


def test_sde_engine_key_models_are_chunk_independent_under_every_prng():
    """A model that draws its own noise from a key (under vmap) gets the same numbers whatever the
    chunk, for each PRNG implementation (rbg's batched draws would use the first key only)."""
    class Keyed(LinearSDE):
        def diffusion(self, t, y, a, key):
            import jax

            return a * (1.0 + jax.random.uniform(key, (1, 1)))

    m, t = Keyed(), np.linspace(0.0, 1.0, 3)
    for prng in ("rbg", "threefry2x32"):
        a = simulate.solve_sde(m, t, paths=16, seed=1, dt=0.1, prng=prng)["y"].values  # one chunk, 2 blocks
        b = simulate.solve_sde(m, t, paths=16, seed=1, dt=0.1, prng=prng, chunk=8)["y"].values  # 2 chunks
        np.testing.assert_array_equal(a, b)
        c = simulate.solve_sde(m, t, paths=9, seed=1, dt=0.1, prng=prng)["y"].values
        np.testing.assert_array_equal(c, a[:9])


class _TwoNoiseSDE:
    """dy = -y dt + (1 + y^2)^(1/2) (dW_1 + y dW_2)/2: a state-dependent diffusion of two noises."""

    paper, name, noise_dim, uniforms_per_step = "test", "two_noise", 2, 0

    def args(self):
        import jax.numpy as jnp

        return jnp.asarray(0.5)

    def initial_state(self):
        return np.array([0.3])

    def drift(self, t, y, a):
        return -y

    def diffusion(self, t, y, a, key):
        import jax.numpy as jnp

        return a * jnp.sqrt(1 + y**2)[:, None] * jnp.stack([jnp.ones_like(y), y], axis=1)

    def observables(self, Y):
        return {"y": Y[..., 0]}


class _TwoNoiseIncrement(_TwoNoiseSDE):
    """The same model applying its diffusion itself (the structured-diffusion hook)."""

    name = "two_noise_increment"
    calls = 0

    def increment(self, t, y, h, dW, noise, args):
        type(self).calls += 1
        return -y * h + args * np.sqrt(1.0) * (1 + y**2) ** 0.5 * (dW[0] + y * dW[1])


def test_a_model_increment_gives_the_same_paths_as_its_dense_diffusion():
    t = np.linspace(0.0, 1.0, 6)
    dense = simulate.solve_sde(_TwoNoiseSDE(), t, paths=24, seed=3, dt=0.05)
    hooked = simulate.solve_sde(_TwoNoiseIncrement(), t, paths=24, seed=3, dt=0.05)
    assert _TwoNoiseIncrement.calls > 0  # traced: the engine used the hook
    np.testing.assert_allclose(hooked["y"].values, dense["y"].values, rtol=0, atol=1e-13)


@pytest.mark.parametrize("plan", ["grouped", "per_step_draws", "varying"])
def test_cutting_time_into_segments_does_not_change_the_numbers(plan):
    """The engine runs time in segments (one compiled call each, so a signal is seen between them),
    carrying the states, the time and the draw counter: every cut gives the numbers of one call over
    the whole grid, on each of the three draw plans (:func:`simulate._em.segment_plan`)."""
    from simulate._em import _draws, _per_step_draws, em_paths, step_plan

    m = LinearSDE()
    t, dt = {"grouped": (np.linspace(0.0, 2.0, 11), 0.05),  # 4 steps per interval, groups of intervals
             "per_step_draws": (np.linspace(0.0, 1.5, 4), 0.001),  # 500 steps per interval
             "varying": (np.array([0.0, 0.13, 0.5, 0.55, 1.37, 2.0, 2.01]), 0.05)}[plan]
    n, _ = step_plan(t, dt)
    assert (plan == "varying") == (not np.all(n == n[0]))
    if plan != "varying":
        assert _per_step_draws(m, int(n[0])) == (plan == "per_step_draws")
    whole = em_paths(m, t, dt, 4, 12, m.initial_state(), segment=10**10)  # capped at the grid: one call
    for seg in (1, 2, 3, 5):
        np.testing.assert_array_equal(em_paths(m, t, dt, 4, 12, m.initial_state(), segment=seg), whole)
    assert len(np.unique(whole[:, -1, 0])) == 12 and _draws(m)[2]  # every path its own noise


def test_run_interruptibly_stops_running_work_at_its_next_check():
    """A signal handler that raises in the main thread while the items run on threads: the
    exception propagates at once, running items see ``stop`` at their next check, queued ones never
    start (the Ctrl-C path of both SDE backends)."""
    import os
    import signal
    import threading
    import time

    from simulate._em import run_interruptibly

    started, checks_after_stop = [], []

    def work(item, stop):
        started.append(item)
        while not stop.is_set():
            time.sleep(0.01)
        checks_after_stop.append(item)

    # Ctrl-C raises in the main thread, as at a terminal (a background runner may start us with it ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run_interruptibly(work, range(6), 2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 2
    assert sorted(started) == [0, 1] and sorted(checks_after_stop) == [0, 1]
