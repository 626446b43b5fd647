"""SCB models (docs/papers/scb.md §2): ``yhat = V X a^(k)``, a one-layer linear transformer with one-hot
embeddings and query-dependent positional attention, its softmax-attention variant, and the
squared loss. ``X a`` is a scatter-add (a weighted histogram of the tokens), never a dense one-hot."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["LinearSCB", "SoftmaxSCB", "squared_loss", "context_mix"]


def context_mix(x: torch.Tensor, a_sel: torch.Tensor, N: int) -> torch.Tensor:
    """``X_b a_b`` for every sample: (B, N) from token ids ``x`` (B, T) and weights ``a_sel``
    (B, T), without forming the N x T one-hot."""
    out = torch.zeros(x.shape[0], N, dtype=a_sel.dtype, device=x.device)
    return out.scatter_add_(1, x, a_sel)


class LinearSCB(nn.Module):
    """One-layer linear transformer with one-hot embeddings and query-dependent positional
    attention. Parameters: ``V`` (N, N), ``A`` (T, N) with column k = a^(k)."""

    def __init__(self, V0: np.ndarray, A0: np.ndarray, dtype=torch.float64):
        super().__init__()
        self.V = nn.Parameter(torch.as_tensor(V0, dtype=dtype).clone())
        self.A = nn.Parameter(torch.as_tensor(A0, dtype=dtype).clone())

    def attention(self) -> torch.Tensor:
        return self.A

    def forward(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        Xa = context_mix(x, self.attention()[:, k].T, self.V.shape[0])
        return Xa @ self.V.T


class SoftmaxSCB(LinearSCB):
    """Softmax attention over positions: ``a^(k) = softmax(W[:, k])`` (Decision 9 / §6.1).
    ``W = 0`` reproduces the uniform initial attention of the linear model; ``A`` holds the logits."""

    def __init__(self, V0: np.ndarray, A0: np.ndarray, dtype=torch.float64):
        super().__init__(V0, A0, dtype)
        self.A = nn.Parameter(torch.log(torch.as_tensor(A0, dtype=dtype).clamp_min(1e-300)))  # logits W

    def attention(self) -> torch.Tensor:
        return torch.softmax(self.A, dim=0)


def squared_loss(yhat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(1/2B) sum_b |y_b - yhat_b|^2`` with one-hot targets (spec §2)."""
    onehot = torch.zeros_like(yhat).scatter_(1, y[:, None], 1.0)
    return 0.5 * ((yhat - onehot) ** 2).sum(1).mean()
