"""linattn's Experiment (empirical/linattn/experiment.py): the Trainer's run and the seed-batched engine give the
same numbers; the time grid is the config's; aligned full-batch GD stays on the diagonal set."""

import numpy as np
import pytest

from empirical.linattn import run, train_seeds
from theory.linattn import LinAttnConfig


@pytest.mark.parametrize("mode,variant", [("sgd", "separate"), ("gd", "merged")])
def test_train_seeds_equals_run_per_seed(mode, variant):
    cfg = LinAttnConfig(variant=variant, D=2, N=4, H=2, lams=(1.0, 0.5), init_kind="random", init=0.3, mode=mode,
                        batch=16, samples=32, steps=12, log_every=4)
    batched = train_seeds(cfg, seeds=[3, 4])
    for i, seed in enumerate((3, 4)):
        single = run(cfg.replace(seed=seed), device="cpu")
        np.testing.assert_array_equal(single["time"].values, cfg.ode_times())
        for name in ("loss", "gamma_1", "gamma_2", "sv_1", "offdiag"):
            np.testing.assert_allclose(batched[name].values[i], single[name].values, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(batched["minibatch_loss"].values[i, 1:], single["minibatch_loss"].values[1:],
                                   rtol=1e-12)


def test_full_batch_gd_reaches_the_least_squares_fit_of_its_training_set():
    """ATTN_M is linear regression on the cubic features (spec §2): full-batch GD on a fixed training set ends at
    the least-squares solution of ``y_q ~ vec(Γ)^T z`` on that set (numpy lstsq, independent of the model)."""
    import torch

    from empirical.linattn.data import sequences
    from empirical.linattn.model import cubic_features

    cfg = LinAttnConfig(variant="merged", D=2, N=8, H=1, lams=(1.0, 0.5), init=0.3, mode="gd", samples=200,
                        steps=3000, log_every=1000, lr=0.5)
    tr = train_seeds(cfg, seeds=[0])
    Z, yq = sequences(cfg.lams, cfg.N, cfg.samples, torch.Generator().manual_seed(0))  # the run's training set
    fit = np.linalg.lstsq(cubic_features(Z).numpy(), yq.numpy(), rcond=None)[0].reshape(2, 2)
    np.testing.assert_allclose([tr["gamma_1"].values[0, -1], tr["gamma_2"].values[0, -1]], np.diagonal(fit),
                               rtol=1e-6)
    assert tr["offdiag"].values[0, -1] == pytest.approx(np.hypot(fit[0, 1], fit[1, 0]), rel=1e-6)
