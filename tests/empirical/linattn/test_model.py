"""linattn's network (empirical/linattn/model.py): the attention on token matrices against the two-layer
cubic-feature network (spec §2), the data against the population loss (a Monte-Carlo check), and autograd of the
torch model's expected loss against the derived flow (theory/linattn/derive.py)."""

import itertools

import numpy as np
import pytest
import torch

from empirical.linattn.data import sequences
from empirical.linattn.model import LinearAttention, expected_loss, two_layer_cubic
from theory.linattn import LinAttnConfig
from theory.linattn.derive import assignment, merged_system, separate_system


def _fresh(cfg, batch, seed):
    g = torch.Generator().manual_seed(seed)
    Z, yq = sequences(cfg.lams, cfg.N, batch, g)
    return Z[None], yq[None]


def _trained(cfg, seeds=(0,)):
    """Parameters after a short full-batch GD run from a random start (off the diagonal set)."""
    from empirical.linattn.experiment import _Engine, _stack
    from empirical.seeds import SeedBatch

    rng = SeedBatch(seeds)
    engine = _Engine(cfg, lambda fn: _stack([fn(g) for g in rng.generators]))
    for _ in range(cfg.steps):
        engine.step()
    return engine.model


@pytest.mark.parametrize("variant", ["merged", "separate"])
def test_trained_attention_equals_the_two_layer_cubic_network(variant):
    cfg = LinAttnConfig(variant=variant, D=3, N=8, H=2, lams=(1.0, 0.7, 0.3), init_kind="random", init=0.5,
                        mode="gd", samples=64, steps=30, lr=0.1, **({"R": 2} if variant == "separate" else {}))
    model = _trained(cfg, seeds=(0, 1))
    with torch.no_grad():
        kq = model.key_query()
        assert torch.linalg.matrix_norm(kq - torch.diag_embed(torch.diagonal(kq, dim1=-2, dim2=-1))).min() > 1e-2
        W1, w2 = kq.flatten(-2), model.v                                  # first layer vec(U_h), second v_h
        Z, _ = _fresh(cfg, 32, seed=5)
        Z = Z.expand(2, -1, -1, -1)
        np.testing.assert_allclose(model(Z).numpy(), two_layer_cubic(W1, w2, Z).numpy(), rtol=1e-12, atol=1e-13)


def test_sampled_loss_matches_the_population_loss():
    """The data generator and the attention's forward pass against the closed-form loss, within 5 SE."""
    cfg = LinAttnConfig(variant="separate", D=3, N=5, H=2, R=2, lams=(1.5, 0.8, 0.4), init_kind="random", init=0.6)
    g = torch.Generator().manual_seed(0)
    from empirical.linattn.experiment import initial_parameters

    model = LinearAttention({k: v[None] for k, v in initial_parameters(cfg, g).items()}, merged=False)
    Z, yq = _fresh(cfg, 200_000, seed=1)
    with torch.no_grad():
        err = 0.5 * (yq - model(Z)) ** 2
        want = float(expected_loss(model.gamma(), cfg.lams, cfg.N)[0])
    assert abs(float(err.mean()) - want) < 5 * float(err.std()) / np.sqrt(err.numel())


def test_autograd_of_the_expected_loss_equals_the_derived_flow():
    D, H, R, N = 3, 3, 2, 9.0
    lam = np.array([1.3, 0.9, 0.4])
    rng = np.random.default_rng(3)
    # merged: diagonal U_h
    v, u = rng.normal(size=H), rng.normal(size=(H, D))
    model = LinearAttention({"v": torch.tensor(v)[None], "U": torch.diag_embed(torch.tensor(u))[None]}, True)
    expected_loss(model.gamma(), lam, N).sum().backward()
    want = -np.concatenate([np.r_[model.v.grad[0, h], torch.diagonal(model.U.grad[0, h]).numpy()] for h in range(H)])
    got = merged_system(D, H).to_numpy()(0.0, np.concatenate([np.r_[v[h], u[h]] for h in range(H)]), np.r_[lam, N])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # separate: rows on the assigned components
    comp = assignment(D, H, R)
    a, b = rng.normal(size=(H, R)), rng.normal(size=(H, R))
    K, Q = np.zeros((H, R, D)), np.zeros((H, R, D))
    for h, r in itertools.product(range(H), range(R)):
        K[h, r, comp[h][r]], Q[h, r, comp[h][r]] = a[h, r], b[h, r]
    model = LinearAttention({"v": torch.tensor(v)[None], "K": torch.tensor(K)[None], "Q": torch.tensor(Q)[None]},
                            False)
    expected_loss(model.gamma(), lam, N).sum().backward()
    gK, gQ = model.K.grad[0].numpy(), model.Q.grad[0].numpy()
    want = -np.concatenate([np.r_[model.v.grad[0, h], [gK[h, r, comp[h][r]] for r in range(R)],
                                  [gQ[h, r, comp[h][r]] for r in range(R)]] for h in range(H)])
    y = np.concatenate([np.r_[v[h], a[h], b[h]] for h in range(H)])
    np.testing.assert_allclose(separate_system(D, H, R).to_numpy()(0.0, y, np.r_[lam, N]), want, rtol=1e-10,
                               atol=1e-12)
