"""In-context linear regression sequences (spec §1), drawn from the run's generator only (same seed -> same
numbers). Shapes: ``Z`` ``(B, D+1, N+1)`` token matrices (columns ``[x_n; y_n]``, the query ``[x_q; 0]`` last),
``y_q`` ``(B,)``; float64."""

from __future__ import annotations

import torch

__all__ = ["sequences"]


def sequences(lam, N: int, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` sequences: ``w ~ N(0, I/D)``, ``x ~ N(0, diag(lam))``, ``y = w^T x``; returns ``(Z, y_q)``."""
    dev = generator.device
    lam = torch.as_tensor(lam, dtype=torch.float64, device=dev)
    D = lam.numel()
    w = torch.randn(batch, D, generator=generator, dtype=torch.float64, device=dev) / D ** 0.5
    x = torch.randn(batch, N + 1, D, generator=generator, dtype=torch.float64, device=dev) * lam.sqrt()
    y = torch.einsum("bnd,bd->bn", x, w)
    Z = torch.cat([x.transpose(1, 2), torch.cat([y[:, :N], y.new_zeros(batch, 1)], 1)[:, None, :]], 1)
    return Z, y[:, N]
