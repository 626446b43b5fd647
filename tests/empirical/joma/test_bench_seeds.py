"""`make bench`: 12 seeds in one vectorised run (empirical.joma.seeds.train_seeds) vs a per-seed
loop of Trainer runs, for the small runs the claims' maps make (goal >= 5x). The speed
is reported (bench_row), never asserted; the agreement of the two is tested in test_seeds.py."""

import time

import pytest

from empirical import joma as E
from empirical.joma.seeds import seed_config, train_seeds
from theory import joma as J

SEEDS = list(range(12))
CASES = {  # the maps' cells: the probe (Theorem 4), the Fig. 2 toy (Theorem 1), the HBLT block (§3.4)
    "probe": J.JomaConfig.preset("probe", True, steps=400, log_every=10),
    "toy": J.JomaConfig.preset("toy", True, steps=400, log_every=20),
    "hblt": J.JomaConfig(variant="hblt", steps=300, log_every=20, hblt_samples=256),
}


def _best(fn, repeat=2):
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


@pytest.mark.benchmark
@pytest.mark.parametrize("name", list(CASES))
def test_twelve_seeds_batched_vs_per_seed_loop(bench_row, benchmark, name):
    cfg = CASES[name]
    train_seeds(cfg, seeds=SEEDS[:2])  # warm-up
    benchmark.pedantic(train_seeds, args=(cfg,), kwargs={"seeds": SEEDS}, rounds=2, iterations=1)
    batched = benchmark.stats.stats.min
    loop = _best(lambda: [E.train(seed_config(cfg, s)) for s in SEEDS], repeat=1)
    bench_row(f"joma {name}: 12 seeds batched vs per-seed loop", loop / batched, "x speed-up", goal=">= 5",
              met=loop / batched >= 5, batched_s=batched, loop_s=loop, steps=cfg.steps)
    print(f"joma {name}: 12 seeds batched {batched:.3f} s, per-seed loop {loop:.3f} s, {loop / batched:.1f}x")
