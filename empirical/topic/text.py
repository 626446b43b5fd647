"""The topic paper's real-text protocol (docs/papers/topic.md §5 items 1 and 7; the paper row's
``text`` slot): LDA topics of the WikiText-2 training text, the top fraction of words per topic
(non-overlapping), and same-topic / different-topic ratios of embedding cosine, embedding dot
product and attention weight, for a masked-LM-trained model and its random initialisation (the
control).

**LDA library: scikit-learn** (``LatentDirichletAllocation(learning_method="online")``), which is
Hoffman et al.'s (2010) online variational Bayes, the algorithm the spec names and gensim's
``LdaModel`` implements (an optional extra, ``[text]``). The protocol is one run whose trained
model (not just its trajectory) feeds the ratios, so it runs in-process (not as sweep cells), once
per seed of ``seeds`` (the masked LM's initialisation and minibatch order; the LDA fit, seeded by
``lda_seed``, is shared by every seed), each seed on one torch thread (the model is small: a second
thread bought no wall time on 2 cores and doubled the CPU time).
The shared real-text machinery (corpus, runs, the protocol base class) is in
:mod:`empirical.realtext` and :mod:`empirical.textrun`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from theory.errors import ConfigError

from .. import text
from ..realtext import FULL_VOCAB, TextProtocol
from ..textrun import TextExperiment, TextRunConfig, check_fits, corpus_for, train_text
from ..trainer import resolve_device

__all__ = ["TopicTextConfig", "topic_protocol", "lda_topic_words", "topic_assignment", "topic_ratios", "pair_gaps",
           "pair_cosines", "PERMUTATIONS"]


@dataclass(frozen=True)
class TopicTextConfig(TextProtocol):
    """Masked LM (15 % selected; 80/10/10; tied decoder, BERT style) of ``n_layer`` x ``n_head``
    trained with Adam ``lr``; LDA with ``num_topics`` topics, ``passes`` online passes over the
    training paragraphs of at least ``min_doc_tokens`` tokens; ``thresholds`` = fractions of the
    LDA vocabulary kept per topic (at least 2 words), words in several topics' lists dropped;
    ``seeds``: one masked-LM run (and its initialisation, the control) per seed; ``lda_seed``: the
    LDA fit's ``random_state`` (one fit shared by every seed)."""

    vocab_size: int = 5000
    n_layer: int = 1
    n_head: int = 1
    dropout: float = 0.1
    lr: float = 1e-3
    bptt: int = 64
    batch_size: int = 20
    steps: int = 400
    log_every: int = 100
    num_topics: int = 20
    passes: int = 3
    min_doc_tokens: int = 20
    thresholds: tuple[float, ...] = (0.0005, 0.001, 0.002)
    attention_chunks: int = 100
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    lda_seed: int = 1

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, n_layer=4, n_head=4, emsize=256, d_hid=1024, lr=3e-4, bptt=128,
                steps=20000, log_every=1000, num_topics=100, passes=6, eval_chunks=0, attention_chunks=0,
                seeds=tuple(range(1, 13)))

    def run(self, **changes) -> TextRunConfig:
        """A masked-LM run of this protocol (default: the first seed)."""
        return super().run(**{"objective": "mlm", "tie": True, "seed": self.seeds[0], **changes})

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        return topic_protocol(self, device=device, progress=progress)

    def check_corpus(self) -> None:
        """The streams' check, and LDA's inputs: a paragraph of ``min_doc_tokens`` tokens and a
        word of the LDA vocabulary (:func:`lda_inputs`)."""
        corpus = check_fits(self.run())
        lda_inputs(self, corpus.vocab.itos, corpus.lines_train)


