"""A tiny paper, defined entirely here, to prove that adding a paper needs only its own code and
one row in the table (docs/adding-a-paper.md).

Theory: one logit ``a`` fitted by cross-entropy to Bernoulli(p) labels. The loss
``L(a) = -p log sigma(a) - (1-p) log(1 - sigma(a))`` is differentiated by sympy; gradient flow with
learning rate ``lr`` in time = optimiser steps gives ``da/dt = lr (p - sigma(a))``.
Practice: a 1-parameter torch model trained by minibatch SGD on sampled labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sympy as sp
import torch

from empirical.trainer import ModuleState, Trainer
from figures.claims import registry_claims
from figures.core import agreement
from figures.report import Claim, Observable, Report
from theory import ConfigError, ParamsBase, Problem, ReducedSystem

a, p, lr = sp.symbols("a p lr", real=True)


@dataclass(frozen=True)
class TinyConfig(ParamsBase):
    """Time unit: one optimiser step (the learning rate is inside the ODE)."""

    p: float = 0.8
    lr: float = 0.5
    a0: float = 0.0
    batch: int = 256
    steps: int = 200
    log_every: int = 10
    seed: int = 0

    def validate(self):
        if not 0 < self.p < 1:
            raise ConfigError("p", f"must lie in (0, 1), got {self.p}")
        if self.lr <= 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.batch < 1:
            raise ConfigError("batch", f"must be >= 1, got {self.batch}")

    def ode_time(self, step):
        return float(step)


def systems(config: TinyConfig | None = None) -> list[ReducedSystem]:
    loss = -p * sp.log(1 / (1 + sp.exp(-a))) - (1 - p) * sp.log(1 - 1 / (1 + sp.exp(-a)))
    flow = sp.simplify(-lr * sp.diff(loss, a))
    return [ReducedSystem(name="logit", paper="tiny", state=(a,), parameters=(p, lr), rhs=(flow,),
                          observables={"prob": 1 / (1 + sp.exp(-a))}, spec="tests/tiny_paper.py")]


def problem(config: TinyConfig) -> Problem:
    return Problem(systems()[0], {"p": config.p, "lr": config.lr}, {"a": config.a0}, config.ode_times(),
                   {"scipy": {"method": "RK45"}})


class _Experiment(ModuleState):
    paper, name = "tiny", "logit"

    def __init__(self, config: TinyConfig):
        self.config = config

    def setup(self, device, generator):
        self.gen = generator
        self.model = torch.nn.Linear(1, 1, bias=False, dtype=torch.float64).to(device)
        with torch.no_grad():
            self.model.weight.fill_(self.config.a0)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=self.config.lr)

    def step(self, step):
        y = (torch.rand(self.config.batch, generator=self.gen, dtype=torch.float64) < self.config.p).double()
        logit = self.model(torch.ones(self.config.batch, 1, dtype=torch.float64)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return {"loss": float(loss.detach())}

    def observables(self):
        w = float(self.model.weight.detach())
        return {"a": w, "prob": 1 / (1 + np.exp(-w))}



def train(config: TinyConfig, *, device="auto", variant=None, progress=False, checkpoint=None,
          checkpoint_every=0, resume=False):
    trainer = Trainer(device=device, seed=config.seed, progress=progress, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, resume=resume)
    return trainer.run(_Experiment(config))


def compare(*, quick=True, device="auto") -> Report:
    import simulate

    cfg = TinyConfig()
    ode = simulate.solve(problem(cfg), backend="scipy")
    trained = train(cfg, device="cpu")
    err = agreement(ode, trained, ["prob"])["prob"]
    fixed_point = float(trained["prob"].values[-1])
    return Report("tiny", f"p={cfg.p}, lr={cfg.lr}, batch={cfg.batch}, {cfg.steps} steps",
                  [Observable("prob", err, 0.05)],
                  [Claim("converges_to_p", "sigma(a) converges to the label frequency p", abs(fixed_point - cfg.p) < 0.02,
                         {"final_prob": fixed_point, "p": cfg.p}, "batch 256")])


def figures(outdir, *, quick=True, device="auto"):
    return []


# ------------------------------------------------------------------------------------------------
# Claims: the worked example of docs/claims.md (registry: tests/tiny_claims.toml)
# ------------------------------------------------------------------------------------------------
claims = registry_claims("tiny", Path(__file__).with_name("tiny_claims.toml"))


def log_gap_ratio(traj, config: TinyConfig, *, horizon: int) -> float:
    """``log(mean_{t in [T/2, T]} |sigma(a_t) - p| / |sigma(a_0) - p|)`` at horizon ``T`` (steps),
    on any trajectory with a ``prob`` variable: a training run or the ODE."""
    t, prob = traj["time"].values, traj["prob"].values
    T = config.ode_time(horizon)
    keep = (t >= T / 2) & (t <= T)
    return float(np.log(np.mean(np.abs(prob[keep] - config.p)) / abs(prob[0] - config.p)))


def claim_quantities(config: TinyConfig, coords) -> dict:
    """Derived quantities of the regime: the step's curvature ``lr p (1 - p)`` at the fixed point."""
    return {"lr_curvature": config.lr * config.p * (1 - config.p)}


def theory(config: TinyConfig):
    import simulate

    return simulate.solve(problem(config), backend="scipy")


def train_seeds(config: TinyConfig, *, seeds, device="cpu"):
    """Every seed of ``config`` in one vectorised run (a leading ``seed`` dim): the same numbers as
    :func:`train` per seed (tested), through :class:`empirical.seeds.SeedBatch`."""
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
