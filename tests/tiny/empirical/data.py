"""Bernoulli(p) labels, drawn from the run's generator only (same seed -> same numbers)."""

from __future__ import annotations

import torch

__all__ = ["labels"]


def labels(p: float, batch: int, generator: torch.Generator) -> torch.Tensor:
    """``batch`` labels in {0, 1} (float64) with P(1) = ``p``."""
    return (torch.rand(batch, generator=generator, dtype=torch.float64, device=generator.device) < p).double()
