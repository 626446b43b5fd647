"""SCB: many runs of the linear SCB model in one batched tensor (docs/papers/scb.md §2, §6 item 1, §6.1) — the
engine of the claims' batched seeds (:func:`train_seeds`) and of the l1-vs-SGD comparison.

:func:`train_runs` trains R runs of ``yhat = V X a^(k)`` (spec §2) at once: each run has its own
method, learning rate ``lr`` (for both V and A, Decision 8, unless ``lr_V`` gives V its own), l1 strength ``lam``, data seed
and (optionally) initial parameters. Runs with the same seed see the same minibatches (common
random numbers: method comparisons are paired), and **a run draws exactly what the Trainer's run
of that seed draws** (:class:`SeedSampler`: :class:`~empirical.scb.data.SCBSampler` on the
generator ``torch.Generator().manual_seed(seed)`` the Trainer hands an experiment), and steps by
the one rule of :mod:`empirical.scb.update`: so :func:`train_seeds` equals per-seed
:func:`empirical.scb.train` runs (tested to ~1e-12; the gradients are closed forms here, autograd
there).

Methods (spec §2 pseudo-code), each a setting of the update rule (per-run hyper-parameters):

* ``"l1"`` — the paper's method: ``V <- V - lr G_V D^{-1}``, ``a_k <- a_k - lr G_{a_k}/mu_k``,
  then ``a_k <- soft_threshold(a_k, lr*lam)`` (mu_k-weighted penalty, Decision 5). The prox is off
  during stage 1 and switches on, per run, once ``mean_k <a_k, q_k> T >= lam_switch`` (Decision 7;
  this rule reads q, as in the authors' analysis). ``lam = 0`` is preconditioned SGD without prox.
  Config: ``variant="preconditioned", normalise="end"``.
* ``"l1_proj"`` — the same plus the per-step normalisation of Decision 6, the projection
  ``a_k <- a_k + (1 - 1^T a_k)/T`` applied after the gradient step and before the prox (so the prox
  still sets exact zeros). It pins the scale ``1^T a_k`` that the l1 penalty otherwise shrinks
  (spec §3.5 degeneracy: a -> a/c, V -> cV, which inflates the attention-gradient noise by c).
  Config: ``normalise="step_before_prox"``.
* ``"sgd"`` — vanilla SGD: ``V <- V - lr G_V``, ``A <- A - lr G_A``; no preconditioner, no prox.
  Config: ``variant="sgd"``.

``population=True`` replaces the minibatch gradient by the exact population gradient (spec §3.2,
batched over runs in torch): the theory's noise-free discrete map of each method.

Precision: float64 throughout (the distances go down to ~1e-3). Shapes: ``V`` (R, N, N), ``A``
(R, T, N) with column k = a^(k); minibatch tokens ``x`` (S, B, T), queries ``k`` (S, B), targets
``y`` (S, B) for S seeds.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from theory.errors import ConfigError, check_choice
from theory.params import log_steps
from theory.scb import SCBConfig, SCBTask, initial_parameters, make_task, observables_from_parameters

from ..seeds import SeedBatch
from . import update
from .data import SCBSampler

__all__ = ["METHODS", "RunSpec", "SeedSampler", "minibatch_gradients", "population_gradients", "train_runs",
           "attention_noise_scale", "method_of", "train_seeds", "trajectory_of_runs"]

METHODS = ("l1", "l1_proj", "sgd")


@dataclass(frozen=True)
class RunSpec:
    """One run: ``method`` in METHODS, learning rate ``lr`` (the attention's, and V's unless
    ``lr_V`` gives V its own), l1 strength ``lam`` (threshold ``lr*lam`` per step), data ``seed``."""

    method: str
    lr: float
    lam: float
    seed: int
    lr_V: float | None = None

    def __post_init__(self):
        check_choice("method", self.method, METHODS)
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise ConfigError("lr", f"learning rate must be a finite number > 0, got {self.lr}")
        if self.lr_V is not None and not (np.isfinite(self.lr_V) and self.lr_V > 0):
            raise ConfigError("lr_V", f"learning rate must be a finite number > 0, got {self.lr_V}")
        if not (np.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError("lam", f"l1 strength must be >= 0, got {self.lam}")


def _device(device: str | torch.device) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class SeedSampler:
    """Fresh SCB minibatches (spec §1.2) for S seeds at once: row ``i`` of every draw is what
    :class:`~empirical.scb.data.SCBSampler` draws on seed ``seeds[i]``'s generator (the one the
    Trainer hands an experiment, :class:`empirical.seeds.SeedBatch`). ``sample(B)`` returns ``x``
    (S, B, T), ``k`` (S, B), ``y`` (S, B) token ids."""

    def __init__(self, task: SCBTask, seeds, device: torch.device):
        self.task = task
        self.samplers = [SCBSampler(task, device, g) for g in SeedBatch(seeds, device).generators]

    def sample(self, B: int):
        draws = [s.sample(B) for s in self.samplers]
        return tuple(torch.stack(d) for d in zip(*draws))


def minibatch_gradients(V, A, x, k, y):
    """Batch-mean gradients of ``(1/2B) sum_b |V X_b a^(k_b) - e_{y_b}|^2`` (spec §3.2 per-sample
    forms ``G_V = r (Xa)^T``, ``G_{a^(k)} = X^T V^T r``) for R runs at once. ``x`` (R, B, T),
    ``k``, ``y`` (R, B). Returns ``(G_V (R,N,N), G_A (R,T,N), loss (R,))``."""
    R, T, N = A.shape
    B = x.shape[1]
    a_sel = torch.gather(A, 2, k[:, None, :].expand(R, T, B)).transpose(1, 2)  # (R, B, T)
    Xa = torch.zeros(R, B, N, dtype=A.dtype, device=A.device).scatter_add_(2, x, a_sel)
    r = torch.einsum("rij,rbj->rbi", V, Xa)
    r.scatter_add_(2, y[..., None], -torch.ones_like(r[..., :1]))  # r = yhat - e_y
    loss = 0.5 * (r**2).sum(-1).mean(-1)
    G_V = torch.einsum("rbi,rbj->rij", r, Xa) / B
    g = torch.gather(torch.einsum("rij,rbi->rbj", V, r), 2, x)  # (V^T r)[x_bt], (R, B, T)
    onehot_k = torch.zeros(R, B, N, dtype=A.dtype, device=A.device).scatter_(2, k[..., None], 1.0)
    G_A = torch.einsum("rbt,rbk->rtk", g, onehot_k) / B
    return G_V, G_A, loss


def population_gradients(V, A, P, mu, Qm, Sig):
    """The exact population gradients of spec §3.2 for R runs at once (the formulas of
    :func:`theory.scb.population_gradient`, batched): ``V`` (R, N, N), ``A`` (R, T, N)."""
    n, c, s = (A**2).sum(1), (A * Qm).sum(1), A.sum(1)  # (R, N)
    v = V @ mu  # (R, N)
    gV = ((n @ mu)[:, None, None] * (V @ Sig) - (c @ mu)[:, None, None] * (P @ Sig)
          + (((s**2) @ mu)[:, None] * v - (s @ mu)[:, None] * mu)[:, :, None] * mu[None, None, :])
    vv = torch.einsum("rij,jk,rik->r", V, Sig, V)
    vp = torch.einsum("rij,jk,ik->r", V, Sig, P)
    gA = mu * (vv[:, None, None] * A - vp[:, None, None] * Qm + (s * (v**2).sum(-1, keepdim=True)
                                                                  - (v @ mu)[:, None])[:, None, :])
    return gV, gA


def train_runs(task: SCBTask, runs: list[RunSpec], *, batch: int, steps: int, log_every: int,
               lam_switch: float = 2.0, device: str = "cpu", population: bool = False,
               init: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Train every run in ``runs`` for ``steps`` steps of ``batch`` fresh samples.

    ``population=True`` replaces the minibatch gradient by the exact population gradient (spec
    §3.2; noise-free). ``init`` = (V0, A0), shapes (N, N), (T, N) for every run or (R, N, N),
    (R, T, N) one per run; default ``V = mu 1^T``, ``a = 1/T``. Returns numpy arrays over (run,
    log point): ``step`` (L,), ``V`` (R, L, N, N), ``A`` (R, L, T, N), and the observables of
    :func:`theory.scb.observables_from_parameters` plus ``nnz_mean``/``nnz_max`` (non-zeros per
    attention column), ``support`` (all columns' supports exact), ``support_fraction`` (the fraction of exact columns) and
    ``attention_max_column_distance`` (``max_k |a_k/1'a_k - q_k|``) — all taken on the raw
    parameters; distances are after the final normalisation.
    """
    with _threads(dev := _device(device)):
        return _train_runs(task, runs, batch, steps, log_every, lam_switch, dev, population, init)


