"""JoMA in PyTorch: the one-block toys of papers/joma.md §5 (Figs. 2-4) and the HBLT experiments
of §3 / Table 1. Read top to bottom: data -> models -> experiments -> run functions.

* :class:`JomaBlock` — the real block of spec §1.1: fixed orthonormal embeddings ``U`` (d x (Mc+1),
  identity block as in the official toy), free attention logits ``z`` (Mc,), linear / exp / softmax
  attention with temperature, residual ``f = U_C b + u_q``, lower MLP ``W`` (d x K) with ``phi``.
* :class:`BlockExperiment` — full-batch SGD (equal learning rate on ``W`` and ``z``) with a top
  that is either the stationary gradient of Assumption 1 (``top="fixed"``: loss
  ``-mean_n sum_k G_nk h_nk``, so ``g = G`` exactly) or the official toy's cross-entropy on the
  ``K`` class logits ``h`` (``top="ce"``, Figs. 2-3). Logs ``z_l``, ``v_k_l = u_l^T w_k``,
  ``s_k``, the invariants, ``zhat`` and ``NC(zhat, z)``.
* :class:`ProbeExperiment` — a converging (nonlinear-regime) toy for the entropy drop-and-bounce:
  class ``n`` is a sequence of contextual token ``n`` (``x = e_n``), exp attention, one hidden
  unit regressed on a target ``mu_n`` (squared loss). Salient (large ``mu``) tokens are learned
  first, so the query's attention first sparsifies, then spreads again (Theorem 4's mechanism).
* :class:`HBLTBlockExperiment` — the block on HBLT bags (spec §3.2), trained to predict whether
  the query token co-occurs (logistic loss); learning order vs LCA height (spec §3.4).
* :class:`HierTransformer` / :class:`HierExperiment` — the multi-layer model of Table 1 (spec §5)
  on the random-combination hierarchy (§3.5): per-layer attention entropy, MLP stable rank,
  mean |cos| of MLP out-projection columns, hidden-unit <-> latent alignment scores.

Precision: float64 for the block toys (compared with float64 ODEs); float32 for HierTransformer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from theory.errors import ConfigError, check_choice
from theory.joma import (
    FIG4_MU,
    PAPER,
    JomaConfig,
    entropy,
    hblt_leaf_lca_heights,
    initial_parameters,
    make_data,
    normalised_correlation,
    ode_time,
    stable_rank,
)

from .trainer import ModuleState, Trainer, torch_threads

__all__ = ["JomaBlock", "BlockExperiment", "ProbeExperiment", "HBLTBlockExperiment", "HierTransformer",
           "HierExperiment", "RandomCombinationHierarchy", "hblt_sample", "hblt_block_data", "toy_config",
           "train_block", "train_probe", "train_hblt_block", "train_hier", "half_times", "run", "VARIANTS"]

VARIANTS = ("fixed", "ce", "probe", "hblt", "hier")




# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------
def hblt_sample(config: JomaConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Leaves ``y_l`` (n, branching^depth) of HBLT (spec §3.2): top-level latents on with
    probability ``p_top`` (``rho0 = 2 p_top - 1``), each child copies its parent with
    probability ``(1 + rho)/2`` and flips it otherwise."""
    b = config.branching
    y = (rng.random((n, b)) < config.p_top).astype(np.int8)
    for _ in range(config.depth - 1):
        parent = np.repeat(y, b, axis=1)
        keep = rng.random(parent.shape) < (1 + config.rho) / 2
        y = np.where(keep, parent, 1 - parent).astype(np.int8)
    return y


