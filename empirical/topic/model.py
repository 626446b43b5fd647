"""The one-layer transformer of docs/papers/topic.md §2.1, its loss on the selected positions and the
attention statistics of §5.6 (read top to bottom). Float64 by default.

``f = W_pred (W_V Z) Attn + b``, ``Z = W_E X``, column-wise softmax over keys; no FFN, LayerNorm
or residual. Shapes: ``D`` ids, tokens ``(B, L)``, outputs ``(B, D, L)``, attention
``(B, L_key, L_query)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from theory.topic import TopicConfig, value_optimum

from .data import Vocabulary

__all__ = ["TopicTransformer", "loss_on_selected", "attention_statistics"]


# ------------------------------------------------------------------------------------------------
# Model (spec §2.1): f = W_pred (W_V Z) Attn + b, Z = W_E X, column-wise softmax over keys
# ------------------------------------------------------------------------------------------------
class TopicTransformer(nn.Module):
    """One layer, one head, no FFN / LayerNorm / residual.

    ``embedding``: ``one_hot`` (``W_E = I``, ``W_pred = I``) or ``trained`` (``W_E`` (d, D),
    tied ``W_pred = W_E^T``). ``attention``: ``uniform`` (``W_K = W_Q = 0`` frozen: every valid
    key weighs the same) or ``trained`` (scores ``(W_K Z)^T (W_Q Z)/sqrt(d_a)``). ``value``:
    ``trained``, or frozen ``identity`` / ``block`` (0/1 same-topic matrix over word ids) /
    ``optimum`` (``W_V`` and ``b`` at the stage-1 optimum of the config's key variant: the stage-2
    theorem's setting). The value bias ``b`` is trained (it plays ``b_pred``: attention columns
    sum to 1), except under ``optimum``.
    """

    def __init__(self, config: TopicConfig, vocab: Vocabulary, generator: torch.Generator,
                 dtype=torch.float64):
        super().__init__()
        c = config
        D = vocab.size
        self.D, self.d_a = D, c.d_a or D
        self.uniform = c.attention == "uniform"
        self.one_hot = c.embedding == "one_hot"
        d = D

        def gauss(shape, std):
            return torch.randn(shape, generator=generator, dtype=dtype) * std if std > 0 else torch.zeros(shape, dtype=dtype)

        if c.value == "trained":
            self.W_V = nn.Parameter(gauss((d, d), c.init_scale))
        elif c.value == "identity":
            self.register_buffer("W_V", torch.eye(d, dtype=dtype))
        elif c.value == "optimum":  # the stage-2 theorem's setting: W_V and b frozen at the stage-1 optimum
            W, b = value_optimum(c)
            self.register_buffer("W_V", torch.as_tensor(W, dtype=dtype))
            self.register_buffer("b", torch.as_tensor(b, dtype=dtype))
        else:
            top = torch.as_tensor(vocab.topic_of)
            blk = ((top[:, None] == top[None, :]) & (top[:, None] >= 0)).to(dtype)
            self.register_buffer("W_V", blk)
        if c.value != "optimum":
            self.b = nn.Parameter(torch.zeros(D, dtype=dtype))
        if self.uniform:
            self.register_buffer("W_K", torch.zeros(self.d_a, d, dtype=dtype))
            self.register_buffer("W_Q", torch.zeros(self.d_a, d, dtype=dtype))
        else:
            self.W_K = nn.Parameter(gauss((self.d_a, d), c.kq_scale))
            self.W_Q = nn.Parameter(gauss((self.d_a, d), c.kq_scale))
        if not self.one_hot:  # identity init keeps E = W_E^T W_E in the symmetric algebra
            self.W_E = nn.Parameter(c.init_scale * torch.eye(d, D, dtype=dtype) if c.embedding_init == "identity"
                                    else gauss((d, D), c.init_scale))

    def embed_columns(self) -> torch.Tensor:
        """``W_E`` as (d, D): identity for one-hot embeddings."""
        return torch.eye(self.D, dtype=self.b.dtype, device=self.b.device) if self.one_hot else self.W_E

    def attention(self, tokens: torch.Tensor, key_ok: torch.Tensor) -> torch.Tensor:
        """(B, L_key, L_query) attention, each query column sums to 1 over allowed keys."""
        if self.uniform:
            att = key_ok.to(self.b.dtype)[:, :, None].expand(-1, -1, tokens.shape[1])
            return att / att.sum(1, keepdim=True)
        E = self.embed_columns()
        K = (self.W_K @ E)[:, tokens]  # (d_a, B, L)
        Q = (self.W_Q @ E)[:, tokens]
        scores = torch.einsum("abk,abq->bkq", K, Q) / math.sqrt(self.d_a)
        scores = scores.masked_fill(~key_ok[:, :, None], float("-inf"))
        return torch.softmax(scores, dim=1)

    def forward(self, tokens: torch.Tensor, key_ok: torch.Tensor):
        """Outputs (B, D, L); (B, D, 1) under uniform attention (identical for every query)."""
        E = self.embed_columns()
        VE = self.W_V @ E  # (d, D)
        if self.uniform:
            # every query sees the same context: W_pred W_V x_bar + b
            hist = torch.zeros(tokens.shape[0], self.D, dtype=E.dtype, device=E.device)
            hist.scatter_add_(1, tokens, key_ok.to(E.dtype))
            xbar = hist / hist.sum(1, keepdim=True)  # (B, D)
            out = xbar @ VE.T  # (B, d)
            if not self.one_hot:
                out = out @ E  # W_pred = W_E^T: (B, d) -> (B, D)
            return (out + self.b)[:, :, None]  # (B, D, 1): the same for every query
        att = self.attention(tokens, key_ok)  # (B, Lk, Lq)
        vals = VE[:, tokens]  # (d, B, L)
        ctx = torch.einsum("dbk,bkq->bdq", vals, att)
        if not self.one_hot:
            ctx = torch.einsum("de,bdq->beq", E, ctx)
        return ctx + self.b[None, :, None]


def loss_on_selected(out: torch.Tensor, labels: torch.Tensor, selected: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean over selected positions: ``||f - e_y||^2`` summed over the vocabulary (squared) or
    cross-entropy (spec §2.1, §8 Decision 1)."""
    b_idx, pos = torch.nonzero(selected, as_tuple=True)
    o = out[b_idx, :, pos if out.shape[2] > 1 else torch.zeros_like(pos)]  # (n_sel, D)
    y = labels[selected]
    if kind == "ce":
        return torch.nn.functional.cross_entropy(o, y)
    onehot = torch.zeros_like(o).scatter_(1, y[:, None], 1.0)
    return ((o - onehot) ** 2).sum(1).mean()


