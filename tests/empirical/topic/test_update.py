"""empirical.topic.update: the pure update rule against torch.optim (bit for bit with xp=torch),
numpy against torch, and Adam's first step against its closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from empirical.topic import update
from theory import topic as th

SHAPES = {"W_V": (5, 5), "b": (5,), "W_K": (3, 5)}


def _draws(n_steps: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    params = {k: torch.randn(s, generator=g, dtype=torch.float64) for k, s in SHAPES.items()}
    grads = [{k: torch.randn(s, generator=g, dtype=torch.float64) for k, s in SHAPES.items()} for _ in range(n_steps)]
    return params, grads


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.37), ("adam", 0.03)])
def test_torch_path_is_torch_optim_bit_for_bit(optimizer, lr):
    cfg = th.TopicConfig(optimizer=optimizer, lr=lr)
    params, grads = _draws(6)
    mine, state = dict(params), update.init(params, config=cfg, xp=torch)
    ref = {k: p.clone().requires_grad_(True) for k, p in params.items()}
    opt_cls = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    opt = opt_cls(list(ref.values()), lr=lr, foreach=False)
    for g in grads:
        mine, state = update.update(g, state, mine, config=cfg, xp=torch)
        for k, p in ref.items():
            p.grad = g[k].clone()
        opt.step()
        for k in SHAPES:
            assert torch.equal(mine[k], ref[k].detach()), k
    assert state["step"] == len(grads)


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.37), ("adam", 0.03)])
def test_numpy_equals_torch_and_nothing_changes_in_place(optimizer, lr):
    cfg = th.TopicConfig(optimizer=optimizer, lr=lr)
    params, grads = _draws(6, seed=1)
    tp, ts = dict(params), update.init(params, config=cfg, xp=torch)
    npp = {k: p.numpy().copy() for k, p in params.items()}
    before = {k: a.copy() for k, a in npp.items()}
    first = dict(npp)
    ns = update.init(npp, config=cfg, xp=np)
    for g in grads:
        tp, ts = update.update(g, ts, tp, config=cfg, xp=torch)
        npp, ns = update.update({k: x.numpy() for k, x in g.items()}, ns, npp, config=cfg, xp=np)
    for k in SHAPES:
        np.testing.assert_allclose(npp[k], tp[k].numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(first[k], before[k])  # pure: the inputs are untouched


def test_adam_first_step_and_sgd_closed_forms():
    """Adam's bias-corrected first step is ``-lr g/(|g| + eps)``; SGD's is ``-lr g``."""
    params, grads = _draws(1, seed=2)
    p = {k: x.numpy() for k, x in params.items()}
    g = {k: x.numpy() for k, x in grads[0].items()}
    adam = th.TopicConfig(optimizer="adam", lr=0.01)
    new, state = update.update(g, update.init(p, config=adam), p, config=adam)
    for k in SHAPES:
        np.testing.assert_allclose(new[k] - p[k], -0.01 * g[k] / (np.abs(g[k]) + update.ADAM_EPS), rtol=1e-9)
        np.testing.assert_allclose(state["v"][k], (1 - update.ADAM_BETAS[1]) * g[k] ** 2, rtol=1e-12)
    sgd = th.TopicConfig(optimizer="sgd", lr=0.2)
    new, _ = update.update(g, update.init(p, config=sgd), p, config=sgd)
    for k in SHAPES:
        np.testing.assert_allclose(new[k], p[k] - 0.2 * g[k], rtol=1e-15, atol=1e-15)
