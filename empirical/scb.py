"""SCB in PyTorch: the data of papers/scb.md §1.2, the linear transformer of §2, its
preconditioned proximal SGD, plain SGD, a softmax-attention variant and transfer learning.

Read top to bottom: sampler -> models -> update rules -> experiment -> ``train``.

Precision: float64 by default (the comparison with the float64 ODE is the point); ``dtype``
may be set to float32 for speed on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from theory.errors import ConfigError
from theory.scb import (PAPER, VARIANTS, SCBConfig, SCBTask, check_variant_settings, initial_parameters,
                        make_task, observables_from_parameters, stationary_distribution)

from .trainer import ModuleState, Trainer

__all__ = ["SCBSampler", "LinearSCB", "SoftmaxSCB", "SCBExperiment", "train", "run",
           "correlated_transition", "VARIANTS"]


# ------------------------------------------------------------------------------------------------
# Data (spec §1.2): x_1..x_T ~ mu iid, k ~ mu (query outside the context, Decision 1 A),
# s ~ q^(k), x_o ~ P[:, x_s].
# ------------------------------------------------------------------------------------------------
class SCBSampler:
    """Draws minibatches on a device from a seeded generator. Returns ``x`` (B, T) token ids,
    ``k`` (B,) query ids, ``y`` (B,) target ids."""

    def __init__(self, task: SCBTask, device: torch.device, generator: torch.Generator, dtype=torch.float64):
        self.task, self.gen, self.device = task, generator, device
        self.mu = torch.as_tensor(task.mu, dtype=dtype, device=device)
        self.PT = torch.as_tensor(task.P.T, dtype=dtype, device=device)  # row j = P[:, j]
        self.QT = torch.as_tensor(task.Qm.T, dtype=dtype, device=device)  # row k = q^(k)
        self.query_last = task.config.query == "last"

    def sample(self, B: int):
        T = self.task.T
        x = torch.multinomial(self.mu, B * T, replacement=True, generator=self.gen).view(B, T)
        if self.query_last:  # Decision 1 option B: the query is x_T
            k = x[:, -1]
        else:
            k = torch.multinomial(self.mu, B, replacement=True, generator=self.gen)
        pos = torch.multinomial(self.QT[k], 1, generator=self.gen)  # (B, 1)
        xs = x.gather(1, pos)[:, 0]
        y = torch.multinomial(self.PT[xs], 1, generator=self.gen)[:, 0]
        return x, k, y


# ------------------------------------------------------------------------------------------------
# Models (spec §2): yhat = V X a^(k), computed by scatter-add (X a = bincount of x weighted by a)
# ------------------------------------------------------------------------------------------------
def _context_mix(x: torch.Tensor, a_sel: torch.Tensor, N: int) -> torch.Tensor:
    """``X_b a_b`` for every sample: (B, N) from token ids ``x`` (B, T) and weights ``a_sel``
    (B, T), without forming the N x T one-hot."""
    out = torch.zeros(x.shape[0], N, dtype=a_sel.dtype, device=x.device)
    return out.scatter_add_(1, x, a_sel)


class LinearSCB(nn.Module):
    """One-layer linear transformer with one-hot embeddings and query-dependent positional
    attention. Parameters: ``V`` (N, N), ``A`` (T, N) with column k = a^(k)."""

    def __init__(self, V0: np.ndarray, A0: np.ndarray, dtype=torch.float64):
        super().__init__()
        self.V = nn.Parameter(torch.as_tensor(V0, dtype=dtype).clone())
        self.A = nn.Parameter(torch.as_tensor(A0, dtype=dtype).clone())

    def attention(self) -> torch.Tensor:
        return self.A

    def forward(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        Xa = _context_mix(x, self.attention()[:, k].T, self.V.shape[0])
        return Xa @ self.V.T


class SoftmaxSCB(LinearSCB):
    """Softmax attention over positions: ``a^(k) = softmax(W[:, k])`` (Decision 9 / §6.1).
    ``W = 0`` reproduces the uniform initial attention of the linear model."""

    def __init__(self, V0: np.ndarray, A0: np.ndarray, dtype=torch.float64):
        super().__init__(V0, A0, dtype)
        self.A = nn.Parameter(torch.log(torch.as_tensor(A0, dtype=dtype).clamp_min(1e-300)))  # logits W

    def attention(self) -> torch.Tensor:
        return torch.softmax(self.A, dim=0)


def squared_loss(yhat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(1/2B) sum_b |y_b - yhat_b|^2`` with one-hot targets (spec §2)."""
    onehot = torch.zeros_like(yhat).scatter_(1, y[:, None], 1.0)
    return 0.5 * ((yhat - onehot) ** 2).sum(1).mean()


def soft_threshold_(a: torch.Tensor, thr: float) -> None:
    a.copy_(torch.sign(a) * torch.clamp(a.abs() - thr, min=0.0))