@contextmanager
def _threads(dev: torch.device):
    """One intra-op thread on CPU: these tensors are small, and on a shared 2-core machine torch's
    thread pool costs more than it gains (measured: ~4x slower wall time under load)."""
    n = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _initial(task: SCBTask, R: int, init, f64) -> tuple[torch.Tensor, torch.Tensor]:
    N, T = task.N, task.T
    V0, A0 = init if init is not None else (np.outer(task.mu, np.ones(N)), np.full((T, N), 1.0 / T))
    V0, A0 = np.asarray(V0, float), np.asarray(A0, float)
    if V0.shape[-2:] != (N, N) or A0.shape[-2:] != (T, N) or V0.ndim not in (2, 3) or A0.ndim != V0.ndim \
            or (V0.ndim == 3 and not V0.shape[0] == A0.shape[0] == R):
        raise ConfigError("init", f"shapes {V0.shape}, {A0.shape} fit neither one start (N={N}, T={T}) nor {R} runs")
    V = torch.as_tensor(V0, **f64).expand(R, N, N).clone()
    A = torch.as_tensor(A0, **f64).expand(R, T, N).clone()
    return V, A


def _train_runs(task, runs, batch, steps, log_every, lam_switch, dev, population, init):
    seeds = sorted({r.seed for r in runs})
    sidx = torch.as_tensor([seeds.index(r.seed) for r in runs], device=dev)
    R, N, T = len(runs), task.N, task.T
    f64 = dict(dtype=torch.float64, device=dev)
    mu = torch.as_tensor(task.mu, **f64)
    V, A = _initial(task, R, init, f64)
    lr = torch.as_tensor([r.lr for r in runs], **f64)
    lr_V = torch.as_tensor([r.lr if r.lr_V is None else r.lr_V for r in runs], **f64)
    # the rule of empirical.scb.update, one value per run: projection before the prox (l1_proj)
    hyper = update.Hyper(lr_V=lr_V, lr_A=lr, precondition=torch.as_tensor([r.method != "sgd" for r in runs], device=dev),
                         lam=torch.as_tensor([r.lam for r in runs], **f64), lam_switch=lam_switch,
                         project=torch.as_tensor([r.method == "l1_proj" for r in runs], device=dev),
                         project_before_prox=True)
    Qm = torch.as_tensor(task.Qm, **f64)
    overlap = update.target_overlap(Qm)  # <a_k, q_k> for the l1 switch
    state = update.init((V, A), xp=torch)
    P, Sig = torch.as_tensor(task.P, **f64), torch.as_tensor(task.Sigma, **f64)
    sampler = None if population else SeedSampler(task, seeds, dev)
    grid = log_steps(steps, log_every)  # 0, log_every, ..., steps: the Trainer's logging grid
    logged = set(grid.tolist())
    Vs, As = [], []
    with torch.no_grad():
        for n in range(steps + 1):
            if n in logged:
                Vs.append(V.cpu().numpy().copy())
                As.append(A.cpu().numpy().copy())
            if n == steps:
                break
            if population:
                G_V, G_A = population_gradients(V, A, P, mu, Qm, Sig)
            else:
                x, k, y = sampler.sample(batch)
                G_V, G_A, _ = minibatch_gradients(V, A, x[sidx], k[sidx], y[sidx])
            (V, A), state = update.update((G_V, G_A), state, (V, A), hyper=hyper, mu=mu, overlap=overlap, xp=torch)
    V_all, A_all = np.stack(Vs, 1), np.stack(As, 1)
    with np.errstate(all="ignore"):  # diverged runs give inf/nan observables
        out = {k: np.asarray(v) for k, v in observables_from_parameters(V_all, A_all, task).items()}
        col = np.sqrt(((A_all / A_all.sum(-2, keepdims=True) - task.Qm) ** 2).sum(-2)).max(-1)
    nz = np.abs(A_all) > 0  # exact zeros only: the prox sets them, SGD never does
    on = np.zeros((T, N), dtype=bool)
    for kk in range(N):
        on[task.support[kk], kk] = True
    exact = np.all(nz == on, axis=-2)  # (R, L, N): column k's support is exactly S_k
    out.update(step=grid, V=V_all, A=A_all, nnz_mean=nz.sum(-2).mean(-1), nnz_max=nz.sum(-2).max(-1),
               support=exact.all(-1), support_fraction=exact.mean(-1), attention_max_column_distance=col)
    return out


