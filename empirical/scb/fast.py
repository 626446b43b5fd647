"""SCB real minibatch SGD at the authors' scale (N = 500, T = 1e5): gathers and scatter-adds only.

The same SGD as :class:`empirical.scb.experiment.SCBExperiment` (variants ``preconditioned`` and
``sgd``, the l1 proximal step with its switch, per-step normalisation), written for large ``T``:

* the attention is stored transposed, ``At`` (N, T) with row k = a^(k); the forward pass adds the
  rows of the batch's queries into the weighted histograms ``h_b = X_b a^(k_b)`` (B, N) (docs/papers/scb.md §2);
  the gradient ``d l/d a^(k)_t = sum_{b: k_b = k} (V^T r_b)_{x_{b,t}}`` (spec §3.2) is a gather
  plus an add into the rows of the queries present, never a dense (T, N) gradient. It needs every
  position's token (the attention varies over positions once trained), so tokens are drawn, not
  only their counts, and kept as int16 (N <= 32767; 51 MB at B=256, T=1e5) between the passes;
* ``engine="numba"`` (the default on the CPU): fused kernels of :mod:`empirical.scb.kernels` — a
  counter-based SplitMix64 stream and an integer alias table draw each token and add its weight
  to ``h`` in one pass (parallel over samples); the attention update is one pass per distinct
  query row; the l1 prox + projection one pass over ``At``. ``engine="torch"`` (any device, e.g.
  CUDA): the same steps as torch gathers/scatter-adds in position blocks of ``block``, alias
  tables on float32 uniforms;
* the query, the position ``s ~ q^(k)`` and the target ``x_o ~ P[:, x_s]`` are drawn by inverse
  CDFs (float64) from the run's torch generator, which also seeds each step's token stream
  (same seed -> same numbers; a checkpoint needs only the torch generator state);
* observables come from sufficient statistics of ``At`` (1^T a_k, |a_k|^2, <a_k, q_k>, the
  support mass) and of ``V``: :func:`observables_from_statistics` equals
  :func:`theory.scb.observables_from_parameters` without forming the (T, N) support mask.

Randomness differs from :mod:`empirical.scb.experiment`: the same data distribution (spec §1.2),
not the same numbers; tests check the distribution of one step's update against
:mod:`empirical.scb.experiment` and its mean against the exact population gradient, and the
kernels against torch re-implementations.
Float64 by default (parameters and the kernels' accumulators); ``dtype=torch.float32`` stores
``V`` and ``At`` in float32 (halves the attention's memory traffic; accumulators stay float64).
Measured at N=500, T=1e5, batch 256 on the shared 2-core machine (load ~2-4): 3.6-12 steps/s
(0.9e8-3e8 token positions/s) with the numba engine vs 0.3-0.45 for the torch engine and 0.1-0.24
for :mod:`empirical.scb.experiment`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from theory.errors import ConfigError, check_choice
from theory.sampling import alias_table  # Walker/Vose table (accept, alias), shared with the SDEs
from theory.counter_rng import int_alias_table
from theory.scb import PAPER, SCBConfig, SCBTask, initial_parameters, make_task

from ..trainer import Trainer
from . import kernels as K
from . import update

__all__ = ["FastSCBExperiment", "train_fast", "observables_from_statistics", "alias_table",
           "escape_time_points", "VARIANTS", "ENGINES"]

VARIANTS = ("preconditioned", "sgd")
ENGINES = ("auto", "numba", "torch")


def observables_from_statistics(V: np.ndarray, s, n, c, mass_on, task: SCBTask, Q: int) -> dict[str, float]:
    """The §4 observables from ``V`` (N, N) and per-query statistics of the attention (N,):
    ``s = 1^T a_k``, ``n = |a_k|^2``, ``c = <a_k, q_k>``, ``mass_on = sum_{t in S_k} a_k,t``.
    Same formulas as :func:`theory.scb.observables_from_parameters` (Q support positions per
    query)."""
    mu, P, T_ = task.mu, task.P, task.T
    Pt = P - np.outer(mu, np.ones(task.N))
    Sig = np.diag(mu) - np.outer(mu, mu)
    w = task.Qm[task.support, np.arange(task.N)[:, None]]  # (N, Q) weights on the support
    rho = (w**2).sum(1)
    v = V @ mu
    Vt = V - v[:, None]
    vv, vp = np.einsum("ij,jk,ik->", V, Sig, V), np.einsum("ij,jk,ik->", V, Sig, P)
    K, m2 = float(np.trace(P @ Sig @ P.T)), float(mu @ mu)
    per_k = 0.5 * n * vv - c * vp + 0.5 * rho * K + 0.5 * (s**2 * (v @ v) - 2 * s * (v @ mu) + m2)
    loss = (per_k * mu).sum() + 0.5 * (1 - m2 - K * (mu * rho).sum())
    mean_on = mass_on / Q
    mean_off = (s - mass_on) / (T_ - Q) if T_ > Q else np.zeros_like(s)
    colsum = V.sum(0, keepdims=True)
    return {
        "value_transition_correlation": float((Vt * Pt).sum() / (Pt**2).sum()),
        "value_mean_scale": float(mu @ V @ mu / m2),
        "attention_offsupport_level": float(mean_off.mean()),
        "attention_target_coefficient": float(((mean_on - mean_off) / (w.sum(1) / Q)).mean()),
        "attention_target_overlap": float(c.mean()),
        "attention_sum": float(s.mean()),
        "attention_sq_norm": float(n.mean()),
        "attention_mass_on_support": float(mass_on.mean()),
        "population_loss": float(loss),
        "value_relative_distance_to_truth": float(np.sqrt(((V / colsum - P) ** 2).sum() / (Pt**2).sum())),
        "attention_distance_to_truth": float(np.sqrt(np.mean(n / s**2 - 2 * c / s + rho))),
        "value_off_manifold_residual": float(np.linalg.norm(Vt - (Vt * Pt).sum() / (Pt**2).sum() * Pt)),
    }


@dataclass
class FastSCBExperiment:
    """One SGD run on an SCB task at scale (module docstring). ``engine``: ``numba`` (fused CPU
    kernels of :mod:`empirical.scb.kernels`), ``torch`` (gathers/scatter-adds in torch, any
    device) or ``auto`` (numba on CPU, torch elsewhere). ``block``: positions per sampling block of
    the torch engine (bounds its float working set to ``batch * block``)."""

    config: SCBConfig
    task: SCBTask | None = None
    dtype: torch.dtype = torch.float64
    block: int = 8192
    engine: str = "auto"
    init: tuple[np.ndarray, np.ndarray] | None = None  # (V0, A0); default initial_parameters (as SCBExperiment)
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        if self.config.variant not in VARIANTS:
            raise ConfigError("variant", f"the fast path implements {' and '.join(VARIANTS)}, "
                                         f"not {self.config.variant!r}")
        check_choice("engine", self.engine, ENGINES)
        if self.config.query != "outside":
            raise ConfigError("query", "the fast path implements Decision 1 A (query outside the context)")
        if self.config.N > 32767:
            raise ConfigError("N", "the fast path stores tokens as int16 (N <= 32767)")
        self.name = self.config.variant
        self.task = self.task or make_task(self.config)

    def setup(self, device, generator):
        t, dt = self.task, self.dtype
        V0, A0 = self.init if self.init is not None else initial_parameters(self.config, t)
        if np.shape(V0) != (t.N, t.N) or np.shape(A0) != (t.T, t.N):
            raise ConfigError("init", f"shapes {np.shape(V0)}, {np.shape(A0)} do not fit N={t.N}, T={t.T}")
        self.device, self.gen = device, generator
        self.engine_used = self.engine if self.engine != "auto" else ("numba" if device.type == "cpu" else "torch")
        if self.engine_used == "numba" and device.type != "cpu":
            raise ConfigError("engine", "the numba engine runs on the CPU only")
        self.V = torch.as_tensor(V0, dtype=dt, device=device).clone()
        self.At = torch.as_tensor(np.ascontiguousarray(A0.T), dtype=dt, device=device).clone()
        self.mu = torch.as_tensor(t.mu, dtype=dt, device=device)
        if self.engine_used == "numba":
            self.table = int_alias_table(t.mu)
        else:
            acc, ali = alias_table(t.mu)
            self.acc = torch.as_tensor(acc, dtype=torch.float32, device=device)
            self.ali = torch.as_tensor(ali, dtype=torch.int16, device=device)
        self.support = torch.as_tensor(t.support, device=device)  # (N, Q)
        self.qw = torch.as_tensor(t.Qm[t.support, np.arange(t.N)[:, None]], dtype=dt, device=device)  # (N, Q)
        self.PT = torch.as_tensor(t.P.T, dtype=dt, device=device)
        # cumulative tables for the per-sample categorical draws (query, position, target), float64
        self.cdf_mu = torch.as_tensor(np.cumsum(t.mu), device=device)
        self.cdf_q = torch.cumsum(self.qw.double(), 1)
        self.cdf_P = torch.as_tensor(np.cumsum(t.P.T, 1), device=device)  # row j: cdf of P[:, j]
        self.hyper = update.hyper(self.config, t.T)
        self.opt_state = update.init((self.V, self.At.T), xp=torch)
        self._x = None

    def _categorical(self, cdf: torch.Tensor, rows: torch.Tensor | None = None, B: int | None = None):
        """Inverse-CDF draws: ``B`` draws from the 1-D ``cdf`` or one per row ``cdf[rows]``."""
        c = cdf if rows is None else cdf[rows]
        shape = (B,) if rows is None else (rows.numel(), 1)
        u = torch.rand(shape, dtype=torch.float64, generator=self.gen, device=self.device)
        i = torch.searchsorted(c, u * c[..., -1:] if rows is not None else u * c[-1], right=True)
        return i.clamp_max_(c.shape[-1] - 1).reshape(-1)

    def _tokens(self, B: int, width: int) -> torch.Tensor:
        """(B, width) int16 tokens ~ mu (alias method, torch engine; float32 uniforms: the
        acceptance test resolves ~2^-15 at N = 500)."""
        N = self.task.N
        u = torch.rand(B, width, generator=self.gen, device=self.device)
        i = (u * N).long().clamp_max_(N - 1)
        frac = u * N - i  # the fractional part is a second uniform, independent of i
        return torch.where(frac < self.acc[i], i.to(torch.int16), self.ali[i])

    def _draw(self, B: int):
        """Queries ``k`` (B,), tokens ``x`` (B, T) int16 and ``h_b = X_b a^(k_b)`` (B, N)."""
        T_, N, dt = self.task.T, self.task.N, self.dtype
        k = self._categorical(self.cdf_mu, B=B)
        if self._x is None or self._x.shape[0] != B:
            self._x = torch.empty(B, T_, dtype=torch.int16, device=self.device)
        x = self._x
        if self.engine_used == "numba":
            seed = int(torch.randint(0, 2**63 - 1, (1,), generator=self.gen))
            h = np.empty((B, N))
            thr, ali, nb = self.table
            fwd = K.kernel("forward_tokens", B * T_)
            fwd(np.uint64(seed), k.numpy(), self.At.numpy(), thr, ali, nb, x.numpy(), h)
            return k, x, torch.from_numpy(h).to(dt)
        h = torch.zeros(B, N, dtype=dt, device=self.device)
        for lo in range(0, T_, self.block):
            hi = min(lo + self.block, T_)
            xb = self._tokens(B, hi - lo)
            x[:, lo:hi] = xb
            h.scatter_add_(1, xb.long(), self.At[k, lo:hi])
        return k, x, h

    def step(self, step: int) -> dict[str, float]:
        c, t, hy = self.config, self.task, self.hyper
        B = c.batch
        k, x, h = self._draw(B)
        ar = torch.arange(B, device=self.device)
        j = self._categorical(self.cdf_q, k)  # position s ~ q^(k) on the support (spec §1.2)
        xs = x[ar, self.support[k, j]].long()
        y = self._categorical(self.cdf_P, xs)  # x_o ~ P[:, x_s]
        r = h @ self.V.T
        r[ar, y] -= 1.0  # V X a - e_y
        loss = 0.5 * (r**2).sum(1).mean()
        gV = r.T @ h / B  # spec §3.2: mean_b r_b (X_b a_b)^T
        w = r @ self.V / B  # (B, N): V^T r_b / B; the attention gradient is gA[t, k] = sum_{b: k_b = k} w[b, x_bt]
        if self.engine_used == "torch":  # the rule of empirical.scb.update on the dense gradient
            (self.V, A), self.opt_state = update.update(
                (gV, self._attention_gradient(x, w, k).T), self.opt_state, (self.V, self.At.T), hyper=hy, mu=self.mu,
                overlap=lambda A: self._overlap(A.T), xp=torch)
            self.At = A.T.contiguous()
            return {"loss": float(loss)}
        # numba: the rule's V step and l1 switch around the kernels (tested equal to update.update)
        self.V = update.descend(self.V, gV, hy.lr_V, hy.precondition, self.mu, xp=torch)
        rows, inv = torch.unique(k, return_inverse=True)
        scale = hy.lr_A / self.mu[rows] if hy.precondition else torch.full_like(self.mu[rows], hy.lr_A)
        order = torch.argsort(inv, stable=True)
        starts = torch.zeros(rows.numel() + 1, dtype=torch.int64)
        starts[1:] = torch.cumsum(torch.bincount(inv, minlength=rows.numel()), 0)
        upd = K.kernel("attention_update", x.numel())  # At[rows] -= scale * gA[:, rows].T
        upd(self.At.numpy(), x.numpy(), w.contiguous().numpy(), rows.numpy(), starts.numpy(), order.numpy(),
            scale.double().numpy())
        before = bool(hy.project and hy.project_before_prox)
        if before:  # normalise="step_before_prox": the projection, then the switch and the prox
            self.At += ((1.0 - self.At.sum(1)) / t.T)[:, None]
        lam_on = update.switch_on(self.opt_state.lam_on, hy, lambda: self._overlap(self.At), t.T)
        self.opt_state = update.State(lam_on)
        thr = update.threshold(hy, lam_on)
        if thr > 0 or (hy.project and not before):  # prox, then the projection (update.prox, update.project)
            prox = K.kernel("soft_threshold_project", B * t.T)
            prox(self.At.numpy(), float(thr), bool(hy.project and not before))
        return {"loss": float(loss)}

    def _attention_gradient(self, x, w, k) -> torch.Tensor:
        """The dense attention gradient, transposed: (N, T) with row k = ``sum_{b: k_b = k} w[b, x_b]``
        (spec §3.2), accumulated in position blocks of ``block``."""
        T_ = self.task.T
        gAt = torch.zeros(self.task.N, T_, dtype=self.dtype, device=self.device)
        for lo in range(0, T_, self.block):
            hi = min(lo + self.block, T_)
            gAt[:, lo:hi].index_add_(0, k, w.gather(1, x[:, lo:hi].long()))
        return gAt

    def _overlap(self, At: torch.Tensor) -> torch.Tensor:
        """``<a_k, q_k>`` (N,) of the attention ``At`` (N, T) from its support entries."""
        return (At.gather(1, self.support) * self.qw).sum(1)

    def statistics(self) -> dict[str, np.ndarray]:
        """Sufficient statistics of the attention, float64 numpy (N,) each."""
        on = self.At.gather(1, self.support)
        st = {"s": self.At.sum(1), "n": (self.At**2).sum(1), "c": (on * self.qw).sum(1), "mass_on": on.sum(1)}
        return {k: v.double().cpu().numpy() for k, v in st.items()}

    def observables(self) -> dict[str, float]:
        st = self.statistics()
        V = self.V.double().cpu().numpy()
        obs = observables_from_statistics(V, st["s"], st["n"], st["c"], st["mass_on"], self.task,
                                          self.task.support.shape[1])
        nz = self.At != 0
        Q = self.support.shape[1]
        obs["attention_nonzeros"] = float(nz.sum(1).double().mean())
        obs["support_recovered"] = float(((nz.sum(1) == Q) & nz.gather(1, self.support).all(1)).double().mean())
        return obs

    def parameters_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies: ``V`` (N, N), ``A`` (T, N), float64."""
        return self.V.double().cpu().numpy().copy(), self.At.T.double().cpu().numpy().copy()


    def state_dict(self) -> dict[str, Any]:
        return {"V": self.V.clone(), "At": self.At.clone(), "lam_on": bool(self.opt_state.lam_on)}

    def load_state_dict(self, state):
        self.V.copy_(state["V"])
        self.At.copy_(state["At"])
        self.opt_state = update.State(bool(state["lam_on"]))

    def parameters_info(self) -> dict[str, Any]:
        """Derived quantities and the engine (the config itself is recorded once, by the Trainer)."""
        t = self.task
        return {"K": t.K, "m2": t.m2, "rho": float(t.rho.mean()), "sampler": "alias",
                "engine": getattr(self, "engine_used", self.engine)}


