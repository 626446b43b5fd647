"""`make bench` row of the SCB claims: 12 seeds of one map point in one batched call
(:func:`empirical.scb.l1.train_seeds`) against a loop of per-seed Trainer runs
(:func:`empirical.scb.train`), same config, measured in the same run (goal >= 5x on 2 cores;
reported, not asserted). Asserted: the batched run equals the loop's last seed."""

import timeit

import numpy as np
import pytest

from empirical import scb as escb
from empirical.scb import l1 as el1
from theory import scb

#: an l1 map cell of the quick claims (T = 8, batch 64), at the l1 protocol's horizon
CFG = scb.SCBConfig(N=3, T=8, Q=2, task_seed=0, eta_V=0.29, eta_A=0.29, batch=64, lam=0.01, lam_switch=2.0,
                    steps=120, log_every=1)
SEEDS = list(range(12))


@pytest.mark.benchmark
def test_twelve_seeds_batched_vs_a_per_seed_loop(bench_row, benchmark):
    def loop():
        return [escb.train(CFG, seed=s, device="cpu")[0] for s in SEEDS]

    def batched():
        return el1.train_seeds(CFG, seeds=SEEDS)

    last = loop()[-1]
    b = batched()  # warm both
    t_loop = min(timeit.repeat(loop, number=1, repeat=2))
    benchmark.pedantic(batched, rounds=3, iterations=1)
    t_b = float(benchmark.stats.stats.min)
    ratio = t_loop / t_b
    bench_row("scb claims: 12 seeds batched (train_seeds)", t_b, "s", baseline=t_loop,
              goal=">= 5x vs a per-seed Trainer loop", met=ratio >= 5, speedup=ratio, steps=CFG.steps)
    print(f"\nscb 12 seeds: loop {t_loop:.3f} s, batched {t_b:.3f} s, speed-up {ratio:.1f}x")
    np.testing.assert_allclose(b["population_loss"].isel(seed=-1).values, last["population_loss"].values,
                               rtol=1e-10)
