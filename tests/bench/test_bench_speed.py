"""A speed **report**, not a test of speed: the speed goals, each measured as a ratio against
its baseline in the same run (`make bench`; skipped by default). Speed is never a timed assertion:
each goal is recorded beside its measurement (``met``: whether this machine, at this load, reached
it) and never asserted, so a slow or busy machine cannot fail the suite. At the end the report table
is printed and saved as JSON (``.benchmarks/speed.json``, or ``$TDYN_BENCH_JSON``) with the
machine's load average. (The only asserts here check that a benchmarked command ran and gave the
right output.)

* SDE engine: the full SCB (V, A) minibatch SDE (derived noise, FullMinibatchSDE) — diffrax
  ``Euler`` (the previous engine, kept here as the baseline) vs the numba backend
  (``solve_sde(..., backend="numba")``: compiled path loop, one chunk of paths per core on threads);
  goal >= 20x. Also reported: the ``lax.scan`` engine (rbg PRNG blocks, chunks on threads).
* Reduced SCB SDE: 1000 paths x 1e4 steps, warm; goal < 5 s. The CLI command
  ``tdyn simulate scb --sde --paths 1000 --set steps=10000`` in a fresh process; goal < 15 s.
* SCB real SGD at N=500, T=1e5, batch 256: empirical.scb.fast vs empirical.scb.experiment; goal >= 2 steps/s.
* ``tdyn derive`` per paper: cached vs fresh (and a cached run in a fresh interpreter); goal < 10 s.
* ODE: diffrax vs scipy per solve, with observables; goal >= 5x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import timeit
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import simulate
from theory import scb
from theory.scb import sde as R

pytestmark = pytest.mark.benchmark
REPO = Path(__file__).resolve().parents[2]


def _best_of(fn, n=3):
    return min(timeit.repeat(fn, number=1, repeat=n))


@lru_cache(maxsize=4)
def _diffrax_ensemble(sde, dt: float, max_steps: int):
    """The previous solve_sde engine (diffrax Euler, UnsafeBrownianPath), kept as the baseline."""
    simulate.enable_x64()
    import diffrax
    import jax
    import jax.numpy as jnp

    def one_path(key, y0, args, ts):
        bkey, dkey = jax.random.split(key)

        def diff(t, y, a):
            idx = jnp.round((t - ts[0]) / dt).astype(jnp.int32)
            return sde.diffusion(t, y, a, jax.random.fold_in(dkey, idx))

        bm = diffrax.UnsafeBrownianPath(shape=(sde.noise_dim,), key=bkey)
        terms = diffrax.MultiTerm(diffrax.ODETerm(sde.drift), diffrax.ControlTerm(diff, bm))
        return diffrax.diffeqsolve(terms, diffrax.Euler(), t0=ts[0], t1=ts[-1], dt0=dt, y0=y0, args=args,
                                   saveat=diffrax.SaveAt(ts=ts), adjoint=diffrax.ForwardMode(),
                                   max_steps=max_steps, throw=False).ys

    return jax.jit(jax.vmap(one_path, in_axes=(0, None, None, None)))


def _baseline_sde_run(sde, t, paths, seed=0):
    import jax
    import jax.numpy as jnp

    run = _diffrax_ensemble(sde, 1.0, int(t[-1] - t[0]) + 8)
    keys = jax.random.split(jax.random.PRNGKey(seed), paths)
    return np.asarray(run(keys, jnp.asarray(sde.initial_state()), sde.args(), jnp.asarray(t)))


def test_bench_sde_full_engine_vs_diffrax(bench_row, benchmark):
    cfg = scb.SCBConfig(steps=200, log_every=10)
    paths = 200
    old, t = scb.minibatch_sde(cfg)
    _baseline_sde_run(old, t, paths)  # compile
    base = _best_of(lambda: _baseline_sde_run(old, t, paths, 1), n=2)
    simulate.solve_sde(old, t, paths=paths, seed=0)
    benchmark.pedantic(lambda: simulate.solve_sde(old, t, paths=paths, seed=1), rounds=2, iterations=1)
    engine_only = benchmark.stats.stats.min
    simulate.solve_sde(old, t, paths=paths, seed=0, backend="numba")  # compile
    numba_s = _best_of(lambda: simulate.solve_sde(old, t, paths=paths, seed=1, backend="numba"), n=3)
    work = paths * cfg.steps
    bench_row("full SCB SDE: numba backend vs diffrax", base / numba_s, "x", goal=">= 20x", met=base / numba_s >= 20,
              seconds=numba_s, baseline_seconds=base, path_steps=work)
    bench_row("full SCB SDE path-steps/s (numba backend)", work / numba_s, "1/s", baseline=work / base)
    bench_row("full SCB SDE: lax.scan engine vs diffrax", base / engine_only, "x", seconds=engine_only)
    bench_row("full SCB SDE path-steps/s (lax.scan engine)", work / engine_only, "1/s", baseline=work / base)


def test_bench_sde_reduced_1000x1e4(bench_row, benchmark):
    cfg = scb.SCBConfig(steps=10_000, log_every=5)
    sde, t = R.minibatch_sde_reduced(cfg)
    t0 = time.perf_counter()
    simulate.solve_sde(sde, t, paths=1000, seed=0)
    first = time.perf_counter() - t0
    benchmark.pedantic(lambda: simulate.solve_sde(sde, t, paths=1000, seed=1), rounds=2, iterations=1)
    warm = benchmark.stats.stats.min
    bench_row("reduced SCB SDE 1000 paths x 1e4 steps (warm)", warm, "s", goal="< 5 s", met=warm < 5,
              first_call_seconds=first, path_steps_per_s=1000 * cfg.steps / warm)


def test_bench_cli_simulate_scb_sde(bench_row, benchmark, tmp_path):
    """`tdyn simulate scb --sde --paths 1000 --set steps=10000` in a fresh interpreter: imports,
    compilation, 1000 x 1e4 reduced-SDE steps, observables and the NetCDF write."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "figures.cli", "simulate", "scb", "--sde", "--paths", "1000", "--set", "steps=10000",
           "--out", str(tmp_path / "sde.nc")]
    benchmark.pedantic(lambda: subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tmp_path),
                       rounds=1, iterations=1)
    wall = benchmark.stats.stats.min
    bench_row("tdyn simulate scb --sde --paths 1000 steps=1e4 (fresh process)", wall, "s", goal="< 15 s",
              met=wall < 15)


