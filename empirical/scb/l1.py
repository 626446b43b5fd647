"""SCB: l1-proximal preconditioned SGD vs vanilla SGD, many runs at once (spec §2, §6 item 1, §6.1).

The paper's main figure compares its l1-regularised proximal method with vanilla SGD. This module
trains R runs of the linear SCB model (``yhat = V X a^(k)``, spec §2) *in one batched tensor*: each
run has its own method, learning rate ``lr`` (used for both V and A, Decision 8), l1 strength
``lam`` and data seed. Runs with the same seed see the same minibatches (common random numbers:
the method comparison is paired).

Methods (spec §2 pseudo-code), each a setting of the one update rule :mod:`empirical.scb.update`
(per-run hyper-parameters):

* ``"l1"`` — the paper's method: ``V <- V - lr G_V D^{-1}``, ``a_k <- a_k - lr G_{a_k}/mu_k``,
  then ``a_k <- soft_threshold(a_k, lr*lam)`` (mu_k-weighted penalty, Decision 5). The prox is off
  during stage 1 and switches on, per run, once ``mean_k <a_k, q_k> T >= lam_switch`` (Decision 7;
  this rule reads q, as in the authors' analysis). ``lam = 0`` is preconditioned SGD without prox.
* ``"l1_proj"`` — the same plus the per-step normalisation of Decision 6, the projection
  ``a_k <- a_k + (1 - 1^T a_k)/T`` applied after the gradient step and before the prox (so the prox
  still sets exact zeros). It pins the scale ``1^T a_k`` that the l1 penalty otherwise shrinks
  (spec §3.5 degeneracy: a -> a/c, V -> cV, which inflates the attention-gradient noise by c).
* ``"sgd"`` — vanilla SGD: ``V <- V - lr G_V``, ``A <- A - lr G_A``; no preconditioner, no prox.

Learning-rate search (:func:`largest_stable_lr`), the documented rule: on the geometric grid
``lr_j = lr_min * ratio^j`` (ratio sqrt(2) by default) run ``horizon`` steps (every seed given); a
rate is *stable* when the exact population loss stays finite and below ``1.5 x`` its initial value
at every logged step (the initialisation is a saddle, spec §3.2: at small rates minibatch noise
raises the loss slightly before the escape lowers it, so "below the initial value" would reject
every small rate). ``lr_max`` = the largest grid rate such that it and every smaller grid rate is
stable; the study uses ``lr_max / ratio`` (one grid step back for safety).

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
from theory.scb import SCBTask, observables_from_parameters, population_gradient

from . import update

__all__ = ["METHODS", "RunSpec", "BatchedSampler", "minibatch_gradients", "train_runs",
           "attention_noise_scale", "largest_stable_lr", "initial_loss"]

METHODS = ("l1", "l1_proj", "sgd")
#: a rate is unstable once the population loss exceeds this multiple of its initial value
STABLE_FACTOR = 1.5


@dataclass(frozen=True)
class RunSpec:
    """One run: ``method`` in METHODS, learning rate ``lr`` (V and A), l1 strength ``lam``
    (threshold ``lr*lam`` per step), data ``seed``."""

    method: str
    lr: float
    lam: float
    seed: int

    def __post_init__(self):
        check_choice("method", self.method, METHODS)
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise ConfigError("lr", f"learning rate must be a finite number > 0, got {self.lr}")
        if not (np.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError("lam", f"l1 strength must be >= 0, got {self.lam}")


def _device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class BatchedSampler:
    """Fresh SCB minibatches (spec §1.2, Decision 1 A) for S seeds at once, by inverse CDFs.
    ``sample(B)`` returns ``x`` (S, B, T), ``k`` (S, B), ``y`` (S, B) token ids."""

    def __init__(self, task: SCBTask, seeds, device: torch.device):
        self.task, self.device = task, device
        f64 = dict(dtype=torch.float64, device=device)
        self.cdf_mu = torch.cumsum(torch.as_tensor(task.mu, **f64), 0)
        self.cdf_P = torch.cumsum(torch.as_tensor(task.P.T, **f64), 1)  # row j: cdf of P[:, j]
        self.cdf_Q = torch.cumsum(torch.as_tensor(task.Qm.T, **f64), 1)  # row k: cdf of q^(k)
        self.gens = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def _inv(self, cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        n = cdf.shape[-1]
        return torch.searchsorted(cdf, u.contiguous(), right=True).clamp_(max=n - 1)

    def sample(self, B: int):
        T, N = self.task.T, self.task.N
        u = torch.stack([torch.rand(B, T + 3, generator=g, dtype=torch.float64, device=self.device)
                         for g in self.gens])  # (S, B, T+3)
        x = self._inv(self.cdf_mu, u[..., :T])
        k = self._inv(self.cdf_mu, u[..., T])
        pos = (u[..., T + 1, None] >= self.cdf_Q[k]).sum(-1).clamp_(max=T - 1)  # s ~ q^(k)
        xs = x.gather(-1, pos[..., None])[..., 0]
        y = (u[..., T + 2, None] >= self.cdf_P[xs]).sum(-1).clamp_(max=N - 1)  # x_o ~ P[:, x_s]
        return x, k, y


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


def initial_loss(task: SCBTask) -> float:
    """Population loss at the initialisation ``V = mu 1^T``, ``a = 1/T`` (spec §2, §3.1)."""
    from theory.scb import population_loss
    N, T = task.N, task.T
    return float(population_loss(np.outer(task.mu, np.ones(N)), np.full((T, N), 1.0 / T), task))


def train_runs(task: SCBTask, runs: list[RunSpec], *, batch: int, steps: int, log_every: int,
               lam_switch: float = 2.0, device: str = "cpu", population: bool = False,
               init: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Train every run in ``runs`` for ``steps`` steps of ``batch`` fresh samples.

    ``population=True`` replaces the minibatch gradient by the exact population gradient (spec
    §3.2; noise-free, CPU numpy). ``init`` = (V0, A0), default ``V = mu 1^T``, ``a = 1/T``.
    Returns numpy arrays over (run, log point): ``step`` (L,), ``V`` (R, L, N, N), ``A``
    (R, L, T, N), and the observables of :func:`theory.scb.observables_from_parameters` plus
    ``nnz_mean``/``nnz_max`` (non-zeros per attention column) and ``support`` (all columns' supports
    exact) — all taken on the raw parameters; distances are after the final normalisation.
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


def _train_runs(task, runs, batch, steps, log_every, lam_switch, dev, population, init):
    seeds = sorted({r.seed for r in runs})
    sidx = torch.as_tensor([seeds.index(r.seed) for r in runs], device=dev)
    R, N, T = len(runs), task.N, task.T
    f64 = dict(dtype=torch.float64, device=dev)
    mu = torch.as_tensor(task.mu, **f64)
    V0, A0 = init if init is not None else (np.outer(task.mu, np.ones(N)), np.full((T, N), 1.0 / T))
    V = torch.as_tensor(np.asarray(V0, float), **f64).expand(R, N, N).clone()
    A = torch.as_tensor(np.asarray(A0, float), **f64).expand(R, T, N).clone()
    lr = torch.as_tensor([r.lr for r in runs], **f64)
    # the rule of empirical.scb.update, one value per run: projection before the prox (l1_proj)
    hyper = update.Hyper(lr_V=lr, lr_A=lr, precondition=torch.as_tensor([r.method != "sgd" for r in runs], device=dev),
                         lam=torch.as_tensor([r.lam for r in runs], **f64), lam_switch=lam_switch,
                         project=torch.as_tensor([r.method == "l1_proj" for r in runs], device=dev),
                         project_before_prox=True)
    overlap = update.target_overlap(torch.as_tensor(task.Qm, **f64))  # <a_k, q_k> for the l1 switch
    state = update.init((V, A), xp=torch)
    sampler = None if population else BatchedSampler(task, seeds, dev)
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
                gs = [population_gradient(v, a, task) for v, a in zip(V.cpu().numpy(), A.cpu().numpy())]
                G_V = torch.as_tensor(np.stack([g[0] for g in gs]), **f64)
                G_A = torch.as_tensor(np.stack([g[1] for g in gs]), **f64)
            else:
                x, k, y = sampler.sample(batch)
                G_V, G_A, _ = minibatch_gradients(V, A, x[sidx], k[sidx], y[sidx])
            (V, A), state = update.update((G_V, G_A), state, (V, A), hyper=hyper, mu=mu, overlap=overlap, xp=torch)
    V_all, A_all = np.stack(Vs, 1), np.stack(As, 1)
    with np.errstate(all="ignore"):  # diverged runs (lr search) give inf/nan observables
        out = {k: np.asarray(v) for k, v in observables_from_parameters(V_all, A_all, task).items()}
    nz = np.abs(A_all) > 0  # exact zeros only: the prox sets them, SGD never does
    on = np.zeros((T, N), dtype=bool)
    for kk in range(N):
        on[task.support[kk], kk] = True
    out.update(step=grid, V=V_all, A=A_all, nnz_mean=nz.sum(-2).mean(-1),
               nnz_max=nz.sum(-2).max(-1), support=np.all(nz == on, axis=(-2, -1)))
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
    sampler = BatchedSampler(task, [seed], dev)
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


def largest_stable_lr(task: SCBTask, method: str, *, batch: int, seeds, horizon: int,
                      lr_min: float, n_grid: int = 12, ratio: float = 2**0.5, device: str = "cpu",
                      population: bool = False, init=None) -> dict:
    """The documented search (module docstring): geometric grid ``lr_min * ratio^j``, j < n_grid,
    prox off (``lam = 0``: the prox is non-expansive and cannot cause divergence). Returns
    ``{"lr_max", "lr", "ratio", "grid", "stable"}`` with ``lr = lr_max/ratio`` (NaN if no grid rate is stable);
    raises ConfigError when no grid rate is unstable (the search did not bracket divergence)."""
    if not ratio > 1:
        raise ConfigError("ratio", f"grid ratio must be > 1, got {ratio}")
    grid = lr_min * float(ratio) ** np.arange(n_grid)
    runs = [RunSpec(method, float(g), 0.0, int(s)) for g in grid for s in seeds]
    out = train_runs(task, runs, batch=batch, steps=horizon, log_every=max(1, horizon // 20),
                     device=device, population=population, init=init)
    L = out["population_loss"].reshape(n_grid, len(seeds), -1)
    L0 = float(initial_loss(task)) if init is None else float(L[0, 0, 0])
    with np.errstate(invalid="ignore"):
        stable = np.all(np.isfinite(L) & (L < STABLE_FACTOR * L0), axis=(1, 2))
    n_ok = int(np.argmin(stable)) if not stable.all() else n_grid  # leading run of stable rates
    lr_max = float(grid[n_ok - 1]) if n_ok > 0 else float("nan")
    if stable.all():
        raise ConfigError("n_grid", f"every rate up to {grid[-1]:.3g} was stable: widen the grid")
    return {"lr_max": lr_max, "lr": lr_max / ratio, "ratio": float(ratio), "grid": grid, "stable": stable}
