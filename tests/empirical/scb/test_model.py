"""SCB model (empirical/scb/model.py): autograd gradients against the spec's per-sample formulas and
the exact population gradient."""

import numpy as np
import torch

from empirical import scb as escb
from helpers.scb import set_up_experiment as _setup
from theory import scb


def test_autograd_gradients_equal_spec_per_sample_formulas():
    """G_V = r (X a)^T, G_a(k) = X^T V^T r (docs/papers/scb.md §3.2), without dense one-hots in the model."""
    cfg = scb.SCBConfig(N=4, T=7, Q=2)
    exp = _setup(cfg)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        exp.model.V.copy_(torch.as_tensor(rng.normal(size=(4, 4))))
        exp.model.A.copy_(torch.as_tensor(rng.normal(size=(7, 4))))
    x, k, y = exp.sampler.sample(5)
    loss = escb.squared_loss(exp.model(x, k), y)
    loss.backward()
    V, A = exp.model.V.detach().numpy(), exp.model.A.detach().numpy()
    gV, gA = np.zeros_like(V), np.zeros_like(A)
    for b in range(5):
        X = np.eye(4)[:, x[b].numpy()]  # dense only in the test
        a = A[:, k[b]]
        r = V @ X @ a - np.eye(4)[y[b]]
        gV += np.outer(r, X @ a) / 5
        gA[:, k[b]] += X.T @ V.T @ r / 5
    assert np.allclose(exp.model.V.grad.numpy(), gV, atol=1e-12)
    assert np.allclose(exp.model.A.grad.numpy(), gA, atol=1e-12)


def test_large_batch_gradient_approaches_population_gradient():
    cfg = scb.SCBConfig(N=3, T=5, Q=2, attention="dirichlet")
    exp = _setup(cfg)
    rng = np.random.default_rng(1)
    V0, A0 = exp.task.P + 0.2 * rng.normal(size=(3, 3)), exp.task.Qm + 0.1
    with torch.no_grad():
        exp.model.V.copy_(torch.as_tensor(V0))
        exp.model.A.copy_(torch.as_tensor(A0))
    x, k, y = exp.sampler.sample(400_000)
    escb.squared_loss(exp.model(x, k), y).backward()
    gV, gA = scb.population_gradient(V0, A0, exp.task)
    assert np.max(np.abs(exp.model.V.grad.numpy() - gV)) < 0.01
    assert np.max(np.abs(exp.model.A.grad.numpy() - gA)) < 0.01
