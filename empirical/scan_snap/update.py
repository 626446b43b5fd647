"""Scan & Snap's optimisers (papers/scan_snap.md §2.3, §7): the official code steps the decoder
``Y`` and the attention ``Z`` with their own learning rates ``eta_Y``, ``eta_Z``."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Optimiser"]


class Optimiser:
    """PyTorch's SGD (momentum ``mu``, dampening 0, no weight decay: ``v = mu v + g; p -= lr v``)
    or Adam (betas ``mu``/0.999, eps 1e-8: the config's momentum is Adam's beta1, 0.9 by default
    as PyTorch's), with learning-rate tensors of shape (R,) per parameter."""

    def __init__(self, params: dict[str, nn.Parameter], lrs: dict[str, torch.Tensor], method: str, momentum: float):
        self.params, self.method, self.mu = params, method, momentum
        self.lrs = {k: v.view(-1, 1, 1) for k, v in lrs.items()}
        self.state = {k: {"m": torch.zeros_like(p), "v": torch.zeros_like(p)} for k, p in params.items()}
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        for k, p in self.params.items():
            g, st, lr = p.grad, self.state[k], self.lrs[k]
            if self.method == "sgd":
                st["m"].mul_(self.mu).add_(g) if self.t > 1 else st["m"].copy_(g)
                p.sub_(lr * st["m"])
            else:
                st["m"].mul_(self.mu).add_((1 - self.mu) * g)
                st["v"].mul_(0.999).add_(0.001 * g * g)
                mh = st["m"] / (1 - self.mu**self.t)
                vh = st["v"] / (1 - 0.999**self.t)
                p.sub_(lr * mh / (vh.sqrt() + 1e-8))

    def state_dict(self):
        return {"t": self.t, "state": self.state}

    def load_state_dict(self, d):
        self.t, self.state = d["t"], d["state"]
