"""The JoMA block in PyTorch (spec §1.1) and its full-batch experiments.

* :class:`JomaBlock` — fixed orthonormal embeddings ``U`` (d x (Mc+1), identity block as in the
  official toy), free attention logits ``z`` (Mc,), linear / exp / softmax attention with a logit
  temperature, residual ``f = U_C b + u_q``, lower MLP ``W`` (d x K) with ``phi``.
* :class:`BlockExperiment` — the ``fixed`` variant (loss ``-mean_n sum_k G_nk h_nk``: the very
  objective the block ODE is derived from, so agreement is a *derivation check*) and the ``ce``
  variant (the official Figs. 2-3 toy: cross-entropy on the ``K`` class logits ``h``).
* :class:`MixtureExperiment` — the headline network (``mixture``): finite token sequences from
  Theorem 3's class mixture, softmax attention over the positions (the map the network computes and
  whose entropy is logged), tanh/ReLU MLP, cross-entropy; Assumption 1 is an approximation here.

Precision: float64 throughout (compared with float64 ODEs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from theory.errors import ConfigError
from theory.joma import PAPER, JomaConfig, initial_parameters, make_data, mixture_data, normalised_correlation

from .trainer import ModuleState

__all__ = ["JomaBlock", "BlockExperiment", "MixtureExperiment", "sgd_", "softmax_zhat"]


class JomaBlock(nn.Module):
    """One block (spec §1.1). Input ``X`` (N, Mc) token frequencies; output ``h`` (N, K)."""

    def __init__(self, W0: np.ndarray, z0: np.ndarray, attention: str, activation: str, temperature: float,
                 dtype=torch.float64):
        super().__init__()
        d, _ = W0.shape
        Mc = z0.shape[0]
        self.register_buffer("U", torch.eye(d, Mc + 1, dtype=dtype))  # orthonormal: U_C | u_q
        self.z = nn.Parameter(torch.as_tensor(z0, dtype=dtype).clone())
        self.W = nn.Parameter(torch.as_tensor(W0, dtype=dtype).clone())
        self.attention, self.activation, self.temperature = attention, activation, temperature

    def attend(self, X: torch.Tensor) -> torch.Tensor:
        """``b`` (N, Mc): ``x o z`` (linear), ``x o exp(z/T)`` (exp) or its normalisation (softmax)."""
        if self.attention == "linear":
            return X * self.z
        e = X * torch.exp(self.z / self.temperature)
        return e if self.attention == "exp" else e / e.sum(1, keepdim=True)

    def attention_over_positions(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Softmax attention of the query over the positions of ``tokens`` (n, L) with logits
        ``z[token]/T``: ``(a (n, L), b (n, Mc))``, ``b`` = the attention mass per token type, which
        equals :meth:`attend` of the bag of words for softmax (spec §1.2)."""
        a = torch.softmax(self.z[tokens] / self.temperature, dim=-1)
        b = torch.zeros(tokens.shape[0], self.z.shape[0], dtype=a.dtype, device=a.device).scatter_add_(1, tokens, a)
        return a, b

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attend(X))

    def mlp(self, b: torch.Tensor) -> torch.Tensor:
        """``h = phi(W^T f)`` (N, K) of the attention output ``b`` (N, Mc)."""
        Mc = self.z.shape[0]
        f = b @ self.U[:, :Mc].T + self.U[:, Mc]  # residual: f = U_C b + u_q
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



def sgd_(params, lr):
    """One plain SGD step, the same learning rate on every parameter (Decision 3)."""
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None


