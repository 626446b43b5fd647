"""Real-text pipeline, causal transformer, resume and CLI errors (issue 10), on tiny in-memory
corpora (no WikiText needed)."""

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from empirical.joma import text as JT
from empirical import text
from empirical.scan_snap.text import ScanSnapTextConfig
from empirical.textrun import TextRunConfig, train_text
from empirical.transformer import TransformerLM, attention_entropy, stable_rank, uniform_causal_entropy
from figures.cli import main
from theory.errors import ConfigError


def _grammar(n_lines: int, seed: int) -> list[str]:
    """A toy language with strong bigram structure: '<det> <noun> <verb> <det> <noun> .'"""
    rng = np.random.default_rng(seed)
    det, noun, verb = ["the", "a"], ["cat", "dog", "bird", "fish", "frog"], ["sees", "likes", "eats"]
    return [" ".join([rng.choice(det), rng.choice(noun), rng.choice(verb), rng.choice(det), rng.choice(noun), "."])
            for _ in range(n_lines)]


# ------------------------------------------------------------------------------------------------
# Tokeniser, vocabulary, batching
# ------------------------------------------------------------------------------------------------
def test_basic_english_matches_torchtext_rules():
    # lower-case; ' . , ( ) ! ? split off; " ; : dropped; <unk> kept (torchtext basic_english)
    line = 'Hello, World! It\'s "fine" (ok); yes: <unk> 3.5 @-@ x?'
    assert text.basic_english(line) == ["hello", ",", "world", "!", "it", "'", "s", "fine", "(", "ok", ")", "yes",
                                        "<unk>", "3", ".", "5", "@-@", "x", "?"]


def test_vocabulary_cap_unk_and_split():
    corpus = text.load_corpus(texts=(["b a c a", " ", "a b d"], ["a e", "c"]), vocab_size=3)
    assert corpus.vocab.itos == ("<unk>", "a", "b")  # a:3, b:2; c, d (1 each) fall outside the cap
    assert corpus.train.tolist() == [2, 1, 0, 1, 1, 2, 0]
    assert corpus.valid.tolist() == [1, 0, 0]
    tie = text.Vocab.build([["y", "x", "z", "z"]], vocab_size=3)
    assert tie.itos == ("<unk>", "z", "x")  # ties alphabetical


def test_batchify_and_chunks():
    streams = text.batchify(torch.arange(23), 2)
    assert streams.tolist() == [list(range(11)), list(range(11, 22))]
    assert text.num_chunks(streams, 3) == 3
    x, y = text.chunk(streams, 1, 3)
    assert x.tolist() == [[3, 4, 5], [14, 15, 16]] and y.tolist() == [[4, 5, 6], [15, 16, 17]]
    x3, _ = text.chunk(streams, 3, 3)  # wraps to chunk 0 (next epoch)
    assert x3.tolist() == [[0, 1, 2], [11, 12, 13]]


def test_mask_tokens_rates():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 50, (200, 200), generator=g)
    xm, labels = text.mask_tokens(x, 50, 50, g)
    sel = labels != -100
    assert abs(sel.float().mean().item() - 0.15) < 0.005
    assert torch.equal(labels[sel], x[sel]) and torch.equal(xm[~sel], x[~sel])
    assert abs((xm[sel] == 50).float().mean().item() - 0.8) < 0.02
    assert abs((xm[sel] == x[sel]).float().mean().item() - 0.1 - 0.1 / 49) < 0.02  # kept, or random = itself


@pytest.mark.parametrize("kwargs, field", [
    (dict(texts=(["a b"], ["a"]), vocab_size=1), "vocab_size"),
    (dict(texts=([" ", ""], ["a"]), vocab_size=5), "corpus"),
    (dict(corpus="/nonexistent/wikitext"), "corpus"),
])
def test_bad_corpus_input_names_the_field(kwargs, field):
    kwargs.setdefault("vocab_size", 10)
    with pytest.raises(ConfigError) as info:
        text.load_corpus(**kwargs)
    assert info.value.field == field


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


@pytest.mark.parametrize("args", [["figures", "joma", "--corpus", "/nonexistent/wt2"],
                                  ["reproduce", "--corpus", "/nonexistent/wt2"]])
