"""Every seed of a small JoMA experiment in one vectorised run: the claims' ``runs`` function.

:func:`train_seeds` (``train_seeds(config, *, seeds, device)``, docs/claims.md) trains the block
experiments of :mod:`.experiment` — the block (``fixed``/``ce``: the official Figs. 2-3 toy),
the ``mixture`` network, the converging ``probe`` toy and the ``hblt`` block — for every seed at
once: each parameter carries a leading seed dim, one autograd pass differentiates the sum of the
per-seed losses (each seed's gradient is its own loss's: nothing mixes across seeds) and one
SGD step updates all of them. The result equals the per-seed :class:`~empirical.trainer.Trainer`
runs of :func:`seed_config` (tested to 1e-9): row ``i`` of the returned trajectory is what
``train(seed_config(config, seeds[i]))`` logs, on the observables the claims read.

**What a seed is.** Seed ``s`` draws *every* random choice of a run: the initialisation
(``seed = s``) and, for the variants that sample data, the data set (``data_seed = s``) — as the
one torch seed of the official toys draws both (the Fig. 2 ``X``, the Fig. 4 ``mu``). The
probe's targets come from the run's generator (:func:`.experiment.probe_targets`), drawn here
through :class:`empirical.seeds.SeedBatch` (row ``i`` = seed ``i``'s generator).

Float64 throughout (the claims compare with float64 ODEs). A seed that diverges carries NaN from
that point (the others are unaffected); its statistic is NaN and the map point stays undecided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import xarray as xr

from theory.errors import ConfigError
from theory.joma import JomaConfig, initial_parameters, make_data, mixture_data

from .data import hblt_block_data
from .experiment import probe_targets

__all__ = ["train_seeds", "seed_config", "batched_engine", "observe_at", "BATCHED_VARIANTS"]

#: the variants :func:`train_seeds` batches (``hier`` trains a multi-layer Transformer with Adam:
#: per seed through the Trainer)
BATCHED_VARIANTS = ("fixed", "ce", "mixture", "probe", "hblt")


def seed_config(config: JomaConfig, seed: int) -> JomaConfig:
    """The config of seed ``seed``: ``seed = data_seed = seed`` (``data_seed`` where the variant
    samples data) — the per-seed run :func:`train_seeds` reproduces."""
    changes: dict[str, Any] = {"seed": int(seed)}
    if config.variant_reads("data_seed"):
        changes["data_seed"] = int(seed)
    return config.replace(**changes)


def _phi(activation: str, x: torch.Tensor) -> torch.Tensor:
    if activation == "linear":
        return x
    return torch.tanh(x) if activation == "tanh" else torch.relu(x)


def _attend(attention: str, X: torch.Tensor, z: torch.Tensor, T: float) -> torch.Tensor:
    """``b`` (S, N, Mc) of rows ``X`` (S, N, Mc) with logits ``z`` (S, Mc) (:meth:`JomaBlock.attend`)."""
    if attention == "linear":
        return X * z[:, None, :]
    e = X * torch.exp(z / T)[:, None, :]
    return e if attention == "exp" else e / e.sum(-1, keepdim=True)


def _preactivation(attention: str, X: torch.Tensor, z: torch.Tensor, V: torch.Tensor, s: torch.Tensor,
                   T: float) -> torch.Tensor:
    """``b V^T + s`` (S, N, K) without forming ``b``: the attention weights fold into ``V``
    (``b = x o w / A`` with ``w = z``, ``e^{z/T}`` or its normalised form), two small matmuls
    instead of element-wise work on (S, N, Mc) — the cost of a step."""
    if attention == "linear":
        w = z
    elif attention == "exp":
        w = torch.exp(z / T)
    else:  # softmax: shift-invariant, so subtract the max logit (no overflow)
        w = torch.exp((z - z.max(-1, keepdim=True).values.detach()) / T)
    num = X @ (w[:, None, :] * V).transpose(1, 2)
    if attention == "softmax":
        num = num / (X @ w[..., None])
    return num + s[:, None, :]


def _cross_entropy(h: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per seed, ``(S,)``, of logits ``h`` (S, N, K) and one-hot labels: the
    log-sum-exp written out (torch's fused log-softmax backward is slow on these small last dims)."""
    m = h.max(-1, keepdim=True).values.detach()
    return (m[..., 0] + torch.log(torch.exp(h - m).sum(-1)) - (h * onehot).sum(-1)).mean(-1)


