"""empirical.topic.text: the topic paper's real-text protocol (topic assignment, the gap z-score,
the full preset), on in-memory data (no WikiText needed)."""

import numpy as np
import pytest
from scipy.stats import ttest_ind

from empirical.topic import text as TT


def test_topic_assignment_keeps_top_words_and_drops_overlaps():
    words = [f"w{i}" for i in range(1000)]
    beta = np.full((2, 1000), 1e-4)
    beta[0, [0, 1, 2]] = [0.5, 0.4, 0.3]
    beta[1, [2, 3, 4]] = [0.6, 0.5, 0.45]
    assert TT.topic_assignment(beta, words, 0.002) == {"w0": 0, "w1": 0, "w2": 1, "w3": 1}  # top 2 per topic
    assert TT.topic_assignment(beta, words, 0.0005) == {"w0": 0, "w1": 0, "w2": 1, "w3": 1}  # at least 2
    assert TT.topic_assignment(beta, words, 0.003) == {"w0": 0, "w1": 0, "w3": 1, "w4": 1}  # w2 in both top 3


def test_gap_z_is_welchs_t():
    rng = np.random.default_rng(0)
    s, d = rng.normal(0.3, 1, 4000), rng.normal(0.0, 2, 9000)
    z = TT._gap_z(s.sum(), (s * s).sum(), s.size, d.sum(), (d * d).sum(), d.size)
    assert z == pytest.approx(ttest_ind(s, d, equal_var=False).statistic, rel=1e-3)


def test_full_preset_is_the_papers_protocol():
    t = TT.TopicTextConfig.full()
    assert (t.run().objective, t.run().tie, t.thresholds, t.num_topics) == ("mlm", True, (0.0005, 0.001, 0.002), 100)
