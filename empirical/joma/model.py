"""JoMA's networks in PyTorch, readable top to bottom (docs/papers/joma.md §1.1, §3.5).

* :class:`JomaBlock` — one block of spec §1.1: fixed orthonormal embeddings ``U`` (d x (Mc+1),
  identity block as in the official toy), free attention logits ``z`` (Mc,), linear / exp /
  softmax attention with a logit temperature, residual ``f = U_C b + u_q``, lower MLP ``W``
  (d x K) with ``phi``. Float64 (compared with float64 ODEs).
* :class:`HierTransformer` — the multi-layer Transformer of Table 1 (:class:`HierBlock`: single-head
  causal attention without output projection, residual + LayerNorm, ReLU MLP); float32.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

__all__ = ["JomaBlock", "HierBlock", "HierTransformer"]


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
    """Embedding (``M`` tokens, width ``d``) -> ``nlayer`` :class:`HierBlock` -> linear readout of
    the last position to ``num_class`` logits; ``forward`` also returns each layer's attention map
    (B, L, L) and ReLU hidden activations (B, L, hidden)."""

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