def hblt_block_data(config: JomaConfig, n: int, rng: np.random.Generator, query: int = 0):
    """``(X, label, heights)``: ``X`` (n, Mc) bag-of-words frequencies of the contextual tokens
    (all leaves but the query; uniform when none is on), ``label = y_query``, and each contextual
    token's LCA height with the query."""
    Y = hblt_sample(config, n, rng)
    ctx = np.array([l for l in range(Y.shape[1]) if l != query])
    B = Y[:, ctx].astype(float)
    cnt = B.sum(1, keepdims=True)
    X = np.where(cnt > 0, B / np.maximum(cnt, 1), 1.0 / len(ctx))
    return X, Y[:, query].astype(float), hblt_leaf_lca_heights(config.depth, config.branching, query)[ctx]


@dataclass
class RandomCombinationHierarchy:
    """The official Table-1 generator (spec §3.5): level-0 tokens ``0..M-2`` (``M-1`` = padding);
    each latent of level ``i+1`` is a random unique subset of ``num_combinations[i]`` latents of
    level ``i``; the top level has ``num_class`` latents = classes. A sample draws a class and
    expands it top-down; its leaf tokens are written sorted at the end of a length-``L`` sequence."""

    M: int = 20
    L: int = 16
    num_tokens: tuple = (8, 4)  # latents per level 1..; the last is num_class
    num_combinations: tuple = (2, 2)
    seed: int = 0
    children: list = field(init=False)

    def __post_init__(self):
        if len(self.num_tokens) != len(self.num_combinations):
            raise ConfigError("num_combinations", "needs one entry per level of num_tokens")
        rng = np.random.default_rng(self.seed)
        sizes = [self.M - 1, *self.num_tokens]
        self.children = []
        for lev in range(len(self.num_tokens)):
            chosen: set = set()
            subsets = []
            while len(subsets) < sizes[lev + 1]:
                s = tuple(sorted(rng.choice(sizes[lev], self.num_combinations[lev], replace=False)))
                if s not in chosen:
                    chosen.add(s)
                    subsets.append(s)
            self.children.append(subsets)
        leaves_max = int(np.prod(self.num_combinations))
        if leaves_max > self.L:
            raise ConfigError("L", f"sequence length {self.L} < max number of leaf tokens {leaves_max}")

    @property
    def num_class(self) -> int:
        return self.num_tokens[-1]

    def sample(self, n: int, rng: np.random.Generator):
        """``(tokens (n, L), labels (n,), active)`` with ``active[i]`` (n, num_tokens[i]) the binary
        activity of level-``i+1`` latents."""
        top = len(self.num_tokens) - 1
        labels = rng.integers(0, self.num_class, n)
        tokens = np.full((n, self.L), self.M - 1, dtype=np.int64)
        active = [np.zeros((n, k), dtype=np.int8) for k in self.num_tokens]
        for i, c in enumerate(labels):
            cur = {int(c)}
            for lev in range(top, -1, -1):
                for a in cur:
                    active[lev][i, a] = 1
                cur = {ch for a in cur for ch in self.children[lev][a]}
            leaves = sorted(cur)
            tokens[i, self.L - len(leaves):] = leaves
        return tokens, labels, active


