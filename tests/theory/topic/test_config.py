"""theory.topic.config: the variants (fixed settings, settings a variant never reads) and the
presets of ``tdyn compare topic`` and the figures."""

from __future__ import annotations

import math

import pytest

from theory import ConfigError
from theory import topic as tp


def test_a_setting_the_variant_ignores_is_refused():
    for variant, change in (("stage1", dict(attention="trained")), ("stage1", dict(kq_init_scale=0.1)),
                            ("embedding", dict(value="block")), ("attention", dict(lam=0.1)),
                            ("attention", dict(value="trained")), ("joint", dict(embedding_init="identity"))):
        with pytest.raises(ConfigError, match=next(iter(change))):
            tp.TopicConfig(variant=variant, **change)
    # the settings a variant reads pass through
    assert tp.TopicConfig(variant="joint", kq_init_scale=0.1).kq_scale == 0.1
    assert tp.TopicConfig(variant="attention", value="identity").value == "identity"
    with pytest.raises(ConfigError, match="variant"):
        tp.TopicConfig(variant="stage2")


def test_each_variant_imposes_its_freeze_pattern_and_replace_follows_it():
    expected = {"stage1": ("uniform", "trained", "one_hot"), "joint": ("trained", "trained", "one_hot"),
                "attention": ("trained", "block", "one_hot"), "embedding": ("uniform", "identity", "trained")}
    assert tp.VARIANTS == tuple(expected)
    for variant, (attention, value, embedding) in expected.items():
        c = tp.TopicConfig(variant=variant)
        assert (c.attention, c.value, c.embedding) == (attention, value, embedding)
        # moving between variants re-imposes the new one's settings (nothing of the old one sticks)
        for other, settings in expected.items():
            moved = c.replace(variant=other)
            assert (moved.attention, moved.value, moved.embedding) == settings, (variant, other)
    # a setting the old variant read and the new one does not is refused, naming the field
    with pytest.raises(ConfigError, match="kq_init_scale"):
        tp.TopicConfig(variant="joint", kq_init_scale=0.1).replace(variant="stage1")


def test_presets_are_the_compare_and_figure_regimes():
    """The presets hold the settings the compare and figure runs used before they were presets."""
    s = tp.TopicConfig.preset("stage1")
    assert (s.variant, s.T, s.v, s.tau, s.N, s.batch, s.lr, s.steps, s.log_every) == \
        ("stage1", 5, 4, 2, 200, 32, 0.5, 600, 20)
    s = tp.TopicConfig.preset("stage1", quick=False)
    assert (s.T, s.v, s.tau, s.N, s.batch, s.lr, s.steps, s.log_every) == (10, 10, 2, 1000, 128, 0.5, 3000, 50)
    # two stages: one cell of the claims' quick maps (init 0.02, the longest horizon 1000 steps), so
    # the compare report, the figure and the maps share the run
    j = tp.TopicConfig.preset("two_stage")
    assert (j.variant, j.T, j.v, j.tau, j.p_m, j.p_c, j.p_r, j.keys, j.N, j.batch, j.lr, j.steps, j.log_every,
            j.init_scale, j.kq_scale, j.kq_lr_ratio, j.attention) == \
        ("joint", 3, 2, 2, 0.3, 0.5, 0.3, "code", 48, 16, 0.5, 1000, 20, 0.02, 0.02, 1.0, "trained")
    jf = tp.TopicConfig.preset("two_stage", quick=False)
    assert (jf.N, jf.batch, jf.steps) == (128, 32, 3000) and jf.replace(N=48, batch=16, steps=1000) == j
    for quick, (n_docs, batch, steps) in ((True, (200, 8, 40)), (False, (10_000, 40, 5000))):
        t = tp.TopicConfig.preset("attention_table", quick)
        assert (t.variant, t.T, t.v, t.data, t.alpha, t.N, t.N_max, t.vocab, t.keys, t.random_ids, t.loss,
                t.p_m, t.p_c, t.p_r, t.masking) == \
            ("joint", 10, 10, "lda", 0.1, 100, 150, "code", "code", "all", "ce", 0.15, 0.1, 0.1, "static")
        assert t.init_scale == pytest.approx(1 / math.sqrt(3 * 104), rel=1e-15)
        assert (t.n_docs, t.batch, t.steps, t.log_every) == (n_docs, batch, steps, steps)
    assert tp.TopicConfig.preset("gamma_star", T=5, tau=2).v == 5
    assert tp.TopicConfig.preset("gamma_star", False).v == 10
    with pytest.raises(ConfigError, match="preset"):
        tp.TopicConfig.preset("paper")
