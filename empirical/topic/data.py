"""The topic paper's data: vocabulary layouts, documents (papers/topic.md §1.1 tau-topic model,
§1.3 LDA) and BERT-style masking (§1.2). Numpy, seeded; token ids are int64.

Vocabulary layouts (``config.vocab``):
* ``theory``: ids ``0..Tv-1`` are words (topic ``id // v``), id ``Tv`` is ``[MASK]``;
* ``code``: the official layout ``PAD=0, MASK=1, START=2, END=3``, word ``k`` -> id ``k+4``
  (topic ``(id-4)//v``); documents are wrapped in START ... END (spec §1.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory.topic import TopicConfig

__all__ = ["Vocabulary", "vocabulary", "DocumentSampler", "mask_batch"]


# ------------------------------------------------------------------------------------------------
# Vocabulary (spec §1.3)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vocabulary:
    size: int
    mask: int
    pad: int | None
    start: int | None
    end: int | None
    word_offset: int
    topic_of: np.ndarray  # topic of each id, -1 for special tokens

    @property
    def n_words(self) -> int:
        return int((self.topic_of >= 0).sum())


def vocabulary(config: TopicConfig) -> Vocabulary:
    n = config.T * config.v
    if config.vocab == "theory":
        topic = np.concatenate([np.arange(n) // config.v, [-1]])
        return Vocabulary(n + 1, n, None, None, None, 0, topic)
    # official ids: topic of id i >= 4 is (i - 4) // v; specials excluded (spec §7 bug 2 fixed)
    topic = np.concatenate([[-1, -1, -1, -1], np.arange(n) // config.v])
    return Vocabulary(n + 4, 1, 0, 2, 3, 4, topic)


# ------------------------------------------------------------------------------------------------
# Documents (spec §1.1 tau-topic model; §1.3 LDA)
# ------------------------------------------------------------------------------------------------
class DocumentSampler:
    """Draws documents as token ids with numpy (seeded). ``sample(B)`` returns ``tokens`` (B, L)
    int64 and ``valid`` (B, L) bool (positions beyond a document's length are PAD / invalid)."""

    def __init__(self, config: TopicConfig, vocab: Vocabulary, seed: int):
        self.c, self.vocab = config, vocab
        self.rng = np.random.default_rng(seed)

    def lengths(self, B: int) -> np.ndarray:
        c = self.c
        if c.N_max and c.N_max > c.N:
            return self.rng.integers(c.N, c.N_max + 1, size=B)
        return np.full(B, c.N)

    def topic_weights(self, B: int) -> np.ndarray:
        """(B, T) per-document topic distribution: tau distinct topics uniformly (theory) or
        ``Dir(alpha 1_T)`` (LDA)."""
        c = self.c
        if c.data == "lda":
            return self.rng.dirichlet(np.full(c.T, c.alpha), size=B)
        chosen = np.argsort(self.rng.random((B, c.T)), axis=1)[:, : c.tau]
        w = np.zeros((B, c.T))
        np.put_along_axis(w, chosen, 1.0 / c.tau, axis=1)
        return w

    def sample(self, B: int) -> tuple[np.ndarray, np.ndarray]:
        c, voc = self.c, self.vocab
        lens = self.lengths(B)
        L = int(lens.max())
        theta = self.topic_weights(B)
        cum = np.cumsum(theta, axis=1)
        u = self.rng.random((B, L))
        topic = (u[..., None] > cum[:, None, :]).sum(-1).clip(max=c.T - 1)
        word = topic * c.v + self.rng.integers(0, c.v, size=(B, L))
        tokens = word + voc.word_offset
        valid = np.arange(L)[None, :] < lens[:, None]
        if voc.start is not None:  # official: START + words + END, PAD after
            pad = np.full((B, 1), voc.pad)
            tokens = np.concatenate([np.full((B, 1), voc.start), tokens, pad], axis=1)
            tokens[np.arange(B), lens + 1] = voc.end
            valid = np.concatenate([np.ones((B, 1), bool), valid, np.zeros((B, 1), bool)], axis=1)
            valid[np.arange(B), lens + 1] = True
            tokens = np.where(valid, tokens, voc.pad)
        else:
            tokens = np.where(valid, tokens, 0)
        return tokens.astype(np.int64), valid


def mask_batch(tokens: np.ndarray, valid: np.ndarray, config: TopicConfig, vocab: Vocabulary,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style masking (spec §1.2): each word position is selected w.p. ``p_m`` (at least one
    per document: if none is, one uniformly random word position is); a selected position
    becomes MASK w.p. ``1-p_c-p_r``, a random id w.p. ``p_r`` (words only, or all ids with
    ``random_ids="all"`` as in the code), unchanged w.p. ``p_c``. Returns ``(masked, selected)``."""
    c = config
    is_word = valid & (vocab.topic_of[tokens] >= 0)
    sel = is_word & (rng.random(tokens.shape) < c.p_m)
    none = ~sel.any(1)
    if none.any():
        for b in np.nonzero(none)[0]:
            sel[b, rng.choice(np.nonzero(is_word[b])[0])] = True
    u = rng.random(tokens.shape)
    masked = tokens.copy()
    to_mask = sel & (u < 1 - c.p_c - c.p_r)
    to_rand = sel & (u >= 1 - c.p_c - c.p_r) & (u < 1 - c.p_c)
    if c.random_ids == "all":
        rand = rng.integers(0, vocab.size, size=tokens.shape)
    else:
        rand = rng.integers(0, vocab.n_words, size=tokens.shape) + vocab.word_offset
    masked[to_mask] = vocab.mask
    masked[to_rand] = rand[to_rand]
    return masked, sel