# ------------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------------
class JomaBlock(nn.Module):
    """One block (spec §1.1). Input ``X`` (N, Mc) token frequencies; output ``h`` (N, K)."""

    def __init__(self, W0: np.ndarray, z0: np.ndarray, kind: str, activation: str, temperature: float,
                 dtype=torch.float64):
        super().__init__()
        d, _ = W0.shape
        Mc = z0.shape[0]
        self.register_buffer("U", torch.eye(d, Mc + 1, dtype=dtype))  # orthonormal: U_C | u_q
        self.z = nn.Parameter(torch.as_tensor(z0, dtype=dtype).clone())
        self.W = nn.Parameter(torch.as_tensor(W0, dtype=dtype).clone())
        self.kind, self.activation, self.temperature = kind, activation, temperature

    def attention(self, X: torch.Tensor) -> torch.Tensor:
        """``b`` (N, Mc): ``x o z`` (linear), ``x o exp(z/T)`` (exp) or its normalisation (softmax)."""
        if self.kind == "linear":
            return X * self.z
        e = X * torch.exp(self.z / self.temperature)
        return e if self.kind == "exp" else e / e.sum(1, keepdim=True)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        Mc = self.z.shape[0]
        f = self.attention(X) @ self.U[:, :Mc].T + self.U[:, Mc]  # residual: f = U_C b + u_q
        pre = f @ self.W
        if self.activation == "linear":
            return pre
        return torch.tanh(pre) if self.activation == "tanh" else torch.relu(pre)

    def reduced(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(z (Mc,), V (K, Mc) = (U_C^T W)^T, s (K,) = u_q^T W)`` as float64 numpy."""
        Mc = self.z.shape[0]
        with torch.no_grad():
            W = self.W.detach().cpu().double().numpy().copy()  # copies: never alias the live weights
            U = self.U.cpu().double().numpy().copy()
            return self.z.detach().cpu().double().numpy().copy(), (U[:, :Mc].T @ W).T, U[:, Mc] @ W


def _sgd_(params, lr):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None


def toy_config(data: str = "gaussian", activation: str = "linear", steps: int = 2000) -> JomaConfig:
    """The official Figs. 2-3 toy (spec §5): Mc = 20 (10 distinct + 10 common), K = 20 classes,
    d = 30, softmax attention with T = 0.5, W, z ~ N(0, 1)/100, CE, full batch, SGD lr 0.1."""
    return JomaConfig(kind="softmax", activation=activation, Mc=20, K=20, N=20, d=30, temperature=0.5,
                      data=data, lr=0.1, steps=steps, log_every=20, init_scale=0.01)


@dataclass
class BlockExperiment(ModuleState):
    """Full-batch SGD on the block; ``top`` = ``fixed`` (stationary g, Assumption 1) or ``ce``."""

    config: JomaConfig
    top: str = "fixed"
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        if self.top not in ("fixed", "ce"):
            raise ConfigError("variant", f"block top must be 'fixed' or 'ce', got {self.top!r}")
        if self.top == "ce" and self.config.N != self.config.K:
            raise ConfigError("N", "the CE toy needs one class per hidden unit (N == K)")
        self.name = f"block_{self.top}"
        self.X, self.G = make_data(self.config)

    def setup(self, device, generator):
        c = self.config
        W0, z0 = initial_parameters(c)
        self.model = JomaBlock(W0, z0, c.kind, c.activation, c.temperature, self.dtype).to(device)
        self.Xt = torch.as_tensor(self.X, dtype=self.dtype, device=device)
        self.Gt = torch.as_tensor(self.G, dtype=self.dtype, device=device)
        self.labels = torch.arange(c.N, device=device)
        self.xbar = self.X.mean(0)  # Decision 4: bbar ~ E[x]
        z, V, s = self.model.reduced()
        self._C = z - self._zhat_terms(V)[0]
        self._c_linear = z**2 - (V**2).sum(0)
        self._z0 = z
        self._bbar_integral = np.zeros(c.Mc)
        if c.kind == "softmax":
            self._C_alt = {k: z - v for k, v in self._zhat_alternatives(V).items()}

    def loss(self) -> torch.Tensor:
        h = self.model(self.Xt)
        if self.top == "fixed":
            return -(self.Gt * h).sum(1).mean()  # -dL/dh_nk = G_nk / N: Assumption 1 exactly
        return nn.functional.cross_entropy(h, self.labels)

    def step(self, step: int) -> dict[str, float]:
        track = self.config.kind == "softmax"
        if track:
            eb0, n0 = self._mean_b_and_norm()
        loss = self.loss()
        loss.backward()
        _sgd_(self.model.parameters(), self.config.lr)  # equal learning rates on W and z
        if track:  # int E[b](t) d(sum_k |v_k|^2)/(2T), trapezoid per step (Decision 4, time-varying E[b])
            eb1, n1 = self._mean_b_and_norm()
            self._bbar_integral += 0.5 * (eb0 + eb1) * (n1 - n0) / (2 * self.config.temperature)
        return {"loss": float(loss.detach())}

    def _mean_b_and_norm(self):
        with torch.no_grad():
            b = self.model.attention(self.Xt).mean(0).cpu().double().numpy()
            Mc = self.config.Mc
            V = self.model.W[:Mc].detach().cpu().double().numpy()  # U_C = identity block
            return b, float((V**2).sum())

    def _zhat_terms(self, V):
        T = self.config.temperature
        sq = (V**2).sum(0)
        if self.config.kind == "linear":
            return (sq, sq, 0 * sq)
        if self.config.kind == "exp":
            return (sq / (2 * T), sq / (2 * T), 0 * sq)
        t1 = sq / (2 * T)
        t2 = -self.xbar * (V**2).sum() / (2 * T)
        return (t1 + t2, t1, t2)

    def _zhat_alternatives(self, V):
        """Decision 4's other estimators: the official code's ``|W|_F^2`` (all of W, including the
        u_q and null-space parts), and a time-varying ``E[b]`` entering as the integral
        ``int E[b] d(sum_k |v_k|^2)/(2T)`` accumulated during training (a product ``E[b](t) |v|^2``
        would not be an invariant)."""
        T = self.config.temperature
        sq = (V**2).sum(0)
        with torch.no_grad():
            W = self.model.W.detach().cpu().double().numpy()
        return {"code": sq / (2 * T) - self.xbar * (W**2).sum() / (2 * T),
                "Eb": sq / (2 * T) - self._bbar_integral}

    def observables(self) -> dict[str, float]:
        c = self.config
        z, V, s = self.model.reduced()
        out: dict[str, float] = {f"z_{l + 1}": z[l] for l in range(c.Mc)}
        ks = range(c.K) if c.K * c.Mc <= 64 else range(1)
        out.update({f"v_{k + 1}_{l + 1}": V[k, l] for k in ks for l in range(c.Mc)})
        out.update({f"s_{k + 1}": s[k] for k in range(c.K)})
        zhat, t1, t2 = self._zhat_terms(V)
        if c.kind == "linear":  # z^2 - sum_k v_k^2 = c; zhat = sign(z(0)) sqrt(...), wrong once z_l crosses 0
            inv = z**2 - (V**2).sum(0)
            zh = np.sign(self._z0) * np.sqrt(np.maximum(zhat + self._c_linear, 0.0))
        else:
            inv = z - zhat
            zh = zhat + self._C
        out.update({f"invariant_{l + 1}": inv[l] for l in range(c.Mc)})
        out["invariant_max_abs_drift"] = float(np.abs(zh - z).max())
        out["nc_zhat_z"] = float(normalised_correlation(zh, z))
        out["nc_term1_z"] = float(normalised_correlation(t1, z))
        out["nc_term2_z"] = float(normalised_correlation(t2, z)) if np.ptp(t2) > 0 else float("nan")
        if np.ptp(z - self._z0) > 0:  # stricter (spec §5 Fig. 2): changes since init
            out["nc_change"] = float(normalised_correlation(zh - self._z0, z - self._z0))
        if c.kind == "softmax":
            for k, zh_alt in self._zhat_alternatives(V).items():
                out[f"nc_zhat_{k}_z"] = float(normalised_correlation(zh_alt + self._C_alt[k], z))
        with torch.no_grad():
            b = self.model.attention(self.Xt).cpu().double().numpy()
        bn = b / b.sum(1, keepdims=True)
        out["attention_entropy"] = float((-(bn * np.log(np.where(bn > 0, bn, 1))).sum(1)).mean())
        return {k: float(v) for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}

    def time_of_step(self, step: int) -> float:
        return ode_time(step, self.config.lr)

    def state_dict(self):
        return {**super().state_dict(), "bbar_integral": self._bbar_integral.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self._bbar_integral = state["bbar_integral"]

    def parameters_info(self) -> dict[str, Any]:
        return {**self.config.to_dict(), "top": self.top}


def train_block(config: JomaConfig, top: str = "fixed", *, device: str = "cpu", progress: bool = False):
    """Train the block; returns ``(trajectory, experiment)``; time = lr x step."""
    exp = BlockExperiment(config, top)
    with torch_threads(1):
        traj = Trainer(device=device, seed=config.seed, progress=progress).run(exp, config.steps, config.log_every)
    return traj, exp


# ------------------------------------------------------------------------------------------------
# The converging toy: entropy drop-then-bounce (spec §2.5, §4 item 3)
# ------------------------------------------------------------------------------------------------
@dataclass
class ProbeExperiment(ModuleState):
    """Class ``n`` = a sequence of contextual token ``n`` (``x = e_n``) + the query; exp attention
    with temperature; ``K = 1`` hidden unit regressed on ``mu_n`` (loss ``mean_n (mu_n - h_n)^2/2``).
    Attention entropy is that of the query over a uniform bag: ``H(softmax(z/T))``."""

    config: JomaConfig
    mu: tuple = tuple(2 * m for m in FIG4_MU)
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "probe"

    def setup(self, device, generator):
        c = self.config
        n = len(self.mu)
        W0 = np.zeros((n + 1, 1))
        self.model = JomaBlock(W0, np.zeros(n), "exp", c.activation, c.temperature, self.dtype).to(device)
        self.X = torch.eye(n, dtype=self.dtype, device=device)
        self.target = torch.as_tensor(self.mu, dtype=self.dtype, device=device)

    def step(self, step):
        loss = 0.5 * ((self.target - self.model(self.X)[:, 0]) ** 2).mean()
        loss.backward()
        _sgd_(self.model.parameters(), self.config.lr)
        return {"loss": float(loss.detach())}

    def observables(self):
        z, V, s = self.model.reduced()
        out = {"attention_entropy": float(entropy(z / self.config.temperature))}
        out.update({f"v_{j + 1}": float(V[0, j]) for j in range(len(self.mu))})
        return out

    def time_of_step(self, step):
        return ode_time(step, self.config.lr)



def train_probe(config: JomaConfig | None = None, *, steps: int = 8000, log_every: int = 50, device="cpu"):
    """The converging toy with its defaults (exp attention, T = 0.5, lr 0.01, linear phi)."""
    config = config or JomaConfig(temperature=0.5, lr=0.01)
    exp = ProbeExperiment(config)
    with torch_threads(1):
        return Trainer(device=device, seed=config.seed).run(exp, steps, log_every), exp


# ------------------------------------------------------------------------------------------------
# HBLT one-block toy: learning order vs LCA height (spec §3.4)
# ------------------------------------------------------------------------------------------------
@dataclass
class HBLTBlockExperiment(ModuleState):
    """Softmax-attention block (one hidden unit, linear phi) on HBLT bags of the contextual leaves,
    trained by full-batch SGD to predict whether the query leaf is on (logistic loss): the upper
    layer's gradient ``g = y_query - sigmoid(h)``, so ``Delta_l = E[g x_l]`` is the query's
    co-occurrence excess with token ``l`` (spec §3.3-3.4)."""

    config: JomaConfig
    n_samples: int = 4096
    kind: str = "softmax"
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "hblt_block"

    def __post_init__(self):
        rng = np.random.default_rng(self.config.data_seed)
        self.X, self.label, self.heights = hblt_block_data(self.config, self.n_samples, rng)

    def setup(self, device, generator):
        Mc = self.X.shape[1]
        self.model = JomaBlock(np.zeros((Mc + 1, 1)), np.zeros(Mc), self.kind, "linear", 1.0, self.dtype).to(device)
        self.Xt = torch.as_tensor(self.X, dtype=self.dtype, device=device)
        self.yt = torch.as_tensor(self.label, dtype=self.dtype, device=device)

    def step(self, step):
        loss = nn.functional.binary_cross_entropy_with_logits(self.model(self.Xt)[:, 0], self.yt)
        loss.backward()
        _sgd_(self.model.parameters(), self.config.lr)
        return {"loss": float(loss.detach())}

    def observables(self):
        z, V, s = self.model.reduced()
        out = {f"z_{l + 1}": float(z[l]) for l in range(z.size)}
        out.update({f"v_{l + 1}": float(V[0, l]) for l in range(z.size)})
        return out

    def time_of_step(self, step):
        return ode_time(step, self.config.lr)



def half_times(traj, prefix: str, n: int) -> np.ndarray:
    """Per component: first logged time at which ``|x(t) - x(0)|`` reaches half of its final value."""
    t = traj["time"].values
    out = np.empty(n)
    for i in range(n):
        x = traj[f"{prefix}_{i + 1}"].values
        dx = np.abs(x - x[0])
        out[i] = t[int(np.argmax(dx >= 0.5 * dx[-1]))] if dx[-1] > 0 else np.nan
    return out


def train_hblt_block(config: JomaConfig | None = None, *, steps: int = 1500, log_every: int = 10,
                     n_samples: int = 1024, device="cpu"):
    """Defaults: depth-4 binary tree, rho = 0.7, query = leaf 0, 1024 bags, lr 1."""
    config = config or JomaConfig(depth=4, rho=0.7, lr=1.0)
    exp = HBLTBlockExperiment(config, n_samples=n_samples)
    with torch_threads(1):
        return Trainer(device=device, seed=config.seed).run(exp, steps, log_every), exp


# ------------------------------------------------------------------------------------------------
# Multi-layer Transformer of Table 1 (spec §5) on the random-combination hierarchy
# ------------------------------------------------------------------------------------------------
class HierBlock(nn.Module):
    """Single-head causal attention (bias-free Wq, Wk, Wv, no output projection), residual +
    LayerNorm; MLP d -> hidden -> d with ReLU, residual + LayerNorm."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.Wq, self.Wk, self.Wv = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        L, d = x.shape[1], x.shape[2]
        att = self.Wq(x) @ self.Wk(x).transpose(1, 2) / math.sqrt(d)
        mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        x = self.ln1(x + att @ self.Wv(x))
        hid = torch.relu(self.fc1(x))
        return self.ln2(x + self.fc2(hid)), att, hid


class HierTransformer(nn.Module):
    def __init__(self, M: int, d: int, hidden: int, nlayer: int, num_class: int):
        super().__init__()
        self.emb = nn.Embedding(M, d)
        self.blocks = nn.ModuleList(HierBlock(d, hidden) for _ in range(nlayer))
        self.readout = nn.Linear(d, num_class)

    def forward(self, tokens):
        x = self.emb(tokens)
        atts, hids = [], []
        for blk in self.blocks:
            x, a, h = blk(x)
            atts.append(a)
            hids.append(h)
        return self.readout(x[:, -1]), atts, hids


@dataclass
class HierExperiment(ModuleState):
    """Adam on the Table-1 model (spec §5 Table 1, scaled down); observables per layer: attention
    entropy (mean over query rows, eps = 1e-8, on a fixed test batch), stable rank of fc1, mean
    |cos| between fc2 columns (Decision after §5), and the alignment scores."""

    data: RandomCombinationHierarchy
    d: int = 64
    hidden: int = 80
    nlayer: int = 2
    lr: float = 1e-3
    wd: float = 1e-4
    batch: int = 128
    n_test: int = 512
    paper: str = PAPER
    name: str = "hier"

    def setup(self, device, generator):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        self.device = device
        self.model = HierTransformer(self.data.M, self.d, self.hidden, self.nlayer, self.data.num_class).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.wd)
        self.rng = np.random.default_rng(self.data.seed + 1)
        tok, lab, act = self.data.sample(self.n_test, np.random.default_rng(self.data.seed + 2))
        self.test = (torch.as_tensor(tok, device=device), torch.as_tensor(lab, device=device), act)

    def step(self, step):
        tok, lab, _ = self.data.sample(self.batch, self.rng)
        logits, _, _ = self.model(torch.as_tensor(tok, device=self.device))
        loss = nn.functional.cross_entropy(logits, torch.as_tensor(lab, device=self.device))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return {"loss": float(loss.detach())}

    def alignment(self) -> dict[str, float]:
        """``score{l}``: layer-l ReLU hidden activations max-pooled over positions vs the binary
        activity of level-(l+1) latents; Pearson (and cosine) correlation, max over hidden units,
        mean over latents (Decision 11)."""
        tok, _, act = self.test
        with torch.no_grad():
            _, _, hids = self.model(tok)
        out = {}
        for l in range(min(self.nlayer, len(act))):
            Hm = hids[l].max(1).values.double().cpu().numpy()  # (n, hidden)
            A = act[l].astype(float)
            for kind, centre in (("pearson", True), ("cosine", False)):
                Hc = Hm - Hm.mean(0) if centre else Hm
                Ac = A - A.mean(0) if centre else A
                num = Ac.T @ Hc
                den = np.linalg.norm(Ac, axis=0)[:, None] * np.linalg.norm(Hc, axis=0)[None, :]
                C = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
                out[f"score{l}_{kind}"] = float(C.max(1).mean())
        return out

    def observables(self):
        tok, lab, _ = self.test
        with torch.no_grad():
            logits, atts, _ = self.model(tok)
            out = {"test_accuracy": float((logits.argmax(1) == lab).double().mean())}
            for l, (a, blk) in enumerate(zip(atts, self.model.blocks)):
                ent = -(a * torch.log(a + 1e-8)).sum(-1).mean()
                out[f"attention_entropy_{l}"] = float(ent)
                out[f"stable_rank_{l}"] = stable_rank(blk.fc1.weight.detach().double().cpu().numpy())
                W2 = blk.fc2.weight.detach().double().cpu().numpy()  # (d, hidden): columns = out-proj vectors
                Wn = W2 / np.maximum(np.linalg.norm(W2, axis=0, keepdims=True), 1e-12)
                cos = np.abs(Wn.T @ Wn)
                out[f"mean_abs_cos_{l}"] = float((cos.sum() - np.trace(cos)) / (cos.size - cos.shape[0]))
        out.update(self.alignment())
        return out

    def time_of_step(self, step):
        return float(step)



