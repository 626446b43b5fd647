"""SCB data (empirical/scb/data.py): the sampler follows the generative process of docs/papers/scb.md §1.2."""

import numpy as np

from helpers.scb import set_up_experiment as _setup
from theory import scb


def test_sampler_follows_the_generative_process():
    cfg = scb.SCBConfig(N=3, T=6, Q=2, attention="dirichlet", task_seed=2)
    exp = _setup(cfg)
    x, k, y = exp.sampler.sample(200_000)
    task = exp.task
    freq = np.bincount(x.numpy().ravel(), minlength=3) / x.numel()
    assert np.allclose(freq, task.mu, atol=4 * np.sqrt(0.25 / x.numel()))
    # E[y | X, k] = P X q^(k): averaged over samples with query k, P(y) = P (X q)
    for kk in range(3):
        sel = (k == kk).numpy()
        Xq = np.zeros(3)
        xs = x.numpy()[sel]
        for t in range(task.T):
            Xq += task.Qm[t, kk] * np.bincount(xs[:, t], minlength=3) / sel.sum()
        expected = task.P @ Xq
        got = np.bincount(y.numpy()[sel], minlength=3) / sel.sum()
        assert np.allclose(got, expected, atol=4 * np.sqrt(0.25 / sel.sum()))
