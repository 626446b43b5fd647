"""empirical/text.py: tokeniser, vocabulary, batching, masking, corpus checks (tiny in-memory
corpora; no WikiText needed)."""

import pytest
import torch

from empirical import text
from theory.errors import ConfigError


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


def test_wikitext_103_needs_the_datasets_package():
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="datasets"):
            text.check_corpus("wikitext-103")
    else:  # pragma: no cover
        assert text.check_corpus("wikitext-103") == "wikitext-103"