def attention_noise_scale(task: SCBTask, batch: int, *, draws: int = 200, seed: int = 12345,
                          device: str = "cpu") -> float:
    """Per-step minibatch noise scale of the l1 method's attention update, divided by ``lr``:
    the RMS over off-support coordinates (t not in S_k, all k) of the standard deviation, over
    ``draws`` minibatches of size ``batch``, of the preconditioned gradient ``G_{a_k,t}/mu_k``,
    evaluated at the ground truth ``V = P``, ``a_k = q_k`` (where the prox must hold the support).
    The per-step threshold ``lr*lam`` compares with the per-step noise ``lr*sigma``: ``lam/sigma``."""
    dev = _device(device)
    f64 = dict(dtype=torch.float64, device=dev)
    sampler = SeedSampler(task, [seed], dev)
    V = torch.as_tensor(task.P, **f64)[None]
    A = torch.as_tensor(task.Qm, **f64)[None]
    mu = torch.as_tensor(task.mu, **f64)
    gs = []
    with torch.no_grad(), _threads(dev):
        for _ in range(draws):
            x, k, y = sampler.sample(batch)
            gs.append((minibatch_gradients(V, A, x, k, y)[1][0] / mu).cpu().numpy())
    sd = np.stack(gs).std(0, ddof=1)
    off = np.ones_like(sd, dtype=bool)
    for kk in range(task.N):
        off[task.support[kk], kk] = False
    return float(np.sqrt((sd[off] ** 2).mean()))


