"""JoMA's two small toys in PyTorch: the converging one-token-per-class probe (entropy drop and
bounce, spec §2.5) and the block on HBLT bags (learning order vs LCA height, spec §3.2-3.4).
Float64 (compared with float64 ODEs and closed forms)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from theory.joma import FIG4_MU, PAPER, JomaConfig, entropy, hblt_leaf_lca_heights

from .joma_block import JomaBlock, sgd_
from .trainer import ModuleState

__all__ = ["hblt_sample", "hblt_block_data", "ProbeExperiment", "HBLTBlockExperiment", "half_times"]


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
        sgd_(self.model.parameters(), self.config.lr)
        return {"loss": float(loss.detach())}

    def observables(self):
        z, V, s = self.model.reduced()
        out = {"attention_entropy": float(entropy(z / self.config.temperature))}
        out.update({f"v_{j + 1}": float(V[0, j]) for j in range(len(self.mu))})
        return out


    def parameters_info(self):
        return self.config.to_dict()



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
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "hblt_block"

    def __post_init__(self):
        rng = np.random.default_rng(self.config.data_seed)
        self.X, self.label, self.heights = hblt_block_data(self.config, self.config.hblt_samples, rng)

    def setup(self, device, generator):
        Mc = self.X.shape[1]
        self.model = JomaBlock(np.zeros((Mc + 1, 1)), np.zeros(Mc), self.config.attention, "linear", 1.0, self.dtype).to(device)
        self.Xt = torch.as_tensor(self.X, dtype=self.dtype, device=device)
        self.yt = torch.as_tensor(self.label, dtype=self.dtype, device=device)

    def step(self, step):
        loss = nn.functional.binary_cross_entropy_with_logits(self.model(self.Xt)[:, 0], self.yt)
        loss.backward()
        sgd_(self.model.parameters(), self.config.lr)
        return {"loss": float(loss.detach())}

    def observables(self):
        z, V, s = self.model.reduced()
        out = {f"z_{l + 1}": float(z[l]) for l in range(z.size)}
        out.update({f"v_{l + 1}": float(V[0, l]) for l in range(z.size)})
        return out


    def parameters_info(self):
        return self.config.to_dict()



def half_times(traj, prefix: str, n: int) -> np.ndarray:
    """Per component: first logged time at which ``|x(t) - x(0)|`` reaches half of its final value."""
    t = traj["time"].values
    out = np.empty(n)
    for i in range(n):
        x = traj[f"{prefix}_{i + 1}"].values
        dx = np.abs(x - x[0])
        out[i] = t[int(np.argmax(dx >= 0.5 * dx[-1]))] if dx[-1] > 0 else np.nan
    return out

