"""The network: one logit, read top to bottom."""

from __future__ import annotations

import torch

__all__ = ["Logit"]


class Logit(torch.nn.Module):
    """``sigma(a)``: the predicted probability of label 1 (float64)."""

    def __init__(self, a0: float):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(float(a0), dtype=torch.float64))

    def forward(self, n: int) -> torch.Tensor:
        """The logit repeated for ``n`` examples (the model has no input)."""
        return self.a.expand(n)