# ------------------------------------------------------------------------------------------------
# Observables (spec §6)
# ------------------------------------------------------------------------------------------------
@torch.no_grad()
def attention_statistics(model: TopicTransformer, tokens: np.ndarray, valid: np.ndarray,
                         vocab: Vocabulary, v: int, max_len: int = 100) -> dict[str, float]:
    """Average attention (unmasked documents, first ``max_len`` positions, uniform = 1/L) paid by a
    word query to keys that are the same word (incl. itself), same topic & different word,
    different topic (spec §5.6). Topics from ``vocab.topic_of`` (``(id-4)//v`` in the official
    layout; special tokens excluded as queries and keys: the code's off-by-4 lookup is not copied).
    Also ``gamma_hat = ((v-1) alpha_hat + beta_hat)/v`` with ``alpha_hat, beta_hat`` the ratios
    to the different-topic average."""
    dev = model.b.device
    if vocab.start is not None:  # drop START; keep max_len tokens
        tokens, valid = tokens[:, 1:], valid[:, 1:]
    tokens, valid = tokens[:, :max_len], valid[:, :max_len]
    t = torch.as_tensor(tokens, device=dev)
    ok = torch.as_tensor(valid, device=dev)
    att = model.attention(t, ok).cpu().numpy()  # (B, Lk, Lq)
    top = vocab.topic_of[tokens]
    word = top >= 0
    pair = word[:, :, None] & word[:, None, :]
    same_word = tokens[:, :, None] == tokens[:, None, :]
    same_topic = top[:, :, None] == top[:, None, :]
    sw = att[pair & same_word].mean()
    st = att[pair & same_topic & ~same_word].mean()
    dt = att[pair & ~same_topic].mean()
    a_hat, b_hat = st / dt, sw / dt
    return {"attention_same_word": float(sw), "attention_same_topic_other_word": float(st),
            "attention_different_topic": float(dt), "attention_uniform": 1.0 / tokens.shape[1],
            "alpha_hat": float(a_hat), "beta_hat": float(b_hat), "gamma_hat": float(((v - 1) * a_hat + b_hat) / v)}


