"""Scan & Snap training (docs/papers/scan_snap.md §5): one run for the Trainer
(:class:`ScanSnapExperiment`, :func:`train`, :func:`run` = the paper row's ``train`` slot), every
seed of a setting in one call (:func:`train_seeds`, the claims' runs), many runs as one batched
computation (:func:`train_grid`, Fig. 6), and the same finite-T SGD as a jax stochastic map
(:func:`sgd_ensemble`).

The data path is the config's variant (``counts`` or ``sequences``, :mod:`.data`); the model and
loss are :mod:`.model`, the update rule :mod:`.update`; ``engine="numpy"`` grids run the compiled
count-vector engine :mod:`.fast`. Float64 by default.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from theory.errors import ConfigError, DivergenceError, check_choice
from theory.scan_snap import (
    PAPER,
    ScanSnapConfig,
    count_vector_objective,
    entropy,
    make_task,
    observables_from_parameters,
    symmetric_y_coordinates,
)

from ..trainer import Trainer, resolve_device, torch_threads
from . import update
from .data import Sampler
from .model import DirectYZ, loss_step

__all__ = ["ScanSnapExperiment", "train", "run", "train_seeds", "train_grid", "sgd_ensemble", "logged_observables"]


# ------------------------------------------------------------------------------------------------
# Experiment (one run, for the Trainer)
# ------------------------------------------------------------------------------------------------
@dataclass
class ScanSnapExperiment:
    """One training run on the data path ``config.variant`` (``counts`` or ``sequences``). Logs the
    spec §6 observables from the parameters, the symmetric-coordinate means of ``Y`` (``Y_own_j``,
    ``Y_xlab_j``, ``Y_o_j``, ``Y_c_lab``, ``Y_c_o``) and of ``Z`` (``z_dt_j``, ``z_c``) that the
    T = inf system integrates, and (``log_z_rows``) every moving attention logit as ``z_{n}_{l}``
    (class n, token l)."""

    config: ScanSnapConfig
    log_z_rows: bool = True
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        self.name = self.config.variant
        self.task = make_task(self.config)

    def setup(self, device, generator):
        c = self.config
        self.model = DirectYZ(self.task, 1, c.zero_init, generator, self.dtype, device)
        self.sampler = Sampler(self.task, device, generator, self.dtype)
        self.hyper = _hyper(c, torch.tensor([c.eta_Y], dtype=self.dtype, device=device),
                            torch.tensor([c.eta_Z], dtype=self.dtype, device=device))
        self.opt_state = update.init(self._parameters(), xp=torch)

    def _parameters(self) -> dict[str, torch.nn.Parameter]:
        return {"Y": self.model.Y, "Z": self.model.Z}

    def step(self, step: int) -> dict[str, float]:
        self.model.zero_grad(set_to_none=True)
        loss = loss_step(self.model, self.sampler, 1, self.config.batch, self.config.variant).sum()
        loss.backward()
        self.opt_state = update.step_torch(self._parameters(), self.opt_state, **self.hyper)
        return {"loss": float(loss.detach())}

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "opt": self.opt_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt_state = state["opt"]

    def parameters_numpy(self):
        return (self.model.Y.detach()[0].cpu().numpy().astype(np.float64),
                self.model.Z.detach()[0].cpu().numpy().astype(np.float64))

    def observables(self) -> dict[str, float]:
        Y, Z = self.parameters_numpy()
        return {k: float(v) for k, v in logged_observables(self.task, Y, Z, self.log_z_rows).items()}


    def parameters_info(self) -> dict[str, Any]:
        """Derived sizes (the config itself is recorded once, by the Trainer)."""
        return {"K": self.task.K, "M_out": self.task.M_out}


def logged_observables(task, Y: np.ndarray, Z: np.ndarray, z_rows: bool = True,
                       attention_only: bool = False) -> dict[str, np.ndarray]:
    """What a run logs, from parameters ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in) (any
    leading dims: one run, or the seeds of :func:`train_seeds`): the spec §6 observables, the
    symmetric-coordinate means of ``Y`` and of ``Z`` (``z_dt_j``: DT j's logit, mean over classes;
    ``z_c``: the common logits' mean) that the T = inf system integrates, and with ``z_rows`` every
    moving attention logit ``z_{n}_{l}`` (class n, token l). ``attention_only``: the ``z`` means
    and ``dt_entropy`` only (cheap enough to log every step)."""
    zq = Z[..., task.query, :]  # (..., K, M_in): each class's query row
    zdt = np.take_along_axis(zq, np.broadcast_to(task.dt, zq.shape[:-1] + task.dt.shape[1:]), -1)
    if attention_only:  # c_n on the DTs, P(l|n) e^{z}: the spec §6 DT entropy
        logc = zdt + np.log(np.take_along_axis(task.P, task.dt, 1))
        obs = {"dt_entropy": entropy(np.exp(logc - logc.max(-1, keepdims=True))).mean(-1)}
    else:
        obs = dict(observables_from_parameters(Y, Z, task))
        obs.update(symmetric_y_coordinates(task, Y))
    obs.update({f"z_dt_{j}": zdt[..., j].mean(-1) for j in range(task.dt.shape[1])})
    if task.common.size:
        obs["z_c"] = Z[..., np.unique(task.query)[:, None], task.common[None, :]].mean((-2, -1))
    if z_rows:
        for n in range(task.K):
            for l in task.support(n):
                obs[f"z_{n}_{l}"] = Z[..., task.query[n], l]
    return obs


def train(config: ScanSnapConfig, *, device: str = "auto", seed: int | None = None, progress: bool = False,
          log_z_rows: bool = True, checkpoint=None, checkpoint_every: int | str | None = None, resume: bool = False):
    """Train one model on the data path ``config.variant``, logged at ``config.log_steps()`` (time
    ``config.ode_times()``); returns ``(trajectory, experiment)``."""
    exp = ScanSnapExperiment(config, log_z_rows=log_z_rows)
    trainer = Trainer(device=device, seed=config.seed if seed is None else seed, progress=progress,
                      checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
    return trainer.run(exp), exp


def run(config: ScanSnapConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int | str | None = None, resume: bool = False):
    """``tdyn train scan-snap``: one run, returns the trajectory. ``variant`` (the CLI's
    ``--variant``: ``counts`` or ``sequences``) sets ``config.variant``; it must agree with it when
    the config's variant was moved from its default."""
    if variant is not None:
        if config.variant not in (variant, ScanSnapConfig.variant):
            raise ConfigError("variant", f"--variant {variant!r} contradicts variant={config.variant!r}; "
                                         "set one of them")
        config = config.replace(variant=variant)
    traj, _ = train(config, device=device, progress=progress, log_z_rows=config.K <= 4,
                    checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
    return traj


def _hyper(config: ScanSnapConfig, lr_Y: torch.Tensor, lr_Z: torch.Tensor) -> dict[str, Any]:
    """The update rule's settings: the config's optimiser and momentum, learning rates (R,) per run."""
    return {"lr": {"Y": lr_Y.view(-1, 1, 1), "Z": lr_Z.view(-1, 1, 1)}, "method": config.optimizer,
            "momentum": config.momentum}


# ------------------------------------------------------------------------------------------------
# The seeds of one setting in one call (a claim's map point)
# ------------------------------------------------------------------------------------------------
def train_seeds(config: ScanSnapConfig, *, seeds, device: str = "cpu", z_rows: bool = False,
                attention_only: bool = False, shuffle_labels: bool = False, lr_scale: tuple = (1.0, 1.0)):
    """Every seed of ``config`` in one vectorised run: a trajectory with dims ``(seed, time)``,
    logged at ``config.log_steps()`` (time ``config.ode_times()``), the variables of
    :func:`logged_observables` (``z_rows``: also every moving logit; ``attention_only``: the
    attention's coordinates and DT entropy only). The claims' ``runs``.

    SGD on count vectors (``optimizer="sgd"``, ``variant="counts"``) runs the compiled engine
    :class:`empirical.scan_snap.fast.CountSGD` with one generator per seed
    (``numpy.random.default_rng(seed)``): seed ``s``'s run is the same numbers batched or alone,
    and the same algorithm as the Trainer's :func:`train` (same init law, count law, batch-mean
    gradient and PyTorch momentum; given the Trainer's minibatches it reproduces the Trainer's
    parameters: tests); only the random streams differ (numpy's, not torch's). Float64, CPU
    (``device`` is accepted for the ``runs`` signature). Null controls of the claims (count-vector
    SGD only): ``shuffle_labels`` draws every sample's next token independently of its context
    ("shuffled data"); ``lr_scale = (a, b)`` trains at ``(a eta_Y, b eta_Z)`` on the same steps
    (0 freezes a layer). Other settings (Adam, token sequences)
    train each seed with :func:`train` and stack the runs. A run that diverges leaves NaN from its
    last finite log on (for every seed of the call: they share the engine's steps)."""
    import xarray as xr

    from simulate.trajectory import make_trajectory

    from .fast import CountSGD

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("seeds", "give at least one seed")
    if config.optimizer != "sgd" or config.variant != "counts":
        if shuffle_labels or tuple(lr_scale) != (1.0, 1.0):
            raise ConfigError("variant", "the null controls (shuffled labels, scaled rates) run count-vector SGD only")
        runs = [train(config.replace(seed=s), device=device, log_z_rows=z_rows)[0].drop_vars("loss", errors="ignore")
                for s in seeds]
        if attention_only:
            keep = ["dt_entropy", *[v for v in runs[0].data_vars if v.startswith("z_dt_") or v == "z_c"]]
            runs = [r[keep] for r in runs]
        return xr.concat(runs, "seed").assign_coords(seed=seeds)
    task = make_task(config)
    R = len(seeds)
    eng = CountSGD(task, [lr_scale[0] * config.eta_Y] * R, [lr_scale[1] * config.eta_Z] * R, batch=config.batch,
                   momentum=config.momentum, zero_init=config.zero_init, rng=[np.random.default_rng(s) for s in seeds],
                   shuffle_labels=shuffle_labels)
    logs = [int(s) for s in config.log_steps()]
    rows: list[dict[str, np.ndarray]] = []
    message = ""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for i, step in enumerate(logs):
            try:
                while eng.steps_done < step:
                    eng.step()
            except DivergenceError as err:
                message = f"diverged at step {err.step}: {err.message}"
                nan = {k: np.full(R, np.nan) for k in rows[0]}
                rows += [nan] * (len(logs) - i)
                break
            rows.append(logged_observables(task, eng.Y, eng.Z, z_rows, attention_only))
    data = {k: np.stack([r[k] for r in rows], -1) for k in rows[0]}  # (seed, time)
    traj = make_trajectory(config.ode_times(), data, paper=PAPER, system=config.variant, source="train",
                           backend="numba-count-engine-batched", status=-1 if message else 0, message=message,
                           lead_dims=("seed",), config=config)
    return traj.assign_coords(seed=seeds)


# ------------------------------------------------------------------------------------------------
# Batched grids (Fig. 6): many runs in one computation
# ------------------------------------------------------------------------------------------------
def train_grid(config: ScanSnapConfig, eta_Z: list[float], ratios: list[float], seeds: int, *,
               device: str = "cpu", snapshots: tuple[int, ...] = (), dtype=torch.float64, engine: str = "torch"):
    """Train ``len(eta_Z) x len(ratios) x seeds`` runs of ``config`` (eta_Y = ratio * eta_Z) as one
    batched computation (on the data path ``config.variant``). ``engine="numpy"``
    runs the count-vector SGD of :mod:`empirical.scan_snap.fast` (cost independent of T; SGD and
    the counts path only, CPU, float64 or float32 as ``dtype``; the same algorithm on other random
    streams than torch's). Returns a dict with
    ``eta_Z``, ``ratio``, ``seed`` (R,) arrays, ``final`` (observables dict of (R,) arrays) and
    ``Z`` snapshots {step: (R, M_in, M_in)}. Runs are independent (own data, own init); the whole
    grid is seeded by ``config.seed``."""
    if seeds < 1:
        raise ConfigError("seeds", f"must be >= 1, got {seeds}")
    for v in list(eta_Z) + list(ratios):
        if not (math.isfinite(v) and v > 0):
            raise ConfigError("eta_Z", f"learning rates and ratios must be > 0, got {v}")
    check_choice("engine", engine, ("torch", "numpy"))
    if engine == "numpy":
        np_dtype = np.float32 if dtype == torch.float32 else np.float64
        return _train_grid_numpy(config, eta_Z, ratios, seeds, snapshots, np_dtype)
    with torch_threads(1):
        return _train_grid(config, eta_Z, ratios, seeds, resolve_device(device), snapshots, dtype)


def _grid_result(combos, Y, Z, snaps, task):
    return {
        "eta_Z": np.array([c[0] for c in combos]), "ratio": np.array([c[1] for c in combos]),
        "seed": np.array([c[2] for c in combos]),
        "final": observables_from_parameters(Y.astype(np.float64), Z.astype(np.float64), task),
        "Z": snaps, "task": task,
    }


def _train_grid_numpy(config, eta_Z, ratios, seeds, snapshots, dtype=np.float64):
    from .fast import CountSGD

    if config.optimizer != "sgd" or config.variant != "counts":
        field = "optimizer" if config.optimizer != "sgd" else "variant"
        raise ConfigError(field, "engine='numpy' runs count-vector SGD only (optimizer=sgd, variant=counts)")
    task = make_task(config)
    combos = list(itertools.product(eta_Z, ratios, range(seeds)))
    eng = CountSGD(task, [c[0] * c[1] for c in combos], [c[0] for c in combos], batch=config.batch,
                   momentum=config.momentum, zero_init=config.zero_init, rng=np.random.default_rng(config.seed),
                   dtype=dtype)
    snaps = eng.run(config.steps, snapshots)
    snaps[config.steps] = eng.Z.copy()
    return _grid_result(combos, eng.Y, eng.Z, snaps, task)


def _train_grid(config, eta_Z, ratios, seeds, dev, snapshots, dtype):
    task = make_task(config)
    combos = list(itertools.product(eta_Z, ratios, range(seeds)))
    R = len(combos)
    gen = torch.Generator(device=dev)
    gen.manual_seed(config.seed)
    model = DirectYZ(task, R, config.zero_init, gen, dtype, dev)
    sampler = Sampler(task, dev, gen, dtype)
    ez = torch.tensor([c[0] for c in combos], dtype=dtype, device=dev)
    ey = torch.tensor([c[0] * c[1] for c in combos], dtype=dtype, device=dev)
    params = {"Y": model.Y, "Z": model.Z}
    hyper, opt_state = _hyper(config, ey, ez), update.init(params, xp=torch)
    snaps = {}
    for s in range(config.steps):
        if s in snapshots:
            snaps[s] = model.Z.detach().cpu().numpy().copy()
        model.zero_grad(set_to_none=True)
        loss = loss_step(model, sampler, R, config.batch, config.variant)
        loss.sum().backward()
        opt_state = update.step_torch(params, opt_state, **hyper)
        if not torch.isfinite(loss).all():
            raise DivergenceError(s + 1, "non-finite loss in the grid")
    snaps[config.steps] = model.Z.detach().cpu().numpy().copy()
    return _grid_result(combos, model.Y.detach().cpu().numpy(), model.Z.detach().cpu().numpy(), snaps, task)


# ------------------------------------------------------------------------------------------------
# The same finite-T SGD as a jax stochastic map (count vectors), vmapped over seeds and learning rates
# ------------------------------------------------------------------------------------------------
def sgd_ensemble(config: ScanSnapConfig, lrs, paths_per_lr: int, *, seed: int = 0):
    """Finite-T SGD (the update rule of :mod:`.update`, momentum ``config.momentum``, batch
    ``config.batch``, ``T - 1`` contextual tokens drawn as count vectors) as a stochastic map in
    jax: its gradient is ``jax.grad`` of
    :func:`theory.scan_snap.count_vector_objective`; ``paths_per_lr`` seeds for each ``(eta_Y,
    eta_Z)`` in ``lrs``, all vmapped, steps by ``lax.scan``; zero or default init as the config
    says. Logged at ``config.log_steps()``. Returns ``(times, Y, Z, lr)`` with times
    ``config.ode_times()``, Y (paths, n_logged, M_in, M_out), Z (paths, n_logged, M_in, M_in), the
    per-path learning rates (paths, 2). Float64."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    task = make_task(config)
    P = jnp.asarray(task.P)
    query, label = jnp.asarray(task.query), jnp.asarray(task.label)
    B, L, mu = config.batch, config.T - 1, config.momentum
    logs = config.log_steps()
    slot = np.full(config.steps + 1, len(logs), dtype=np.int64)  # step -> buffer slot (last = discard)
    slot[logs] = np.arange(len(logs))
    slot = jnp.asarray(slot)
    lr = jnp.asarray(np.repeat(np.asarray(lrs, float).reshape(-1, 2), paths_per_lr, axis=0))
    grad = jax.grad(count_vector_objective, argnums=(0, 1))

    def one_path(key, lr_p):
        kinit, kloop = jax.random.split(key)
        if config.zero_init:
            Y0 = jnp.zeros((task.M_in, task.M_out))
            Z0 = jnp.zeros((task.M_in, task.M_in))
        else:
            k1, k2 = jax.random.split(kinit)
            b = 1.0 / np.sqrt(task.M_in)
            Y0 = jax.random.uniform(k1, (task.M_in, task.M_out), minval=-b, maxval=b)
            Z0 = jax.random.uniform(k2, (task.M_in, task.M_in), minval=-b, maxval=b)

        hyper = {"lr": {"Y": lr_p[0], "Z": lr_p[1]}, "method": "sgd", "momentum": mu, "maximize": True}

        def step(carry, inp):
            params, state, bY, bZ = carry
            key, i = inp
            k1, k2 = jax.random.split(key)
            n = jax.random.randint(k1, (B,), 0, task.K)
            counts = jax.random.multinomial(k2, L, P[n])
            gY, gZ = grad(params["Y"], params["Z"], counts, n, query, label)
            params, state = update.update({"Y": gY, "Z": gZ}, state, params, xp=jnp, **hyper)  # ascent on J
            bY, bZ = bY.at[slot[i + 1]].set(params["Y"]), bZ.at[slot[i + 1]].set(params["Z"])
            return (params, state, bY, bZ), None

        bY = jnp.zeros((len(logs) + 1,) + Y0.shape).at[0].set(Y0)
        bZ = jnp.zeros((len(logs) + 1,) + Z0.shape).at[0].set(Z0)
        params = {"Y": Y0, "Z": Z0}
        init = (params, update.init(params, xp=jnp), bY, bZ)
        out, _ = jax.lax.scan(step, init, (jax.random.split(kloop, config.steps), jnp.arange(config.steps)))
        return out[2][:-1], out[3][:-1]

    keys = jax.random.split(jax.random.PRNGKey(seed), lr.shape[0])
    Y, Z = jax.jit(jax.vmap(one_path))(keys, lr)
    return config.ode_times(), np.asarray(Y), np.asarray(Z), np.asarray(lr)