def lda_inputs(cfg: TopicTextConfig, vocab_itos, lines) -> tuple[list[str], list[list[str]]]:
    """``(words, docs)`` of the LDA fit: model-vocabulary words of >= 3 letters that are not English
    stop words, and the training paragraphs of at least ``min_doc_tokens`` tokens;
    ``ConfigError('corpus', ...)`` when either is empty (nothing to fit)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    words = [w for w in vocab_itos[1:] if len(w) >= 3 and w.isalpha() and w not in ENGLISH_STOP_WORDS]
    docs = [list(toks) for toks in lines if len(toks) >= cfg.min_doc_tokens]
    if not words:
        raise ConfigError("corpus", "no word for the LDA topics (words of >= 3 letters that are not stop words)")
    if not docs:
        raise ConfigError("corpus", f"no training paragraph of >= {cfg.min_doc_tokens} tokens for the LDA topics")
    return words, docs


def lda_topic_words(cfg: TopicTextConfig, vocab_itos, lines) -> tuple[np.ndarray, list[str]]:
    """Fit LDA (scikit-learn, online VB) on training paragraphs; returns ``(beta, words)`` with
    ``beta[k, w] = P(word w | topic k)`` over the LDA vocabulary ``words`` (model-vocabulary words
    of >= 3 letters that are not English stop words)."""
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import CountVectorizer

    words, docs = lda_inputs(cfg, vocab_itos, lines)
    X = CountVectorizer(analyzer=lambda d: d, vocabulary=words).fit_transform(docs)
    lda = LatentDirichletAllocation(n_components=cfg.num_topics, learning_method="online", max_iter=cfg.passes,
                                    random_state=cfg.lda_seed, n_jobs=1)
    lda.fit(X)
    beta = lda.components_ / lda.components_.sum(1, keepdims=True)
    return beta, words


def topic_assignment(beta: np.ndarray, words: list[str], fraction: float) -> dict[str, int]:
    """Top ``max(2, round(fraction * len(words)))`` words of each topic; words listed under more
    than one topic are dropped (the spec's non-overlapping table). ``word -> topic``."""
    k = max(2, int(round(fraction * len(words))))
    lists = [np.argsort(-b)[:k] for b in beta]
    counts = np.bincount(np.concatenate(lists), minlength=len(words))
    return {words[w]: t for t, ws in enumerate(lists) for w in ws if counts[w] == 1}


#: label permutations of the per-seed permutation null (:func:`pair_gaps`)
PERMUTATIONS = 200


def _gaps(S: np.ndarray, N: np.ndarray, labels: np.ndarray) -> tuple[float, float, float]:
    """``(mean_same, mean_diff, gap)`` of word-pair sums ``S`` and counts ``N`` (``W x W``, distinct
    word pairs only) under the word -> topic ``labels``."""
    same = labels[:, None] == labels[None, :]
    s_same, n_same = S[same].sum(), N[same].sum()
    s_diff, n_diff = S[~same].sum(), N[~same].sum()
    ms = s_same / n_same if n_same else np.nan
    md = s_diff / n_diff if n_diff else np.nan
    return float(ms), float(md), float(ms - md)


def pair_cosines(E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Word-pair sums and counts (``W x W``, each distinct pair once) of the cosine of the
    embeddings ``E`` (``W x d``); a pair with a zero embedding has no cosine (count 0)."""
    nrm = np.linalg.norm(E, axis=1)
    norms = np.outer(nrm, nrm)
    pairs = np.triu(norms > 0, 1)
    return np.divide(E @ E.T, norms, out=np.zeros_like(norms), where=pairs), pairs.astype(float)


def pair_gaps(name: str, S: np.ndarray, N: np.ndarray, topic: np.ndarray, *, rng: np.random.Generator,
              permutations: int = PERMUTATIONS) -> dict[str, float]:
    """Same-topic and different-topic means of a statistic given its word-pair sums ``S`` and
    counts ``N`` (``W x W`` over the assigned words; each distinct pair once for the embeddings,
    every query-key position pair for the attention), their ratio and gap, and the gap's
    **permutation null**: the topic labels permuted over the words (topic sizes kept)
    ``permutations`` times, with every dependence of the pairs kept (pairs sharing a word, a query,
    a sequence). ``<name>_perm_z`` = (gap - null mean) / null SD, a calibrated z: standard under
    exchangeable labels whatever the dependence, unlike a z treating the pairs as independent.
    Undefined values are NaN, not infinities: the ratio when the different-topic mean is 0, the z
    when fewer than two permutations have a gap or their gaps do not vary."""
    ms, md, gap = _gaps(S, N, topic)
    perms = [_gaps(S, N, rng.permutation(topic)) for _ in range(permutations)]
    null = np.array([g for _, _, g in perms])
    finite = null[np.isfinite(null)]  # a permutation without same- or different-topic pairs has no gap
    sd = float(finite.std(ddof=1)) if finite.size > 1 else float("nan")
    z = (gap - float(finite.mean())) / sd if sd > 0 else float("nan")  # sd nan or 0: no calibrated z
    return {f"{name}_same": ms, f"{name}_diff": md, f"{name}_ratio": ms / md if md != 0 else float("nan"),
            f"{name}_gap": gap,
            f"{name}_shuffled_same": perms[0][0] if perms else float("nan"),
            f"{name}_shuffled_diff": perms[0][1] if perms else float("nan"),
            f"{name}_perm_z": z,
            f"{name}_perm_p": float((1 + np.sum(np.abs(finite) >= abs(gap))) / (1 + finite.size))}


@torch.no_grad()
def topic_ratios(exp: TextExperiment, assigns: list[dict[str, int]], chunks: int = 0, *,
                 seed: int = 0) -> list[dict[str, float]]:
    """For each word -> topic assignment: same-topic / different-topic ratios and gaps of the
    average embedding cosine, embedding dot product (each distinct word pair once) and attention
    weight (query-key pairs of distinct positions whose words are both assigned; mean over layers
    and heads; eval mode, no masking; the first ``chunks`` validation chunks, 0 = all), each with
    its per-seed permutation null (:func:`pair_gaps`, generator seeded with ``seed``)."""
    stoi, dev = exp.corpus.vocab.stoi, exp.device
    out, lookups = [], []
    for assign in assigns:
        ids = torch.as_tensor([stoi[w] for w in assign], device=dev)
        E = exp.model.emb.weight[ids].double().cpu().numpy()
        lookup = torch.full((len(exp.corpus.vocab),), -1, dtype=torch.long, device=dev)
        lookup[ids] = torch.arange(len(assign), device=dev)  # position in the assignment's word list
        lookups.append(lookup)
        out.append({"E": E})
    W = [len(a) for a in assigns]
    att_sum = [torch.zeros(w, w, dtype=torch.float64) for w in W]
    att_cnt = [torch.zeros(w, w, dtype=torch.float64) for w in W]
    n = text.num_chunks(exp.valid_streams, exp.config.bptt)
    for i in range(min(chunks, n) if chunks else n):
        x, _ = text.chunk(exp.valid_streams, i, exp.config.bptt)
        att = torch.stack(exp.attention(x)).mean((0, 2))  # (B, T, T): mean over layers, heads
        off = ~torch.eye(x.shape[1], dtype=torch.bool, device=dev)
        for a_i, lookup in enumerate(lookups):
            w = lookup[x]  # (B, T) word index of each position, -1 if unassigned
            both = (w[:, :, None] >= 0) & (w[:, None, :] >= 0) & off
            wq = w[:, :, None].expand_as(both)[both]
            wk = w[:, None, :].expand_as(both)[both]
            flat = (wq * W[a_i] + wk).cpu()
            att_sum[a_i].view(-1).index_add_(0, flat, att[both].double().cpu())
            att_cnt[a_i].view(-1).index_add_(0, flat, torch.ones(flat.numel(), dtype=torch.float64))
    rng = np.random.default_rng(seed)
    res = []
    for assign, o, S_att, N_att in zip(assigns, out, att_sum, att_cnt):
        topic = np.array(list(assign.values()))
        E = o["E"]
        dot = E @ E.T
        upper = np.triu(np.ones_like(dot, dtype=bool), 1)  # each distinct pair once
        r = {"n_words": len(assign), "n_topics": len(set(assign.values()))}
        r.update(pair_gaps("cosine", *pair_cosines(E), topic, rng=rng))
        r.update(pair_gaps("dot", np.where(upper, dot, 0.0), upper.astype(float), topic, rng=rng))
        S_a, N_a = S_att.numpy(), N_att.numpy()
        r.update(pair_gaps("attention", S_a, N_a, topic, rng=rng))
        same = topic[:, None] == topic[None, :]
        r.update({"attention_pairs_same": int(N_a[same].sum()), "attention_pairs_diff": int(N_a[~same].sum())})
        res.append(r)
    return res


def topic_protocol(cfg: TopicTextConfig, *, device: str = "auto", progress: bool = False) -> dict[str, Any]:
    """Returns ``table`` (DataFrame: seed, model in {trained, control}, threshold, the three
    ratios, their numerators/denominators, gaps and permutation z; one block per seed of ``cfg.seeds``),
    ``traj`` (the first seed's masked-LM run), ``topics`` (word lists at the first threshold),
    ``seconds`` (training of every seed plus the LDA fit) and ``lda_seconds``."""
    import time

    from ..trainer import torch_threads

    corpus = corpus_for(cfg.run())
    t0 = time.perf_counter()
    beta, words = lda_topic_words(cfg, corpus.vocab.itos, corpus.lines_train)
    lda_seconds = time.perf_counter() - t0
    assigns = [topic_assignment(beta, words, thr) for thr in cfg.thresholds]
    rows, trajs, seconds = [], [], lda_seconds
    for seed in cfg.seeds:
        run = cfg.run(seed=seed)
        with torch_threads(1):
            traj, trained, sec = train_text(run, device=device, progress=progress, corpus=corpus)
            control = TextExperiment(run, corpus)
            torch.manual_seed(run.seed)  # the Trainer's seeding: the control is the trained model's initialisation
            gen = torch.Generator(device=resolve_device(device))
            gen.manual_seed(run.seed)
            control.setup(resolve_device(device), gen)
            rows += [{"seed": seed, "model": name, "threshold": thr, **r}
                     for name, exp in (("trained", trained), ("control", control))
                     for thr, r in zip(cfg.thresholds, topic_ratios(exp, assigns, cfg.attention_chunks, seed=seed))]
        trajs.append(traj)
        seconds += sec
    return {"table": pd.DataFrame(rows), "traj": trajs[0], "topics": assigns[0], "seconds": seconds,
            "lda_seconds": lda_seconds}
