"""SCB training runs (docs/papers/scb.md §2, §6): :class:`SCBExperiment` (one network on one task, for
the :class:`~empirical.trainer.Trainer`), :func:`train` and :func:`run` (the paper table's train
slot). Variants: preconditioned proximal SGD, plain SGD, softmax attention; transfer through
``init``.

Precision: float64 by default (the comparison with the float64 ODE is the point); ``dtype``
may be set to float32 for speed on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from theory.errors import ConfigError
from theory.scb import PAPER, SCBConfig, SCBTask, initial_parameters, make_task, observables_from_parameters

from ..trainer import ModuleState, Trainer
from . import update
from .data import SCBSampler
from .model import LinearSCB, SoftmaxSCB, squared_loss

__all__ = ["SCBExperiment", "train", "run"]


@dataclass
class SCBExperiment(ModuleState):
    """One training run on an SCB task, of the config's ``variant``: ``preconditioned`` (V D^{-1},
    a_k/mu_k, proximal l1 once <a,q>T >= lam_switch), ``sgd`` (plain SGD, same learning rates, no
    l1) or ``softmax`` (a = softmax(W), plain SGD, the attention learning rate scaled by
    ``T**softmax_lr_power``, spec §6.1) — all through the rule of :mod:`.update`. ``init``
    optionally gives (V0, A0), e.g. a pretrained model for transfer.
    """

    config: SCBConfig
    task: SCBTask | None = None
    init: tuple[np.ndarray, np.ndarray] | None = None
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        self.name = self.config.variant
        self.task = self.task or make_task(self.config)

    def setup(self, device, generator):
        V0, A0 = self.init if self.init is not None else initial_parameters(self.config, self.task)
        if V0.shape != (self.task.N, self.task.N) or A0.shape != (self.task.T, self.task.N):
            raise ConfigError("init", f"shapes {V0.shape}, {A0.shape} do not fit N={self.task.N}, T={self.task.T}")
        cls = SoftmaxSCB if self.config.variant == "softmax" else LinearSCB
        self.model = cls(V0, A0, self.dtype).to(device)
        self.sampler = SCBSampler(self.task, device, generator, self.dtype)
        self.mu = self.sampler.mu
        self.Qm = torch.as_tensor(self.task.Qm, dtype=self.dtype, device=device)
        self.hyper = update.hyper(self.config, self.task.T)
        self.opt_state = update.init((self.model.V, self.model.A), xp=torch)

    def step(self, step: int) -> dict[str, float]:
        x, k, y = self.sampler.sample(self.config.batch)
        m = self.model
        m.zero_grad(set_to_none=True)
        loss = squared_loss(m(x, k), y)
        loss.backward()
        with torch.no_grad():  # the rule of .update (spec §2): gradient step, l1 switch, prox, projection
            (V, A), self.opt_state = update.update((m.V.grad, m.A.grad), self.opt_state, (m.V, m.A), hyper=self.hyper,
                                                   mu=self.mu, overlap=update.target_overlap(self.Qm), xp=torch)
            m.V.copy_(V)
            m.A.copy_(A)
        return {"loss": float(loss.detach())}

    def parameters_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            return (self.model.V.detach().cpu().numpy().astype(np.float64),
                    self.model.attention().detach().cpu().numpy().astype(np.float64))

    def normalised_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """The final normalisation step (spec §3.5): ``V / colsum(V)``, ``a_k / 1^T a_k``."""
        V, A = self.parameters_numpy()
        return V / V.sum(0, keepdims=True), A / A.sum(0, keepdims=True)

    def observables(self) -> dict[str, float]:
        V, A = self.parameters_numpy()
        obs = observables_from_parameters(V, A, self.task)
        obs["attention_nonzeros"] = float((np.abs(A) > 0).sum(0).mean())
        obs["support_recovered"] = float(np.mean([
            set(np.nonzero(np.abs(A[:, k]) > 1e-12)[0]) == set(self.task.support[k]) for k in range(self.task.N)]))
        return {k: float(v) for k, v in obs.items()}


    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "lam_on": bool(self.opt_state.lam_on)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.opt_state = update.State(bool(state["lam_on"]))

    def parameters_info(self) -> dict[str, Any]:
        t = self.task
        """Derived quantities of the task (the config itself is recorded once, by the Trainer)."""
        return {"K": t.K, "m2": t.m2, "rho": float(t.rho.mean())}


def train(config: SCBConfig, *, device: str = "auto", seed: int | None = None, task: SCBTask | None = None,
          init=None, progress: bool = False, stop_when=None, checkpoint=None, checkpoint_every: int | str | None = None,
          resume: bool = False):
    """Train one network of ``config.variant`` and return ``(trajectory, experiment)``. The
    trajectory holds the theory's observables at ``config.log_steps()``, time
    ``config.ode_times()`` (steps)."""
    exp = SCBExperiment(config, task=task, init=init)
    trainer = Trainer(device=device, seed=config.seed if seed is None else seed, progress=progress,
                      checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
    traj = trainer.run(exp, stop_when=stop_when)
    Vn, An = exp.normalised_parameters()
    traj.attrs["final_distance_P"] = float(np.linalg.norm(Vn - exp.task.P))
    traj.attrs["final_distance_Q"] = float(np.linalg.norm(An - exp.task.Qm))
    # early stopping (spec §6.1 decision): the logged point of minimal population loss (the exact
    # population loss is the validation loss of an infinite held-out set); the distance
    # observables are already taken after the final normalisation
    best = int(np.nanargmin(traj["population_loss"].values))
    traj.attrs["early_stop_step"] = int(traj["step"].values[best])
    traj.attrs["early_stop_value_distance"] = float(traj["value_relative_distance_to_truth"].values[best])
    traj.attrs["early_stop_attention_distance"] = float(traj["attention_distance_to_truth"].values[best])
    return traj, exp


def run(config: SCBConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int | str | None = None, resume: bool = False):
    """`tdyn train scb` (the paper table's train slot): one run, returns the trajectory. ``variant``
    (``--variant``), when given, replaces ``config.variant`` (a setting it ignores: ConfigError)."""
    if variant is not None and variant != config.variant:
        config = config.replace(variant=variant)
    traj, _ = train(config, device=device, progress=progress, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every, resume=resume)
    return traj