def _nc(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Normalised (Pearson) correlation along the last dim (NaN where a side is constant)."""
    a = a - a.mean(-1, keepdim=True)
    b = b - b.mean(-1, keepdim=True)
    den = torch.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    return torch.where(den > 0, (a * b).sum(-1) / torch.where(den > 0, den, torch.ones_like(den)),
                       torch.full_like(den, float("nan")))


@dataclass
class _Batch:
    """Parameters (leading seed dim) of one batched block: ``z`` (S, Mc), ``V`` (S, K, Mc) =
    ``(U_C^T W)^T``, ``s`` (S, K) = ``u_q^T W`` (the embedding's other rows never move)."""

    z: torch.Tensor
    V: torch.Tensor
    s: torch.Tensor

    @property
    def params(self) -> list[torch.Tensor]:
        return [self.z, self.V, self.s]

    @classmethod
    def of(cls, W0s, z0s, device) -> "_Batch":
        Mc = z0s[0].shape[0]
        t = lambda a: torch.as_tensor(np.stack(a), dtype=torch.float64, device=device).requires_grad_(True)  # noqa: E731
        return cls(t(z0s), t([W[:Mc].T for W in W0s]), t([W[Mc] for W in W0s]))


def _named(observed: dict, lead: int = 1) -> dict:
    """Expand ``observe()``'s blocks: a name with ``{}`` placeholders holds an array (S, *dims,
    ...) and becomes one variable per index (1-based), ``z_{}`` -> ``z_1, z_2, ...``; ``lead``
    leading dims (the seed) are kept, as are any trailing ones (time)."""
    out = {}
    for key, arr in observed.items():
        m = key.count("{}")
        if not m:
            out[key] = arr
            continue
        for idx in np.ndindex(*arr.shape[lead:lead + m]):
            out[key.format(*(i + 1 for i in idx))] = arr[(slice(None),) * lead + idx]
    return out


class _Engine:
    """One batched experiment: ``loss_of(z, V, s) -> (S,)`` per-seed losses of any parameters
    (the Hessians of :mod:`figures.joma.claims` use it), ``loss()`` at the current ones,
    ``observe() -> {name: (S,) or block}`` (a block: a name with ``{}`` per index, see :func:`_named`)."""

    name = ""
    p: _Batch

    def __init__(self, config: JomaConfig, seeds: list[int], device: torch.device):
        self.c, self.seeds, self.device = config, seeds, device
        self.cfgs = [seed_config(config, s) for s in seeds]

    def tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a), dtype=torch.float64, device=self.device)

    def loss_of(self, z, V, s) -> torch.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def loss(self) -> torch.Tensor:
        return self.loss_of(*self.p.params)


class _Block(_Engine):
    """``fixed``/``ce`` (:class:`~.experiment.BlockExperiment`): class rows ``X``, full batch."""

    name = "block"

    def __init__(self, config, seeds, device):
        super().__init__(config, seeds, device)
        data = [make_data(cf) for cf in self.cfgs]
        self._setup([initial_parameters(cf) for cf in self.cfgs], [x for x, _ in data], np.arange(config.N),
                    [g for _, g in data])

    def _setup(self, init, X, labels, G=None):
        """Parameters from ``init`` (per seed ``(W0, z0)``), rows ``X`` (per seed), ``labels``
        (shared or per seed), the fixed top's ``G`` (per seed); ``G0`` the gradient rows at init."""
        c = self.c
        self.p = _Batch.of([w for w, _ in init], [z for _, z in init], self.device)
        self.X = self.tensor(X)
        self.labels = torch.as_tensor(np.asarray(labels), device=self.device)
        self.onehot = torch.eye(c.K, dtype=torch.float64, device=self.device)[self.labels].expand(
            self.X.shape[0], -1, -1)
        self.xbar = self.X.mean(1)  # Decision 4: bbar ~ E[x]
        with torch.no_grad():
            self.z0 = self.p.z.detach().clone()
            self.C = self.z0 - self._zhat(self.p.V)
            self.G0 = self.tensor(G) if G is not None and self._fixed_top else self.gradient_rows()

    @property
    def _fixed_top(self) -> bool:
        return self.c.variant == "fixed"

    def _zhat(self, V):
        """Theorem 1's estimate without its constant (softmax: Decision 4's ``bbar = E[x]``)."""
        T = self.c.temperature
        sq = (V**2).sum(1)  # (S, Mc)
        if self.c.attention == "softmax":
            return (sq - self.xbar * (V**2).sum((1, 2))[:, None]) / (2 * T)
        return sq / (2 * T) if self.c.attention == "exp" else sq

    def logits_of(self, z, V, s):
        """``h`` (S, N, K) of every row."""
        return _phi(self.c.activation, _preactivation(self.c.attention, self.X, z, V, s, self.c.temperature))

    def gradient_rows(self):
        """``G = -N dL/dh``: ``onehot - softmax(h)`` (cross-entropy), ``G`` itself (fixed top)."""
        if self._fixed_top:
            return self.G0
        return self.onehot - torch.softmax(self.logits_of(*self.p.params), -1)

    def loss_of(self, z, V, s):
        h = self.logits_of(z, V, s)
        if self._fixed_top:
            return -(self.G0 * h).sum(-1).mean(-1)
        return _cross_entropy(h, self.onehot)

    def _state(self, h):
        """The parameters as the per-seed experiment logs them."""
        p = self.p
        return {"z_{}": p.z, "v_1_{}": p.V[:, 0, :], "s_{}": p.s}

    def _entropy(self):
        b = _attend(self.c.attention, self.X, self.p.z, self.c.temperature)
        bn = b / b.sum(-1, keepdim=True)
        return -(bn * torch.log(torch.where(bn > 0, bn, torch.ones_like(bn)))).sum(-1).mean(-1)

    def observe(self):
        c, (z, V, s) = self.c, self.p.params
        h = self.logits_of(z, V, s)
        out = self._state(h)
        out["attention_entropy"] = self._entropy()
        if c.attention != "linear":  # Theorem 1 (exp: exact; softmax: the estimate zhat)
            dz, zh = z - self.z0, self._zhat(V) + self.C
            out["zhat_{}"] = zh  # Theorem 1's estimate, zhat(0) = z(0)
            out["invariant_residual_rel"] = (torch.linalg.vector_norm(zh - z, dim=-1)
                                             / torch.linalg.vector_norm(dz, dim=-1).clamp_min(1e-300))
            out["nc_change"] = _nc(zh - self.z0, dz)
        G = self.gradient_rows()
        out["g_drift"] = torch.linalg.vector_norm(G - self.G0, dim=(1, 2)) / torch.linalg.vector_norm(self.G0, dim=(1, 2))
        out["attention_logit_spread"] = (z.max(-1).values - z.min(-1).values) / c.temperature
        out["output_logit_spread"] = (h.max(-1).values - h.min(-1).values).max(-1).values
        return out


