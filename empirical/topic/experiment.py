"""The topic paper's training run: :class:`TopicExperiment` (the Experiment protocol of
:mod:`empirical.trainer`), :func:`train` and :func:`run` (the paper row's ``train`` slot).

Time: the Trainer logs at ``config.log_steps()`` with ODE time ``config.ode_time(step)`` (the
convention is stated once, in :mod:`theory.topic.config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from theory.topic import PAPER, VARIANTS, TopicConfig, context_residual, off_symmetric_residual, reduced_coordinates

from ..trainer import ModuleState, Trainer
from .data import DocumentSampler, mask_batch, vocabulary
from . import update
from .model import TopicTransformer, attention_statistics, loss_on_selected

__all__ = ["TopicExperiment", "train", "run", "VARIANTS"]


# ------------------------------------------------------------------------------------------------
# Experiment
# ------------------------------------------------------------------------------------------------
@dataclass
class TopicExperiment(ModuleState):
    """One training run of ``config``; ``config.variant`` picks the freeze pattern
    (:data:`theory.topic.TopicConfig.VARIANTS`):

    * ``stage1``: uniform attention, one-hot, W_V trained (the stage-1 theorem setting);
    * ``joint``: W_K, W_Q, W_V trained together from small init (two stages, docs/papers/topic.md §3.4);
    * ``attention``: W_V frozen (``config.value``: block or identity), attention trained;
    * ``embedding``: W_V = I frozen, uniform attention, W_E trained (spec §3.1).
    """

    config: TopicConfig
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        self.name = self.config.variant
        self.vocab = vocabulary(self.config)

    def setup(self, device, generator):
        c = self.config
        seed = int(generator.initial_seed())
        gen_cpu = torch.Generator().manual_seed(seed)
        self.model = TopicTransformer(c, self.vocab, gen_cpu, self.dtype).to(device)
        self.device = device
        self.sampler = DocumentSampler(c, self.vocab, seed)
        self.mask_rng = np.random.default_rng(seed + 1)
        self.trained = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self.update_state = update.init(self.trained, config=c, xp=torch)
        self.dataset = None
        if c.n_docs:
            tok, val = self.sampler.sample(c.n_docs)
            masked, sel = mask_batch(tok, val, c, self.vocab, self.mask_rng) if c.masking == "static" else (None, None)
            self.dataset = (tok, val, masked, sel)
        eval_cfg = c.replace(N_max=0, N=min(max(c.N, 1), 100)) if c.data == "tau" else c
        self.eval_docs = DocumentSampler(eval_cfg, self.vocab, seed + 2).sample(32)

    def batch(self):
        c = self.config
        if self.dataset is None:
            tok, val = self.sampler.sample(c.batch)
            masked, sel = mask_batch(tok, val, c, self.vocab, self.mask_rng)
        else:
            idx = self.sampler.rng.integers(0, c.n_docs, size=c.batch)
            tok, val = self.dataset[0][idx], self.dataset[1][idx]
            if c.masking == "static":
                masked, sel = self.dataset[2][idx], self.dataset[3][idx]
            else:
                masked, sel = mask_batch(tok, val, c, self.vocab, self.mask_rng)
        key_ok = val & ~sel if c.keys == "code" else val  # code: selected positions are not keys
        as_t = lambda a: torch.as_tensor(a, device=self.device)  # noqa: E731
        return as_t(masked), as_t(key_ok), as_t(tok), as_t(sel)

    def state_dict(self) -> dict:
        """Model (:class:`ModuleState`), the update rule's state, and the data and masking RNG
        states, so a resumed run draws the same batches."""
        return {**super().state_dict(), "update": self.update_state, "sampler_rng": self.sampler.rng.bit_generator.state,
                "mask_rng": self.mask_rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.update_state = state["update"]
        self.sampler.rng.bit_generator.state = state["sampler_rng"]
        self.mask_rng.bit_generator.state = state["mask_rng"]

    def step(self, step: int) -> dict[str, float]:
        masked, key_ok, labels, sel = self.batch()
        self.model.zero_grad(set_to_none=True)
        loss = loss_on_selected(self.model(masked, key_ok), labels, sel, self.config.loss)
        total = loss
        if self.config.lam > 0 and isinstance(self.model.W_V, nn.Parameter):
            total = loss + self.config.lam * (self.model.W_V**2).sum()  # gradient-carrying (§7 bug 1 fixed)
        total.backward()
        with torch.no_grad():  # the paper's update rule (update.py), applied to the module's tensors
            new, self.update_state = update.update({n: p.grad for n, p in self.trained.items()}, self.update_state,
                                                   {n: p.detach() for n, p in self.trained.items()},
                                                   config=self.config, xp=torch)
            for n, p in self.trained.items():
                p.copy_(new[n])
        return {"loss": float(loss.detach())}

    def value_like_matrix(self) -> np.ndarray:
        """``W_V`` (one-hot) or ``E = W_E^T W_E`` (embedding setting) as numpy."""
        m = self.model
        with torch.no_grad():
            M = m.W_E.T @ m.W_E if self.config.variant == "embedding" else m.W_V
            return M.detach().cpu().numpy().astype(np.float64)

    def observables(self) -> dict[str, float]:
        m = self.model
        with torch.no_grad():
            obs = {"norm_W_K": float(torch.linalg.norm(m.W_K)), "norm_W_Q": float(torch.linalg.norm(m.W_Q)),
                   "norm_W_V": float(torch.linalg.norm(m.W_V))}
        M = self.value_like_matrix()
        obs.update(reduced_coordinates(M, m.b.detach().cpu().numpy(), self.vocab.topic_of, mask_id=self.vocab.mask))
        obs["off_symmetric_residual"] = float(off_symmetric_residual(M, self.vocab.topic_of))
        obs["context_residual"] = float(context_residual(M, m.b.detach().cpu().numpy(), self.vocab.topic_of,
                                                         self.vocab.mask))
        if self.config.variant in ("joint", "attention"):
            tok, val = self.eval_docs
            st = attention_statistics(m, tok, val, self.vocab, self.config.v)
            obs["gamma_hat"] = st["gamma_hat"]
        return obs

    def parameters_info(self) -> dict[str, Any]:
        """Derived quantities only (the config is recorded once, by the Trainer): the vocabulary
        size ``D``, the K/Q dimension in use and the dtype."""
        return {"D": self.vocab.size, "d_a": self.model.d_a, "dtype": str(self.dtype)}


def _with_variant(config: TopicConfig, variant: str | None) -> TopicConfig:
    """``config`` with ``variant`` (None: its own), validated by the variant mechanism."""
    return config if variant is None or variant == config.variant else config.replace(variant=variant)


def train(config: TopicConfig, *, variant: str | None = None, device: str = "auto", seed: int | None = None,
          progress: bool = False, attention_docs: int = 100, checkpoint=None, checkpoint_every: int | str | None = None,
          resume: bool = False):
    """Train one network, logged at ``config.log_steps()``; returns ``(trajectory, experiment)``.
    ``variant`` (None: ``config.variant``) replaces the config's variant. With trained attention
    the final attention statistics (``attention_docs`` held-out unmasked documents) go into the
    attrs."""
    config = _with_variant(config, variant)
    exp = TopicExperiment(config)
    seed = config.seed if seed is None else seed
    trainer = Trainer(device=device, seed=seed, progress=progress, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, resume=resume)
    traj = trainer.run(exp)
    if exp.config.attention == "trained" and attention_docs:
        tok, val = DocumentSampler(exp.config, exp.vocab, 10_000 + seed).sample(attention_docs)
        for k, x in attention_statistics(exp.model, tok, val, exp.vocab, config.v).items():
            traj.attrs[k] = x
    return traj, exp


def run(config: TopicConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int | str | None = None, resume: bool = False):
    """`tdyn train topic`: one run of ``config`` (``variant``, the CLI's ``--variant``, replaces
    ``config.variant`` when given), returns the trajectory."""
    traj, _ = train(config, variant=variant, device=device, progress=progress,
                    checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
    return traj
