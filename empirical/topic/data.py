"""The topic paper's data: vocabulary layouts, documents (docs/papers/topic.md §1.1 tau-topic model,
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

__all__ = ["Vocabulary", "vocabulary", "DocumentSampler", "documents", "topic_weights", "mask_batch", "mask_selection",
           "mask_draws", "apply_mask"]


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
    int64 and ``valid`` (B, L) bool (positions beyond a document's length are PAD / invalid).

    ``sample`` = :func:`documents` of :meth:`draw`: the random numbers, then a deterministic
    transform that also works on the draws of many seeds stacked along a leading dim (the batched
    runs of :mod:`empirical.topic.seeds` draw per seed and transform once)."""

    def __init__(self, config: TopicConfig, vocab: Vocabulary, seed: int):
        self.c, self.vocab = config, vocab
        self.rng = np.random.default_rng(seed)

    def lengths(self, B: int) -> np.ndarray:
        c = self.c
        if c.N_max and c.N_max > c.N:
            return self.rng.integers(c.N, c.N_max + 1, size=B)
        return np.full(B, c.N)

    def draw(self, B: int) -> dict[str, np.ndarray]:
        """The random numbers of ``B`` documents, in the stream's order: lengths (LDA layout),
        the topic draws (tau distinct topics: uniform keys whose ``tau`` smallest pick them;
        LDA: ``Dir(alpha 1_T)`` weights), then per position a uniform (its topic) and an integer
        (its word within the topic)."""
        c = self.c
        lens = self.lengths(B)
        topics = self.rng.dirichlet(np.full(c.T, c.alpha), size=B) if c.data == "lda" else self.rng.random((B, c.T))
        L = int(lens.max())
        return {"lens": lens, "topics": topics, "u": self.rng.random((B, L)),
                "word": self.rng.integers(0, c.v, size=(B, L))}

    def topic_weights(self, B: int) -> np.ndarray:
        """(B, T) per-document topic distribution: tau distinct topics uniformly (theory) or
        ``Dir(alpha 1_T)`` (LDA)."""
        c = self.c
        if c.data == "lda":
            return self.rng.dirichlet(np.full(c.T, c.alpha), size=B)
        return topic_weights(self.rng.random((B, c.T)), c)

    def sample(self, B: int) -> tuple[np.ndarray, np.ndarray]:
        return documents(self.draw(B), self.c, self.vocab)


def topic_weights(keys: np.ndarray, config: TopicConfig) -> np.ndarray:
    """``(..., T)`` uniform keys -> weights ``1/tau`` on the ``tau`` topics with the smallest keys."""
    chosen = np.argsort(keys, axis=-1)[..., : config.tau]
    w = np.zeros(keys.shape)
    np.put_along_axis(w, chosen, 1.0 / config.tau, axis=-1)
    return w


def documents(draws: dict[str, np.ndarray], config: TopicConfig, vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`DocumentSampler.draw`'s numbers -> ``(tokens, valid)``, both ``(..., B, L)`` (a leading
    seed dim allowed: the draws of several seeds stacked, ``u``/``word`` padded to a common length)."""
    c, voc = config, vocab
    lens, u = draws["lens"], draws["u"]
    theta = draws["topics"] if c.data == "lda" else topic_weights(draws["topics"], c)
    cum = np.cumsum(theta, axis=-1)
    topic = np.zeros(u.shape, dtype=np.int64)  # the number of cumulative weights below u (a loop over T:
    for t in range(c.T):                         # one pass per topic, no (..., L, T) temporary)
        topic += u > cum[..., t, None]
    topic = topic.clip(max=c.T - 1)
    tokens = topic * c.v + draws["word"] + voc.word_offset
    L = u.shape[-1]
    valid = np.arange(L) < lens[..., None]
    if voc.start is not None:  # official: START + words + END, PAD after
        lead = tokens.shape[:-1]
        tokens = np.concatenate([np.full((*lead, 1), voc.start), tokens, np.full((*lead, 1), voc.pad)], axis=-1)
        valid = np.concatenate([np.ones((*lead, 1), bool), valid, np.zeros((*lead, 1), bool)], axis=-1)
        end = (np.arange(L + 2) == lens[..., None] + 1)
        tokens = np.where(end, voc.end, tokens)
        valid = valid | end
        tokens = np.where(valid, tokens, voc.pad)
    else:
        tokens = np.where(valid, tokens, 0)
    return tokens.astype(np.int64), valid


def mask_batch(tokens: np.ndarray, valid: np.ndarray, config: TopicConfig, vocab: Vocabulary,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style masking (spec §1.2): each word position is selected w.p. ``p_m`` (at least one
    per document: if none is, one uniformly random word position is); a selected position
    becomes MASK w.p. ``1-p_c-p_r``, a random id w.p. ``p_r`` (words only, or all ids with
    ``random_ids="all"`` as in the code), unchanged w.p. ``p_c``. Returns ``(masked, selected)``.
    The draws are :func:`mask_selection` then :func:`mask_draws`; the transform :func:`apply_mask`."""
    sel = mask_selection(tokens, valid, config, vocab, rng)
    return apply_mask(tokens, sel, mask_draws(rng, tokens.shape, config, vocab), config, vocab), sel


def mask_selection(tokens: np.ndarray, valid: np.ndarray, config: TopicConfig, vocab: Vocabulary,
                   rng: np.random.Generator, uniform: np.ndarray | None = None) -> np.ndarray:
    """The selected positions ``(B, L)``: a uniform per position (``uniform``: drawn already, e.g.
    batched) below ``p_m`` among word positions; a document with none gets one uniformly random
    word position (``rng.choice``, in document order)."""
    is_word = valid & (vocab.topic_of[tokens] >= 0)
    sel = is_word & ((rng.random(tokens.shape) if uniform is None else uniform) < config.p_m)
    none = ~sel.any(-1)
    if none.any():
        for b in np.nonzero(none)[0]:
            sel[b, rng.choice(np.nonzero(is_word[b])[0])] = True
    return sel


def mask_draws(rng: np.random.Generator, shape, config: TopicConfig, vocab: Vocabulary) -> dict[str, np.ndarray]:
    """The masking numbers after the selection: a uniform per position (MASK / random / kept) and
    a random id per position."""
    u = rng.random(shape)
    if config.random_ids == "all":
        rand = rng.integers(0, vocab.size, size=shape)
    else:
        rand = rng.integers(0, vocab.n_words, size=shape) + vocab.word_offset
    return {"u": u, "rand": rand}


def apply_mask(tokens: np.ndarray, sel: np.ndarray, draws: dict[str, np.ndarray], config: TopicConfig,
               vocab: Vocabulary) -> np.ndarray:
    """The masked tokens (any leading dims): MASK where ``u < 1-p_c-p_r``, the random id where
    ``u`` lies in ``[1-p_c-p_r, 1-p_c)``, the token itself otherwise (selected positions only)."""
    c, u = config, draws["u"]
    masked = np.where(sel & (u < 1 - c.p_c - c.p_r), vocab.mask, tokens)
    return np.where(sel & (u >= 1 - c.p_c - c.p_r) & (u < 1 - c.p_c), draws["rand"], masked)
