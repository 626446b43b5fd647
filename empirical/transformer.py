"""One small transformer for every real-text experiment, nanoGPT-style and readable, that exposes
each layer's attention map.

It is the PyTorch word-language-model tutorial model the official Scan & Snap and JoMA code use
(docs/papers/scan_snap.md §5.6, docs/papers/joma.md "Fig. 6"): embedding scaled by ``sqrt(d)`` plus
sinusoidal positions, ``n_layer`` **post-LN** blocks ``x = LN(x + Drop(Attn(x)))``,
``x = LN(x + Drop(FFN(x)))`` with ``FFN = fc2(Drop(ReLU(fc1(x))))``, causal mask for language
modelling (``causal=False`` gives the bidirectional masked-LM encoder of the topic paper), and a
linear decoder, untied (JoMA, Scan & Snap) or tied to the embedding (``tie=True``, BERT style).
Embedding and untied decoder weights start ``U(-0.1, 0.1)``, decoder bias 0, as the tutorial.

Attention maps are computed explicitly (``softmax(q k^T / sqrt(d_head))``, no fused kernel) and
returned by ``forward(..., return_attention=True)`` as one ``(B, H, T, T)`` tensor per layer
(query rows, key columns; each row sums to 1). Shapes: ids ``(B, T)`` -> logits ``(B, T, V)``.
Float32 (a language model on real text; nothing here is compared with a float64 theory).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TransformerLM", "Block", "SelfAttention", "sinusoidal_positions", "attention_entropy",
           "uniform_causal_entropy", "stable_rank", "EPS"]

#: the epsilon of the official entropy, -sum a log(a + eps) (docs/papers/joma.md Decision 9)
EPS = 1e-8


def sinusoidal_positions(T: int, d: int) -> torch.Tensor:
    """The tutorial's ``PositionalEncoding`` table ``(T, d)``: ``sin`` on even, ``cos`` on odd
    columns, frequencies ``10000^(-2i/d)``."""
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return pe


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate ``q, k, v`` projections and an output projection."""

    def __init__(self, d: int, n_head: int, dropout: float, causal: bool):
        super().__init__()
        if d % n_head:
            raise ValueError(f"d={d} is not divisible by n_head={n_head}")
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))
        self.n_head, self.causal = n_head, causal
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, n_query: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (B, T, d) -> (out (B, Tq, d), att (B, H, Tq, T))``: the last ``Tq = n_query``
        positions as queries (default all ``T``; every position is a key)."""
        B, T, d = x.shape
        H = self.n_head
        Tq = T if n_query is None else n_query
        split = lambda t, n: t.view(B, n, H, d // H).transpose(1, 2)  # noqa: E731  (B, H, n, dh)
        q, k, v = split(self.q(x[:, T - Tq:]), Tq), split(self.k(x), T), split(self.v(x), T)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // H)
        if self.causal:
            future = torch.ones(Tq, T, dtype=torch.bool, device=x.device).triu(T - Tq + 1)
            scores = scores.masked_fill(future, float("-inf"))
        att = scores.softmax(-1)  # (B, H, Tq, T), rows = queries
        y = (self.drop(att) @ v).transpose(1, 2).reshape(B, Tq, d)
        return self.out(y), att


class Block(nn.Module):
    """Post-LN block: ``x = LN1(x + Drop(Attn(x)))``; ``x = LN2(x + Drop(fc2(Drop(ReLU(fc1 x)))))``."""

    def __init__(self, d: int, d_hid: int, n_head: int, dropout: float, causal: bool):
        super().__init__()
        self.attn = SelfAttention(d, n_head, dropout, causal)
        self.fc1, self.fc2 = nn.Linear(d, d_hid), nn.Linear(d_hid, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, att = self.attn(x)
        x = self.ln1(x + self.drop(a))
        x = self.ln2(x + self.drop(self.fc2(self.drop(F.relu(self.fc1(x))))))
        return x, att


class TransformerLM(nn.Module):
    """Token ids ``(B, T)`` -> logits ``(B, T, vocab)``; see the module docstring."""

    def __init__(self, vocab: int, d: int = 200, d_hid: int = 200, n_layer: int = 1, n_head: int = 1,
                 dropout: float = 0.2, max_len: int = 512, *, causal: bool = True, tie: bool = False):
        super().__init__()
        self.d, self.causal, self.tie = d, causal, tie
        self.emb = nn.Embedding(vocab, d)
        self.register_buffer("pe", sinusoidal_positions(max_len, d), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d, d_hid, n_head, dropout, causal) for _ in range(n_layer))
        self.decoder = nn.Linear(d, vocab)
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if tie:
            self.decoder.weight = self.emb.weight
        else:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def features(self, idx: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Last block's output ``(B, T, d)`` and the per-layer attention maps ``(B, H, T, T)``."""
        T = idx.shape[1]
        x = self.drop(self.emb(idx) * math.sqrt(self.d) + self.pe[:T])
        maps = []
        for block in self.blocks:
            x, att = block(x)
            maps.append(att)
        return x, maps

    def forward(self, idx: torch.Tensor, return_attention: bool = False):
        x, maps = self.features(idx)
        logits = self.decoder(x)
        return (logits, maps) if return_attention else logits


def attention_entropy(att: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """``-sum_j a_ij log(a_ij + eps)`` over keys, then the mean over queries (and every leading
    axis: batch, heads). ``att`` ``(..., T, T)``; a scalar tensor (docs/papers/joma.md Decision 9)."""
    return -(att * torch.log(att + eps)).sum(-1).mean()


def uniform_causal_entropy(T: int) -> float:
    """Entropy of the uniform causal map, ``mean_{i=1..T} ln i`` (2.632 for ``T = 35``,
    docs/papers/joma.md §4 item 4): the maximum a causal attention map can reach."""
    return float(sum(math.log(i) for i in range(1, T + 1)) / T)


def stable_rank(W: torch.Tensor) -> float:
    """``||W||_F^2 / sigma_max(W)^2`` (docs/papers/joma.md §2.6, Decision 10)."""
    W = W.detach().double()
    return float((W * W).sum() / torch.linalg.matrix_norm(W, ord=2) ** 2)
