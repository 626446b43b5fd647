"""empirical.topic.experiment: the variants' settings, and the embedding variant's trained topic
mode against the derived logistic flow."""

from __future__ import annotations

import pytest

from empirical import topic as emp
from theory import topic as th


def test_a_setting_the_variant_ignores_is_refused():
    from theory import ConfigError

    for variant, change in (("stage1", dict(attention="trained")), ("stage1", dict(kq_init_scale=0.1)),
                            ("embedding", dict(value="block")), ("attention", dict(lam=0.1))):
        with pytest.raises(ConfigError, match=next(iter(change))):
            emp.TopicExperiment(th.TopicConfig(**change), variant=variant)
    # the settings a variant reads pass through
    assert emp.TopicExperiment(th.TopicConfig(kq_init_scale=0.1), variant="joint").config.kq_scale == 0.1
    assert emp.TopicExperiment(th.TopicConfig(value="identity"), variant="attention").config.value == "identity"


def test_embedding_topic_mode_follows_logistic_flow():
    """Spec §3.5 embedding version (W_V = I, uniform attention, W_E trained): the topic mode of
    E = W_E^T W_E follows e_2' = -8 eta kappa a e_2 (a e_2 - 1) (derived, previously unchecked)
    and ends at 1/(v a). Identity init keeps E in the symmetric algebra; a Gaussian init does not
    commute with the gradient and lags the ODE (rel_l2 ~ 0.09 measured; not asserted)."""
    import simulate as sim
    from figures.core import agreement

    cfg = th.TopicConfig(T=5, v=4, tau=2, N=200, batch=32, lr=0.1, steps=600, log_every=20, init_scale=0.3,
                         embedding_init="identity")
    traj, _ = emp.train(cfg, variant="embedding", device="cpu")
    e0 = float(traj["topic_mode"].values[0])
    assert e0 == pytest.approx(0.09, abs=1e-12)
    ode = sim.solve(th.embedding_system("theory"), th.system_parameters(cfg), [e0], cfg.ode_times(), backend="scipy")
    assert agreement(ode, traj, ["block_difference"])["block_difference"] <= 0.05
    a = 1 - (1 - cfg.p_c) * cfg.p_m
    assert traj["block_difference"].values[-1] == pytest.approx(1 / (cfg.v * a), rel=0.05)