def train_fast(config: SCBConfig, *, device: str = "auto", seed: int | None = None, task: SCBTask | None = None,
               dtype=torch.float64, progress: bool = False, stop_when=None, engine: str = "auto"):
    """Train one network of ``config.variant`` with :class:`FastSCBExperiment`; returns
    ``(trajectory, experiment)``, observables logged at ``config.log_steps()`` (time
    ``config.ode_time``, as :func:`empirical.scb.train`)."""
    exp = FastSCBExperiment(config, task=task, dtype=dtype, engine=engine)
    trainer = Trainer(device=device, seed=config.seed if seed is None else seed, progress=progress)
    return trainer.run(exp, stop_when=stop_when), exp


def escape_time_points(Ts=(8, 16, 32), *, N: int = 3, Q: int = 2, batch: int = 512, seeds=2,
                       lr_fraction: float = 0.5, max_steps: int = 200_000, device: str = "auto",
                       dtype=torch.float64) -> list[dict]:
    """Real-SGD escape times (first step with beta >= 1/2, spec §3.4) vs T, one row per (T, seed):
    ``{T, seed, lr, N, batch, steps_run, escape_time (nan if not reached within the run), ode_same_task,
    rel_err_vs_ode, formula, token_positions, seconds}``.

    Learning rate by the spec's rule (§2 stability bound, Decision 6): ``lr = lr_fraction * 2/(m2 T)``
    for both eta_V and eta_A, fixed before any run (``lr_fraction = 1/2``: half the bound). The run
    lasts ``min(max_steps, 3 x the formula's escape)`` steps and stops once the coefficient passes
    0.6; ``ode_same_task`` is the 4-D ODE's escape on the same task and learning rate. ``seeds``: a
    count (seeds 0..seeds-1) or the seeds themselves (to spread one T's runs over machines)."""
    import time

    import simulate
    from theory import scb

    rows = []
    for Tv in Ts:
        probe = SCBConfig(N=N, T=int(Tv), Q=Q, batch=batch, steps=1, log_every=1)
        task = make_task(probe)
        lr = lr_fraction * 2.0 / (task.m2 * int(Tv))
        base = probe.replace(eta_V=lr, eta_A=lr)
        p = scb.system_parameters(base, task)
        formula = float(scb.escape_time_formula().subs({scb.T: p["T"], scb.rho: p["rho"], scb.K: p["K"],
                                                        scb.eta_V: lr, scb.eta_A: lr}))
        steps = int(min(max_steps, max(10, 3 * formula)))
        cfg = base.replace(steps=steps, log_every=max(1, steps // 400))
        ode = simulate.solve(scb.problem(cfg, task=task, t=np.linspace(0, steps, 4001)))
        t_ode = float(simulate.first_crossing(ode, "attention_target_coefficient", scb.ESCAPE_LEVEL))
        for s in (range(seeds) if isinstance(seeds, int) else seeds):
            t0 = time.perf_counter()
            tr, _ = train_fast(cfg, device=device, seed=s, task=task, dtype=dtype,
                               stop_when=lambda o: o["attention_target_coefficient"] >= 0.6)
            run_s = time.perf_counter() - t0
            esc = float(simulate.first_crossing(tr, "attention_target_coefficient", scb.ESCAPE_LEVEL))
            steps_run = int(tr["step"].values[-1])
            rows.append({"T": int(Tv), "seed": s, "lr": lr, "lr_fraction_of_bound": lr_fraction, "N": N, "Q": Q,
                         "batch": batch, "K": task.K, "m2": task.m2, "rho": p["rho"], "steps_run": steps_run,
                         "escape_time": esc,
                         "ode_same_task": t_ode, "rel_err_vs_ode": abs(esc - t_ode) / t_ode, "formula": formula,
                         "token_positions": steps_run * batch * int(Tv), "seconds": run_s})
    return rows

