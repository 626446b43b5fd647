"""The reparameterised 1-layer transformer of Scan & Snap (docs/papers/scan_snap.md §2.2, the official
``Model2``): ``logits = Y^T LN(X^T b)``, ``b = softmax_t(z_{x_T, x_t})``, and its loss.

Read top to bottom: the model (:class:`DirectYZ`, ``R`` independent copies), the loss
(:func:`cross_entropy`), one batch's loss on a data path (:func:`loss_step`). Float64 by default;
float32 may be chosen for speed on a GPU.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from theory.scan_snap import ScanSnapTask

from .data import Sampler

__all__ = ["DirectYZ", "cross_entropy", "loss_step"]


class DirectYZ(nn.Module):
    """``R`` independent copies of the reparameterised 1-layer transformer.

    ``Y`` (R, M_in, M_out): decoder, ``Y[l, k]`` from attended token l to output k (the official
    decoder weight is ``Y^T``); ``Z`` (R, M_in, M_in): attention logits, row = query, column = key.
    ``zero_init`` (spec §2.3) or PyTorch's default linear init, uniform(+-1/sqrt(M_in)).
    """

    def __init__(self, task: ScanSnapTask, R: int = 1, zero_init: bool = True, generator=None,
                 dtype=torch.float64, device="cpu"):
        super().__init__()
        Mi, Mo = task.M_in, task.M_out
        if zero_init:
            Y = torch.zeros(R, Mi, Mo, dtype=dtype, device=device)
            Z = torch.zeros(R, Mi, Mi, dtype=dtype, device=device)
        else:  # nn.Linear default: kaiming_uniform(a=sqrt 5) -> U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            bound = 1.0 / math.sqrt(Mi)
            Y = (torch.rand(R, Mi, Mo, generator=generator, dtype=dtype, device=device) * 2 - 1) * bound
            Z = (torch.rand(R, Mi, Mi, generator=generator, dtype=dtype, device=device) * 2 - 1) * bound
        self.Y = nn.Parameter(Y)
        self.Z = nn.Parameter(Z)

    def _zq(self, q: torch.Tensor) -> torch.Tensor:
        """Rows z_{x_T} of each sample: (R, B, M_in)."""
        return torch.gather(self.Z, 1, q[..., None].expand(*q.shape, self.Z.shape[-1]))

    def mixture_from_sequences(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """``X^T b``: softmax over the T - 1 key positions (the query is not a key), scattered into
        token space. x (R, B, L) -> (R, B, M_in)."""
        logits = torch.gather(self._zq(q), 2, x)  # z_{x_T, x_t}
        b = torch.softmax(logits, dim=-1)
        return torch.zeros_like(self._zq(q)).scatter_add(2, x, b)

    def mixture_from_counts(self, counts: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """``X^T b = q o e^{z_m} / (q . e^{z_m})`` (spec §1.3): a softmax over tokens with log-count
        offsets (-inf where a token is absent)."""
        logc = torch.where(counts > 0, torch.log(counts.clamp_min(1e-300)), torch.full_like(counts, -math.inf))
        return torch.softmax(self._zq(q) + logc, dim=-1)

    def forward(self, mixture: torch.Tensor) -> torch.Tensor:
        u = mixture / mixture.norm(dim=-1, keepdim=True)  # LN: l2, no mean subtraction
        return torch.einsum("rbl,rlk->rbk", u, self.Y)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Batch-mean CE per run, (R,). Minimising it is ascent on J (spec §2.2)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -torch.gather(logp, 2, labels[..., None])[..., 0].mean(-1)


def loss_step(model: DirectYZ, sampler: Sampler, R: int, B: int, path: str) -> torch.Tensor:
    """Sample a batch per run on data path ``path`` (``counts`` or ``sequences``) and return the
    per-run batch-mean CE (R,)."""
    if path == "counts":
        n, q, counts = sampler.counts(R, B)
        mix = model.mixture_from_counts(counts, q)
    else:
        n, q, x = sampler.sequences(R, B)
        mix = model.mixture_from_sequences(x, q)
    return cross_entropy(model(mix), sampler.label[n])
