"""The three papers' real-text protocols (issue 10), each a function of a frozen, validated Config
with ``quick()`` (CPU, small vocabulary, short runs; what ``make figures`` runs) and ``full()``
(the papers' protocols, for a GPU) presets. Every run is a :func:`empirical.textrun.train_text`.

* :func:`scan_snap_protocol` — papers/scan_snap.md §5.6: Fig. 7 (lowest-layer attention maps of
  1- and 3-layer models at iterations 0, 500, 1000, 1500; SGD lr 5, FFN lr 10, StepLR 0.95 per
  epoch, clip 0.5, dropout 0.3, as the official notebook) and Fig. 10 (validation attention
  entropy of a 1-layer model vs one SGD learning rate eta for all parameters, several seeds).
* :func:`joma_protocol` — papers/joma.md Figs. 6 and 8: per-layer validation attention entropy and
  fc1 stable rank over training for several depths (Adam 1e-4, emsize 200, one head, bptt 35,
  dropout 0.2, untied decoder) and the Adam learning-rate sweep of the 5-layer model.
* :func:`topic_protocol` — papers/topic.md §5 items 1 and 7: LDA topics of the training text, top
  fraction of words per topic (non-overlapping), and same-topic / different-topic ratios of
  embedding cosine, embedding dot product and attention weight, for a masked-LM-trained model and
  its random initialisation (the control).

**LDA library: scikit-learn** (``LatentDirichletAllocation(learning_method="online")``), which is
Hoffman et al.'s (2010) online variational Bayes, the algorithm the spec names and gensim's
``LdaModel`` implements; scikit-learn installs from wheels for current numpy/scipy, is seeded by
``random_state``, and needs no corpus/dictionary conversion. It is an optional extra (``[text]``).

**Runs as sweep cells.** The Scan & Snap and JoMA protocols are grids of independent runs; each
run is a cell of :mod:`empirical.sweeps` computed by :func:`empirical.textrun.text_cell`
(:func:`run_text_cells`): a result store makes an interrupted protocol resume without recomputing
finished runs, and ``workers=K`` / ``ray=ADDRESS`` run the cells in parallel. Topic's protocol is
one run whose trained model (not just its trajectory) feeds the ratios, so it runs in-process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import torch

from theory.errors import ConfigError

from . import text
from .sweeps import Cell, load_cells, run_cells
from .textrun import (CELL_THREADS, TextExperiment, TextRunConfig, TextSettings, cell_config, cell_progress, corpus_for,
                      train_text)
from .trainer import resolve_device

__all__ = ["ScanSnapTextConfig", "JomaTextConfig", "TopicTextConfig", "scan_snap_protocol", "joma_protocol",
           "topic_protocol", "run_text_cells", "per_layer_summary", "lda_topic_words", "topic_ratios", "TEXT_CELL"]

#: the sweep cell function of every real-text run (:func:`empirical.textrun.text_cell`)
TEXT_CELL = "empirical.textrun:text_cell"
#: vocabulary cap of the full presets: above the 12,455 types of the training split wiki.test.tokens (= no cap)
FULL_VOCAB = 40000


@dataclass(frozen=True)
class _TextProtocol(TextSettings):
    """A protocol's shared settings; ``steps``/``log_every`` are those of its main runs."""

    vocab_size: int = 1000
    steps: int = 240
    log_every: int = 80
    eval_chunks: int = 8

    def validate(self) -> None:
        self.run().validate()
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, tuple) and (not v or any(not x > 0 for x in v)):
                raise ConfigError(f.name, f"must be a non-empty tuple of positive numbers, got {v!r}")

    def run(self, **changes) -> TextRunConfig:
        """The :class:`TextRunConfig` of one run of this protocol."""
        base = {f.name: getattr(self, f.name) for f in fields(TextRunConfig) if hasattr(self, f.name)}
        return TextRunConfig(**{**base, **changes})

    def sweep_run(self, **changes) -> TextRunConfig:
        """The run the paper sweeps (``tdyn sweep PAPER --kind text``'s base config)."""
        return self.run(**changes)

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        """Run this protocol (``sweep``: ``store``/``workers``/``ray`` for protocols run as cells)."""
        raise NotImplementedError

    @classmethod
    def quick(cls, **changes) -> "_TextProtocol":
        return cls(**{**cls.QUICK, **changes})

    @classmethod
    def full(cls, **changes) -> "_TextProtocol":
        return cls(**{**cls.FULL, **changes})


