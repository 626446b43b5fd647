"""Empirical checks for papers/topic.md: data and masking laws, the model's attention paths, the
attention statistics, and the trained networks against the theory (acceptance 2-4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from empirical import topic as emp
from figures import topic as ft
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


def test_uniform_path_equals_general_attention_with_zero_kq():
    cfg = th.TopicConfig(T=4, v=3, tau=2, N=20, init_scale=0.3, kq_init_scale=0.0)
    voc = emp.vocabulary(cfg)
    g = torch.Generator().manual_seed(0)
    uni = emp.TopicTransformer(cfg.replace(attention="uniform"), voc, g)
    gen = emp.TopicTransformer(cfg.replace(attention="trained"), voc, torch.Generator().manual_seed(0))
    gen.W_V.data.copy_(uni.W_V.data)
    tok, val = emp.DocumentSampler(cfg, voc, 0).sample(5)
    masked, sel = emp.mask_batch(tok, val, cfg, voc, np.random.default_rng(0))
    t, ok = torch.as_tensor(masked), torch.as_tensor(val & ~sel)
    a, b = uni(t, ok), gen(t, ok)
    assert torch.allclose(a.expand_as(b), b, atol=1e-12)


def test_attention_statistics_uniform_and_planted():
    """Uniform attention: every statistic is 1/L (spec §5.8). A planted block attention gives the
    exact planted averages (topics from (id-4)//v, specials excluded)."""
    cfg = th.TopicConfig(T=10, v=10, data="lda", N=100, N_max=150, vocab="code", attention="trained", kq_init_scale=0.0)
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


def test_stage1_trained_matches_ode():
    """Acceptance 2 (the `tdyn compare topic --quick` regime): rel_l2(lambda_2(t)) <= 0.05 and the
    final block statistic within 5% of 1/(v a)."""
    ode, traj, exp, report = ft.stage1_comparison(quick=True, device="cpu")
    assert report["observables"]["topic_mode"]["rel_l2"] <= 0.05
    assert abs(report["block_difference"]["rel_error"]) <= 0.05
    assert report["passed"]
    # the heat-map is block-wise: every same-topic entry above every different-topic entry
    W = exp.value_like_matrix()[:-1, :-1]
    top = np.repeat(np.arange(ft.STAGE1_QUICK.T), ft.STAGE1_QUICK.v)
    same = top[:, None] == top[None, :]
    assert W[same].min() > W[~same].max()


def test_joint_training_shows_two_stages_and_topic_attention():
    """Acceptance 3-4: K/Q below 10% of final until W_V reached 80% of its plateau; measured onset
    within a factor 2 of the two-stage reduced system's; trained attention ordering."""
    traj, pred, check = ft.two_stage_run(quick=True, device="cpu")
    assert check["two_stages"], check
    assert 0.5 <= check["onset_ratio"] <= 2.0, check
    assert pred["stage1_80pct"] < 0.2 * check["onset_predicted"]  # the predicted time-scale separation
    a = traj.attrs
    assert a["attention_same_topic_other_word"] > a["attention_uniform"] > a["attention_different_topic"]
    assert check["gamma_star"] == pytest.approx(1 + 3 * 0.5 / 0.3, rel=1e-6)  # code variant
    assert 1.5 < check["gamma_hat"] < 1.5 * check["gamma_star"]


@pytest.mark.slow
def test_stage1_full_size_matches_ode():
    """T = v = 10 (the paper's sizes), N = 1000: same acceptance as the quick regime."""
    _, _, _, report = ft.stage1_comparison(quick=False, device="cpu")
    assert report["observables"]["topic_mode"]["rel_l2"] <= 0.05
    assert abs(report["block_difference"]["rel_error"]) <= 0.05


@pytest.mark.slow
def test_joint_training_full_two_stages():
    _, _, check = ft.two_stage_run(quick=False, device="cpu")
    assert check["two_stages"] and 0.5 <= check["onset_ratio"] <= 2.0, check


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
    ode = sim.solve(th.embedding_system("theory"), th.system_parameters(cfg), [e0],
                    np.arange(0, cfg.steps + 1, cfg.log_every, dtype=float), backend="scipy")
    assert agreement(ode, traj, ["block_difference"])["block_difference"] <= 0.05
    a = 1 - (1 - cfg.p_c) * cfg.p_m
    assert traj["block_difference"].values[-1] == pytest.approx(1 / (cfg.v * a), rel=0.05)
