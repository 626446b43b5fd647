"""empirical.topic.seeds.train_seeds: every seed of a config in one vectorised run gives the
per-seed Trainer runs' numbers (to rounding: the batched loss sums in another order)."""

from __future__ import annotations

import numpy as np
import pytest

from empirical import topic as emp
from empirical.topic.seeds import ATTENTION_KEYS, train_seeds
from theory import topic as th

TWO = th.TopicConfig.preset("two_stage")

CASES = {
    "joint, lr ratio 3": TWO.replace(steps=60, log_every=20, kq_lr_ratio=3.0),
    "stage1 (uniform attention)": th.TopicConfig.preset("stage1").replace(steps=30, log_every=10),
    "attention, W_V at the stage-1 optimum": TWO.replace(variant="attention", value="optimum", steps=40, log_every=20),
    "LDA, variable lengths, CE, weight decay": th.TopicConfig(
        variant="joint", T=3, v=2, data="lda", N=10, N_max=15, loss="ce", init_scale=0.1, steps=30, log_every=10,
        batch=4, lam=0.01),
    "code layout, static masks, Adam": th.TopicConfig.preset("attention_table").replace(
        optimizer="adam", lr=0.01, n_docs=30, steps=6, log_every=3, N=20, N_max=30),
}


@pytest.mark.parametrize("name", list(CASES))
def test_batched_seeds_equal_per_seed_runs(name):
    cfg = CASES[name]
    seeds = [0, 3, 7]
    batched = train_seeds(cfg, seeds=seeds, device="cpu", attention_docs=8)
    assert list(batched["seed"].values) == seeds
    for i, s in enumerate(seeds):
        traj, exp = emp.train(cfg, device="cpu", seed=s, attention_docs=8)
        assert set(traj.data_vars) <= set(batched.data_vars)
        np.testing.assert_allclose(batched["final_value"].isel(seed=i).values, exp.value_like_matrix(), rtol=1e-9,
                                   atol=1e-12, err_msg=f"{name}: final W_V of seed {s}")
        np.testing.assert_array_equal(batched["time"].values, traj["time"].values)
        for k in traj.data_vars:
            np.testing.assert_allclose(batched[k].isel(seed=i).values, traj[k].values, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{name}: {k} of seed {s}")
        for k in ATTENTION_KEYS:
            if cfg.attention == "trained":
                assert float(batched[f"final_{k}"].isel(seed=i)) == pytest.approx(traj.attrs[k], rel=1e-9, abs=1e-12)
    # the seeds differ (each its own draws)
    assert not np.allclose(batched["minibatch_loss"].isel(seed=0).values[1:], batched["minibatch_loss"].isel(seed=1).values[1:])


def test_a_diverged_seed_is_nan_from_its_divergence_on():
    """Where a per-seed run raises DivergenceError, the batched run records NaN from that logging
    point on (the claims' statistic is then NaN: the point stays undecided), not an exception."""
    from theory.errors import DivergenceError

    cfg = th.TopicConfig.preset("stage1").replace(steps=40, log_every=10, lr=1e6)
    with pytest.raises(DivergenceError):
        emp.train(cfg, device="cpu", seed=0)
    out = train_seeds(cfg, seeds=[0, 1], device="cpu")
    assert np.isnan(out["topic_mode"].values[:, -1]).all()
    assert np.isfinite(out["topic_mode"].values[:, 0]).all()  # logged before the first step


def test_kq_learning_rate_ratio_and_the_frozen_optimum():
    """``kq_lr_ratio`` scales the K/Q step only (one SGD step from the same init: the K/Q change is
    ratio times that at ratio 1, the W_V change the same); ``value="optimum"`` freezes W_V and b
    at the stage-1 optimum (its topic mode is the closed form 1/a_eff = 1 for code keys)."""
    import torch

    from empirical.topic import update

    g = {"W_K": torch.ones(2), "W_Q": torch.ones(2), "W_V": torch.ones(2), "b": torch.ones(2)}
    p = {k: torch.zeros(2) for k in g}
    for ratio in (1.0, 4.0):
        cfg = TWO.replace(kq_lr_ratio=ratio)
        new, _ = update.update(g, update.init(p, config=cfg, xp=torch), p, config=cfg, xp=torch)
        assert float(new["W_K"][0]) == pytest.approx(-cfg.lr * ratio) and float(new["W_V"][0]) == pytest.approx(-cfg.lr)
    att = TWO.replace(variant="attention", value="optimum")
    traj, exp = emp.train(att.replace(steps=2, log_every=1), device="cpu")
    assert set(exp.trained) == {"W_K", "W_Q"}
    assert traj["topic_mode"].values == pytest.approx(1.0, rel=1e-9)  # code keys: a_eff = 1