# ------------------------------------------------------------------------------------------------
# Scan & Snap, Figs. 7 and 10
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScanSnapTextConfig(_TextProtocol):
    """Fig. 7: ``layers`` models, SGD ``lr`` (FFN ``ffn_lr``), StepLR ``lr_decay`` per epoch, clip
    ``clip``, ``dropout``; attention maps logged at ``log_steps()``. Fig. 10: 1-layer models, one
    SGD learning rate per run (``sweep_lrs``) for every parameter, ``seeds``, ``sweep_steps``
    minibatches, ``sweep_dropout``."""

    dropout: float = 0.3
    lr: float = 5.0
    ffn_lr: float = 10.0
    lr_decay: float = 0.95
    clip: float = 0.5
    layers: tuple[int, ...] = (1, 3)
    sweep_lrs: tuple[float, ...] = (1.0, 3.0, 5.0)
    seeds: tuple[int, ...] = (1, 2)
    sweep_steps: int = 120
    sweep_dropout: float = 0.2

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, steps=1500, log_every=500, sweep_lrs=(1.0, 2.0, 3.0, 4.0, 5.0),
                seeds=(1, 2, 3, 4, 5), sweep_steps=1725, eval_chunks=0)  # 5 epochs of the split

    def sweep_run(self, **changes) -> TextRunConfig:
        """A Fig. 10 run: 1 layer, one SGD learning rate for every parameter, no decay."""
        return self.run(**{"n_layer": 1, "optimizer": "sgd", "lr": self.sweep_lrs[0], "ffn_lr": 0.0, "lr_decay": 1.0,
                           "dropout": self.sweep_dropout, "seed": self.seeds[0], "steps": self.sweep_steps,
                           "log_every": self.sweep_steps, **changes})

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        return scan_snap_protocol(self, device=device, progress=progress, **sweep)


def scan_snap_protocol(cfg: ScanSnapTextConfig, *, device: str = "auto", progress: bool = False,
                       store: str | Path | None = None, workers: int = 1, ray: str | None = None) -> dict[str, Any]:
    """Returns ``maps[n_layer] = {step: (T, T) map}``, ``traj[n_layer]`` (validation entropy per
    layer over training), ``sweep`` (DataFrame: lr, seed, entropy, val_loss) and ``seconds``.
    Every run is a cell of :func:`run_text_cells` (``store``, ``workers``, ``ray``)."""
    jobs = [({"part": "fig7", "n_layer": L}, cfg.run(n_layer=L, optimizer="sgd", seed=cfg.seeds[0]))
            for L in cfg.layers]
    grid = [(lr, seed) for lr in cfg.sweep_lrs for seed in cfg.seeds]
    jobs += [({"part": "fig10", "lr": lr, "seed": seed}, cfg.sweep_run(lr=lr, seed=seed)) for lr, seed in grid]
    trajs = run_text_cells("scan-snap", jobs, device=device, progress=progress, store=store, workers=workers, ray=ray)
    out: dict[str, Any] = {"maps": {}, "traj": {}, "seconds": sum(t.attrs["train_seconds"] for t in trajs)}
    for L, traj in zip(cfg.layers, trajs):
        out["maps"][L] = {int(s): m for s, m in zip(traj["step"].values, traj["snapshot"].values)}
        out["traj"][L] = traj.drop_vars("snapshot")
    out["sweep"] = pd.DataFrame([{"lr": lr, "seed": seed, "entropy": float(t["entropy_layer0"].values[-1]),
                                  "val_loss": float(t["val_loss"].values[-1])}
                                 for (lr, seed), t in zip(grid, trajs[len(cfg.layers):])])
    return out


