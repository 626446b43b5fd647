"""empirical/scan_snap/update.py: the update rule equals torch.optim's SGD and Adam, is pure and
the same in numpy and torch, and the compiled count engine's kernel equals it."""

import numpy as np
import pytest
import torch

from empirical import scan_snap as es
from theory import scan_snap as ss


class _Rule:
    """The update rule (``empirical.scan_snap.update``) stepping torch Parameters, as the engines do."""

    def __init__(self, params: dict, lr: float, method: str, momentum: float):
        self.params, self.state = params, es.update.init(params, xp=torch)
        lrs = {k: torch.tensor([lr], dtype=torch.float64).view(-1, 1, 1) for k in params}
        self.hyper = {"lr": lrs, "method": method, "momentum": momentum}

    def step(self):
        self.state = es.update.step_torch(self.params, self.state, **self.hyper)


@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_optimiser_matches_torch(method):
    torch.manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(1, 4, 5, dtype=torch.float64))
    p2 = torch.nn.Parameter(p1.detach().clone())
    ours = _Rule({"Y": p1}, 0.3, method, 0.9)
    ref = (torch.optim.SGD([p2], lr=0.3, momentum=0.9) if method == "sgd" else torch.optim.Adam([p2], lr=0.3))
    for _ in range(7):
        g = torch.randn_like(p1)
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert float((p1 - p2).abs().max()) < 1e-12


def test_adam_uses_momentum_as_beta1():
    # Adam's beta1 is the config's momentum (every setting reaches every variant)
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(1, 3, 3, generator=g, dtype=torch.float64))
    q = torch.nn.Parameter(p.detach().clone())
    ours = _Rule({"p": p}, 0.1, "adam", 0.5)
    ref = torch.optim.Adam([q], lr=0.1, betas=(0.5, 0.999), eps=1e-8)
    for _ in range(4):
        gr = torch.randn(1, 3, 3, generator=g, dtype=torch.float64)
        p.grad, q.grad = gr.clone(), gr.clone()
        ours.step()
        ref.step()
    np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_update_rule_is_pure_and_the_same_in_numpy_and_torch(method):
    """``update`` leaves its inputs alone and gives the same numbers with xp=numpy and xp=torch
    (per-run learning rates (R, 1, 1) broadcast over the parameters)."""
    rng = np.random.default_rng(5)
    params = {"Y": rng.normal(size=(3, 4, 5)), "Z": rng.normal(size=(3, 4, 4))}
    lr = {"Y": np.array([0.1, 0.2, 0.3])[:, None, None], "Z": np.array([1.0, 0.5, 0.25])[:, None, None]}
    tp = {k: torch.as_tensor(v) for k, v in params.items()}
    tlr = {k: torch.as_tensor(v) for k, v in lr.items()}
    sn, st = es.update.init(params), es.update.init(tp, xp=torch)
    for _ in range(4):
        grads = {k: rng.normal(size=v.shape) for k, v in params.items()}
        before = {k: v.copy() for k, v in params.items()}
        params, sn = es.update.update(grads, sn, params, lr=lr, method=method, momentum=0.8)
        tp, st = es.update.update({k: torch.as_tensor(v) for k, v in grads.items()}, st, tp, lr=tlr, method=method,
                                  momentum=0.8, xp=torch)
        assert not any(np.array_equal(before[k], params[k]) for k in params)  # a new value, the old one kept
    assert sn["step"] == st["step"] == 4
    for k in params:
        np.testing.assert_allclose(tp[k].numpy(), params[k], rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_maximize_is_descent_on_the_negated_gradient(method):
    """``maximize=True`` on ``g`` (ascent, as the jax engines step on dJ) = descent on ``-g``."""
    rng = np.random.default_rng(7)
    p0 = rng.normal(size=(2, 3))
    up = down = {"p": p0}
    s_up = s_down = es.update.init(up)
    hyper = {"lr": {"p": 0.3}, "method": method, "momentum": 0.7}
    for _ in range(5):
        g = {"p": rng.normal(size=(2, 3))}
        up, s_up = es.update.update(g, s_up, up, maximize=True, **hyper)
        down, s_down = es.update.update({"p": -g["p"]}, s_down, down, **hyper)
    np.testing.assert_allclose(up["p"], down["p"], rtol=1e-13, atol=1e-14)
    assert np.abs(up["p"] - p0).max() > 0.1  # the parameters moved


def test_count_engine_kernel_equals_the_update_rule():
    """The compiled count-vector engine's momentum kernel is the update rule (SGD on -grad J): three
    steps of the engine on its batches = three steps of ``update`` on the same batches' gradients."""
    from empirical.scan_snap.fast import CountSGD

    task = ss.make_task(ss.Config(num_last=2, num_next_per_last=2, T=64))
    lr_Y, lr_Z = np.array([1.0, 2.0]), np.array([0.5, 3.0])
    eng = CountSGD(task, lr_Y, lr_Z, batch=16, momentum=0.9, zero_init=False, rng=np.random.default_rng(2))
    params = {"Y": eng.Y.copy(), "Z": eng.Z.copy()}
    Z0, state = eng.Z.copy(), es.update.init(params)
    hyper = {"lr": {"Y": lr_Y[:, None, None], "Z": lr_Z[:, None, None]}, "method": "sgd", "momentum": 0.9,
             "maximize": True}
    for _ in range(3):
        batch = eng.sample()
        gY, gZ = eng.gradient(batch)  # ascent gradient of J at the engine's current parameters
        params, state = es.update.update({"Y": gY, "Z": gZ}, state, params, **hyper)
        eng.step(batch)
        np.testing.assert_allclose(eng.Y, params["Y"], rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(eng.Z, params["Z"], rtol=1e-14, atol=1e-15)
    assert np.abs(eng.Z - Z0).max() > 1e-2  # the attention moved (a non-trivial check)
