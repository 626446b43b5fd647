"""Speed of the batched seeds (`make bench`): the claims' map cells train every seed of a config in
one vectorised run (:func:`empirical.topic.seeds.train_seeds`); the row compares 12 seeds batched
against the per-seed Trainer loop on the two-stage preset (joint K/Q/V, 200 steps), in CPU
seconds of this process (both paths use one torch thread). Goal >= 5x; reported, not asserted. The
asserted part is the agreement (same numbers, tested in full in test_seeds.py)."""

import time

import numpy as np
import pytest

from empirical import topic as emp
from empirical.topic import seeds as S
from theory.topic import TopicConfig

SEEDS = tuple(range(12))


@pytest.mark.benchmark
def test_twelve_seeds_batched_vs_per_seed_loop(bench_row, benchmark):
    cfg = TopicConfig.preset("two_stage", True).replace(steps=200)
    t0 = time.process_time()
    loop = [emp.train(cfg, device="cpu", seed=s)[0] for s in SEEDS]
    per_seed = time.process_time() - t0

    def batched():
        S._cached.cache_clear()  # a cold run, not the per-process cache
        return S.train_seeds(cfg, seeds=SEEDS, device="cpu")

    t0 = time.process_time()
    out = benchmark.pedantic(batched, rounds=1, iterations=1)
    once = time.process_time() - t0
    bench_row("topic: 12 seeds batched vs a per-seed loop (two_stage, 200 steps)", per_seed / once, "x",
              goal=">= 5x", met=per_seed / once >= 5, seconds=once, baseline_seconds=per_seed)
    print(f"12 seeds: per-seed loop {per_seed:.2f} CPU s, batched {once:.2f} CPU s, ratio {per_seed / once:.2f}")
    for i in (0, 11):
        np.testing.assert_allclose(out["topic_mode"].isel(seed=i).values, loop[i]["topic_mode"].values, rtol=1e-9,
                                   atol=1e-12)