def test_bench_scb_sgd_at_scale(bench_row, benchmark):
    import torch

    from empirical import scb as E
    from empirical.scb import fast as F

    cfg = scb.SCBConfig(N=500, T=100_000, Q=2, eta_V=1e-5, eta_A=1e-5, batch=256, steps=10, log_every=5)
    task = scb.make_task(cfg)

    def rate(exp, n):
        exp.setup(torch.device("cpu"), torch.Generator().manual_seed(0))
        exp.step(0)  # warm
        t0 = time.perf_counter()
        for i in range(n):
            exp.step(i + 1)
        return n / (time.perf_counter() - t0)

    base = rate(E.SCBExperiment(cfg, task=task), 2)
    torch_engine = rate(F.FastSCBExperiment(cfg, task=task, engine="torch"), 2)
    fast_exp = F.FastSCBExperiment(cfg, task=task)  # numba kernels on the CPU
    fast_exp.setup(torch.device("cpu"), torch.Generator().manual_seed(0))
    fast_exp.step(0)
    benchmark.pedantic(lambda: fast_exp.step(1), rounds=5, iterations=1)
    fast = 1.0 / benchmark.stats.stats.min
    bench_row("SCB real SGD N=500 T=1e5 B=256 (steps/s)", fast, "steps/s", baseline=base, goal=">= 2 steps/s",
         met=fast >= 2, torch_threads=torch.get_num_threads(), kernel_threads=F.K.threads(),
         token_positions_per_s=fast * 256 * 100_000, torch_engine_steps_per_s=torch_engine)


@pytest.mark.parametrize("paper", ["scb", "scan-snap", "topic", "joma"])
def test_bench_derive_cached(bench_row, benchmark, paper, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from figures.cli import main

    monkeypatch.setenv("TDYN_CACHE_DIR", str(tmp_path))

    def derive(*extra):
        res = CliRunner().invoke(main, ["derive", paper, *extra])
        assert res.exit_code == 0, res.output
        return res.stdout

    t0 = time.perf_counter()
    fresh = derive("--no-cache")
    fresh_s = time.perf_counter() - t0
    derive()  # fills the cache
    benchmark.pedantic(derive, rounds=3, iterations=1)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TDYN_CACHE_DIR": str(tmp_path)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "figures.cli", "derive", paper], env=env, capture_output=True,
                         text=True, check=True).stdout
    process_s = time.perf_counter() - t0
    assert out == fresh
    bench_row(f"tdyn derive {paper}: cached, fresh process", process_s, "s", baseline=fresh_s, goal="< 10 s",
         met=process_s < 10, in_process_cached_seconds=benchmark.stats.stats.min)


def test_bench_ode_diffrax_vs_scipy_with_observables(bench_row, benchmark):
    S = scb.symmetric_system()
    p = dict(T=1e3, rho=1 / 3, K=0.1, m2=1 / 3, eta_V=1.0, eta_A=1.0)
    y0 = dict(zeta=0.0, omega=1.0, xi=1e-3, beta=0.0)
    t = np.linspace(0, 60, 601)
    simulate.solve(S, p, y0, t, backend="diffrax")
    simulate.solve(S, p, y0, t, backend="scipy")
    scipy_s = _best_of(lambda: simulate.solve(S, p, y0, t, backend="scipy"), n=7)
    scipy_no = _best_of(lambda: simulate.solve(S, p, y0, t, backend="scipy", observables=False), n=7)
    diffrax_no = _best_of(lambda: simulate.solve(S, p, y0, t, backend="diffrax", observables=False), n=15)
    benchmark.pedantic(lambda: simulate.solve(S, p, y0, t, backend="diffrax"), rounds=15, iterations=1)
    d = benchmark.stats.stats.min
    bench_row("ODE diffrax vs scipy, with observables", scipy_s / d, "x", goal=">= 5x", met=scipy_s / d >= 5,
         diffrax_seconds=d, scipy_seconds=scipy_s)
    bench_row("ODE diffrax vs scipy, without observables", scipy_no / diffrax_no, "x",
         diffrax_seconds=diffrax_no, scipy_seconds=scipy_no)
