"""The topic paper's real-text protocol (papers/topic.md §5 items 1 and 7; the paper row's
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

from .. import text
from ..realtext import FULL_VOCAB, TextProtocol
from ..textrun import TextExperiment, TextRunConfig, corpus_for, train_text
from ..trainer import resolve_device

__all__ = ["TopicTextConfig", "topic_protocol", "lda_topic_words", "topic_assignment", "topic_ratios"]


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


def lda_topic_words(cfg: TopicTextConfig, vocab_itos, lines) -> tuple[np.ndarray, list[str]]:
    """Fit LDA (scikit-learn, online VB) on training paragraphs; returns ``(beta, words)`` with
    ``beta[k, w] = P(word w | topic k)`` over the LDA vocabulary ``words`` (model-vocabulary words
    of >= 3 letters that are not English stop words)."""
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

    words = [w for w in vocab_itos[1:] if len(w) >= 3 and w.isalpha() and w not in ENGLISH_STOP_WORDS]
    docs = [list(toks) for toks in lines if len(toks) >= cfg.min_doc_tokens]
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


def _gap_z(s_sum, s_sq, n_s, d_sum, d_sq, n_d) -> float:
    """``(mean_same - mean_diff) / standard error`` of two groups given sums and sums of squares
    (pairs treated as independent: a rough scale for "is the gap beyond noise")."""
    ms, md = s_sum / n_s, d_sum / n_d
    var = (s_sq / n_s - ms**2) / n_s + (d_sq / n_d - md**2) / n_d
    return float((ms - md) / np.sqrt(var)) if var > 0 else float("nan")


def _pair_stats(name: str, sim: np.ndarray, topic: np.ndarray) -> dict[str, float]:
    same = topic[:, None] == topic[None, :]
    s, d = sim[same & ~np.eye(len(topic), dtype=bool)], sim[~same]
    return {f"{name}_same": s.mean(), f"{name}_diff": d.mean(), f"{name}_ratio": s.mean() / d.mean(),
            f"{name}_gap_z": _gap_z(s.sum(), (s * s).sum(), s.size, d.sum(), (d * d).sum(), d.size)}


@torch.no_grad()
def topic_ratios(exp: TextExperiment, assigns: list[dict[str, int]], chunks: int = 0) -> list[dict[str, float]]:
    """For each word -> topic assignment: same-topic / different-topic ratios of the average
    embedding cosine, embedding dot product (distinct word pairs) and attention weight (query-key
    pairs of distinct positions whose words are both assigned; mean over layers and heads; eval
    mode, no masking; the first ``chunks`` validation chunks, 0 = all), with each gap's z-score."""
    stoi, dev = exp.corpus.vocab.stoi, exp.device
    out, lookups = [], []
    for assign in assigns:
        ids = torch.as_tensor([stoi[w] for w in assign], device=dev)
        topic = np.array(list(assign.values()))
        E = exp.model.emb.weight[ids].double().cpu().numpy()
        dot = E @ E.T
        nrm = np.linalg.norm(E, axis=1)
        out.append({**_pair_stats("cosine", dot / np.outer(nrm, nrm), topic), **_pair_stats("dot", dot, topic),
                    "n_words": len(assign), "n_topics": len(set(assign.values()))})
        lookup = torch.full((len(exp.corpus.vocab),), -1, dtype=torch.long, device=dev)
        lookup[ids] = torch.as_tensor(topic, device=dev)
        lookups.append(lookup)
    acc = torch.zeros(len(assigns), 3, 2, dtype=torch.float64)  # (assignment, sum/sumsq/count, same/diff)
    n = text.num_chunks(exp.valid_streams, exp.config.bptt)
    for i in range(min(chunks, n) if chunks else n):
        x, _ = text.chunk(exp.valid_streams, i, exp.config.bptt)
        att = torch.stack(exp.attention(x)).mean((0, 2))  # (B, T, T): mean over layers, heads
        off = ~torch.eye(x.shape[1], dtype=torch.bool, device=dev)
        for a_i, lookup in enumerate(lookups):
            t = lookup[x]  # (B, T) topic of each position, -1 if unassigned
            both = (t[:, :, None] >= 0) & (t[:, None, :] >= 0) & off
            same = both & (t[:, :, None] == t[:, None, :])
            for k, m in enumerate((same, both & ~same)):
                a = att[m].double().cpu()
                acc[a_i, :, k] += torch.stack([a.sum(), (a * a).sum(), torch.tensor(float(a.numel()))])
    for res, (tot, sq, cnt) in zip(out, acc.numpy()):
        res.update({"attention_same": tot[0] / cnt[0], "attention_diff": tot[1] / cnt[1],
                    "attention_ratio": (tot[0] / cnt[0]) / (tot[1] / cnt[1]),
                    "attention_gap_z": _gap_z(tot[0], sq[0], cnt[0], tot[1], sq[1], cnt[1]),
                    "attention_pairs_same": int(cnt[0]), "attention_pairs_diff": int(cnt[1])})
    return out


def topic_protocol(cfg: TopicTextConfig, *, device: str = "auto", progress: bool = False) -> dict[str, Any]:
    """Returns ``table`` (DataFrame: seed, model in {trained, control}, threshold, the three
    ratios, their numerators/denominators and gap z-scores; one block per seed of ``cfg.seeds``),
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
                     for thr, r in zip(cfg.thresholds, topic_ratios(exp, assigns, cfg.attention_chunks))]
        trajs.append(traj)
        seconds += sec
    return {"table": pd.DataFrame(rows), "traj": trajs[0], "topics": assigns[0], "seconds": seconds,
            "lda_seconds": lda_seconds}
