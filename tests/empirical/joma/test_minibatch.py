"""empirical/joma/minibatch.py: minibatch SGD of the block, all seeds vectorised — equal to a plain
per-seed loop over the network, one step's covariance is lr^2 Cov_rows[g]/B (what the SDE's
increment has), and divergence leaves NaN."""

import numpy as np
import pytest
import torch

from empirical.joma.minibatch import sgd_seeds
from empirical.joma.model import JomaBlock
from helpers.joma import network_row_flows
from theory import ConfigError
from theory import joma as J


def _plain_loop(cfg, seed, steps):
    """One seed, the textbook way: its own generator, the module, autograd, p -= lr grad."""
    X, G = (torch.as_tensor(a) for a in J.make_data(cfg))
    W0, z0 = J.initial_parameters(cfg)
    net = JomaBlock(W0, z0, cfg.attention, cfg.activation, cfg.temperature)
    idx = torch.randint(0, cfg.N, (cfg.steps, cfg.batch), generator=torch.Generator().manual_seed(seed))
    for k in range(steps):
        loss = -(G[idx[k]] * net(X[idx[k]])).sum(1).mean()
        loss.backward()
        with torch.no_grad():
            for p in net.parameters():
                p -= cfg.lr * p.grad
                p.grad = None
    return net.reduced()


@pytest.mark.parametrize("attention,activation", [("exp", "linear"), ("softmax", "tanh")])
def test_batched_seeds_equal_a_plain_per_seed_loop(attention, activation):
    cfg = J.JomaConfig(attention=attention, activation=activation, Mc=4, K=3, d=7, lr=0.05, steps=30, log_every=30,
                       batch=2, init_scale=0.1)
    tr = sgd_seeds(cfg, seeds=[3, 0, 11])
    assert tr["z_1"].dims == ("seed", "time") and list(tr["seed"].values) == [3, 0, 11]
    np.testing.assert_array_equal(tr["time"].values, cfg.ode_times())
    for i, seed in enumerate((3, 0, 11)):
        z, V, s = _plain_loop(cfg, seed, cfg.steps)
        got = tr.isel(seed=i, time=-1)
        np.testing.assert_allclose([float(got[f"z_{l + 1}"]) for l in range(4)], z, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose([[float(got[f"v_{k + 1}_{l + 1}"]) for l in range(4)] for k in range(3)], V,
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose([float(got[f"s_{k + 1}"]) for k in range(3)], s, rtol=1e-12, atol=1e-14)


def test_one_step_covariance_is_lr2_cov_over_batch():
    """Over 4000 seeds, one SGD step from the initial state: mean ``lr f``, covariance
    ``lr^2 Cov_rows[g]/B`` of the network's per-row gradients (z < 5 per entry)."""
    cfg = J.JomaConfig(Mc=3, K=2, N=3, d=6, gradient="random", lr=0.1, steps=1, log_every=1, batch=2,
                       init_scale=0.4)
    tr = sgd_seeds(cfg, seeds=range(4000))
    names = J.state_names(3, 2)
    Y = np.stack([tr[n].values for n in names], -1)  # (seeds, 2, dim)
    inc = Y[:, 1] - Y[:, 0]
    X, G = J.make_data(cfg)
    W0, z0 = J.initial_parameters(cfg)
    F = network_row_flows("exp", "linear", X, G, W0[:3].T, W0[3], z0, 1.0, d=6)
    cov = cfg.lr**2 * (F - F.mean(0)).T @ (F - F.mean(0)) / 3 / cfg.batch
    P = inc.shape[0]
    np.testing.assert_allclose(inc.mean(0), cfg.lr * F.mean(0), atol=6 * np.sqrt(cov.diagonal().max() / P))
    se = np.sqrt((np.outer(cov.diagonal(), cov.diagonal()) + cov**2) / P) + 1e-18
    assert np.max(np.abs(np.cov(inc.T) - cov) / se) < 5


def test_divergence_leaves_nan_and_other_variants_are_refused():
    cfg = J.JomaConfig(lr=0.5, steps=400, log_every=20)  # t = 200, far past the blow-up (t ~ 16)
    tr = sgd_seeds(cfg, seeds=[0, 1])
    v = tr["v_1_1"].values
    assert np.isfinite(v[:, 0]).all() and np.isnan(v[:, -1]).all()
    with pytest.raises(ConfigError, match="variant"):
        sgd_seeds(J.JomaConfig(variant="ce"), seeds=[0])


def test_without_replacement_one_step_covariance_has_the_finite_population_factor():
    """``replacement=False``: B distinct rows per step, so one step's covariance is
    ``(N - B)/(N - 1)`` times the i.i.d. one (zero for B = N: full batch, no noise)."""
    cfg = J.JomaConfig(Mc=3, K=2, N=3, d=6, gradient="random", lr=0.1, steps=1, log_every=1, batch=2,
                       init_scale=0.4, replacement=False)
    names = J.state_names(3, 2)
    tr = sgd_seeds(cfg, seeds=range(3000))
    inc = np.stack([tr[n].values[:, 1] - tr[n].values[:, 0] for n in names], 1)
    X, G = J.make_data(cfg)
    W0, z0 = J.initial_parameters(cfg)
    F = network_row_flows("exp", "linear", X, G, W0[:3].T, W0[3], z0, 1.0, d=6)
    cov = cfg.lr**2 * (F - F.mean(0)).T @ (F - F.mean(0)) / 3 / 2 * (3 - 2) / (3 - 1)
    se = np.sqrt((np.outer(cov.diagonal(), cov.diagonal()) + cov**2) / inc.shape[0]) + 1e-18
    assert np.max(np.abs(np.cov(inc.T) - cov) / se) < 5
    full = sgd_seeds(cfg.replace(batch=3), seeds=range(4))
    v = full["v_1_1"].values
    np.testing.assert_allclose(v, v[:1].repeat(4, 0), rtol=0, atol=1e-15)  # every seed takes the full batch
    with pytest.raises(ConfigError, match="distinct"):
        sgd_seeds(cfg.replace(batch=4), seeds=[0])
