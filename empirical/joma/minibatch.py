"""Minibatch SGD of the JoMA block, every seed in one vectorised run (docs/papers/joma.md §2.7: the process the
block SDE approximates; the SDE's calibration).

The network is :class:`~empirical.joma.model.JomaBlock` (the ``fixed`` top: loss
``-mean_{n in batch} G_n . h(x_n)``, Assumption 1 exactly), trained by the paper's one update rule
(:mod:`.update`: SGD, equal learning rates on ``W`` and ``z``) on minibatches of ``config.batch``
rows drawn uniformly **with replacement** from the ``N`` data rows (the sampling the SDE's
``Sigma = Cov/B`` describes; ``config.replacement=False``: ``B`` distinct rows per step, whose mean
has the smaller covariance ``(N - B)/(N - 1) Cov/B`` — the SDE's assumption broken on purpose, to
map where it breaks). Every seed starts from the config's initial parameters (the SDE's
initial state); seed ``s`` only drives its minibatch draws, ``torch.randint(0, N, (steps, B),
generator=torch.Generator(device).manual_seed(s))``. Seeds run together: the parameters are
stacked (:func:`empirical.seeds.stacked_modules`) and the forward pass is
``torch.func.vmap`` of the module through ``functional_call``; autograd of the summed loss gives
each seed its own gradient. Float64. The tensors are small (a few rows per seed): the run holds
torch to one intra-op thread (restored afterwards) — on a shared 2-core machine two threads made
it 10-40x slower.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from theory.errors import ConfigError
from theory.joma import JomaConfig, block_parameters, block_system, initial_parameters, make_data

from . import update
from .model import JomaBlock

__all__ = ["sgd_seeds"]


def sgd_seeds(config: JomaConfig, *, seeds: Sequence[int], device: str = "cpu"):
    """Minibatch SGD of the block for every seed (module docstring), logged at
    ``config.log_steps()`` (time ``config.ode_times()``): a Trajectory with dims ``(seed, time)``
    holding the block state ``z_l``, ``v_k_l``, ``s_k`` and the block system's observables (the
    Theorem-1 invariant expressions). A seed whose parameters become non-finite is NaN from there
    on; the run stops early once every seed has."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _sgd_seeds(config, seeds, device)
    finally:
        torch.set_num_threads(threads)


def _draw_rows(c, generator, device) -> torch.Tensor:
    """``(steps, B)`` row indices of one seed: uniform with replacement, or (``replacement=False``)
    ``B`` distinct rows per step (the first ``B`` of a uniform random permutation)."""
    if c.replacement:
        return torch.randint(0, c.N, (c.steps, c.batch), generator=generator, device=device)
    u = torch.rand(c.steps, c.N, generator=generator, dtype=torch.float64, device=device)
    return u.argsort(-1)[:, :c.batch]


def _sgd_seeds(config, seeds, device):
    from empirical.seeds import stacked_modules
    from empirical.trainer import resolve_device
    from simulate.trajectory import make_trajectory

    if config.variant != "fixed":
        raise ConfigError("variant", f"minibatch SGD of the block is the 'fixed' variant's, got {config.variant!r}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("seeds", "need at least one seed")
    c, dev = config, resolve_device(device)
    X, G = make_data(c)
    W0, z0 = initial_parameters(c)
    params, buffers, base = stacked_modules(
        seeds, lambda: JomaBlock(W0, z0, c.attention, c.activation, c.temperature).to(dev))
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    names = list(params)
    Xt = torch.as_tensor(X, dtype=torch.float64, device=dev)
    Gt = torch.as_tensor(G, dtype=torch.float64, device=dev)
    if not c.replacement and c.batch > c.N:
        raise ConfigError("batch", f"{c.batch} distinct rows per step out of N = {c.N} (replacement=False)")
    idx = torch.stack([_draw_rows(c, torch.Generator(dev).manual_seed(s), dev) for s in seeds])  # (seeds, steps, B)
    forward = torch.func.vmap(lambda p, b, x: torch.func.functional_call(base, (p, b), (x,)))
    state = update.init([params[k].detach() for k in names], config=c, xp=torch)
    log_at = [int(s) for s in c.log_steps()]
    S, Mc = len(seeds), c.Mc
    out = np.full((S, len(log_at), Mc + c.K * Mc + c.K), np.nan)

    def record(i):
        with torch.no_grad():
            W, z = params["W"].detach(), params["z"].detach()
            out[:, i] = torch.cat([z, W[:, :Mc].transpose(1, 2).reshape(S, -1), W[:, Mc]], 1).cpu().numpy()

    li = 0
    for step in range(c.steps + 1):
        if li < len(log_at) and step == log_at[li]:
            record(li)
            li += 1
            if not np.isfinite(out[:, li - 1]).any():
                break  # every seed has diverged: the rest stays NaN
        if step == c.steps:
            break
        i = idx[:, step]
        h = forward(params, buffers, Xt[i])  # (seeds, B, K)
        loss = -(Gt[i] * h).sum(-1).mean(-1).sum()  # each seed's own loss; seeds do not interact
        grads = torch.autograd.grad(loss, [params[k] for k in names])
        with torch.no_grad():
            new, state = update.update(list(grads), state, [params[k].detach() for k in names], config=c, xp=torch)
        params = {k: p.requires_grad_(True) for k, p in zip(names, new)}
    sysm = block_system(c.attention, c.activation, c.Mc, c.K, c.N)
    variables = {n: out[..., j] for j, n in enumerate(sysm.state_names)}
    with np.errstate(all="ignore"):
        obs = sysm.observables_numpy()(out, sysm.parameter_vector(block_parameters(c, X, G)))
    variables.update({k: np.asarray(v, dtype=np.float64) for k, v in obs.items()})
    traj = make_trajectory(c.ode_times(), variables, paper="joma", system=f"block_{c.attention}_{c.activation}",
                           source="train", backend=f"torch-{dev.type}-batched-minibatch", lead_dims=("seed",),
                           config=c, extra_attrs={"batch": int(c.batch),
                                        "sampling": "with replacement" if c.replacement else "distinct rows per step"})
    return traj.assign_coords(seed=seeds)