# ------------------------------------------------------------------------------------------------
# Experiment
# ------------------------------------------------------------------------------------------------
@dataclass
class SCBExperiment(ModuleState):
    """One training run on an SCB task.

    ``variant``: ``preconditioned`` (V D^{-1}, a_k/mu_k, proximal l1 once <a,q>T >= lam_switch),
    ``sgd`` (plain SGD, same learning rates, no l1) or ``softmax`` (a = softmax(W), plain SGD, the
    attention learning rate scaled by ``T**softmax_lr_power``, spec §6.1). ``init`` optionally gives
    (V0, A0), e.g. a pretrained model for transfer. A setting the variant ignores is a ConfigError.
    """

    config: SCBConfig
    variant: str = "preconditioned"
    task: SCBTask | None = None
    init: tuple[np.ndarray, np.ndarray] | None = None
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        check_variant_settings(self.config, self.variant)
        self.name = self.variant
        self.task = self.task or make_task(self.config)

    def setup(self, device, generator):
        V0, A0 = self.init if self.init is not None else initial_parameters(self.config, self.task)
        if V0.shape != (self.task.N, self.task.N) or A0.shape != (self.task.T, self.task.N):
            raise ConfigError("init", f"shapes {V0.shape}, {A0.shape} do not fit N={self.task.N}, T={self.task.T}")
        cls = SoftmaxSCB if self.variant == "softmax" else LinearSCB
        self.model = cls(V0, A0, self.dtype).to(device)
        self.sampler = SCBSampler(self.task, device, generator, self.dtype)
        self.mu = self.sampler.mu
        self.Qm = torch.as_tensor(self.task.Qm, dtype=self.dtype, device=device)
        self.lam_on = False

    def step(self, step: int) -> dict[str, float]:
        c = self.config
        x, k, y = self.sampler.sample(c.batch)
        m = self.model
        m.zero_grad(set_to_none=True)
        loss = squared_loss(m(x, k), y)
        loss.backward()
        with torch.no_grad():
            gV, gA = m.V.grad, m.A.grad
            if self.variant == "preconditioned":
                m.V -= c.eta_V * gV / self.mu[None, :]  # V <- V - eta_V grad D^{-1}
                m.A -= c.eta_A * gA / self.mu[None, :]  # a_k <- a_k - eta_A grad / mu_k
                if c.lam > 0:
                    if not self.lam_on:  # Decision 7: stage 2 starts once <a,q> T >= lam_switch
                        self.lam_on = bool((m.A * self.Qm).sum(0).mean() * self.task.T >= c.lam_switch)
                    if self.lam_on:
                        soft_threshold_(m.A, c.eta_A * c.lam)  # mu_k-weighted penalty -> threshold eta_A lam
                if c.normalise == "step":  # projection onto 1^T a_k = 1 (Decision 6)
                    m.A += (1.0 - m.A.sum(0, keepdim=True)) / self.task.T
            elif self.variant == "sgd":
                m.V -= c.eta_V * gV
                m.A -= c.eta_A * gA
            else:  # softmax: plain SGD, attention lr x T^power (spec §6.1 decision: T^2)
                m.V -= c.eta_V * gV
                m.A -= c.eta_A * float(self.task.T) ** c.softmax_lr_power * gA
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
        return {**super().state_dict(), "lam_on": self.lam_on}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.lam_on = state["lam_on"]

    def parameters_info(self) -> dict[str, Any]:
        t = self.task
        return {**self.config.to_dict(), "variant": self.variant, "K": t.K, "m2": t.m2,
                "rho": float(t.rho.mean()), "samples_per_step": self.config.batch}


def train(config: SCBConfig, *, variant: str = "preconditioned", device: str = "auto", seed: int | None = None,
          task: SCBTask | None = None, init=None, progress: bool = False, stop_when=None,
          checkpoint=None, checkpoint_every: int = 0, resume: bool = False):
    """Train one network and return ``(trajectory, experiment)``. The trajectory holds the
    theory's observables at ``config.log_steps()``, time ``config.ode_times()`` (steps)."""
    exp = SCBExperiment(config, variant=variant, task=task, init=init)
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


def correlated_transition(P_pre: np.ndarray, mix: float, seed: int, alpha: float = 1.0) -> np.ndarray:
    """Downstream transition for transfer (Decision 10): ``mix * P_pre + (1 - mix) * P_indep`` with
    ``P_indep`` fresh Dirichlet columns; column-stochastic for any mix in [0, 1]."""
    if not 0 <= mix <= 1:
        raise ConfigError("transfer_mix", f"must be in [0, 1], got {mix}")
    rng = np.random.default_rng(seed)
    N = P_pre.shape[0]
    P = mix * P_pre + (1 - mix) * rng.dirichlet(np.full(N, alpha), size=N).T
    stationary_distribution(P)  # validates irreducibility
    return P


def run(config: SCBConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int = 0, resume: bool = False):
    """`tdyn train scb`: one run (default variant ``preconditioned``), returns the trajectory."""
    traj, _ = train(config, variant=variant or "preconditioned", device=device, progress=progress,
                    checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
    return traj
