"""Speed of the count-vector path vs the sequence path (pytest-benchmark; `make bench`).

Reported as a ratio against the sequence path measured in the same run (DEVELOPERS.md), at
T = 128 and T = 1024 (issue 3, criterion 3). The asserted part is that both paths compute the same
loss on the same counts; the speed is recorded in ``extra_info``."""

import timeit

import pytest
import torch

from empirical import scan_snap as es
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
