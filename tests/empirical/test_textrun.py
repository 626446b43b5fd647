"""empirical/textrun.py: one real-text training run learns (beats the unigram model) and resumes
bit for bit (tiny in-memory corpus)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from empirical import text
from empirical.textrun import TextRunConfig, train_text
from helpers.corpora import grammar

TINY = TextRunConfig(vocab_size=30, emsize=32, d_hid=32, n_layer=2, dropout=0.1, lr=2e-3, batch_size=8,
                     eval_batch_size=4, bptt=12, steps=120, log_every=60, eval_chunks=4, snapshot_chunk=1)


def _tiny_corpus():
    return text.load_corpus(texts=(grammar(2500, 0), grammar(150, 1)), vocab_size=30)


def test_tiny_training_beats_the_unigram_model():
    corpus = _tiny_corpus()
    traj, exp, _ = train_text(TINY, device="cpu", corpus=corpus)
    # cross-entropy of the training unigram distribution on the evaluated validation tokens
    p = torch.bincount(corpus.train, minlength=len(corpus.vocab)).double() / corpus.train.numel()
    y = torch.cat([text.chunk(exp.valid_streams, i, TINY.bptt)[1].reshape(-1) for i in exp.eval_ids])
    unigram = float(-torch.log(p[y]).mean())
    val = traj["val_loss"].values
    assert val[0] > math.log(len(corpus.vocab)) - 0.5  # starts near uniform
    assert val[-1] < unigram - 0.5, (val, unigram)  # the model has learnt the grammar's bigrams
    assert set(exp.snapshots) == {0, 60, 120}


@pytest.mark.parametrize("objective", ["lm", "mlm"])
def test_resume_is_bit_identical(tmp_path, objective, interrupt_at):
    corpus = _tiny_corpus()
    cfg = dataclasses.replace(TINY, objective=objective, tie=objective == "mlm", steps=12, log_every=4)
    full, exp_full, _ = train_text(cfg, device="cpu", corpus=corpus)
    ck = tmp_path / "ck.pt"
    interrupt_at(8)
    with pytest.raises(KeyboardInterrupt):
        train_text(cfg, device="cpu", corpus=corpus, checkpoint=ck, checkpoint_every=4)
    res, exp_res, _ = train_text(cfg, device="cpu", corpus=corpus, checkpoint=ck, checkpoint_every=4, resume=True)
    for name in full.data_vars:
        assert np.array_equal(full[name].values, res[name].values, equal_nan=True), name
    for k, v in exp_full.model.state_dict().items():
        assert torch.equal(v, exp_res.model.state_dict()[k]), k
    assert all(np.array_equal(exp_full.snapshots[s], exp_res.snapshots[s]) for s in exp_full.snapshots)
    other, _, _ = train_text(dataclasses.replace(cfg, seed=2), device="cpu", corpus=corpus)
    assert not np.array_equal(other["val_loss"].values, full["val_loss"].values)


@pytest.mark.parametrize("objective", ["lm", "mlm"])
def test_observables_equal_a_separate_loss_pass_and_attention_pass(objective):
    """The evaluation's validation loss and per-layer attention entropies equal a re-computation
    with one eval-mode pass for the loss and another for the attention maps, bit for bit."""
    from empirical.transformer import attention_entropy

    corpus = _tiny_corpus()
    cfg = dataclasses.replace(TINY, objective=objective, tie=objective == "mlm", steps=6, log_every=6)
    _, exp, _ = train_text(cfg, device="cpu", corpus=corpus)
    with torch.no_grad():
        obs = exp.observables()
        exp.model.eval()
        gen = torch.Generator().manual_seed(12345)
        loss, ent = 0.0, np.zeros(cfg.n_layer)
        for i in exp.eval_ids:
            x, y = text.chunk(exp.valid_streams, i, cfg.bptt)
            loss += float(exp._loss(x, y, gen))
            ent += [float(attention_entropy(a)) for a in exp.attention(x)]
    n = len(exp.eval_ids)
    assert obs["val_loss"] == loss / n
    assert [obs[f"entropy_layer{l}"] for l in range(cfg.n_layer)] == list(ent / n)
