"""Scan & Snap's realism ladder: the same data and the same named observables at three rungs.

* **rung 0 — reduced:** :class:`~.model.DirectYZ`, the paper's (Y, Z) reparameterisation (spec §2.2),
  trained by SGD at ``(eta_Y, eta_Z)``;
* **rung 1 — the paper's network as stated** (spec §2.1, Eqn. 1-2): :class:`PaperTransformer`,
  embeddings ``U`` (M, d), ``W_Q, W_K, W_V`` (d, d); the query ``x_T`` attends over the ``T - 1``
  contextual positions with ``softmax_t(u_{x_T}^T W_Q W_K^T u_{x_t} / sqrt d)`` (not to itself),
  ``u~ = U^T LN(X^T b)`` (l2 normalisation in token space), logits ``u_k^T W_V u~`` over the output
  vocabulary; trained by SGD, before any reparameterisation;
* **rung 2 — a standard transformer:** :class:`empirical.standard.StandardTransformer` (pre-LN,
  learned positions, causal softmax attention, GELU MLP, final LayerNorm, linear decoder) on the
  sequence ``x_1 .. x_{T-1}, x_T``, predicting the next token at the query's position; AdamW with a
  linear warm-up.

**How each observable is read** (one definition per name, :func:`attention_observables`):

* the class attention ``c_n`` (K, M_in) — rung 0: ``c_n = normalize(P(.|n) o e^{z_{psi(n)}})``
  from the parameters (spec §6, Eqn. 5); rung 1: the same with the network's implied logits
  ``Z = U W_Q W_K^T U^T / sqrt d`` (exactly its attention score of a query token on a key token);
  rung 2: the first layer's per-token logit ``z_l = log mean_t exp(s(psi(n), l, t))`` over the
  context positions ``t`` (:func:`empirical.readouts.per_token_logit`: a first-layer score depends
  on the query token, the key token and the positions only), then ``normalize(P(.|n) o e^{z})`` per
  head and the mean over heads: the attention mass the query puts on token ``l`` in a long context;
* ``dt_entropy``: the entropy of ``c_n`` renormalised on the class's distinct tokens, mean over
  classes (spec §6, Decision 6: the Fig. 6 metric; the theory's ``dt_entropy``);
* ``support_entropy``: the entropy of ``c_n`` on its support;
* ``ct_mass``: the attention mass ``c_n`` puts on the common tokens, mean over classes (the snap
  suppresses it: Theorem 2);
* ``dt_entropy_sampled``: ``dt_entropy`` of the *sampled* attention (spec §6) — the query's
  attention map row over the context positions (rung 2: layer 0, mean over heads), summed per
  token (:func:`empirical.readouts.token_attention`), averaged per class over a fixed probe batch
  of ``probe`` sequences; at finite ``T`` it differs from ``c_n`` (Jensen), at every rung alike;
* ``loss``: the batch-mean cross-entropy of the step.

Every rung trains on the same config (:class:`theory.scan_snap.ScanSnapConfig`: layout, ``T``,
batch, steps, ``eta_Y``, ``eta_Z``, momentum) and logs at ``config.log_steps()``; rungs 0 and 1
train all seeds as one batched computation on the exact count-vector path (spec §1.3: their
attention depends on the sequence through its token counts only), rung 2 one seed at a time on
token sequences (its positions matter). Float64 for rungs 0 and 1; rung 2 trains in ``dtype``
(float32 by default). :func:`train_ladder` runs them all: an :class:`xarray.Dataset` with dims
``(rung, seed, time)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from theory.errors import ConfigError, check_choice
from theory.scan_snap import ScanSnapConfig, ScanSnapTask, attention_scores, entropy, make_task

from ..readouts import per_token_logit, token_attention
from ..standard import StandardTransformer, adamw_warmup
from ..trainer import resolve_device, torch_threads
from . import update
from .data import Sampler
from .model import DirectYZ, cross_entropy, loss_step

__all__ = ["PaperTransformer", "RungSettings", "RUNGS", "OBSERVABLES", "attention_observables",
           "train_rung", "train_ladder"]

#: the rungs, lowest first
RUNGS = (0, 1, 2)
#: what every rung logs (see the module docstring)
OBSERVABLES = ("dt_entropy", "support_entropy", "ct_mass", "dt_entropy_sampled", "loss")


@dataclass(frozen=True)
class RungSettings:
    """What the rungs above 0 add to the paper's config.

    Rung 1: width ``d`` (the official run's ``d = 128``); initialisation ``U`` with orthonormal rows
    (the paper's near-orthogonal embeddings, exact here since ``M <= d``), ``W_Q, W_K`` entries
    ``N(0, 1/d)``, ``W_V = 0`` (so ``Y(0) = 0`` exactly and ``Z(0) = O(1/d)``); learning rates
    chosen so that the implied ``Y`` and ``Z`` move at the paper's ``eta_Y``, ``eta_Z`` at
    initialisation: ``W_V`` at ``eta_Y`` (``dY = U U^T G_Y U U^T = G_Y``), ``W_Q, W_K`` at ``eta_Z
    d / 2`` (``W W^T ~ I`` at init, two factors), ``U`` at ``u_rate eta_Z``. The paper gives no
    rate for ``U``: at the ladder's Syn-Medium 1/2 setting (eta = 1, batch 128, T = 128) ``U`` at
    ``eta_Z`` diverges within 20 steps, ``0.1 eta_Z`` (the default) trains; ``u_rate = 0`` freezes
    the embeddings (then ``W_V`` moves ``Y`` exactly as rung 0 when ``d = M``: tests).

    Rung 2: ``d``, ``n_layer``, ``n_head``, MLP width ``4 d``; AdamW at ``lr`` with ``warmup``
    steps of linear warm-up and ``weight_decay``; ``dtype`` of training. ``probe``: sequences per
    run of the sampled read-out (every rung)."""

    d: int = 128
    u_rate: float = 0.1
    n_layer: int = 1
    n_head: int = 1
    lr: float = 1e-3
    warmup: int = 10
    weight_decay: float = 0.01
    dtype: torch.dtype = torch.float32
    probe: int = 256

    def validate(self, task: ScanSnapTask, rung: int) -> None:
        if rung == 1 and self.d < task.M_out:
            raise ConfigError("d", f"rung 1's orthonormal embeddings need d >= M = {task.M_out}, got {self.d}")
        if not (math.isfinite(self.u_rate) and self.u_rate >= 0):
            raise ConfigError("u_rate", f"must be a finite number >= 0, got {self.u_rate}")
        if self.probe < 1:
            raise ConfigError("probe", f"must be >= 1, got {self.probe}")


# ------------------------------------------------------------------------------------------------
# Rung 1: the paper's 1-layer transformer as stated
# ------------------------------------------------------------------------------------------------
class PaperTransformer(DirectYZ):
    """``R`` independent copies of the paper's 1-layer transformer (spec §2.1; see the module
    docstring). Parameters ``U`` (R, M_out, d), ``WQ``, ``WK``, ``WV`` (R, d, d); the implied
    ``Y = U W_V^T U^T`` (R, M_in, M_out) and ``Z = U W_Q W_K^T U^T / sqrt d`` (R, M_in, M_in) are
    properties, so :class:`~.model.DirectYZ`'s count-vector path and :func:`~.model.loss_step` run
    the same network exactly. The sequence path and the decoder compute the network as written
    (query and key vectors per position, ``u~ = U^T LN(X^T b)``, logits ``u_k^T W_V u~``)."""

    def __init__(self, task: ScanSnapTask, R: int, d: int, generator=None, dtype=torch.float64, device="cpu"):
        torch.nn.Module.__init__(self)
        self.M_in, self.d = task.M_in, d
        G = torch.randn(R, d, task.M_out, generator=generator, dtype=dtype, device=device)
        U = torch.linalg.qr(G).Q.transpose(-1, -2)  # (R, M_out, d), orthonormal rows
        std = 1.0 / math.sqrt(d)
        self.U = torch.nn.Parameter(U.contiguous())
        self.WQ = torch.nn.Parameter(torch.randn(R, d, d, generator=generator, dtype=dtype, device=device) * std)
        self.WK = torch.nn.Parameter(torch.randn(R, d, d, generator=generator, dtype=dtype, device=device) * std)
        self.WV = torch.nn.Parameter(torch.zeros(R, d, d, dtype=dtype, device=device))

    @property
    def Z(self) -> torch.Tensor:
        Ui = self.U[:, : self.M_in]
        return Ui @ self.WQ @ self.WK.transpose(-1, -2) @ Ui.transpose(-1, -2) / math.sqrt(self.d)

    @property
    def Y(self) -> torch.Tensor:
        return self.U[:, : self.M_in] @ self.WV.transpose(-1, -2) @ self.U.transpose(-1, -2)

    def attention(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The query's attention ``b`` (R, B, T-1) over the context positions ``x`` (R, B, T-1)."""
        emb = lambda ids: torch.gather(self.U, 1, ids.reshape(ids.shape[0], -1, 1).expand(-1, -1, self.d))  # noqa: E731
        qv = emb(q) @ self.WQ  # (R, B, d)
        kv = (emb(x) @ self.WK).view(*x.shape, self.d)  # (R, B, T-1, d)
        return (torch.einsum("rbe,rbte->rbt", qv, kv) / math.sqrt(self.d)).softmax(-1)

    def mixture_from_sequences(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        b = self.attention(x, q)
        return torch.zeros(x.shape[:-1] + (self.M_in,), dtype=b.dtype, device=b.device).scatter_add(2, x, b)

    def forward(self, mixture: torch.Tensor) -> torch.Tensor:
        u = mixture / mixture.norm(dim=-1, keepdim=True)  # LN: l2 in token space (spec §2.1)
        ut = u @ self.U[:, : self.M_in]  # u~ = U^T LN(X^T b): (R, B, d)
        return ut @ self.WV.transpose(-1, -2) @ self.U.transpose(-1, -2)  # u_k^T W_V u~


# ------------------------------------------------------------------------------------------------
# Read-outs
# ------------------------------------------------------------------------------------------------
def attention_observables(task: ScanSnapTask, c: np.ndarray) -> dict[str, np.ndarray]:
    """``dt_entropy``, ``support_entropy``, ``ct_mass`` (module docstring) of the class attention
    ``c`` (..., K, M_in) (rows on supp(n), any normalisation)."""
    c = np.asarray(c, np.float64)
    c = c / c.sum(-1, keepdims=True)
    dt = np.take_along_axis(c, np.broadcast_to(task.dt, c.shape[:-1] + task.dt.shape[1:]), -1)
    out = {"dt_entropy": entropy(dt).mean(-1), "support_entropy": entropy(c).mean(-1)}
    out["ct_mass"] = c[..., task.common].sum(-1).mean(-1) if task.common.size else np.zeros(c.shape[:-2])
    return out


def _class_mean(mass: torch.Tensor, n: torch.Tensor, K: int) -> np.ndarray:
    """Mean of ``mass`` (R, B, M) over the samples of each class ``n`` (R, B): (R, K, M)."""
    onehot = torch.nn.functional.one_hot(n, K).to(mass.dtype)  # (R, B, K)
    s = torch.einsum("rbk,rbm->rkm", onehot, mass)
    return (s / onehot.sum(1)[..., None].clamp_min(1)).detach().cpu().numpy()


def _c_rung2(model: StandardTransformer, task: ScanSnapTask, T: int) -> np.ndarray:
    """Rung 2's class attention (K, M_in): first-layer per-token logits of each class's query at
    position ``T - 1`` on every token at the context positions ``0 .. T - 2``, per head, mean over
    heads (module docstring)."""
    dev = next(model.parameters()).device
    with torch.no_grad():
        s = model.layer0_scores(torch.as_tensor(task.query, device=dev), torch.full((task.K,), T - 1, device=dev),
                                torch.arange(task.M_in, device=dev), torch.arange(T - 1, device=dev))
        z = per_token_logit(s).double().cpu().numpy()  # (K, H, M_in)
    P = task.P[:, None, :]
    logc = np.where(P > 0, z + np.log(np.where(P > 0, P, 1.0)), -np.inf)
    c = np.exp(logc - logc.max(-1, keepdims=True))
    return (c / c.sum(-1, keepdims=True)).mean(1)


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------
def _lr(config: ScanSnapConfig, rung: int, settings: RungSettings) -> dict[str, float]:
    if rung == 0:
        return {"Y": config.eta_Y, "Z": config.eta_Z}
    return {"U": settings.u_rate * config.eta_Z, "WQ": config.eta_Z * settings.d / 2, "WK": config.eta_Z * settings.d / 2, "WV": config.eta_Y}


def _train_reduced_or_paper(config, task, rung, seeds, settings, dev):
    """Rungs 0 and 1: every seed in one batched computation on count vectors (float64)."""
    R = len(seeds)
    gen = torch.Generator(device=dev).manual_seed(int(config.seed) * 1_000_003 + sum(seeds) + 7919 * R)
    if rung == 0:
        model = DirectYZ(task, R, config.zero_init, gen, torch.float64, dev)
    else:
        model = PaperTransformer(task, R, settings.d, gen, torch.float64, dev)
    sampler = Sampler(task, dev, gen, torch.float64)
    pn, pq, px = sampler.sequences(R, settings.probe)  # the fixed probe batch
    params = {k: getattr(model, k) for k in _lr(config, rung, settings)}
    lr = _lr(config, rung, settings)
    state = update.init(params, xp=torch)
    logs, rows = set(int(s) for s in config.log_steps()), []
    loss = torch.full((R,), float("nan"), dtype=torch.float64)
    for step in range(config.steps + 1):
        if step in logs:
            with torch.no_grad():
                c = attention_scores(task, model.Z.detach().cpu().numpy())
                # the Z-table route (the same numbers as rung 1's per-position vectors: tests) keeps
                # the probe's memory at O(R B T), not O(R B T d)
                sampled = _class_mean(DirectYZ.mixture_from_sequences(model, px, pq), pn, task.K)
            row = attention_observables(task, c)
            row["dt_entropy_sampled"] = attention_observables(task, sampled)["dt_entropy"]
            row["loss"] = loss.detach().cpu().numpy()
            rows.append(row)
        if step == config.steps:
            break
        model.zero_grad(set_to_none=True)
        loss = loss_step(model, sampler, R, config.batch, "counts")
        loss.sum().backward()
        state = update.step_torch(params, state, lr=lr, method=config.optimizer, momentum=config.momentum)
    return {k: np.stack([r[k] for r in rows], -1) for k in rows[0]}  # (seed, time)


def _train_standard(config, task, seed, settings, dev):
    """Rung 2: one seed on token sequences."""
    gen = torch.Generator(device=dev).manual_seed(int(config.seed) * 1_000_003 + int(seed))
    T = config.T
    model = StandardTransformer(task.M_in, settings.d, settings.n_layer, settings.n_head, max_len=T,
                                vocab_out=task.M_out, causal=True, dtype=settings.dtype, device=dev, generator=gen)
    opt = adamw_warmup(model.parameters(), lr=settings.lr, warmup=settings.warmup, weight_decay=settings.weight_decay)
    sampler = Sampler(task, dev, gen, torch.float64)
    label = sampler.label
    pn, pq, px = sampler.sequences(1, settings.probe)
    probe = torch.cat([px[0], pq[0][:, None]], 1)
    logs, rows = set(int(s) for s in config.log_steps()), []
    loss = torch.tensor(float("nan"))
    for step in range(config.steps + 1):
        if step in logs:
            with torch.no_grad():
                _, maps = model(probe, return_attention=True, n_query=1)
                row_att = maps[0][:, :, -1, : T - 1].mean(1)  # layer 0, the query's row over the context, head mean
                sampled = _class_mean(token_attention(row_att, px[0], task.M_in)[None].double(), pn, task.K)
            row = attention_observables(task, _c_rung2(model, task, T))
            row["dt_entropy_sampled"] = attention_observables(task, sampled)["dt_entropy"][0]
            row["loss"] = float(loss.detach())
            rows.append(row)
        if step == config.steps:
            break
        n, q, x = sampler.sequences(1, config.batch)
        logits = model(torch.cat([x[0], q[0][:, None]], 1), n_query=1)[:, -1]  # prediction at the query's position
        opt.zero_grad()
        loss = cross_entropy(logits[None].double(), label[n])[0]
        loss.backward()
        opt.step()
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def train_rung(config: ScanSnapConfig, rung: int, *, seeds, settings: RungSettings | None = None, device: str = "cpu"):
    """Every seed of ``config`` at ``rung`` (0, 1, 2): an :class:`xarray.Dataset` of
    :data:`OBSERVABLES` with dims ``(seed, time)``, ``time`` the optimiser step (logged at
    ``config.log_steps()``; ``ode_time`` = ``config.ode_times()`` as a coordinate, the paper's
    per-sample time for SGD). Rungs 0 and 1 train by ``config.optimizer`` (SGD or Adam) at the
    paper's rates (:class:`RungSettings`); rung 2 by AdamW with warm-up. Same seeds, same numbers."""
    import xarray as xr

    check_choice("rung", rung, RUNGS)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("seeds", "give at least one seed")
    settings = settings or RungSettings()
    task = make_task(config)
    settings.validate(task, rung)
    dev = resolve_device(device)
    with torch_threads(1):
        if rung < 2:
            data = _train_reduced_or_paper(config, task, rung, seeds, settings, dev)
        else:
            per = [_train_standard(config, task, s, settings, dev) for s in seeds]
            data = {k: np.stack([p[k] for p in per]) for k in per[0]}
    steps = config.log_steps()
    return xr.Dataset({k: (("seed", "time"), v) for k, v in data.items()},
                      coords={"seed": seeds, "time": steps.astype(float), "ode_time": ("time", config.ode_times())},
                      attrs={"paper": "scan-snap", "rung": rung})


def train_ladder(config: ScanSnapConfig, *, seeds, rungs=RUNGS, settings: RungSettings | None = None,
                 device: str = "cpu"):
    """:func:`train_rung` at every rung of ``rungs``, stacked along a ``rung`` dim, with each
    rung's CPU seconds (``cpu_seconds``, dim ``rung``)."""
    import time

    import xarray as xr

    out, cpu = [], []
    for r in rungs:
        t0 = time.process_time()
        out.append(train_rung(config, r, seeds=seeds, settings=settings, device=device))
        cpu.append(time.process_time() - t0)
    ds = xr.concat(out, "rung").assign_coords(rung=list(rungs))
    ds["cpu_seconds"] = ("rung", np.array(cpu))
    return ds
