"""empirical/realtext.py: the papers' real-text protocols — their full presets, bad settings, and
the topic statistics."""

import numpy as np
import pytest
from scipy.stats import ttest_ind

from empirical import realtext as R
from empirical import text
from empirical.textrun import TextRunConfig
from theory.errors import ConfigError


def test_bad_bptt_and_empty_files(tmp_path):
    with pytest.raises(ConfigError, match="bptt"):
        TextRunConfig(bptt=1)
    with pytest.raises(ConfigError, match="vocab_size"):
        R.JomaTextConfig.quick(vocab_size=1)
    with pytest.raises(ConfigError, match="layers"):
        R.ScanSnapTextConfig.quick(layers=())
    (tmp_path / text.TRAIN_FILE).write_text("\n \n")
    (tmp_path / text.VALID_FILE).write_text("a b\n")
    with pytest.raises(ConfigError, match="empty"):
        text.check_corpus(tmp_path)


def test_topic_assignment_keeps_top_words_and_drops_overlaps():
    words = [f"w{i}" for i in range(1000)]
    beta = np.full((2, 1000), 1e-4)
    beta[0, [0, 1, 2]] = [0.5, 0.4, 0.3]
    beta[1, [2, 3, 4]] = [0.6, 0.5, 0.45]
    assert R.topic_assignment(beta, words, 0.002) == {"w0": 0, "w1": 0, "w2": 1, "w3": 1}  # top 2 per topic
    assert R.topic_assignment(beta, words, 0.0005) == {"w0": 0, "w1": 0, "w2": 1, "w3": 1}  # at least 2
    assert R.topic_assignment(beta, words, 0.003) == {"w0": 0, "w1": 0, "w3": 1, "w4": 1}  # w2 in both top 3


def test_gap_z_is_welchs_t():
    rng = np.random.default_rng(0)
    s, d = rng.normal(0.3, 1, 4000), rng.normal(0.0, 2, 9000)
    z = R._gap_z(s.sum(), (s * s).sum(), s.size, d.sum(), (d * d).sum(), d.size)
    assert z == pytest.approx(ttest_ind(s, d, equal_var=False).statistic, rel=1e-3)


def test_full_presets_are_the_papers_protocols():
    j = R.JomaTextConfig.full().run(n_layer=5)
    assert (j.optimizer, j.lr, j.emsize, j.n_head, j.bptt, j.dropout, j.tie, j.batch_size, j.clip) == \
        ("adam", 1e-4, 200, 1, 35, 0.2, False, 20, 0.5)
    assert R.JomaTextConfig.full().layers == (1, 2, 5, 10) and len(R.JomaTextConfig.full().sweep_lrs) == 7
    s = R.ScanSnapTextConfig.full()
    assert (s.lr, s.ffn_lr, s.lr_decay, s.clip, s.dropout, s.layers) == (5.0, 10.0, 0.95, 0.5, 0.3, (1, 3))
    assert list(s.log_steps()) == [0, 500, 1000, 1500] and s.sweep_lrs == (1.0, 2.0, 3.0, 4.0, 5.0)
    t = R.TopicTextConfig.full()
    assert (t.run().objective, t.run().tie, t.thresholds, t.num_topics) == ("mlm", True, (0.0005, 0.001, 0.002), 100)
