"""SCB update rules (papers/scb.md §2): preconditioned proximal SGD, plain SGD."""

from __future__ import annotations

import torch

__all__ = ["soft_threshold_"]


def soft_threshold_(a: torch.Tensor, thr: float) -> None:
    a.copy_(torch.sign(a) * torch.clamp(a.abs() - thr, min=0.0))
