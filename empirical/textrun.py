"""Real-text training runs: one language-model experiment on WikiText, run by the
:class:`~empirical.trainer.Trainer` (tqdm bar with loss and tokens/s, periodic checkpoints,
bit-identical resume), and the configurations of the three papers' protocols.

* :class:`TextRunConfig` — one run: data (corpus, vocabulary cap, bptt, streams), model
  (:class:`~empirical.transformer.TransformerLM`), objective (causal LM or masked LM), optimiser
  (Adam, or the Scan & Snap notebook's SGD with a separate FFN learning rate, per-epoch StepLR and
  gradient clipping).
* :class:`TextExperiment` — the Trainer's experiment. Step ``s`` trains on bptt chunk ``s`` of the
  training streams (in order, epoch after epoch, as the tutorial loop). Observables, in eval mode
  on the first ``eval_chunks`` validation chunks: ``val_loss``, ``entropy_layer{l}`` (attention
  entropy -sum a log(a + 1e-8), mean over queries, docs/papers/joma.md Decision 9), ``stable_rank_layer{l}``
  (of each block's ``fc1``, docs/papers/joma.md §2.6), and the lowest layer's attention map of batch
  element 0 of training chunk ``snapshot_chunk`` (docs/papers/scan_snap.md §5.6), kept in
  ``experiment.snapshots[step]``.
* :func:`text_cell` — one run as a sweep cell (:mod:`empirical.sweeps`): the protocols run their
  grids of runs through the sweep runner (result store, resume, local processes or Ray).
* The papers' protocols (configs with ``quick()`` / ``full()`` presets and their runners) are
  the paper rows' ``text`` slots (:mod:`empirical.realtext`, :mod:`empirical.topic.text`).

Time: there is no reduced ODE for real text, so ``ode_time(step) = step`` (unit: one minibatch).
Float32 throughout (torch defaults).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from theory.errors import ConfigError, check_choice
from theory.params import ParamsBase

from . import text
from .trainer import ModuleState, Trainer
from .transformer import TransformerLM, attention_entropy, stable_rank

__all__ = ["TextSettings", "TextRunConfig", "TextExperiment", "train_text", "corpus_for", "text_cell", "cell_config",
           "PAPER"]

PAPER = "realtext"


@dataclass(frozen=True)
class TextSettings(ParamsBase):
    """Settings every real-text config has (a run's and a protocol's). ``corpus=""`` means the
    default (``--corpus`` or ``../shared/data/wikitext-2``); ``max_train_tokens=0`` keeps the whole
    training split; ``eval_chunks=0`` evaluates on every validation chunk. Time unit: one minibatch
    (no reduced ODE on real text, so ``ode_time(step) = step``)."""

    corpus: str = ""
    vocab_size: int = 2000
    max_train_tokens: int = 0
    emsize: int = 200
    d_hid: int = 200
    dropout: float = 0.2
    steps: int = 200
    log_every: int = 50
    eval_chunks: int = 10

    def ode_time(self, step: int | float) -> float:
        return float(step)


@dataclass(frozen=True)
class TextRunConfig(TextSettings):
    """One real-text training run (fields of :class:`TextSettings` plus model and optimiser):
    ``ffn_lr=0`` uses ``lr`` for the FFN too; ``lr_decay`` multiplies every learning rate after each
    epoch (StepLR); ``clip=0`` disables gradient clipping."""

    objective: str = "lm"
    n_layer: int = 1
    n_head: int = 1
    tie: bool = False
    optimizer: str = "adam"
    lr: float = 1e-4
    ffn_lr: float = 0.0
    lr_decay: float = 1.0
    clip: float = 0.5
    batch_size: int = 20
    eval_batch_size: int = 10
    bptt: int = 35
    snapshot_chunk: int = 100
    seed: int = 1

    def validate(self) -> None:
        text.check_vocab_size(self.vocab_size)
        text.check_bptt(self.bptt)
        check_choice("objective", self.objective, ("lm", "mlm"))
        check_choice("optimizer", self.optimizer, ("adam", "sgd"))
        for name in ("n_layer", "n_head", "emsize", "d_hid", "batch_size", "eval_batch_size", "steps", "log_every"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.emsize % self.n_head:
            raise ConfigError("n_head", f"must divide emsize={self.emsize}, got {self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"must lie in [0, 1), got {self.dropout}")
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        for name in ("ffn_lr", "clip", "max_train_tokens", "eval_chunks", "snapshot_chunk"):
            if getattr(self, name) < 0:
                raise ConfigError(name, f"must be >= 0, got {getattr(self, name)}")
        if not 0 < self.lr_decay <= 1:
            raise ConfigError("lr_decay", f"must lie in (0, 1], got {self.lr_decay}")


@functools.lru_cache(maxsize=8)
def _corpus_cached(corpus: str, vocab_size: int, max_train_tokens: int) -> text.Corpus:
    return text.load_corpus(corpus, vocab_size=vocab_size, max_train_tokens=max_train_tokens or None)


def corpus_for(config: TextRunConfig) -> text.Corpus:
    """The tokenised corpus of ``config`` (cached per corpus, vocabulary cap and token limit)."""
    path = str(text.check_corpus(config.corpus or None))
    return _corpus_cached(path, config.vocab_size, config.max_train_tokens)


def check_fits(config: TextRunConfig) -> text.Corpus:
    """The tokenised corpus of ``config`` when it can feed the run's streams (``batch_size``
    training and ``eval_batch_size`` validation streams of at least one ``bptt`` chunk plus its
    target each: :func:`text.batchify`, :func:`text.num_chunks`); else ``ConfigError('corpus', ...)``
    before any training. Cached: the run that follows reuses the tokenised corpus."""
    corpus = corpus_for(config)
    for name, ids, B in (("training", corpus.train, config.batch_size),
                         ("validation", corpus.valid, config.eval_batch_size)):
        need = B * (config.bptt + 1)
        if ids.numel() < need:
            raise ConfigError("corpus", f"{corpus.source}: {ids.numel()} {name} tokens; the runs need at least "
                                        f"{need} ({B} streams of {config.bptt} tokens plus a target)")
    return corpus


class TextExperiment(ModuleState):
    """A :class:`TextRunConfig` run for the :class:`~empirical.trainer.Trainer` (module docstring).
    For ``objective="mlm"`` the model is bidirectional and its vocabulary gains a ``[MASK]`` id
    (``= len(vocab)``); the loss is over the selected (corrupted) positions only."""

    paper = PAPER

    def __init__(self, config: TextRunConfig, corpus: text.Corpus):
        self.config, self.corpus = config, corpus
        self.name = f"{config.objective}_L{config.n_layer}_lr{config.lr:g}"
        self.tokens_per_step = config.batch_size * config.bptt
        self.snapshots: dict[int, np.ndarray] = {}
        self.done = 0

    # -- set-up ----------------------------------------------------------------------------------
    def setup(self, device, generator):
        c = self.config
        self.device, self.gen = device, generator
        self.V = len(self.corpus.vocab)
        mlm = c.objective == "mlm"
        self.model = TransformerLM(self.V + int(mlm), c.emsize, c.d_hid, c.n_layer, c.n_head, c.dropout,
                                   max_len=max(c.bptt, 64), causal=not mlm, tie=c.tie).to(device)
        ffn = [p for b in self.model.blocks for p in (*b.fc1.parameters(), *b.fc2.parameters())]
        ffn_ids = {id(p) for p in ffn}
        rest = [p for p in self.model.parameters() if id(p) not in ffn_ids]
        groups = [{"params": rest, "lr": c.lr}, {"params": ffn, "lr": c.ffn_lr or c.lr}]
        self.opt = (torch.optim.SGD(groups) if c.optimizer == "sgd" else torch.optim.Adam(groups))
        self.train_streams = text.batchify(self.corpus.train, c.batch_size).to(device)
        self.valid_streams = text.batchify(self.corpus.valid, c.eval_batch_size).to(device)
        self.n_train = text.num_chunks(self.train_streams, c.bptt)
        n_valid = text.num_chunks(self.valid_streams, c.bptt)
        self.eval_ids = range(min(c.eval_chunks, n_valid) if c.eval_chunks else n_valid)
        self._clock = None

    @staticmethod
    def _lm_loss(logits, y):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def _loss(self, x, y, generator):
        if self.config.objective == "lm":
            return self._lm_loss(self.model(x), y)
        xm, labels = text.mask_tokens(x, self.V, self.V, generator)
        h, _ = self.model.features(xm)
        sel = labels != -100  # decode the selected positions only (the loss ignores the others)
        loss = F.cross_entropy(self.model.decoder(h[sel]), labels[sel], reduction="sum")
        return loss / sel.sum().clamp(min=1)

    # -- the Trainer's interface -----------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        c = self.config
        self.model.train()
        x, y = text.chunk(self.train_streams, step, c.bptt)
        loss = self._loss(x, y, self.gen)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if c.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.clip)
        self.opt.step()
        self.done = step + 1
        if c.lr_decay != 1 and self.done % self.n_train == 0:  # StepLR(1, gamma) once per epoch
            for g in self.opt.param_groups:
                g["lr"] *= c.lr_decay
        return {"loss": loss.item()}

    @torch.no_grad()
    def attention(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention maps ``(B, H, T, T)`` of ids ``x`` in eval mode."""
        was = self.model.training
        self.model.eval()
        _, maps = self.model.features(x)
        self.model.train(was)
        return maps

    @torch.no_grad()
    def observables(self) -> dict[str, float]:
        c = self.config
        self.model.eval()
        L = c.n_layer
        ent, loss = torch.zeros(L, dtype=torch.float64), 0.0
        eval_gen = torch.Generator(device=self.device)
        eval_gen.manual_seed(12345)  # the same validation masks at every log step (MLM)
        for i in self.eval_ids:
            x, y = text.chunk(self.valid_streams, i, c.bptt)
            if c.objective == "lm":  # one eval-mode pass gives the loss and the maps (the same numbers as two)
                logits, maps = self.model(x, return_attention=True)
                loss += float(self._lm_loss(logits, y))
            else:  # the masked LM's loss reads the corrupted ids; its maps, the clean ones
                loss += float(self._loss(x, y, eval_gen))
                maps = self.attention(x)
            ent += torch.tensor([float(attention_entropy(a)) for a in maps], dtype=torch.float64)
        n = len(self.eval_ids)
        obs = {"val_loss": loss / n}
        obs.update({f"entropy_layer{l}": float(ent[l] / n) for l in range(L)})
        obs.update({f"stable_rank_layer{l}": stable_rank(b.fc1.weight) for l, b in enumerate(self.model.blocks)})
        x, _ = text.chunk(self.train_streams, c.snapshot_chunk, c.bptt)
        snap = self.attention(x[:1])[0][0].mean(0).cpu().numpy().astype(np.float64)  # lowest layer, (T, T)
        self.snapshots[self.done] = snap
        obs["snapshot_entropy"] = float(attention_entropy(torch.as_tensor(snap)))
        self.model.train()
        return obs


    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(done=self.done, snapshots=dict(self.snapshots), torch_rng=torch.get_rng_state(),
                     cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.done, self.snapshots = state["done"], dict(state["snapshots"])
        torch.set_rng_state(state["torch_rng"])  # dropout draws from the global stream
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    def parameters_info(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.config.to_dict().items() if k != "corpus"},
                "corpus": self.corpus.source, "vocab": len(self.corpus.vocab)}


