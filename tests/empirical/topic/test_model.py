"""empirical.topic.model: the uniform-attention path against the general one, and the attention
statistics (uniform, and a planted block attention against an independent numpy computation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from empirical import topic as emp
from theory import topic as th


def test_uniform_path_equals_general_attention_with_zero_kq():
    cfg = th.TopicConfig(T=4, v=3, tau=2, N=20, init_scale=0.3)  # stage1: uniform attention
    voc = emp.vocabulary(cfg)
    g = torch.Generator().manual_seed(0)
    uni = emp.TopicTransformer(cfg, voc, g)
    gen = emp.TopicTransformer(cfg.replace(variant="joint", kq_init_scale=0.0), voc, torch.Generator().manual_seed(0))
    assert (uni.uniform, gen.uniform) == (True, False)
    gen.W_V.data.copy_(uni.W_V.data)
    tok, val = emp.DocumentSampler(cfg, voc, 0).sample(5)
    masked, sel = emp.mask_batch(tok, val, cfg, voc, np.random.default_rng(0))
    t, ok = torch.as_tensor(masked), torch.as_tensor(val & ~sel)
    a, b = uni(t, ok), gen(t, ok)
    assert torch.allclose(a.expand_as(b), b, atol=1e-12)


def test_attention_statistics_uniform_and_planted():
    """Uniform attention: every statistic is 1/L (docs/papers/topic.md §5.8). A planted block attention gives the
    exact planted averages (topics from (id-4)//v, specials excluded)."""
    cfg = th.TopicConfig(variant="joint", T=10, v=10, data="lda", N=100, N_max=150, vocab="code", kq_init_scale=0.0)
    assert cfg.attention == "trained"
    voc = emp.vocabulary(cfg)
    model = emp.TopicTransformer(cfg, voc, torch.Generator().manual_seed(0))
    tok, val = emp.DocumentSampler(cfg, voc, 0).sample(6)
    st = emp.attention_statistics(model, tok, val, voc, cfg.v)
    for k in ("attention_same_word", "attention_same_topic_other_word", "attention_different_topic"):
        assert st[k] == pytest.approx(0.01, abs=1e-12)
    assert st["gamma_hat"] == pytest.approx(1.0, abs=1e-10)
    # planted: score 3 for same-topic word pairs, d_a = D and K = Q = sqrt(3) * 1_topic embedding
    D = voc.size
    top = voc.topic_of
    Emb = np.zeros((D, D))
    for i in range(D):
        if top[i] >= 0:
            Emb[top[i], i] = 1.0
    with torch.no_grad():
        scale = (3.0 * np.sqrt(D)) ** 0.5
        model.W_K.copy_(torch.as_tensor(scale * Emb))
        model.W_Q.copy_(torch.as_tensor(scale * Emb))
    st = emp.attention_statistics(model, tok, val, voc, cfg.v)
    # independent numpy: per document, drop START, keep 100 positions, softmax over valid keys
    sums = {"sw": [], "st": [], "dt": []}
    for t_, v_ in zip(tok, val):
        t_, v_ = t_[1:101], v_[1:101]
        tp_ = top[t_]
        for q in range(len(t_)):
            if tp_[q] < 0:
                continue
            sc = np.where((tp_ == tp_[q]) & (tp_ >= 0), 3.0, 0.0)
            w = np.where(v_, np.exp(sc), 0.0)
            att = w / w.sum()
            for k in range(len(t_)):
                if tp_[k] < 0:
                    continue
                key = "sw" if t_[k] == t_[q] else ("st" if tp_[k] == tp_[q] else "dt")
                sums[key].append(att[k])
    assert st["attention_same_word"] == pytest.approx(np.mean(sums["sw"]), rel=1e-10)
    assert st["attention_same_topic_other_word"] == pytest.approx(np.mean(sums["st"]), rel=1e-10)
    assert st["attention_different_topic"] == pytest.approx(np.mean(sums["dt"]), rel=1e-10)
    assert st["attention_same_topic_other_word"] > 0.01 > st["attention_different_topic"]