class _Mixture(_Block):
    """``mixture`` (:class:`~.experiment.MixtureExperiment`): token sequences, softmax over
    positions, cross-entropy (or ``top="fixed"``: loss ``-G(0).h``). Softmax attention over the
    positions with logits ``z[token]/T`` puts mass ``b_l = c_l e^{z_l/T} / sum_j c_j e^{z_j/T}`` on
    token type ``l`` (``c_l`` its count; docs/papers/joma.md §1.2), so the batch runs the block on the bags of
    words ``X = c/L`` — no per-position work — and the entropy over positions is
    ``-sum_l b_l log(b_l / c_l)`` (each of the ``c_l`` positions of type ``l`` has weight ``b_l/c_l``)."""

    name = "mixture"

    def __init__(self, config, seeds, device):  # noqa: the bags replace _Block's class rows
        _Engine.__init__(self, config, seeds, device)
        data = [mixture_data(cf) for cf in self.cfgs]
        self._setup([initial_parameters(cf) for cf in self.cfgs], [d[2] for d in data], np.stack([d[1] for d in data]))
        counts = self.X * config.seq_len
        self.log_counts = torch.log(torch.where(counts > 0, counts, torch.ones_like(counts)))

    @property
    def _fixed_top(self) -> bool:
        return self.c.top == "fixed"

    def gradient_rows(self):  # the fixed top's loss is -G(0).h; G itself is always onehot - softmax(h)
        return self.onehot - torch.softmax(self.logits_of(*self.p.params), -1)

    def _state(self, h):
        p = self.p
        out = {"z_{}": p.z, "v_{}_{}": p.V, "s_{}": p.s}
        out["accuracy"] = (h.argmax(-1) == self.labels).double().mean(-1)
        return out

    def _entropy(self):
        b = _attend("softmax", self.X, self.p.z, self.c.temperature)
        logb = torch.log(torch.where(b > 0, b, torch.ones_like(b)))
        return -(b * (logb - self.log_counts)).sum(-1).mean(-1)


class _Probe(_Engine):
    """``probe`` (:class:`~.experiment.ProbeExperiment`): token ``n`` alone in class ``n``, exp
    attention, one unit regressed on the seed's targets."""

    name = "probe"

    def __init__(self, config, seeds, device):
        from empirical.seeds import SeedBatch

        super().__init__(config, seeds, device)
        self.mu = SeedBatch(seeds, device).draw(probe_targets).to(torch.float64)  # (S, n)
        S, n = self.mu.shape
        self.p = _Batch.of([np.zeros((n + 1, 1))] * S, [np.zeros(n)] * S, device)

    def loss_of(self, z, V, s):
        h = _phi(self.c.activation, V[:, 0, :] * torch.exp(z / self.c.temperature) + s)  # (S, n): x = e_n
        return 0.5 * ((self.mu - h) ** 2).mean(-1)

    def observe(self):
        q = torch.softmax(self.p.z / self.c.temperature, -1)
        out = {"attention_entropy": -(q * torch.log(q)).sum(-1)}
        return {**out, "v_{}": self.p.V[:, 0, :], "mu_{}": self.mu}


