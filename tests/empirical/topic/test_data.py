"""empirical.topic.data: the documents and masking laws of docs/papers/topic.md §1 (tau-topic model,
the official LDA layout)."""

from __future__ import annotations

import numpy as np
import pytest

from empirical import topic as emp
from theory import topic as th


def test_tau_topic_documents_and_masking_law():
    cfg = th.TopicConfig(T=6, v=3, tau=2, N=300, p_m=0.2, p_c=0.25, p_r=0.15)
    voc = emp.vocabulary(cfg)
    smp = emp.DocumentSampler(cfg, voc, seed=0)
    tok, val = smp.sample(200)
    assert tok.shape == (200, 300) and val.all()
    n_topics = [len(np.unique(voc.topic_of[t])) for t in tok]
    assert set(n_topics) == {2}  # exactly tau distinct topics (N large)
    masked, sel = emp.mask_batch(tok, val, cfg, voc, np.random.default_rng(1))
    assert sel.mean() == pytest.approx(0.2, abs=0.005)
    m = masked[sel]
    orig = tok[sel]
    frac_mask = (m == voc.mask).mean()
    frac_kept = (m == orig).mean()
    assert frac_mask == pytest.approx(1 - 0.25 - 0.15, abs=0.01)
    # kept = p_c + p_r * P(random word == original) = p_c + p_r/(Tv)
    assert frac_kept == pytest.approx(0.25 + 0.15 / 18, abs=0.01)
    assert (masked[~sel] == tok[~sel]).all()
    assert (m != voc.mask).sum() > 0 and (m[m != voc.mask] < cfg.T * cfg.v).all()  # words only


def test_official_layout_lda_lengths_and_all_id_replacement():
    cfg = th.TopicConfig(T=10, v=10, data="lda", alpha=0.1, N=100, N_max=150, vocab="code", keys="code",
                         random_ids="all", p_m=0.5, p_c=0.0, p_r=1.0)
    voc = emp.vocabulary(cfg)
    assert voc.size == 104 and voc.mask == 1
    ids = np.arange(104)
    assert (voc.topic_of[4:] == (ids[4:] - 4) // 10).all() and (voc.topic_of[:4] == -1).all()
    tok, val = emp.DocumentSampler(cfg, voc, seed=3).sample(300)
    lens = val.sum(1) - 2  # START and END
    assert lens.min() >= 100 and lens.max() <= 150 and len(np.unique(lens)) > 20
    assert (tok[:, 0] == voc.start).all() and (tok[np.arange(300), lens + 1] == voc.end).all()
    assert (tok[~val] == voc.pad).all()
    # Dir(0.1): documents are dominated by few topics
    top_share = [np.bincount(voc.topic_of[t[v]][voc.topic_of[t[v]] >= 0], minlength=10).max() / l
                 for t, v, l in zip(tok, val, lens)]
    assert np.mean(top_share) > 0.5
    masked, sel = emp.mask_batch(tok, val, cfg, voc, np.random.default_rng(0))
    assert not sel[:, 0].any() and not sel[np.arange(300), lens + 1].any()  # specials never selected
    repl = masked[sel]
    assert (repl < 4).mean() == pytest.approx(4 / 104, abs=0.01)  # random ids include PAD/MASK/START/END