def run_text_cells(paper: str, jobs: Sequence[tuple[Mapping[str, Any], TextRunConfig]], *, device: str = "auto",
                   progress: bool = False, store: str | Path | None = None, workers: int = 1,
                   ray: str | None = None) -> list:
    """Run ``jobs`` (``(swept values, run config)`` pairs) as cells of :func:`empirical.sweeps.run_cells`
    with :func:`empirical.textrun.text_cell`; returns their trajectories (in memory, in job order).
    ``store`` (a folder; None: a temporary one) keeps finished runs: a rerun on the same code skips
    them, so an interrupted protocol resumes. ``workers > 1`` runs cells in that many local
    processes, ``ray`` (an address or ``"auto"``) on a Ray cluster (the workers write the cells into
    ``store``: on several machines it must be a shared folder, and so must the corpus); every cell
    is the same :func:`~empirical.textrun.train_text` run as in-process (same seed -> same numbers). A failed
    cell raises :class:`~empirical.sweeps.CellsFailed` after the others finished."""
    if workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    dev = str(resolve_device(device))
    cells = [Cell(paper, cell_config(run), job="text", options={"device": dev}, swept=dict(swept))
             for swept, run in jobs]

    def note(key, status, err):
        print(f"{paper}: cell {key} {status}{': ' + err if err else ''}", file=sys.stderr)

    with contextlib.ExitStack() as stack:
        if store is None:
            store = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"tdyn-{paper}-"))
        stack.enter_context(cell_progress(progress and workers == 1 and ray is None))
        if workers > 1 and ray is None:  # the spawned workers share the cores
            threads = str(max(1, (os.cpu_count() or 1) // workers))
            stack.enter_context(mock.patch.dict(os.environ, {CELL_THREADS: threads}))
        run_cells(TEXT_CELL, cells, store, workers=workers, ray=ray, progress=note if progress else None)
        return load_cells(store, cells)


# ------------------------------------------------------------------------------------------------
# JoMA, Figs. 6 and 8
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JomaTextConfig(_TextProtocol):
    """Fig. 6: ``layers`` depths at Adam ``lr``; Fig. 8: depth ``sweep_layers`` at each of
    ``sweep_lrs``; every run ``steps`` minibatches logged every ``log_every``; ``seeds`` averaged."""

    lr: float = 1e-4
    layers: tuple[int, ...] = (1, 2, 5)
    sweep_layers: int = 5
    sweep_lrs: tuple[float, ...] = (1e-4, 1e-3)
    seeds: tuple[int, ...] = (1,)
    steps: int = 200
    log_every: int = 20

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, layers=(1, 2, 5, 10), sweep_lrs=(1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 1e-3, 1e-2),
                seeds=(1, 2, 3), steps=6900, log_every=100, eval_chunks=0)  # 20 epochs of the split

    def sweep_run(self, **changes) -> TextRunConfig:
        """A Fig. 8 run: ``sweep_layers`` layers at Adam ``lr``, the first seed."""
        return self.run(**{"n_layer": self.sweep_layers, "seed": self.seeds[0], **changes})

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        return joma_protocol(self, device=device, progress=progress, **sweep)


def per_layer_summary(traj, prefix: str = "entropy_layer") -> pd.DataFrame:
    """Per layer: initial value, minimum, its step, final value, ``drop = initial - min`` and
    ``bounce = final - min`` (papers/joma.md Fig. 8 quantities)."""
    steps = traj["step"].values
    rows = []
    for name in sorted((n for n in traj.data_vars if n.startswith(prefix)), key=lambda n: int(n[len(prefix):])):
        y = traj[name].values
        i = int(np.argmin(y))
        rows.append({"layer": int(name[len(prefix):]), "initial": y[0], "min": y[i], "min_step": int(steps[i]),
                     "final": y[-1], "drop": y[0] - y[i], "bounce": y[-1] - y[i]})
    return pd.DataFrame(rows)


def _mean_runs(trajs):
    """Seed average of runs logged on the same steps (an xarray Dataset)."""
    import xarray as xr

    return xr.concat(trajs, dim="run", combine_attrs="drop_conflicts").mean("run") if len(trajs) > 1 else trajs[0]


def joma_protocol(cfg: JomaTextConfig, *, device: str = "auto", progress: bool = False,
                  store: str | Path | None = None, workers: int = 1, ray: str | None = None) -> dict[str, Any]:
    """Returns ``depth[L]`` and ``sweep[lr]`` (seed-averaged trajectories with ``val_loss``,
    ``entropy_layer{l}``, ``stable_rank_layer{l}`` per logged step) and ``seconds``. Every
    (layers, lr, seed) run is a cell of :func:`run_text_cells` (``store``, ``workers``, ``ray``);
    the depth run at ``lr`` doubles as the sweep's run at that lr."""
    pairs = list(dict.fromkeys([(L, cfg.lr) for L in cfg.layers] + [(cfg.sweep_layers, lr) for lr in cfg.sweep_lrs]))
    jobs = [({"n_layer": L, "lr": lr, "seed": seed}, cfg.run(n_layer=L, lr=lr, seed=seed))
            for L, lr in pairs for seed in cfg.seeds]
    trajs = run_text_cells("joma", jobs, device=device, progress=progress, store=store, workers=workers, ray=ray)
    n = len(cfg.seeds)
    mean = {p: _mean_runs([t.drop_vars("snapshot") for t in trajs[i * n:(i + 1) * n]]) for i, p in enumerate(pairs)}
    return {"depth": {L: mean[(L, cfg.lr)] for L in cfg.layers},
            "sweep": {lr: mean[(cfg.sweep_layers, lr)] for lr in cfg.sweep_lrs},
            "seconds": sum(t.attrs["train_seconds"] for t in trajs)}


# ------------------------------------------------------------------------------------------------
# Topic, items 1 and 7
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TopicTextConfig(_TextProtocol):
    """Masked LM (15 % selected; 80/10/10; tied decoder, BERT style) of ``n_layer`` x ``n_head``
    trained with Adam ``lr``; LDA with ``num_topics`` topics, ``passes`` online passes over the
    training paragraphs of at least ``min_doc_tokens`` tokens; ``thresholds`` = fractions of the
    LDA vocabulary kept per topic (at least 2 words), words in several topics' lists dropped."""

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
    seed: int = 1

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, n_layer=4, n_head=4, emsize=256, d_hid=1024, lr=3e-4, bptt=128,
                steps=20000, log_every=1000, num_topics=100, passes=6, eval_chunks=0, attention_chunks=0)

    def run(self, **changes) -> TextRunConfig:
        return super().run(**{"objective": "mlm", "tie": True, **changes})

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
                                    random_state=cfg.seed, n_jobs=1)
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
    """Returns ``table`` (DataFrame: model in {trained, control}, threshold, the three ratios and
    their numerators/denominators), ``traj`` (the masked-LM run), ``topics`` (word lists at the
    first threshold) and ``seconds``."""
    import time

    run = cfg.run()
    corpus = corpus_for(run)
    t0 = time.perf_counter()
    beta, words = lda_topic_words(cfg, corpus.vocab.itos, corpus.lines_train)
    lda_seconds = time.perf_counter() - t0
    traj, trained, sec = train_text(run, device=device, progress=progress, corpus=corpus)
    control = TextExperiment(run, corpus)
    torch.manual_seed(run.seed)  # the Trainer's seeding: the control is the trained model's initialisation
    gen = torch.Generator(device=resolve_device(device))
    gen.manual_seed(run.seed)
    control.setup(resolve_device(device), gen)
    assigns = [topic_assignment(beta, words, thr) for thr in cfg.thresholds]
    rows = [{"model": name, "threshold": thr, **r} for name, exp in (("trained", trained), ("control", control))
            for thr, r in zip(cfg.thresholds, topic_ratios(exp, assigns, cfg.attention_chunks))]
    return {"table": pd.DataFrame(rows), "traj": traj, "topics": assigns[0], "seconds": sec + lda_seconds,
            "lda_seconds": lda_seconds}
