"""theory/joma/sde.py: the minibatch SDE (spec §2.7, project extension): path spread ~ sqrt(lr/B),
the ensemble mean follows the ODE."""

import numpy as np

import simulate as sim
from theory import joma as J


def test_minibatch_sde_noise_scales_as_one_over_sqrt_batch_and_mean_follows_ode():
    """Spec §2.7 (project extension): path spread ~ sqrt(lr/B); the ensemble mean follows the ODE."""
    stds, means = {}, {}
    for B in (1, 4):
        cfg = J.JomaConfig(Mc=3, K=2, N=2, d=5, gradient="random", batch=B, lr=0.01, steps=200, log_every=50)
        sde, t = J.minibatch_sde(cfg)
        tr = sim.solve_sde(sde, t, paths=128, seed=1, dt=cfg.lr)
        stds[B] = float(tr["v_1_1"].std("path").values[-1])
        means[B] = float(tr["v_1_1"].mean("path").values[-1])
    ode = sim.solve(J.problem(cfg), backend="scipy")
    assert 1.6 < stds[1] / stds[4] < 2.5
    for B in (1, 4):
        assert abs(means[B] - float(ode["v_1_1"].values[-1])) < 4 * stds[B] / np.sqrt(128) + 1e-3