def softmax_zhat(V: np.ndarray, bbar: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Theorem 1's softmax estimate (spec §2.2) without its constant: ``(zhat, term1, term2)`` with
    ``term1 = sum_k v_k^2/(2T)``, ``term2 = -bbar sum_k |v_k|^2/(2T)`` (Decision 4: ``bbar = E[x]``)."""
    t1 = (V**2).sum(0) / (2 * temperature)
    t2 = -bbar * (V**2).sum() / (2 * temperature)
    return t1 + t2, t1, t2


@dataclass
class BlockExperiment(ModuleState):
    """Full-batch SGD on the block; the top is ``config.variant``: ``fixed`` (stationary g,
    Assumption 1 exactly) or ``ce`` (cross-entropy on the class logits)."""

    config: JomaConfig
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        if self.config.variant not in ("fixed", "ce"):
            raise ConfigError("variant", f"the block top is 'fixed' or 'ce', got {self.config.variant!r}")
        self.top = self.config.variant
        self.name = f"block_{self.top}"
        self.X, self.G = make_data(self.config)

    def setup(self, device, generator):
        c = self.config
        W0, z0 = initial_parameters(c)
        self.model = JomaBlock(W0, z0, c.attention, c.activation, c.temperature, self.dtype).to(device)
        self.Xt = torch.as_tensor(self.X, dtype=self.dtype, device=device)
        self.Gt = torch.as_tensor(self.G, dtype=self.dtype, device=device)
        self.labels = torch.arange(c.N, device=device)
        self.xbar = self.X.mean(0)  # Decision 4: bbar ~ E[x]
        z, V, s = self.model.reduced()
        self._C = z - self._zhat_terms(V)[0]
        self._c_linear = z**2 - (V**2).sum(0)
        self._z0 = z
        self._bbar_integral = np.zeros(c.Mc)
        if c.attention == "softmax":
            self._C_alt = {k: z - v for k, v in self._zhat_alternatives(V).items()}

    def loss(self) -> torch.Tensor:
        h = self.model(self.Xt)
        if self.top == "fixed":
            return -(self.Gt * h).sum(1).mean()  # -dL/dh_nk = G_nk / N: Assumption 1 exactly
        return nn.functional.cross_entropy(h, self.labels)

    def step(self, step: int) -> dict[str, float]:
        track = self.config.attention == "softmax"
        if track:
            eb0, n0 = self._mean_b_and_norm()
        loss = self.loss()
        loss.backward()
        sgd_(self.model.parameters(), self.config.lr)  # equal learning rates on W and z
        if track:  # int E[b](t) d(sum_k |v_k|^2)/(2T), trapezoid per step (Decision 4, time-varying E[b])
            eb1, n1 = self._mean_b_and_norm()
            self._bbar_integral += 0.5 * (eb0 + eb1) * (n1 - n0) / (2 * self.config.temperature)
        return {"loss": float(loss.detach())}

    def _mean_b_and_norm(self):
        with torch.no_grad():
            b = self.model.attend(self.Xt).mean(0).cpu().double().numpy()
            Mc = self.config.Mc
            V = self.model.W[:Mc].detach().cpu().double().numpy()  # U_C = identity block
            return b, float((V**2).sum())

    def _zhat_terms(self, V):
        T = self.config.temperature
        sq = (V**2).sum(0)
        if self.config.attention == "linear":
            return (sq, sq, 0 * sq)
        if self.config.attention == "exp":
            return (sq / (2 * T), sq / (2 * T), 0 * sq)
        return softmax_zhat(V, self.xbar, T)

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
        if c.attention == "linear":  # z^2 - sum_k v_k^2 = c; zhat = sign(z(0)) sqrt(...), wrong once z_l crosses 0
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
        if c.attention == "softmax":
            for k, zh_alt in self._zhat_alternatives(V).items():
                out[f"nc_zhat_{k}_z"] = float(normalised_correlation(zh_alt + self._C_alt[k], z))
        with torch.no_grad():
            b = self.model.attend(self.Xt).cpu().double().numpy()
        bn = b / b.sum(1, keepdims=True)
        out["attention_entropy"] = float((-(bn * np.log(np.where(bn > 0, bn, 1))).sum(1)).mean())
        return {k: float(v) for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}


    def state_dict(self):
        return {**super().state_dict(), "bbar_integral": self._bbar_integral.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self._bbar_integral = state["bbar_integral"]

    def parameters_info(self) -> dict[str, Any]:
        return self.config.to_dict()



@dataclass
class MixtureExperiment(ModuleState):
    """The headline network (``mixture`` variant): :func:`theory.joma.mixture_data` sequences,
    softmax attention over the positions (:meth:`JomaBlock.attention_over_positions`), ``phi`` MLP
    with ``K`` = number of classes, cross-entropy on ``h``, full-batch SGD (same ``lr`` on ``W``
    and ``z``). Logged: ``z``, ``v_k_l``, ``s_k``, the entropy of the attention it computes, the
    Theorem-1 softmax estimate ``zhat`` (NC of changes, relative residual), and the drift of the
    back-propagated gradient ``G(t) = onehot - softmax(h)`` from ``G(0)`` (Assumption 1)."""

    config: JomaConfig
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "mixture"

    def __post_init__(self):
        if self.config.variant != "mixture":
            raise ConfigError("variant", f"MixtureExperiment needs the 'mixture' variant, got {self.config.variant!r}")
        self.tokens, self.labels, self.X = mixture_data(self.config)

    def setup(self, device, generator):
        c = self.config
        W0, z0 = initial_parameters(c)
        self.model = JomaBlock(W0, z0, "softmax", c.activation, c.temperature, self.dtype).to(device)
        self.tok = torch.as_tensor(self.tokens, device=device)
        self.lab = torch.as_tensor(self.labels, device=device)
        self.xbar = self.X.mean(0)  # Decision 4: bbar ~ E[x]
        self.z0, V0, _ = self.model.reduced()
        self._C = self.z0 - softmax_zhat(V0, self.xbar, c.temperature)[0]
        self.G0 = self.gradient_rows()
        self.G0t = torch.as_tensor(self.G0, dtype=self.dtype, device=device)

    def logits(self):
        a, b = self.model.attention_over_positions(self.tok)
        return self.model.mlp(b), a

    def gradient_rows(self) -> np.ndarray:
        """``G (n, K) = onehot(y) - softmax(h)``: ``N * (-dL/dh)`` of the mean cross-entropy."""
        with torch.no_grad():
            h, _ = self.logits()
            p = torch.softmax(h, 1).cpu().double().numpy()
        return np.eye(self.config.K)[self.labels] - p

    def step(self, step):
        h, _ = self.logits()
        if self.config.top == "fixed":  # -dL/dh = G(0)/N exactly: the ODE's own objective
            loss = -(self.G0t * h).sum(1).mean()
        else:
            loss = nn.functional.cross_entropy(h, self.lab)
        loss.backward()
        sgd_(self.model.parameters(), self.config.lr)
        return {"loss": float(loss.detach())}

    def observables(self):
        c = self.config
        z, V, s = self.model.reduced()
        out = {f"z_{l + 1}": z[l] for l in range(c.Mc)}
        out.update({f"v_{k + 1}_{l + 1}": V[k, l] for k in range(c.K) for l in range(c.Mc)})
        out.update({f"s_{k + 1}": s[k] for k in range(c.K)})
        with torch.no_grad():
            h, a = self.logits()
            ent = -(a * torch.log(torch.where(a > 0, a, torch.ones_like(a)))).sum(-1).mean()
            out["accuracy"] = float((h.argmax(1) == self.lab).double().mean())
        out["attention_entropy"] = float(ent)
        zh = softmax_zhat(V, self.xbar, c.temperature)[0] + self._C
        dz = z - self.z0
        out["invariant_residual_rel"] = float(np.linalg.norm(zh - z) / max(np.linalg.norm(dz), 1e-300))
        if np.ptp(dz) > 0:
            out["nc_change"] = float(normalised_correlation(zh - self.z0, dz))
        out["g_drift"] = float(np.linalg.norm(self.gradient_rows() - self.G0) / np.linalg.norm(self.G0))
        return {k: float(v) for k, v in out.items()}


    def parameters_info(self) -> dict[str, Any]:
        return self.config.to_dict()