# ------------------------------------------------------------------------------------------------
# One config, many seeds: the claims' batched runs
# ------------------------------------------------------------------------------------------------
def method_of(config: SCBConfig) -> str:
    """The :data:`METHODS` entry that trains like ``config`` (its variant and normalisation)."""
    if config.variant == "sgd":
        return "sgd"
    if config.variant != "preconditioned":
        raise ConfigError("variant", f"the batched runs train 'preconditioned' and 'sgd', not {config.variant!r}")
    if config.normalise == "step":
        raise ConfigError("normalise", "the batched runs project before the prox: use 'step_before_prox' (or 'end')")
    return "l1_proj" if config.normalise == "step_before_prox" else "l1"


def train_seeds(config: SCBConfig, *, seeds, device: str = "cpu", task: SCBTask | None = None, init=None):
    """Every seed of ``config`` in one batched run (:func:`train_runs`): a trajectory with dims
    ``(seed, time)`` holding the observables the Trainer's run logs (time ``config.ode_times()``;
    not ``minibatch_loss``), plus ``nnz_max``, ``support_exact`` (every column's support exact)
    and ``attention_max_column_distance``. ``support_recovered`` and ``attention_nonzeros`` count
    exact zeros (the Trainer's, |a| > 1e-12: the same after the prox).
    Seed ``s`` draws and steps exactly as ``empirical.scb.train(config, seed=s)`` (tested).
    ``init`` = (V0, A0) for every seed, or per seed with a leading seed axis."""
    task = task or make_task(config)
    seeds = [int(s) for s in seeds]
    if init is None and config.init != "mu":
        init = initial_parameters(config, task)
    runs = [RunSpec(method_of(config), float(config.eta_A), float(config.lam), s, lr_V=float(config.eta_V))
            for s in seeds]
    out = train_runs(task, runs, batch=config.batch, steps=config.steps, log_every=config.log_every,
                     lam_switch=config.lam_switch, device=device, init=init)
    return trajectory_of_runs(out, config, seeds, task=task)


#: the per-run arrays of :func:`train_runs` a trajectory keeps (besides the theory's observables)
_EXTRA = {"nnz_mean": "attention_nonzeros", "nnz_max": "nnz_max", "support": "support_exact",
          "support_fraction": "support_recovered", "attention_max_column_distance": "attention_max_column_distance"}


def trajectory_of_runs(out: dict[str, np.ndarray], config: SCBConfig, seeds, *, task: SCBTask | None = None,
                       dim: str = "seed"):
    """:func:`train_runs`' output as a trajectory Dataset with dims ``(dim, time)`` (one run per
    entry of ``seeds``), time ``config.ode_times()``."""
    from simulate.trajectory import make_trajectory

    names = [k for k in out if k not in ("step", "V", "A", *_EXTRA)]
    variables = {k: np.asarray(out[k], dtype=np.float64) for k in names}
    variables.update({new: np.asarray(out[k], dtype=np.float64) for k, new in _EXTRA.items()})
    traj = make_trajectory(config.ode_times(), variables, paper="scb", system=config.variant, source="train",
                           backend="torch-batched", lead_dims=(dim,), config=config,
                           extra_attrs={"K": task.K, "m2": task.m2} if task is not None else None)
    return traj.assign_coords({dim: list(seeds)}).assign(step=("time", np.asarray(out["step"], dtype=np.float64)))
