"""empirical/joma/update.py: the one update rule (optax style) is torch.optim.Adam bit for bit, the
numpy and torch paths agree, and every JoMA engine steps with it."""

import numpy as np
import pytest
import torch

from empirical import joma as E
from theory import joma as J


def _adam_config(lr=0.01, wd=0.01):
    return J.JomaConfig(variant="hier", lr=lr, wd=wd)


def test_adam_rule_is_torch_adam_bit_for_bit():
    """update.py's Adam (xp=torch) against torch.optim.Adam(lr, weight_decay) on the same float32
    tensors and gradients, 6 steps: identical bits (the hier runs are unchanged by the move)."""
    from empirical.joma import update

    g = torch.Generator().manual_seed(3)
    params = [torch.randn(5, 4, generator=g), torch.randn(7, generator=g)]
    ref = [p.clone().requires_grad_(True) for p in params]
    opt = torch.optim.Adam(ref, lr=0.01, weight_decay=0.01)
    cfg = _adam_config()
    state, mine = update.init(params, config=cfg, xp=torch), params
    for _ in range(6):
        grads = [torch.randn(p.shape, generator=g) for p in params]
        for r, gr in zip(ref, grads):
            r.grad = gr.clone()
        opt.step()
        mine, state = update.update(grads, state, mine, config=cfg, xp=torch)
        for r, m in zip(ref, mine):
            assert torch.equal(r.detach(), m)
    assert state["step"] == 6 and torch.equal(state["v"][1], opt.state[ref[1]]["exp_avg_sq"])


@pytest.mark.parametrize("variant", ["fixed", "hier"])
def test_update_rule_numpy_equals_torch(variant):
    """The same pure rule with xp=numpy and xp=torch (float64) agrees to rounding over 5 steps;
    SGD is p - lr g exactly (a closed form)."""
    from empirical.joma import update

    cfg = _adam_config() if variant == "hier" else J.JomaConfig(lr=0.3)
    rng = np.random.default_rng(0)
    p_np = [rng.standard_normal((3, 2)), rng.standard_normal(4)]
    p_t = [torch.tensor(p) for p in p_np]
    s_np, s_t = update.init(p_np, config=cfg, xp=np), update.init(p_t, config=cfg, xp=torch)
    for _ in range(5):
        grads = [rng.standard_normal(p.shape) for p in p_np]
        new_np, s_np = update.update(grads, s_np, p_np, config=cfg, xp=np)
        new_t, s_t = update.update([torch.tensor(g) for g in grads], s_t, p_t, config=cfg, xp=torch)
        if variant == "fixed":
            for p, g, q in zip(p_np, grads, new_np):
                np.testing.assert_array_equal(q, p - 0.3 * g)
        p_np, p_t = new_np, new_t
        for a, b in zip(p_np, p_t):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-13, atol=1e-15)
    assert update.rule(cfg) == ("adam" if variant == "hier" else "sgd")


def test_every_engine_steps_with_the_update_rule(monkeypatch):
    """Each experiment's step moves its parameters exactly as the pure rule does from the gradients
    of that step (no other update, no other learning rate), SGD or Adam by variant."""
    from empirical.joma import update

    for cfg in (J.JomaConfig(steps=3), J.JomaConfig.preset("headline", Mc=5, K=3, d=7, n_per_class=6, seq_len=5),
                J.JomaConfig.preset("probe"), J.JomaConfig(variant="hblt", hblt_samples=32),
                J.JomaConfig.preset("hier", width=8, hidden=6, n_test=16, batch=8)):
        exp = E.experiment(cfg)
        exp.setup(torch.device("cpu"), torch.Generator().manual_seed(0))
        exp.step(0)  # Adam's state is non-trivial from the second step on
        params = [p.detach().clone() for p in exp.model.parameters()]
        state = {k: ([t.clone() for t in v] if isinstance(v, list) else v) for k, v in exp.update_state.items()}
        grads, step_ = [], update.step_
        monkeypatch.setattr(update, "step_", lambda m, st, c: grads.extend(p.grad.clone() for p in m.parameters())
                            or step_(m, st, c))
        exp.step(1)
        monkeypatch.undo()
        assert len(grads) == len(params) > 0
        want, _ = update.update(grads, state, params, config=cfg, xp=torch)
        for p, w, q in zip(exp.model.parameters(), want, params):
            assert torch.equal(p.detach(), w) and not torch.equal(w, q), exp.name
        assert update.rule(exp.config) == ("adam" if cfg.variant == "hier" else "sgd")