def test_cli_missing_corpus_exits_2_with_one_line(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: corpus: "), res.stderr


# ------------------------------------------------------------------------------------------------
# The transformer
# ------------------------------------------------------------------------------------------------
def test_uniform_causal_entropy_value_and_model_at_zero_attention():
    assert round(uniform_causal_entropy(35), 3) == 2.632
    assert uniform_causal_entropy(35) == pytest.approx(math.lgamma(36) / 35, rel=1e-12)  # mean ln i = ln(35!)/35
    torch.manual_seed(0)
    model = TransformerLM(50, d=16, d_hid=16, n_layer=2, dropout=0.0).eval()
    for b in model.blocks:  # q = k = 0 -> every allowed key gets the same score
        for lin in (b.attn.q, b.attn.k):
            torch.nn.init.zeros_(lin.weight), torch.nn.init.zeros_(lin.bias)
    with torch.no_grad():
        _, maps = model(torch.randint(0, 50, (3, 35)), return_attention=True)
    for a in maps:
        assert attention_entropy(a).item() == pytest.approx(uniform_causal_entropy(35), abs=1e-5)


def test_attention_maps_are_causal_rows_sum_to_one_and_match_torch_sdpa():
    torch.manual_seed(1)
    model = TransformerLM(40, d=24, d_hid=32, n_layer=2, n_head=2, dropout=0.0).eval()
    x = torch.randint(0, 40, (2, 12))
    logits, maps = model(x, return_attention=True)
    for a in maps:
        assert a.shape == (2, 2, 12, 12)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, 12))
        assert torch.all(a.triu(1) == 0)
    # the layer output equals torch's fused causal attention (an independent implementation)
    att = model.blocks[0].attn
    h = model.emb(x) * math.sqrt(24) + model.pe[:12]
    split = lambda t: t.view(2, 12, 2, 12).transpose(1, 2)  # noqa: E731
    ref = F.scaled_dot_product_attention(split(att.q(h)), split(att.k(h)), split(att.v(h)), is_causal=True)
    ours, _ = att(h)
    torch.testing.assert_close(ours, att.out(ref.transpose(1, 2).reshape(2, 12, 24)), rtol=1e-5, atol=1e-5)
    # causality of the whole model: changing future tokens leaves earlier logits unchanged
    x2 = x.clone()
    x2[:, 7:] = (x2[:, 7:] + 1) % 40
    torch.testing.assert_close(model(x2)[:, :7], logits[:, :7])
    # the bidirectional (masked-LM) model attends to the future
    enc = TransformerLM(40, d=24, d_hid=32, causal=False, tie=True, dropout=0.0).eval()
    assert enc.decoder.weight is enc.emb.weight
    assert float(enc(x, return_attention=True)[1][0].triu(1).sum()) > 0


def test_stable_rank_of_known_spectrum():
    U, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    W = U[:, :3] @ torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    assert stable_rank(W) == pytest.approx(14 / 9, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# Training: learning, resume
# ------------------------------------------------------------------------------------------------
TINY = TextRunConfig(vocab_size=30, emsize=32, d_hid=32, n_layer=2, dropout=0.1, lr=2e-3, batch_size=8,
                     eval_batch_size=4, bptt=12, steps=120, log_every=60, eval_chunks=4, snapshot_chunk=1)


def _tiny_corpus():
    return text.load_corpus(texts=(_grammar(2500, 0), _grammar(150, 1)), vocab_size=30)


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


def test_full_presets_are_the_papers_protocols():
    j = JT.JomaTextConfig.full().run(n_layer=5)
    assert (j.optimizer, j.lr, j.emsize, j.n_head, j.bptt, j.dropout, j.tie, j.batch_size, j.clip) == \
        ("adam", 1e-4, 200, 1, 35, 0.2, False, 20, 0.5)
    assert JT.JomaTextConfig.full().layers == (1, 2, 5, 10) and len(JT.JomaTextConfig.full().sweep_lrs) == 7
    s = ScanSnapTextConfig.full()
    assert (s.lr, s.ffn_lr, s.lr_decay, s.clip, s.dropout, s.layers) == (5.0, 10.0, 0.95, 0.5, 0.3, (1, 3))
    assert list(s.log_steps()) == [0, 500, 1000, 1500] and s.sweep_lrs == (1.0, 2.0, 3.0, 4.0, 5.0)


def test_wikitext_103_needs_the_datasets_package():
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="datasets"):
            text.check_corpus("wikitext-103")
    else:  # pragma: no cover
        assert text.check_corpus("wikitext-103") == "wikitext-103"
