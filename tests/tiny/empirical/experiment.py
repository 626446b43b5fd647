"""The tiny paper's Experiment (the Trainer's protocol) and ``run``, the row's train slot.

The Trainer reads time from the config: it runs ``config.steps`` steps, logs at
``config.log_steps()`` and stamps each row with ``config.ode_time(step)`` — the experiment has no
time of its own.
"""

from __future__ import annotations

import numpy as np
import torch

from empirical.trainer import ModuleState, Trainer

from ..theory import TinyConfig
from ..theory.population import sigmoid
from . import update as rule
from .data import labels
from .model import Logit

__all__ = ["TinyExperiment", "run"]


class TinyExperiment(ModuleState):
    paper, name = "tiny", "logit"

    def __init__(self, config: TinyConfig):
        self.config = config

    def setup(self, device, generator):
        self.gen = generator
        self.model = Logit(self.config.a0).to(device)
        self.state = rule.init(self.model.a.detach(), xp=torch)

    def loss(self) -> torch.Tensor:
        c = self.config
        logit = self.model(c.batch if c.variant == "sgd" else 1)
        if c.variant == "exact":  # the expected cross-entropy: no labels drawn
            return torch.nn.functional.binary_cross_entropy_with_logits(logit, torch.full_like(logit, c.p))
        return torch.nn.functional.binary_cross_entropy_with_logits(logit, labels(c.p, c.batch, self.gen))

    def step(self, step):
        loss = self.loss()
        (grad,) = torch.autograd.grad(loss, [self.model.a])
        with torch.no_grad():
            new, self.state = rule.update(grad, self.state, self.model.a, lr=self.config.lr, xp=torch)
            self.model.a.copy_(new)
        return {"loss": float(loss.detach())}

    def observables(self):
        a = float(self.model.a.detach())
        return {"a": a, "prob": float(sigmoid(a))}


def run(config: TinyConfig, *, device="auto", variant=None, progress=False, checkpoint=None,
        checkpoint_every=None, resume=False):
    """``tdyn train tiny``: one run, its trajectory. ``variant`` is the config's own (the CLI builds
    the config with ``--variant`` first); a different one is rebound here, one mechanism."""
    if variant is not None and variant != config.variant:
        config = config.replace(variant=variant)
    trainer = Trainer(device=device, progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                      resume=resume)
    return trainer.run(TinyExperiment(config))


def train_seeds(config: TinyConfig, *, seeds, device="cpu"):
    """Every seed of ``config`` in one vectorised run (a leading ``seed`` dim): the same numbers as
    :func:`run` per seed (tested), through :class:`empirical.seeds.SeedBatch`."""
    from empirical.seeds import SeedBatch
    from empirical.trainer import resolve_device
    from simulate.trajectory import make_trajectory

    dev = resolve_device(device)
    rng = SeedBatch(seeds, dev)
    w = torch.full((len(seeds),), float(config.a0), dtype=torch.float64, device=dev)
    log_at = {int(s) for s in config.log_steps()}
    logged = [w.clone()]
    for step in range(config.steps):
        y = (rng.rand(config.batch, dtype=torch.float64) < config.p).double()  # (seeds, batch)
        w = w - config.lr * (torch.sigmoid(w)[:, None] - y).mean(1)          # d(BCE)/dw, mean over the batch
        if step + 1 in log_at:
            logged.append(w.clone())
    a_t = torch.stack(logged, 1).cpu().numpy()
    traj = make_trajectory(config.ode_times(), {"a": a_t, "prob": 1 / (1 + np.exp(-a_t))}, paper="tiny",
                           system="logit", source="train", backend=f"torch-{dev.type}-batched",
                           lead_dims=("seed",), config=config)
    return traj.assign_coords(seed=list(seeds))
