"""SCB data (docs/papers/scb.md §1.2): ``x_1..x_T ~ mu`` iid, the query ``k ~ mu`` outside the context
(Decision 1 A; option B: the query is ``x_T``), the position ``s ~ q^(k)``, the target
``x_o ~ P[:, x_s]``; and the downstream transition of the transfer task (Decision 10)."""

from __future__ import annotations

import numpy as np
import torch

from theory.errors import ConfigError
from theory.scb import SCBTask, stationary_distribution

__all__ = ["SCBSampler", "correlated_transition"]


class SCBSampler:
    """Draws minibatches on a device from a seeded generator. Returns ``x`` (B, T) token ids,
    ``k`` (B,) query ids, ``y`` (B,) target ids."""

    def __init__(self, task: SCBTask, device: torch.device, generator: torch.Generator, dtype=torch.float64):
        self.task, self.gen, self.device = task, generator, device
        self.mu = torch.as_tensor(task.mu, dtype=dtype, device=device)
        self.PT = torch.as_tensor(task.P.T, dtype=dtype, device=device)  # row j = P[:, j]
        self.QT = torch.as_tensor(task.Qm.T, dtype=dtype, device=device)  # row k = q^(k)
        self.query_last = task.config.query == "last"

    def sample(self, B: int):
        T = self.task.T
        x = torch.multinomial(self.mu, B * T, replacement=True, generator=self.gen).view(B, T)
        if self.query_last:  # Decision 1 option B: the query is x_T
            k = x[:, -1]
        else:
            k = torch.multinomial(self.mu, B, replacement=True, generator=self.gen)
        pos = torch.multinomial(self.QT[k], 1, generator=self.gen)  # (B, 1)
        xs = x.gather(1, pos)[:, 0]
        y = torch.multinomial(self.PT[xs], 1, generator=self.gen)[:, 0]
        return x, k, y


def correlated_transition(P_pre: np.ndarray, mix: float, seed: int, alpha: float = 1.0) -> np.ndarray:
    """Downstream transition for transfer (Decision 10): ``mix * P_pre + (1 - mix) * P_indep`` with
    ``P_indep`` fresh Dirichlet columns; column-stochastic for any mix in [0, 1]."""
    if not 0 <= mix <= 1:
        raise ConfigError("transfer_mix", f"must be in [0, 1], got {mix}")
    rng = np.random.default_rng(seed)
    N = P_pre.shape[0]
    P = mix * P_pre + (1 - mix) * rng.dirichlet(np.full(N, alpha), size=N).T
    stationary_distribution(P)  # validates irreducibility
    return P
