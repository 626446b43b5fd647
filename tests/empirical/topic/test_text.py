"""empirical.topic.text: the topic paper's real-text protocol (topic assignment, the per-seed
permutation null of the gaps, the full preset), on in-memory data (no WikiText needed)."""

import numpy as np
import pytest

from empirical.topic import text as TT


def test_topic_assignment_keeps_top_words_and_drops_overlaps():
    words = [f"w{i}" for i in range(1000)]
    beta = np.full((2, 1000), 1e-4)
    beta[0, [0, 1, 2]] = [0.5, 0.4, 0.3]
    beta[1, [2, 3, 4]] = [0.6, 0.5, 0.45]
    assert TT.topic_assignment(beta, words, 0.002) == {"w0": 0, "w1": 0, "w2": 1, "w3": 1}  # top 2 per topic
    assert TT.topic_assignment(beta, words, 0.0005) == {"w0": 0, "w1": 0, "w2": 1, "w3": 1}  # at least 2
    assert TT.topic_assignment(beta, words, 0.003) == {"w0": 0, "w1": 0, "w3": 1, "w4": 1}  # w2 in both top 3


def test_permutation_z_is_calibrated_where_pairs_share_words():
    """Word pairs with per-word effects (S_ij = u_i + u_j + noise: every pair of a word shares its
    u_i) and no topic structure: the permutation z of pair_gaps is standard over independent
    label draws, while a z treating the pairs as independent is not (here it is too narrow: the
shared effects cancel in the gap but not in the pairs' spread); a planted topic effect
    gives a large permutation z."""
    rng = np.random.default_rng(0)
    W, T_ = 40, 4
    u = rng.normal(0, 1, W)
    S = u[:, None] + u[None, :] + rng.normal(0, 0.3, (W, W))
    upper = np.triu(np.ones((W, W), dtype=bool), 1)
    N = upper.astype(float)
    zs, naive = [], []
    for k in range(100):
        topic = rng.permutation(np.repeat(np.arange(T_), W // T_))
        r = TT.pair_gaps("x", np.where(upper, S, 0.0), N, topic, rng=np.random.default_rng(k), permutations=100)
        zs.append(r["x_perm_z"])
        same = (topic[:, None] == topic[None, :]) & upper
        s, d = S[same], S[upper & ~same]
        naive.append((s.mean() - d.mean()) / np.sqrt(s.var() / s.size + d.var() / d.size))
    assert 0.8 < np.std(zs) < 1.25 and abs(np.mean(zs)) < 0.3
    assert not 0.8 < np.std(naive) < 1.25  # the independent-pairs z the permutation null replaces is not standard
    topic = np.repeat(np.arange(T_), W // T_)
    planted = S + 1.0 * (topic[:, None] == topic[None, :])
    r = TT.pair_gaps("x", np.where(upper, planted, 0.0), N, topic, rng=rng, permutations=150)
    assert r["x_perm_z"] > 3 and r["x_perm_p"] < 0.02


def test_full_preset_is_the_papers_protocol():
    t = TT.TopicTextConfig.full()
    assert (t.run().objective, t.run().tie, t.thresholds, t.num_topics) == ("mlm", True, (0.0005, 0.001, 0.002), 100)


def _pairs(W):
    """Each distinct pair of ``W`` words once (upper triangle): counts 1, else 0."""
    return np.triu(np.ones((W, W)), 1)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_undefined_ratio_and_z_are_nan_without_warnings():
    topic = np.array([0, 0, 1, 1])
    N = _pairs(4)
    S = np.zeros((4, 4))
    S[0, 1] = S[2, 3] = 2.0  # same-topic pairs only: the different-topic mean is exactly 0
    r = TT.pair_gaps("x", S, N, topic, rng=np.random.default_rng(0), permutations=50)
    assert r["x_same"] == 2.0 and r["x_diff"] == 0.0 and r["x_gap"] == 2.0  # (2 + 2) / 2 pairs; 0 / 4 pairs
    assert np.isnan(r["x_ratio"])  # 2 / 0: undefined, not inf
    one = TT.pair_gaps("x", S, N, topic, rng=np.random.default_rng(0), permutations=1)
    assert np.isnan(one["x_perm_z"])  # one permutation: no SD
    flat = TT.pair_gaps("x", np.where(N > 0, 1.0, 0.0), N, topic, rng=np.random.default_rng(0), permutations=20)
    assert flat["x_ratio"] == 1.0 and flat["x_gap"] == 0.0 and np.isnan(flat["x_perm_z"])  # every gap 0: SD 0


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_pair_cosines_skip_zero_embeddings():
    E = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.0, 2.0]])
    S, N = TT.pair_cosines(E)
    want = {(0, 1): 1 / np.sqrt(2), (0, 3): 0.0, (1, 3): 1 / np.sqrt(2)}  # by hand; the zero row has no cosine
    assert {(i, j) for i, j in zip(*np.nonzero(N))} == set(want)
    for (i, j), c in want.items():
        assert S[i, j] == pytest.approx(c, abs=1e-15)