class _HBLT(_Engine):
    """``hblt`` (:class:`~.experiment.HBLTBlockExperiment`): HBLT bags, one linear unit, logistic loss."""

    name = "hblt_block"

    def __init__(self, config, seeds, device):
        super().__init__(config, seeds, device)
        data = [hblt_block_data(cf, cf.hblt_samples, np.random.default_rng(cf.data_seed)) for cf in self.cfgs]
        self.X = self.tensor([d[0] for d in data])
        self.y = self.tensor([d[1] for d in data])
        self.heights = data[0][2]
        S, Mc = len(seeds), self.X.shape[-1]
        self.p = _Batch.of([np.zeros((Mc + 1, 1))] * S, [np.zeros(Mc)] * S, device)

    def loss_of(self, z, V, s):
        h = _preactivation(self.c.attention, self.X, z, V, s, 1.0)[..., 0]  # (S, n): one unit, T = 1
        return torch.nn.functional.binary_cross_entropy_with_logits(h, self.y, reduction="none").mean(-1)

    def observe(self):
        return {"z_{}": self.p.z, "v_{}": self.p.V[:, 0, :]}


_ENGINES = {"fixed": _Block, "ce": _Block, "mixture": _Mixture, "probe": _Probe, "hblt": _HBLT}


def batched_engine(config: JomaConfig, seeds, device: str = "cpu") -> _Engine:
    """The batched experiment of ``config``'s variant for ``seeds`` before training: its data
    (``X``; rows of the seed dim), parameters ``p`` (``z``, ``V``, ``s``: the initial ones),
    ``loss_of(z, V, s)`` (per-seed losses of any parameters) and ``observe()``. The theory's
    trajectories are measured with the same ``observe`` (:func:`observe_at`)."""
    from empirical.trainer import resolve_device

    if config.variant not in _ENGINES:
        raise ConfigError("variant", f"train_seeds batches {', '.join(BATCHED_VARIANTS)}; "
                                     f"{config.variant!r} trains per seed (empirical.joma.train)")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("seeds", "give at least one seed")
    return _ENGINES[config.variant](config, seeds, resolve_device(device))


def observe_at(engine: _Engine, z, V, s) -> dict[str, np.ndarray]:
    """``engine.observe()`` with the parameters set to ``z`` (S, Mc), ``V`` (S, K, Mc), ``s``
    (S, K) — e.g. a point of an ODE's trajectory — as float64 arrays (S,)."""
    from empirical.trainer import torch_threads

    with torch_threads(1), torch.no_grad():  # small tensors: extra intra-op threads only cost
        for p, x in zip(engine.p.params, (z, V, s)):
            p.copy_(torch.as_tensor(np.asarray(x), dtype=torch.float64))
        return _named({k: v.detach().cpu().numpy().copy() for k, v in engine.observe().items()})


def train_seeds(config: JomaConfig, *, seeds, device: str = "cpu") -> xr.Dataset:
    """Train ``config`` for every seed in ``seeds`` at once (module docstring): full-batch SGD with
    one learning rate, ``config.steps`` steps, logged at ``config.log_steps()`` with time
    ``config.ode_time(step)``. Returns one trajectory with dims ``(seed, time)`` (coordinate
    ``seed``; the HBLT block adds the coordinate ``lca_height`` (dim ``token``): each contextual
    token's LCA height with the query)."""
    from empirical.trainer import torch_threads
    from simulate.trajectory import make_trajectory

    seeds = [int(s) for s in seeds]
    with torch_threads(1):  # small tensors: one intra-op thread (as the Trainer)
        eng = batched_engine(config, seeds, device)
        dev = eng.device
        params = eng.p.params
        lr = float(config.lr)
        log_at = {int(s) for s in config.log_steps()}
        rows = []

        def observe():  # copies: the views of live parameters change with the next step
            rows.append({k: v.detach().clone() for k, v in eng.observe().items()})

        with torch.no_grad():
            observe()
        for step in range(int(config.steps)):
            loss = eng.loss()
            grads = torch.autograd.grad(loss.sum(), params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(lr * g)
                if step + 1 in log_at:
                    observe()
    names = list(rows[0])
    data = _named({n: torch.stack([r[n] for r in rows], -1).detach().cpu().numpy() for n in names})
    traj = make_trajectory(config.ode_times(), data, paper="joma", system=eng.name, source="train",
                           backend=f"torch-{dev.type}-batched", lead_dims=("seed",), config=config)
    traj = traj.assign(step=("time", np.asarray(config.log_steps(), dtype=np.float64)))
    if isinstance(eng, _HBLT):
        traj = traj.assign_coords(lca_height=("token", eng.heights.astype(np.int64)))
    return traj.assign_coords(seed=seeds)
