"""empirical.topic.experiment: the train slot's variant keyword, and the embedding variant's
trained topic mode against the derived logistic flow."""

from __future__ import annotations

import pytest

from empirical import topic as emp
from theory import topic as th


def test_the_variant_keyword_replaces_the_configs_variant():
    """The train slot's ``variant=`` (the CLI's ``--variant``) is the config's variant field: the
    run is the one of ``config.replace(variant=...)``; without it, ``config.variant`` runs."""
    cfg = th.TopicConfig(T=3, v=2, N=12, batch=4, steps=2, log_every=1, init_scale=0.01)
    traj = emp.run(cfg, variant="joint", device="cpu", progress=False)
    assert traj.attrs["system"] == "joint" and float(traj["norm_W_K"].values[0]) > 0
    assert emp.run(cfg.replace(variant="joint"), device="cpu", progress=False)["norm_W_K"].values.tolist() == \
        traj["norm_W_K"].values.tolist()
    assert emp.run(cfg, device="cpu", progress=False).attrs["system"] == "stage1"
    assert emp.TopicExperiment(th.TopicConfig(variant="attention")).config.value == "block"


def test_embedding_topic_mode_follows_logistic_flow():
    """docs/papers/topic.md §3.5 embedding version (W_V = I, uniform attention, W_E trained): the topic mode of
    E = W_E^T W_E follows e_2' = -8 eta kappa a e_2 (a e_2 - 1) (derived, previously unchecked)
    and ends at 1/(v a). Identity init keeps E in the symmetric algebra; a Gaussian init does not
    commute with the gradient and lags the ODE (rel_l2 ~ 0.09 measured; not asserted)."""
    import simulate as sim
    from figures.core import agreement

    cfg = th.TopicConfig(variant="embedding", T=5, v=4, tau=2, N=200, batch=32, lr=0.1, steps=600, log_every=20,
                         init_scale=0.3, embedding_init="identity")
    traj, _ = emp.train(cfg, device="cpu")
    e0 = float(traj["topic_mode"].values[0])
    assert e0 == pytest.approx(0.09, abs=1e-12)
    ode = sim.solve(th.embedding_system("theory"), th.system_parameters(cfg), [e0], cfg.ode_times(), backend="scipy")
    assert agreement(ode, traj, ["block_difference"])["block_difference"] <= 0.05
    a = 1 - (1 - cfg.p_c) * cfg.p_m
    assert traj["block_difference"].values[-1] == pytest.approx(1 / (cfg.v * a), rel=0.05)