def train_text(config: TextRunConfig, *, device: str = "auto", progress: bool = False, checkpoint=None,
               checkpoint_every: int | str | None = None, resume: bool = False, corpus: text.Corpus | None = None):
    """Train one run; returns ``(trajectory, experiment, seconds)``. The trajectory is logged at
    ``config.log_steps()``; ``experiment.snapshots`` holds the lowest layer's attention maps."""
    corpus = corpus if corpus is not None else corpus_for(config)
    exp = TextExperiment(config, corpus)
    trainer = Trainer(device=device, seed=config.seed, progress=progress, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, resume=resume)
    t0 = time.perf_counter()
    traj = trainer.run(exp)
    return traj, exp, time.perf_counter() - t0


def cell_config(config: TextRunConfig) -> dict[str, Any]:
    """``config`` as a sweep cell's config dict: every field, ``corpus`` resolved (the CLI's
    ``--corpus`` or the default) to an absolute directory path that worker processes can read."""
    out = config.to_dict()
    corpus = text.check_corpus(config.corpus or None)
    out["corpus"] = str(Path(corpus).resolve()) if isinstance(corpus, Path) or Path(corpus).is_dir() else str(corpus)
    return out


def text_cell(paper: str, config: dict, *, device: str = "cpu", progress: bool = False):
    """One real-text run as a sweep cell (``"empirical.textrun:text_cell"``, importable in spawned
    workers and on Ray nodes): ``config`` holds every :class:`TextRunConfig` field, ``corpus`` a
    directory path (workers do not see the CLI's ``--corpus``). Returns the run's trajectory
    (``val_loss``, ``entropy_layer{l}``, ``stable_rank_layer{l}``, ... per logged step) plus
    ``snapshot`` (time, query, key): the lowest layer's attention map at each logged step
    (``experiment.snapshots``, float64), and ``attrs["train_seconds"]`` (the run's training time).
    ``paper`` only labels the run (the protocols pass theirs). ``progress`` (the run's tqdm bar) is a
    sweep ``runtime`` keyword: not part of the cell's key. (Torch's CPU threads need no setting here:
    the Trainer runs on one, :func:`empirical.trainer.torch_threads`, whatever the number of workers.)"""
    cfg = TextRunConfig.from_dict(config)
    traj, exp, sec = train_text(cfg, device=device, progress=progress)
    snaps = np.stack([exp.snapshots[int(s)] for s in traj["step"].values])
    traj = traj.assign(snapshot=(("time", "query", "key"), snaps))
    traj.attrs.update(train_seconds=float(sec), text_paper=paper)
    return traj
