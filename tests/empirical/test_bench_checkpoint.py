"""Checkpoint overhead of training, as time ratios against training without checkpoints
in the same run (skipped by default; `make bench`): the default time interval (every 60 s) must
cost under 5 %; the old default, a checkpoint at every logging step, is shown for comparison."""

import time

import pytest

from empirical import scb as escb
from theory import scb

pytestmark = pytest.mark.benchmark


def test_bench_checkpoint_overhead_ratio(benchmark, tmp_path):
    cfg = scb.SCBConfig(N=3, T=8, Q=2, batch=32, steps=4000, log_every=5)
    escb.train(cfg, device="cpu")  # warm
    plain = []

    def timed_plain():  # interleaved with the measured runs: the same load for both
        t0 = time.perf_counter()
        escb.train(cfg, device="cpu")
        plain.append(time.perf_counter() - t0)

    benchmark.pedantic(lambda: escb.train(cfg, device="cpu", checkpoint=tmp_path / "default", checkpoint_every=None),
                       setup=timed_plain, rounds=4, iterations=1)
    plain = min(plain)
    t0 = time.perf_counter()
    escb.train(cfg, device="cpu", checkpoint=tmp_path / "log", checkpoint_every=0)
    every_log = time.perf_counter() - t0
    ratio = benchmark.stats.stats.min / plain
    benchmark.extra_info.update({"plain_s": plain, "default_ratio": ratio, "every_log_step_ratio": every_log / plain})
    print(f"\ncheckpoint overhead ({cfg.steps} SCB steps): default (60 s) x{ratio:.3f}, "
          f"every logging step x{every_log / plain:.2f} (no checkpoints: {plain:.2f} s)")
