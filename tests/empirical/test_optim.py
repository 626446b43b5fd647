"""empirical.optim.adam, the one Adam: torch.optim.Adam's numbers bit for bit with torch arrays, the
same to rounding with numpy, lists or dicts of parameters, one rate or one per parameter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from empirical.optim import adam


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    target = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=5)}
    start = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=5)}
    return target, start


def _grads(params, target, xp):
    """The gradient of sum (p - target)^3 / 3 + (p - target): nonlinear, so the steps differ."""
    return {k: (p - (xp.as_tensor(target[k]) if xp is torch else target[k])) ** 2 + 1.0 for k, p in params.items()}


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_torch_arrays_give_torch_optim_adam_bit_for_bit(weight_decay):
    target, start = _problem()
    rates = {"a": 1e-2, "b": 3e-3}
    ref = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in start.items()}
    opt = torch.optim.Adam([{"params": [ref[k]], "lr": rates[k]} for k in ref], betas=(0.9, 0.999), eps=1e-8,
                           weight_decay=weight_decay, foreach=False)
    rule = adam(rates, weight_decay=weight_decay, xp=torch)
    params = {k: torch.tensor(v, dtype=torch.float64) for k, v in start.items()}
    state = rule.init(params)
    for _ in range(25):
        g = _grads({k: p.detach() for k, p in ref.items()}, target, torch)
        for k, p in ref.items():
            p.grad = g[k].clone()
        opt.step()
        params, state = rule.update(_grads(params, target, torch), state, params)
    assert state["step"] == 25
    for k in ref:
        assert torch.equal(params[k], ref[k].detach()), k  # bit for bit


def test_numpy_equals_torch_to_rounding_and_lists_work_as_dicts():
    target, start = _problem(1)
    out = {}
    for xp in (np, torch):
        rule = adam(2e-2, weight_decay=0.05, xp=xp)
        params = [xp.asarray(start[k]) if xp is np else torch.tensor(start[k]) for k in ("a", "b")]
        state = rule.init(params)
        for _ in range(40):
            g = _grads(dict(zip("ab", params)), target, xp)
            params, state = rule.update([g["a"], g["b"]], state, params)
        assert isinstance(params, list) and isinstance(state["m"], list)
        out[xp.__name__] = [np.asarray(p) for p in params]
    for a, b in zip(out["numpy"], out["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    moved = [np.abs(a - start[k]).max() for a, k in zip(out["numpy"], "ab")]
    assert min(moved) > 1e-3  # the steps did move the parameters (the check above is not vacuous)


def test_hyperparameters_are_bound_when_the_rule_is_built():
    rule = adam(0.1, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.lr = 0.2
    p = {"w": np.array([1.0, -2.0])}
    new, state = rule.update({"w": np.array([0.5, 0.5])}, rule.init(p), p)
    # first step: m = 0.2 g, v = 0.01 g^2; bias-corrected m/sqrt(v) = sign(g): p - lr sign(g) (eps aside)
    np.testing.assert_allclose(new["w"], p["w"] - 0.1 * 0.5 / (0.5 + 1e-6), rtol=1e-12)
    assert p["w"].tolist() == [1.0, -2.0] and state["step"] == 1  # nothing modified in place
