"""empirical/scan_snap/data.py: the count-vector sampler draws Multinomial(T - 1, P(.|n))."""

import numpy as np
import torch

from empirical import scan_snap as es
from theory import scan_snap as ss


def _model(task, R=1, zero=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return es.DirectYZ(task, R, zero, g), es.Sampler(task, "cpu", g)


def test_count_sampler_is_multinomial():
    cfg = ss.Config(T=200)
    task = ss.make_task(cfg)
    _, smp = _model(task)
    n, q, c = smp.counts(4, 4000)
    assert torch.all(c.sum(-1) == cfg.T - 1)
    P = torch.as_tensor(task.P)[n]
    assert torch.all(c[P == 0] == 0)
    # mean and variance of each count vs Multinomial(T-1, P): z-scores of the means
    for k in range(task.K):
        sel = c[n == k]
        p = torch.as_tensor(task.P[k])
        N = sel.shape[0]
        mean, var = (cfg.T - 1) * p, (cfg.T - 1) * p * (1 - p)
        on = p > 0
        z = (sel.mean(0) - mean)[on] / torch.sqrt(var[on] / N)
        assert float(z.abs().max()) < 4.5
        np.testing.assert_allclose(sel.var(0)[on].numpy(), var[on].numpy(), rtol=0.12)
    assert torch.all(q == torch.as_tensor(task.query)[n])
