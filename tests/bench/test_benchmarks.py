"""Speed, as ratios against a baseline measured in the same run (skipped by default; `make bench`).

* ODE: one diffrax solve (compiled, warm) vs one scipy Radau solve of the SCB 4-D system.
* SDE: minibatch-SGD SDE paths per second (vmapped diffrax ensemble) vs real SGD runs per second
  (PyTorch, same config, CPU).
"""

import time

import numpy as np
import pytest

import simulate
from empirical import scb as escb
from theory import scb

pytestmark = pytest.mark.benchmark


def _best_of(fn, n=5):
    best = np.inf
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def test_bench_ode_diffrax_vs_scipy(benchmark):
    S = scb.symmetric_system()
    p = dict(T=1e3, rho=1 / 3, K=0.1, m2=1 / 3, eta_V=1.0, eta_A=1.0)
    y0 = dict(zeta=0.0, omega=1.0, xi=1e-3, beta=0.0)
    t = np.linspace(0, 60, 601)
    simulate.solve(S, p, y0, t, backend="diffrax")  # compile once
    scipy_time = _best_of(lambda: simulate.solve(S, p, y0, t, backend="scipy"))
    benchmark.pedantic(lambda: simulate.solve(S, p, y0, t, backend="diffrax"), rounds=10, iterations=1)
    ratio = scipy_time / benchmark.stats.stats.min
    benchmark.extra_info["scipy_seconds"] = scipy_time
    benchmark.extra_info["speedup_diffrax_over_scipy"] = ratio
    print(f"\nODE solve: scipy {scipy_time*1e3:.2f} ms, diffrax {benchmark.stats.stats.min*1e3:.2f} ms, ratio {ratio:.2f}")


def test_bench_sde_paths_per_second_vs_sgd_runs(benchmark):
    cfg = scb.SCBConfig(N=3, T=8, Q=2, eta_V=0.1, eta_A=0.1, batch=32, steps=200, log_every=10)
    sde, t = scb.minibatch_sde(cfg)
    paths = 256
    simulate.solve_sde(sde, t, paths=paths, seed=0)  # compile once
    benchmark.pedantic(lambda: simulate.solve_sde(sde, t, paths=paths, seed=1), rounds=3, iterations=1)
    sde_rate = paths / benchmark.stats.stats.min
    task = scb.make_task(cfg)
    runs = 4
    sgd_time = _best_of(lambda: [escb.train(cfg, device="cpu", seed=s, task=task) for s in range(runs)], n=2)
    sgd_rate = runs / sgd_time
    benchmark.extra_info.update({"sde_paths_per_s": sde_rate, "sgd_runs_per_s": sgd_rate, "ratio": sde_rate / sgd_rate})
    print(f"\nSDE {sde_rate:.1f} paths/s vs SGD {sgd_rate:.2f} runs/s: ratio {sde_rate / sgd_rate:.1f}")
