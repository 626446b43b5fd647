"""empirical/joma/seeds.py: every seed in one vectorised run equals the per-seed Trainer runs."""

import numpy as np
import pytest
import torch

from empirical import joma as E
from empirical.joma.experiment import probe_targets
from empirical.joma.seeds import seed_config, train_seeds
from theory import joma as J
from theory.errors import ConfigError

CASES = {
    "fig2_toy_gaussian": J.JomaConfig.preset("toy", True, steps=120, log_every=20),
    "fig2_toy_random_relu": J.JomaConfig.preset("toy", True, steps=120, log_every=20, data="random", activation="relu"),
    "fixed_exp": J.JomaConfig(steps=200, log_every=50),
    "mixture": J.JomaConfig.preset("headline", True, steps=120, log_every=40),
    "mixture_fixed_top": J.JomaConfig.preset("headline", True, steps=80, log_every=40, top="fixed", seq_len=6),
    "probe": J.JomaConfig.preset("probe", True, steps=300, log_every=50),
    "hblt": J.JomaConfig(variant="hblt", steps=60, log_every=20, hblt_samples=128),
}


@pytest.mark.parametrize("name", list(CASES))
def test_train_seeds_equals_the_per_seed_trainer_runs(name):
    """Row i of the batched run is seed_config(config, seeds[i])'s Trainer run, on every
    observable both log (parameters, Theorem-1 NC, attention entropy, accuracy), to 1e-9."""
    cfg = CASES[name]
    seeds = [0, 3]
    batch = train_seeds(cfg, seeds=seeds)
    assert list(batch["seed"].values) == seeds
    np.testing.assert_allclose(batch["time"].values, cfg.ode_times())
    for i, s in enumerate(seeds):
        ref, _ = E.train(seed_config(cfg, s))
        common = [n for n in ref.data_vars if n in batch.data_vars and n != "step"]
        assert len(common) >= 10, common
        for n in common:
            want = ref[n].values
            got = batch[n].isel(seed=i).values
            keep = np.isfinite(want)
            np.testing.assert_allclose(got[keep], want[keep], rtol=1e-9, atol=1e-9 * np.abs(want[keep]).max(),
                                       err_msg=f"{name}: {n}, seed {s}")
        if "invariant_max_abs_drift" in ref:  # Theorem 1's estimate (zhat(0) = z(0)) against the Trainer's
            Mc = cfg.Mc
            zh = np.stack([batch[f"zhat_{l + 1}"].isel(seed=i).values - batch[f"z_{l + 1}"].isel(seed=i).values
                           for l in range(Mc)])
            np.testing.assert_allclose(np.abs(zh).max(0), ref["invariant_max_abs_drift"].values, rtol=1e-7, atol=1e-12)
    if name != "probe" and name != "fixed_exp":  # seeds differ (data and init) where the variant draws them
        a, b = (batch["z_1"].isel(seed=i).values for i in (0, 1))
        assert np.abs(a - b).max() > 1e-6


def test_probe_targets_are_the_official_fig4_draw():
    """Seed 0's probe targets are twice Fig. 4's mu (docs/papers/joma.md §5, printed to 4 decimals); other seeds
    draw other targets, sorted, in [2, 8)."""
    mu0 = probe_targets(torch.Generator().manual_seed(0)).numpy()
    np.testing.assert_allclose(mu0 / 2, J.FIG4_MU, atol=1.5e-4)
    mu1 = probe_targets(torch.Generator().manual_seed(1)).numpy()
    assert np.all(np.diff(mu1) >= 0) and mu1.min() >= 2 and mu1.max() < 8 and np.abs(mu1 - mu0).max() > 0.1


def test_seed_config_draws_data_only_where_the_variant_samples_it():
    assert seed_config(J.JomaConfig.preset("toy", True), 4).data_seed == 4
    probe = seed_config(J.JomaConfig.preset("probe", True), 4)
    assert probe.seed == 4 and probe.data_seed == probe.variant_default("data_seed")


def test_train_seeds_refuses_the_multilayer_variant():
    with pytest.raises(ConfigError, match="variant"):
        train_seeds(J.JomaConfig.preset("hier", True), seeds=[0])
