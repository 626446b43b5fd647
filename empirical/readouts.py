"""Observables read from a real network's attention, defined once for every ladder.

* :func:`empirical.transformer.attention_entropy` (re-exported): ``-sum_j a_ij log(a_ij + eps)``
  over keys, mean over queries (``log T`` for a uniform map, ``mean_i ln i`` for the uniform causal
  map, 0 for one-hot rows: tests);
* :func:`token_attention`: a query's attention over key *positions* summed into token space,
  ``X^T b`` (docs/papers/scan_snap.md §2.1: the attended mixture), renormalised over the keys given;
* :func:`per_token_logit`: the per-token attention logit of a query whose score on a key depends on
  the key's token and position only (a first layer): ``z_l = log mean_t exp(s(l, t))`` over the
  context positions ``t``. For i.i.d. tokens and a long context the attention mass on token ``l``
  tends to ``P(l) e^{z_l} / sum_l' P(l') e^{z_l'}`` (spec §1.3, Eqn. 5), so ``z`` is the network's
  counterpart of the paper's attention logit ``z_ml``; without positional dependence it is the score
  itself.

Shapes in the docstrings; any float dtype.
"""

from __future__ import annotations

import math

import torch

from .transformer import attention_entropy, uniform_causal_entropy

__all__ = ["attention_entropy", "uniform_causal_entropy", "token_attention", "per_token_logit"]


def token_attention(att: torch.Tensor, ids: torch.Tensor, M: int) -> torch.Tensor:
    """Attention ``att`` (..., P) of one query over P key positions holding tokens ``ids`` (..., P)
    summed per token: ``(..., M)``, renormalised to sum 1 over these keys (a causal query's weight
    on itself, when left out of the keys, is removed)."""
    out = torch.zeros(att.shape[:-1] + (M,), dtype=att.dtype, device=att.device).scatter_add_(-1, ids, att)
    return out / out.sum(-1, keepdim=True)


def per_token_logit(scores: torch.Tensor) -> torch.Tensor:
    """``log mean_t exp(scores[..., t])`` over the last axis (the context positions): ``(...)``."""
    return torch.logsumexp(scores, dim=-1) - math.log(scores.shape[-1])
