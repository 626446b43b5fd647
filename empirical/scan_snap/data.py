"""Scan & Snap data (docs/papers/scan_snap.md §1.2-1.4): class ``n`` uniform; ``T - 1`` i.i.d.
contextual tokens from ``P(.|n)``; the query ``psi(n)``; the label ``n``'s output token.

Two data paths (the config's ``variant``) that must agree:

* ``sequences`` — as the official code: ``T - 1`` token ids per sample;
* ``counts`` — the exact count-vector reduction of spec §1.3: ``q ~ Multinomial(T - 1, P(.|n))``
  drawn by conditional binomials, so the cost does not grow with ``T``.

Every batch carries a leading run axis ``R`` (many runs train as one batched computation).
"""

from __future__ import annotations

import numpy as np
import torch

from theory.scan_snap import ScanSnapTask

__all__ = ["Sampler", "counts_of"]


class Sampler:
    """Draws minibatches for ``R`` independent runs from one seeded generator.

    ``counts(R, B)`` -> ``(n, q_ids, counts)`` with counts (R, B, M_in) (float, sum T - 1);
    ``sequences(R, B)`` -> ``(n, q_ids, x)`` with x (R, B, T - 1) token ids."""

    def __init__(self, task: ScanSnapTask, device, generator: torch.Generator, dtype=torch.float64):
        self.task, self.gen, self.device, self.dtype = task, generator, device, dtype
        self.P = torch.as_tensor(task.P, dtype=dtype, device=device)
        sup = np.stack([task.support(n) for n in range(task.K)])  # equal support sizes (generator)
        self.support = torch.as_tensor(sup, device=device)
        self.sup_p = torch.as_tensor(np.take_along_axis(task.P, sup, 1), dtype=dtype, device=device)
        self.query = torch.as_tensor(task.query, device=device)
        self.label = torch.as_tensor(task.label, device=device)
        self.L = task.config.T - 1

    def classes(self, R: int, B: int) -> torch.Tensor:
        return torch.randint(0, self.task.K, (R, B), generator=self.gen, device=self.device)

    def counts(self, R: int, B: int):
        n, q, sup, k = self.support_counts(R, B)
        counts = torch.zeros((R, B, self.task.M_in), dtype=self.dtype, device=self.device)
        counts.scatter_(2, sup, k)
        return n, q, counts

    def support_counts(self, R: int, B: int):
        """Counts on each sample's support only: ``(n, q_ids, support_ids (R, B, S), counts (R, B, S))``."""
        n = self.classes(R, B)
        probs = self.sup_p[n]  # (R, B, S)
        remaining = torch.full((R, B), float(self.L), dtype=self.dtype, device=self.device)
        mass = torch.ones((R, B), dtype=self.dtype, device=self.device)
        out = torch.zeros((R, B, probs.shape[-1]), dtype=self.dtype, device=self.device)
        S = probs.shape[-1]
        for s in range(S):  # Multinomial by conditional binomials: q_s ~ Bin(rest, p_s / mass_left)
            if s == S - 1:
                k = remaining
            else:
                p = (probs[..., s] / mass).clamp(0.0, 1.0)
                k = torch.binomial(remaining, p, generator=self.gen)
            out[..., s] = k
            remaining = remaining - k
            mass = mass - probs[..., s]
        return n, self.query[n], self.support[n], out

    def sequences(self, R: int, B: int):
        n = self.classes(R, B)
        x = torch.multinomial(self.P[n].reshape(R * B, -1), self.L, replacement=True, generator=self.gen)
        return n, self.query[n], x.view(R, B, self.L)


def counts_of(x: torch.Tensor, M: int, dtype=torch.float64) -> torch.Tensor:
    """Token counts (R, B, M) of sequences x (R, B, L)."""
    out = torch.zeros(x.shape[:-1] + (M,), dtype=dtype, device=x.device)
    return out.scatter_add_(-1, x, torch.ones_like(x, dtype=dtype))
