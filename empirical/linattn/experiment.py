"""linattn's Experiment (the Trainer's protocol), ``run`` (the row's train slot) and ``train_seeds`` (every seed
in one vectorised run, the same numbers as ``run`` per seed).

The Trainer reads time from the config (``config.ode_time(step) = lr * step``). Randomness: the initial
parameters (``init_kind = "random"``), then the training set (``mode = "gd"``) or each step's minibatch
(``mode = "sgd"``) are drawn from the run's generator, in that order.

Observables (spec §4): ``loss`` (the population loss of the current parameters, exact), ``gamma_i``
(``e_i^T Γ e_i``), ``sv_k`` (singular values of ``Γ``, decreasing), ``offdiag`` (``|Γ - diag Γ|_F``); the Trainer
adds ``minibatch_loss``.
"""

from __future__ import annotations

import numpy as np
import torch

from empirical.trainer import ModuleState, Trainer

from theory.linattn import LinAttnConfig
from theory.linattn.population import aligned_parameters
from . import update as rule
from .data import sequences
from .model import LinearAttention, expected_loss

__all__ = ["LinAttnExperiment", "run", "train_seeds", "initial_parameters", "observables_of"]


def initial_parameters(config: LinAttnConfig, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One seed's parameters (no seed axis): aligned (spec §5, deterministic) or i.i.d. ``N(0, init^2)``."""
    dev, dt = generator.device, torch.float64
    names = ("v", "U") if config.variant == "merged" else ("v", "K", "Q")
    if config.init_kind == "aligned":
        return {n: torch.as_tensor(a, dtype=dt, device=dev) for n, a in zip(names, aligned_parameters(config))}
    D, H, R = config.D, config.H, config.R
    shapes = {"v": (H,), "U": (H, D, D), "K": (H, R, D), "Q": (H, R, D)}
    return {n: config.init * torch.randn(*shapes[n], generator=generator, dtype=dt, device=dev) for n in names}


def observables_of(model: LinearAttention, config: LinAttnConfig) -> dict[str, np.ndarray]:
    """Spec §4 observables per seed: name -> array ``(S,)``."""
    with torch.no_grad():
        G = model.gamma()
        loss = expected_loss(G, config.lams, config.N)
        diag = torch.diagonal(G, dim1=-2, dim2=-1)
        sv = torch.linalg.svdvals(G)
        off = torch.linalg.matrix_norm(G - torch.diag_embed(diag))
    out = {"loss": loss, **{f"gamma_{i + 1}": diag[:, i] for i in range(config.D)},
           **{f"sv_{k + 1}": sv[:, k] for k in range(config.D)}, "offdiag": off}
    return {k: v.cpu().numpy() for k, v in out.items()}


class _Engine:
    """Parameters of ``S`` seeds, their data streams and the gradient step (shared by run and train_seeds)."""

    def __init__(self, config: LinAttnConfig, draw):
        self.config, self.draw = config, draw
        params = draw(lambda g: initial_parameters(config, g))
        self.model = LinearAttention(params, merged=config.variant == "merged")
        self.state = rule.init(None, xp=torch)
        self.train_set = draw(lambda g: sequences(config.lams, config.N, config.samples, g)) \
            if config.mode == "gd" else None

    def batch(self):
        c = self.config
        return self.train_set if self.train_set is not None else \
            self.draw(lambda g: sequences(c.lams, c.N, c.batch, g))

    def step(self) -> np.ndarray:
        Z, yq = self.batch()
        per_seed = 0.5 * ((yq - self.model(Z)) ** 2).mean(-1)          # (S,)
        params = list(self.model.parameters())
        grads = torch.autograd.grad(per_seed.sum(), params)           # seeds are independent
        with torch.no_grad():
            for p, g in zip(params, grads):
                new, self.state = rule.update(g, self.state, p, lr=self.config.lr, xp=torch)
                p.copy_(new)
        return per_seed.detach().cpu().numpy()


def _stack(items):
    """``[dict or tuple of tensors per seed]`` -> the same structure stacked on a leading seed axis."""
    first = items[0]
    if isinstance(first, dict):
        return {k: torch.stack([it[k] for it in items]) for k in first}
    return tuple(torch.stack([it[i] for it in items]) for i in range(len(first)))


class LinAttnExperiment(ModuleState):
    paper = "linattn"

    def __init__(self, config: LinAttnConfig):
        self.config = config
        self.name = config.variant

    def setup(self, device, generator):
        self.engine = _Engine(self.config, lambda fn: _stack([fn(generator)]))
        self.model = self.engine.model

    def step(self, step):
        return {"loss": float(self.engine.step()[0])}

    def observables(self):
        return {k: float(v[0]) for k, v in observables_of(self.model, self.config).items()}


def run(config: LinAttnConfig, *, device="auto", variant=None, progress=False, checkpoint=None,
        checkpoint_every=None, resume=False):
    """``tdyn train linattn``: one run, its trajectory. ``variant`` is the config's own (the CLI builds the config
    with ``--variant`` first); a different one is rebound here."""
    if variant is not None and variant != config.variant:
        config = config.replace(variant=variant)
    trainer = Trainer(device=device, progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                      resume=resume)
    return trainer.run(LinAttnExperiment(config))


def train_seeds(config: LinAttnConfig, *, seeds, device="cpu"):
    """Every seed of ``config`` in one vectorised run (a leading ``seed`` dim; the same numbers as :func:`run`
    per seed, tested): the per-seed draws go through :class:`empirical.seeds.SeedBatch`."""
    from empirical.seeds import SeedBatch
    from empirical.trainer import resolve_device, torch_threads
    from simulate.trajectory import make_trajectory

    dev = resolve_device(device)
    rng = SeedBatch(seeds, dev)
    with torch_threads(1):
        engine = _Engine(config, lambda fn: _stack([fn(g) for g in rng.generators]))
        log_at = {int(s) for s in config.log_steps()}
        rows = [observables_of(engine.model, config)]
        batch_loss = [np.full(len(seeds), np.nan)]
        for step in range(config.steps):
            last = engine.step()
            if step + 1 in log_at:
                rows.append(observables_of(engine.model, config))
                batch_loss.append(last)
    data = {k: np.stack([r[k] for r in rows], 1) for k in rows[0]}
    data["minibatch_loss"] = np.stack(batch_loss, 1)
    traj = make_trajectory(config.ode_times(), data, paper="linattn", system=config.variant, source="train",
                           backend=f"torch-{dev.type}-batched", lead_dims=("seed",), config=config)
    return traj.assign_coords(seed=list(seeds))
