"""A tiny paper, defined entirely here, to prove that adding a paper needs only its own code and
one row in the table (docs/adding-a-paper.md).

Theory: one logit ``a`` fitted by cross-entropy to Bernoulli(p) labels. The per-sample loss
``l(a; y) = -y log sigma(a) - (1-y) log(1 - sigma(a))`` averaged over ``y ~ Bernoulli(p)`` is the
population loss; sympy differentiates it: gradient flow with learning rate ``lr`` in time =
optimiser steps gives ``da/dt = lr (p - sigma(a))``. The minibatch noise is derived from the same
per-sample loss (theory/noise.py: a finite distribution, so ``Cov[g] = lr^2 p (1-p)`` exactly) and
:func:`sde` is the generic SDE built on it (docs/sde.md).
Practice: a 1-parameter torch model trained by minibatch SGD on sampled labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp
import torch

from empirical.trainer import ModuleState, Trainer
from figures.core import agreement
from figures.report import Claim, Observable, Report
from theory import ConfigError, ParamsBase, Problem, ReducedSystem
from theory.noise import Finite, derive_noise, expectation

a, p, lr = sp.symbols("a p lr", real=True)
y = sp.Symbol("y", real=True)  # the label: the per-sample loss's sample symbol


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


def per_sample_loss() -> sp.Expr:
    """Cross-entropy of one label ``y`` at logit ``a``."""
    return -y * sp.log(1 / (1 + sp.exp(-a))) - (1 - y) * sp.log(1 - 1 / (1 + sp.exp(-a)))


#: the data distribution: the label is Bernoulli(p)
LABELS = Finite.bernoulli(y, p)


def systems(config: TinyConfig | None = None) -> list[ReducedSystem]:
    loss = expectation(per_sample_loss(), LABELS)
    flow = sp.simplify(-lr * sp.diff(loss, a))
    noise = derive_noise(per_sample_loss(), (a,), (y,), LABELS, preconditioner=lr,
                         description="labels y ~ Bernoulli(p); time = optimiser steps")
    return [ReducedSystem(name="logit", paper="tiny", state=(a,), parameters=(p, lr), rhs=(flow,),
                          observables={"prob": 1 / (1 + sp.exp(-a))}, spec="tests/tiny_paper.py", noise=noise)]


def problem(config: TinyConfig) -> Problem:
    return Problem(systems()[0], {"p": config.p, "lr": config.lr}, {"a": config.a0}, config.ode_times(),
                   {"scipy": {"method": "RK45"}}, config=config)


def sde(config: TinyConfig):
    """``(model, t)``: the generic minibatch SDE of the derived noise (the row's ``sde`` slot)."""
    from simulate import noise_sde

    return noise_sde(problem(config))


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
        return {"loss": float(loss)}

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
