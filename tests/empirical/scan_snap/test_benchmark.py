"""Speed of the count-vector paths vs the sequence path (pytest-benchmark; `make bench`).

Reported as ratios against a baseline measured in the same run: the torch counts
path at T = 128 and 1024; the count engine (numba) at T = 128 and 4096
. The asserted parts are agreements (same loss on the same counts; multinomial
totals); the speeds go to ``extra_info`` and the speed table (``bench_row``). The Fig. 6 protocol's
benchmark is in tests/figures/scan_snap/test_fig6_benchmark.py."""

import timeit

import pytest
import torch

from empirical import scan_snap as es
from helpers.threads import one_blas_thread, one_torch_thread  # noqa: F401  (fixtures)
from theory import scan_snap as ss


@pytest.mark.benchmark
@pytest.mark.parametrize("T", [128, 1024])
def test_counts_vs_sequences_speed(benchmark, T):
    task = ss.make_task(ss.Config(T=T))
    g = torch.Generator().manual_seed(0)
    model = es.DirectYZ(task, 1, False, g)
    smp = es.Sampler(task, "cpu", g)

    def step(path):
        model.zero_grad(set_to_none=True)
        loss = es.loss_step(model, smp, 1, 128, path).sum()
        loss.backward()
        return loss

    step("sequences")  # warm-up
    seq = min(timeit.repeat(lambda: step("sequences"), number=5, repeat=3)) / 5
    benchmark(step, "counts")
    cnt = benchmark.stats.stats.min
    benchmark.extra_info["sequences_s"] = seq
    benchmark.extra_info["speed_ratio_sequences_over_counts"] = seq / cnt
    print(f"T={T}: sequences {seq*1e3:.2f} ms, counts {cnt*1e3:.2f} ms, ratio {seq/cnt:.2f}")
    n, q, x = smp.sequences(1, 16)
    c = es.counts_of(x, task.M_in)
    a = es.cross_entropy(model(model.mixture_from_sequences(x, q)), smp.label[n])
    b = es.cross_entropy(model(model.mixture_from_counts(c, q)), smp.label[n])
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.benchmark
@pytest.mark.parametrize("T", [128, 4096])
def test_count_engine_vs_sequences_speed(bench_row, benchmark, one_blas_thread, T):
    """Count-vector SGD step (numba kernels: multinomial counts, analytic gradient,
    momentum update; batch 128, one run) against the torch sequence path's loss + backward at the same T,
    measured in the same run. The engine draws its data ahead in blocks, so its time is the mean
    step of a 256-step run (refills included), best of 3. Asserted: the engine's counts are
    multinomial totals T - 1 (the sequence is never built)."""
    import numpy as np

    from empirical.scan_snap.fast import CountSGD

    task = ss.make_task(ss.Config(T=T))
    g = torch.Generator().manual_seed(0)
    model = es.DirectYZ(task, 1, False, g)
    smp = es.Sampler(task, "cpu", g)

    def seq_step():
        model.zero_grad(set_to_none=True)
        es.loss_step(model, smp, 1, 128, "sequences").sum().backward()

    seq_step()
    seq = min(timeit.repeat(seq_step, number=5, repeat=3)) / 5
    eng = CountSGD(task, [1.0], [1.0], batch=128, momentum=0.9, zero_init=False, rng=np.random.default_rng(0))
    steps = 256
    eng.run(steps)  # warm-up (tables built, first block drawn)
    benchmark.pedantic(eng.run, args=(steps,), rounds=3, iterations=1)
    cnt = benchmark.stats.stats.min / steps
    benchmark.extra_info.update({"sequences_s": seq, "speed_ratio_sequences_over_count_engine": seq / cnt,
                                 "goal_at_T128": 10.0})
    print(f"T={T}: sequences {seq*1e3:.2f} ms, count engine {cnt*1e3:.3f} ms, ratio {seq/cnt:.1f}")
    bench_row(f"scan-snap count engine vs sequences, T={T}", seq / cnt, "x", goal=">= 10x" if T == 128 else None,
              met=(seq / cnt >= 10) if T == 128 else None, seconds=cnt, baseline_seconds=seq)
    m = eng.sample()
    n, counts = m.per_sample()
    assert counts.shape == (1, 128, task.support(0).size) and np.all(counts.sum(-1) == T - 1)


@pytest.mark.benchmark
@pytest.mark.parametrize("setting", ["theory", "official"])
def test_seeds_batched_vs_per_seed_loop(bench_row, benchmark, one_blas_thread, one_torch_thread, setting):
    """The 12 seeds of one claim map point as one call of
    :func:`empirical.scan_snap.experiment.train_seeds` (the count engine, one generator per seed)
    against a loop over the row's train slot (the Trainer, one seed at a time: what a claim cell
    runs without a ``runs`` function), same config and logging, measured in the same run (best of
    2). ``theory``: the claims' setting (zero init, plain SGD, batch 64, T = 4096 count vectors,
    300 steps, logged every 10); ``official``: the Fig. 4 setting (T = 128, batch 128, momentum
    0.9, 50 steps). Asserted: the two give the same law (final common logit: the seed means agree
    within 4 standard errors), not the speed."""
    import numpy as np

    from empirical.scan_snap.experiment import run, train_seeds

    if setting == "theory":
        cfg = ss.Config.preset("theory", True, eta_Y=1.0, eta_Z=0.1, batch=64, steps=300, log_every=10)
    else:
        cfg = ss.Config.preset("official", True)
    seeds = list(range(12))

    def loop():
        return [run(cfg.replace(seed=s), device="cpu") for s in seeds]

    runs = loop()  # warm-up
    per_seed = min(timeit.repeat(loop, number=1, repeat=2))
    batched = benchmark.pedantic(train_seeds, args=(cfg,), kwargs={"seeds": seeds}, rounds=2, iterations=1,
                                 warmup_rounds=1)
    fast = benchmark.stats.stats.min
    ratio = per_seed / fast
    benchmark.extra_info.update({"per_seed_loop_s": per_seed, "speed_ratio": ratio, "goal": 5.0})
    print(f"{setting}: per-seed loop {per_seed:.2f} s, batched {fast:.3f} s, ratio {ratio:.1f}")
    bench_row(f"scan-snap 12 seeds batched vs per-seed loop ({setting})", ratio, "x", goal=">= 5x", met=ratio >= 5,
              seconds=fast, baseline_seconds=per_seed)
    a = batched["z_c"].values[:, -1]
    b = np.array([r["z_c"].values[-1] for r in runs])
    assert abs(a.mean() - b.mean()) <= 4 * np.sqrt(a.var(ddof=1) / 12 + b.var(ddof=1) / 12)
