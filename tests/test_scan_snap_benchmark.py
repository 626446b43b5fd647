"""Speed of the count-vector paths vs the sequence path, and of the Fig. 6 protocol (pytest-benchmark;
`make bench`).

Reported as ratios against a baseline measured in the same run (DEVELOPERS.md): the torch counts
path at T = 128 and 1024 (issue 3, criterion 3); the count engine (numba) at T = 128 and 4096, and the
Fig. 6 protocol on it through the sweep runner against the torch grid (issue 11, item 2). The
asserted parts are agreements (same loss on the same counts; multinomial totals; the two Fig. 6
tables within seed noise); the speeds go to ``extra_info`` and the speed table (``bench_row``)."""

import timeit

import pytest
import torch

from empirical import scan_snap as es
from empirical.trainer import torch_threads
from theory import scan_snap as ss


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Both paths single-threaded (as the Trainer runs them): on a loaded 2-core machine torch's
    intra-op threads make the torch timings noisy and unfair to compare."""
    with torch_threads(1):
        yield


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


@pytest.fixture()
def one_blas_thread():
    """numpy's BLAS single-threaded too (the torch side runs on one thread): a fair ratio."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        yield


@pytest.mark.benchmark
@pytest.mark.parametrize("T", [128, 4096])
def test_count_engine_vs_sequences_speed(bench_row, benchmark, one_blas_thread, T):
    """Issue 11 item 2: count-vector SGD step (numba kernels: multinomial counts, analytic gradient,
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
def test_fig6_protocol_new_vs_old(bench_row, benchmark, one_blas_thread, tmp_path):
    """Issue 11 item 2: the Fig. 6 protocol (spec §5.4: 4 panels x 4 eta_Z x 4 ratios, 100 steps,
    float64) at 2 seeds instead of 10 (the full one takes minutes on the old path): new = the sweep
    runner's cells on the count-vector engine (:mod:`figures.scan_snap.fig6`, one process, fresh
    store), old = the torch grid per panel as before (:func:`empirical.scan_snap.experiment.train_grid`, float64,
    one thread). Both single-threaded, measured in this run. Asserted: both tables show the
    protocol's grid with 2 runs per cell and their DT entropies agree within seed noise (5 standard
    errors of the difference, per cell, or 0.1 nats)."""
    import time

    import numpy as np
    import pandas as pd

    from figures.scan_snap.fig6 import FIG6_GRID, fig6_config, fig6_table

    seeds = 2
    t0 = time.perf_counter()
    old = []
    for nl in FIG6_GRID["num_last"]:
        cfg = fig6_config(nl, 0.5).replace(seed=nl)
        res = es.train_grid(cfg, list(FIG6_GRID["eta_Z"]), list(FIG6_GRID["ratio"]), seeds, device="cpu",
                            dtype=torch.float64)
        df = pd.DataFrame({"eta_Z": res["eta_Z"], "ratio": res["ratio"], "entropy": res["final"]["dt_entropy"]})
        g = df.groupby(["eta_Z", "ratio"])["entropy"].agg(["mean", "std", "count"]).reset_index()
        g.insert(0, "num_last", nl)
        old.append(g)
    t_old = time.perf_counter() - t0
    old = pd.concat(old, ignore_index=True)
    new = benchmark.pedantic(lambda: fig6_table(seeds=seeds, store=tmp_path / f"s{time.monotonic_ns()}"),
                             rounds=1, iterations=1)
    t_new = benchmark.stats.stats.min
    ratio = t_old / t_new
    print(f"Fig. 6 at {seeds} seeds: old {t_old:.1f} s, new {t_new:.1f} s, ratio {ratio:.2f}")
    bench_row(f"Fig. 6 protocol at {seeds}/10 seeds: new vs old", ratio, "x", goal=">= 2x", met=ratio >= 2,
              seconds=t_new, baseline_seconds=t_old, seeds=seeds)
    m = new.merge(old, on=["num_last", "eta_Z", "ratio"], suffixes=("", "_old"))
    assert len(m) == 64 and set(m["count"]) == set(m["count_old"]) == {seeds}
    se = np.sqrt((m["std"] ** 2 + m["std_old"] ** 2) / seeds)
    assert np.all(np.abs(m["mean"] - m["mean_old"]) <= np.maximum(5 * se, 0.1))
