"""empirical/realtext.py: the machinery the real-text protocols share — bad settings of a protocol
config are refused, and the full presets are the papers' protocols (the topic protocol's tests are
in tests/empirical/topic/test_text.py)."""

import pytest

from empirical import text
from empirical.joma import text as JT
from empirical.scan_snap.text import ScanSnapTextConfig
from empirical.textrun import TextRunConfig
from theory.errors import ConfigError


def test_bad_bptt_and_empty_files(tmp_path):
    with pytest.raises(ConfigError, match="bptt"):
        TextRunConfig(bptt=1)
    with pytest.raises(ConfigError, match="vocab_size"):
        JT.JomaTextConfig.quick(vocab_size=1)
    with pytest.raises(ConfigError, match="layers"):
        ScanSnapTextConfig.quick(layers=())
    (tmp_path / text.TRAIN_FILE).write_text("\n \n")
    (tmp_path / text.VALID_FILE).write_text("a b\n")
    with pytest.raises(ConfigError, match="empty"):
        text.check_corpus(tmp_path)


def test_full_presets_are_the_papers_protocols():
    j = JT.JomaTextConfig.full().run(n_layer=5)
    assert (j.optimizer, j.lr, j.emsize, j.n_head, j.bptt, j.dropout, j.tie, j.batch_size, j.clip) == \
        ("adam", 1e-4, 200, 1, 35, 0.2, False, 20, 0.5)
    assert JT.JomaTextConfig.full().layers == (1, 2, 5, 10) and len(JT.JomaTextConfig.full().sweep_lrs) == 7
    s = ScanSnapTextConfig.full()
    assert (s.lr, s.ffn_lr, s.lr_decay, s.clip, s.dropout, s.layers) == (5.0, 10.0, 0.95, 0.5, 0.3, (1, 3))
    assert list(s.log_steps()) == [0, 500, 1000, 1500] and s.sweep_lrs == (1.0, 2.0, 3.0, 4.0, 5.0)