def train_hier(steps: int = 150, log_every: int = 10, seed: int = 0, device="cpu", data_kw=None, **kw):
    """Scaled-down Table-1 run (M = 20, L = 16, levels (8, 4), combinations (2, 2), d = 32,
    hidden 40, 2 layers, Adam lr 1e-3, wd 1e-4, batch 128)."""
    data = RandomCombinationHierarchy(seed=seed, **(data_kw or {}))
    kw = {"d": 32, "hidden": 40, "n_test": 256, **kw}
    exp = HierExperiment(data, **kw)
    with torch_threads(1):
        return Trainer(device=device, seed=seed).run(exp, steps, log_every), exp


# ------------------------------------------------------------------------------------------------
# CLI convention
# ------------------------------------------------------------------------------------------------
def run(config: JomaConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False):
    """`tdyn train joma [--variant fixed|ce|probe|hblt|hier]`: one run, returns the trajectory."""
    variant = variant or "fixed"
    check_choice("variant", variant, VARIANTS)
    if variant == "hier":
        return train_hier(config.steps, config.log_every, config.seed, device)[0]
    exp = {"fixed": lambda: BlockExperiment(config, "fixed"), "ce": lambda: BlockExperiment(config, "ce"),
           "probe": lambda: ProbeExperiment(config), "hblt": lambda: HBLTBlockExperiment(config)}[variant]()
    with torch_threads(1):
        return Trainer(device=device, seed=config.seed, progress=progress).run(exp, config.steps, config.log_every)
