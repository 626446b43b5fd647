"""JoMA trained networks vs theory (papers/joma.md §2, §3, §5): the real block's autograd gradient is
the derived flow; trained toys keep the invariant, show NC(zhat, z) > 0.9, drop-then-bounce, and
HBLT learning order."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from empirical import joma as E
from theory import joma as J


@pytest.mark.parametrize("kind", J.KINDS)
@pytest.mark.parametrize("activation", ["linear", "tanh"])
def test_network_gradient_is_the_derived_block_flow(kind, activation):
    """-grad of the fixed-g loss of the torch block, in reduced coordinates, equals the sympy rhs."""
    cfg = J.JomaConfig(kind=kind, activation=activation, Mc=3, K=2, N=2, d=5, init_scale=0.4,
                       gradient="random", temperature=0.8)
    exp = E.BlockExperiment(cfg, "fixed")
    exp.setup(torch.device("cpu"), torch.Generator())
    exp.loss().backward()
    m = exp.model
    Mc = cfg.Mc
    gW = -m.W.grad.numpy()
    got = np.concatenate([-m.z.grad.numpy(), gW[:Mc].T.ravel(), gW[Mc]])
    sysm = J.block_system(kind, activation, 3, 2, 2)
    y = sysm.state_vector(J.block_initial_state(cfg))
    want = sysm.to_numpy()(0.0, y, sysm.parameter_vector(J.block_parameters(cfg)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert np.all(gW[Mc + 1:] == 0)  # the null space of the embeddings never moves


def test_trained_exp_toy_keeps_invariant_within_1e3():
    cfg = J.JomaConfig()  # exp attention, equal learning rates, SGD lr 0.005, zero init (c = 0)
    traj, _ = E.train_block(cfg, "fixed")
    inv = np.stack([traj[f"invariant_{l + 1}"].values for l in range(cfg.Mc)])
    z = np.stack([traj[f"z_{l + 1}"].values for l in range(cfg.Mc)])
    assert np.abs(z).max() > 0.3  # attention actually moved
    drift = np.abs(inv - inv[:, :1]).max() / np.abs(z).max()
    assert drift < 1e-3, drift


def test_softmax_toy_nc_stays_above_09_gaussian():
    """Official Figs. 2-3 toy (softmax, T = 0.5, CE, SGD lr 0.1, 2000 iterations, Gaussian X)."""
    traj, _ = E.train_block(E.toy_config("gaussian"), "ce")
    assert traj["minibatch_loss"].values[-1] < 0.9 * traj["minibatch_loss"].values[1]  # it learns
    nc = traj["nc_zhat_z"].values
    assert nc.min() > 0.9, nc.min()
    # the stricter NC of the changes since init (spec §5 recommended metric), reported
    assert np.nanmin(traj["nc_change"].values[5:]) > 0.8


def test_trained_converging_toy_entropy_drops_then_bounces():
    traj, _ = E.train_probe(steps=4000)
    H = traj["attention_entropy"].values
    assert H[0] == pytest.approx(math.log(10))
    assert J.drops_then_bounces(H, tol=1e-9)
    assert len(J.slope_sign_changes(H, tol=1e-9)) == 1
    assert H.min() < H[-1] - 0.02  # a visible bounce


def test_hblt_sampler_matches_theorem5_cooccurrence():
    cfg = J.JomaConfig(depth=3, branching=2, rho=0.6, p_top=0.7)
    Y = E.hblt_sample(cfg, 200_000, np.random.default_rng(0))
    H = J.hblt_leaf_lca_heights(3, 2, 0)
    on = Y[:, 0] == 1
    for h in (1, 2, 3):
        l = int(np.nonzero(H == h)[0][0])
        p_hat = Y[on, l].mean()
        # LCA at height h sits at tree level depth - h; its spin mean is rho^(depth-h-1) * rho0
        rho0 = cfg.rho ** (3 - h - 1) * (2 * cfg.p_top - 1) if h < 3 else None
        if rho0 is None:  # LCA = root: the two top-level subtrees are independent
            p = (1 + cfg.rho ** 2 * (2 * cfg.p_top - 1)) / 2
        else:
            p = J.cooccurrence_probability(cfg.rho, h, rho0)
        se = math.sqrt(p * (1 - p) / on.sum())
        assert abs(p_hat - p) < 5 * se, (h, p_hat, p)


def test_hblt_learning_order_lowest_lca_first():
    """Criterion 5: tokens whose LCA with the query is lowest reach half their final attention
    change strictly earlier on average than tokens whose LCA is the root."""
    cfg = J.JomaConfig(depth=4, rho=0.7, lr=1.0, data_seed=0)
    traj, exp = E.train_hblt_block(cfg)
    ht = E.half_times(traj, "z", len(exp.heights))
    H = exp.heights
    assert ht[H == 1].mean() < ht[H == cfg.depth].mean()
    rho_s = spearmanr(H, ht)[0]
    assert np.isfinite(rho_s)  # reported in the figure; weak positive here (see report)


def test_hierarchy_generator_structure():
    data = E.RandomCombinationHierarchy(M=20, L=16, num_tokens=(8, 4), num_combinations=(2, 2), seed=1)
    tok, lab, act = data.sample(64, np.random.default_rng(0))
    for i in range(64):
        assert act[1][i].sum() == 1 and act[1][i, lab[i]] == 1
        leaves = {t for t in tok[i] if t != data.M - 1}
        want = {c for a in np.nonzero(act[0][i])[0] for c in data.children[0][a]}
        assert leaves == want
        assert list(tok[i][-len(leaves):]) == sorted(leaves)


def test_hierarchy_transformer_observables():
    traj, exp = E.train_hier(steps=60, log_every=20, d=16, hidden=20, n_test=128)
    L = exp.data.L
    for l in range(exp.nlayer):
        ent = traj[f"attention_entropy_{l}"].values
        assert np.all((ent >= 0) & (ent <= math.log(L)))
        sr = traj[f"stable_rank_{l}"].values
        assert np.all((sr >= 1) & (sr <= 16))
    assert traj["test_accuracy"].values[-1] > traj["test_accuracy"].values[0]
    for n in ("score0_pearson", "score1_pearson"):
        assert -1 <= traj[n].values[-1] <= 1


def test_same_seed_same_numbers():
    cfg = J.JomaConfig(steps=50, log_every=10)
    a, _ = E.train_block(cfg)
    b, _ = E.train_block(cfg)
    np.testing.assert_array_equal(a["z_1"].values, b["z_1"].values)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_hblt_learning_order_other_seeds(seed):
    cfg = J.JomaConfig(depth=4, rho=0.7, lr=1.0, data_seed=seed)
    traj, exp = E.train_hblt_block(cfg, n_samples=2048, steps=2000)
    ht = E.half_times(traj, "z", len(exp.heights))
    assert ht[exp.heights == 1].mean() < ht[exp.heights == cfg.depth].mean()


@pytest.mark.slow
def test_nonlinear_mlp_toy_nc_gaussian():
    """Fig. 2 toy with a ReLU / tanh MLP: NC(zhat, z) stays high (measured min 0.88 for ReLU, 0.99 tanh)."""
    for act, floor in (("tanh", 0.9), ("relu", 0.8)):
        traj, _ = E.train_block(E.toy_config("gaussian", activation=act), "ce")
        assert traj["nc_zhat_z"].values.min() > floor
