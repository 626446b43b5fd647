"""SCB minibatch SGD with SVAG's schedule (Li, Malladi & Arora 2021; :mod:`empirical.svag`): many
runs batched in one tensor, the weak-error check of the SCB SDE that does not use its noise model.

:func:`svag_runs` trains ``runs`` independent networks of ``config`` (the rule of
:mod:`empirical.scb.update`, the config's variant) with amplification ``l``: learning rates
``eta/l``, ``l * steps`` steps, each step's gradient ``c₁ ∇L_γ₁ + c₂ ∇L_γ₂`` of two independent
fresh minibatches of ``config.batch`` samples (:func:`empirical.svag.svag_combine`; ``l = 1`` is
plain SGD, one minibatch). Configs: those the SCB SDEs model
(:func:`theory.scb.sde.check_modelled`: preconditioned, ``lam = 0``, ``normalise="end"``). Logged
at SVAG steps ``l * config.log_steps()``, i.e. at the system times ``config.ode_times()`` of the
SDE (one optimiser step of ``config`` = one unit of time).

Gradients: the batched closed forms of :func:`empirical.scb.l1.minibatch_gradients` (tested: their
large-batch mean is the population gradient; the runs they step equal the autograd Trainer's). Data: one :class:`~empirical.scb.data.SCBSampler` on the generator
``torch.Generator().manual_seed(seed)`` draws every run's minibatches at once (``runs * batch``
iid samples per draw, run-major), so runs are independent and the same seed gives the same
numbers. Float64. Shapes: ``V`` (R, N, N), ``A`` (R, T, N) with column k = a^(k).
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from theory.errors import ConfigError
from theory.scb import SCBConfig, SCBTask, initial_parameters, make_task, observables_from_parameters
from theory.scb.sde import check_modelled

from ..svag import SVAG, svag_combine
from . import update
from .data import SCBSampler
from .l1 import _threads, minibatch_gradients

__all__ = ["svag_runs"]


def svag_runs(config: SCBConfig, runs: int, *, l: int = 1, seed: int = 0, task: SCBTask | None = None,
              keep_parameters: bool = False) -> xr.Dataset:
    """``runs`` SVAG runs of ``config`` with amplification ``l`` (module docstring), on the CPU.
    Returns a trajectory with dims ``(run, time)`` (time ``config.ode_times()``) holding the
    observables of :func:`theory.scb.observables_from_parameters`, ``step`` (SVAG steps) and, with
    ``keep_parameters``, ``V`` (run, time, row, col) and ``A`` (run, time, position, query)."""
    from simulate.trajectory import make_trajectory

    sv = SVAG(l)
    check_modelled(config)  # the SDE's domain: preconditioned SGD, no l1, no per-step projection
    if int(runs) < 1:
        raise ConfigError("runs", f"need at least one run, got {runs}")
    task = task or make_task(config)
    R, B, N, T = int(runs), int(config.batch), task.N, task.T
    dev = torch.device("cpu")
    f64 = dict(dtype=torch.float64, device=dev)
    V0, A0 = initial_parameters(config, task)
    V = torch.as_tensor(np.asarray(V0, float), **f64).expand(R, N, N).clone()
    A = torch.as_tensor(np.asarray(A0, float), **f64).expand(R, T, N).clone()
    base = update.hyper(config, T)
    hyper = base._replace(lr_V=sv.lr(float(base.lr_V)), lr_A=sv.lr(float(base.lr_A)))
    mu = torch.as_tensor(task.mu, **f64)
    overlap = update.target_overlap(torch.as_tensor(task.Qm, **f64))
    state = update.init((V[0], A[0]), xp=torch)  # the prox stays off (lam = 0): one scalar state
    sampler = SCBSampler(task, dev, torch.Generator(device=dev).manual_seed(int(seed)))
    draws = 1 if sv.l == 1 else 2
    grid = sv.log_steps(config)
    logged = set(grid.tolist())
    Vs, As = [], []
    with torch.no_grad(), _threads(dev):
        for n in range(int(grid[-1]) + 1):
            if n in logged:
                Vs.append(V.numpy().copy())
                As.append(A.numpy().copy())
            if n == grid[-1]:
                break
            x, k, y = sampler.sample(draws * R * B)
            x, k, y = x.view(draws, R, B, T), k.view(draws, R, B), y.view(draws, R, B)
            grads = [minibatch_gradients(V, A, x[i], k[i], y[i])[:2] for i in range(draws)]
            g = grads[0] if draws == 1 else svag_combine(grads[0], grads[1], sv.l)
            (V, A), state = update.update(g, state, (V, A), hyper=hyper, mu=mu, overlap=overlap, xp=torch)
    V_all, A_all = np.stack(Vs, 1), np.stack(As, 1)
    with np.errstate(all="ignore"):  # a diverged run gives inf/nan observables
        obs = {k: np.asarray(v, dtype=np.float64) for k, v in observables_from_parameters(V_all, A_all, task).items()}
    if keep_parameters:
        obs.update(V=(("row", "col"), V_all), A=(("position", "query"), A_all))
    traj = make_trajectory(config.ode_times(), obs, paper="scb", system=config.variant, source="train",
                           backend="torch-batched-svag", lead_dims=("run",), config=config,
                           extra_attrs={"svag_l": sv.l, "seed": int(seed)})
    return traj.assign(step=("time", np.asarray(grid, dtype=np.float64)))
