"""The shared standard transformer: rung 2 of every paper's realism ladder.

One textbook model for every synthetic-data ladder: token embedding plus learned (or sinusoidal,
or no) positional embedding, ``n_layer`` blocks, a linear decoder. A block is **pre-LN**
(``norm_first=True``: ``x = x + Attn(LN1 x)``; ``x = x + MLP(LN2 x)``, with a final LayerNorm before
the decoder) or **post-LN** (``x = LN1(x + Attn x)``; ``x = LN2(x + MLP x)``), ``MLP = fc2(act(fc1
x))`` with ``act`` GELU (exact, erf form) or ReLU; multi-head softmax self-attention with biases,
optionally causal. With the same weights one block is ``torch.nn.TransformerEncoderLayer``
(``batch_first=True``, dropout 0, the same ``norm_first`` and activation): tests.

The attention is :class:`empirical.transformer.SelfAttention` (explicit ``softmax(q k^T /
sqrt(d_head))``), so every layer's map ``(B, H, T, T)`` (query rows, key columns, rows summing to 1)
is returned by ``forward(..., return_attention=True)``. :meth:`StandardTransformer.layer0_scores`
gives the first layer's pre-softmax score of any (token, position) query on any (token, position)
key: in layer 0 a score depends on the two tokens and positions only, which is what the ladders'
observables read (e.g. the per-token attention logit of Scan & Snap).

Initialisation (GPT-2 style): embeddings and linear weights ``N(0, init_std^2)``, biases 0,
LayerNorm weight 1 and bias 0. Shapes: ids ``(B, T)`` -> logits ``(B, T, vocab_out)``. Any torch
float dtype (``dtype=torch.float64`` for comparisons).

:func:`adamw_warmup` is the optimiser: ``torch.optim.AdamW`` with a linear warm-up of the learning
rate, every hyperparameter bound at construction.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from theory.errors import ConfigError, check_choice

from .transformer import SelfAttention, sinusoidal_positions

__all__ = ["StandardBlock", "StandardTransformer", "WarmupAdamW", "adamw_warmup", "ACTIVATIONS", "POSITIONS"]

#: the MLP's nonlinearity (GELU: the exact erf form, as torch's ``"gelu"``)
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}
#: the positional embedding: learned table, the fixed sinusoidal table, or none
POSITIONS = ("learned", "sinusoidal", "none")


class StandardBlock(nn.Module):
    """One transformer block (see the module docstring): ``x (B, T, d) -> (x, att (B, H, T, T))``."""

    def __init__(self, d: int, n_head: int, d_hid: int, *, norm_first: bool = True, activation: str = "gelu",
                 causal: bool = False, eps: float = 1e-5):
        super().__init__()
        check_choice("activation", activation, tuple(ACTIVATIONS))
        self.attn = SelfAttention(d, n_head, 0.0, causal)
        self.fc1, self.fc2 = nn.Linear(d, d_hid), nn.Linear(d_hid, d)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.norm_first, self.act = norm_first, ACTIVATIONS[activation]

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the attention reads: ``LN1 x`` (pre-LN) or ``x`` (post-LN)."""
        return self.ln1(x) if self.norm_first else x

    def forward(self, x: torch.Tensor, n_query: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``n_query``: outputs at the last ``n_query`` positions only (the rest still serve as keys)."""
        a, att = self.attn(self.attention_input(x), n_query)
        if n_query is not None:
            x = x[:, x.shape[1] - n_query:]
        if self.norm_first:
            x = x + a
            return x + self.mlp(self.ln2(x)), att
        x = self.ln1(x + a)
        return self.ln2(x + self.mlp(x)), att


class StandardTransformer(nn.Module):
    """Token ids ``(B, T)`` -> logits ``(B, T, vocab_out)`` (see the module docstring).

    ``vocab``: input tokens; ``vocab_out``: output tokens (default ``vocab``); ``d`` model width,
    ``n_head`` heads, ``d_hid`` MLP width (default ``4 d``); ``positions`` one of
    :data:`POSITIONS` (``max_len`` rows); ``causal``: each position attends to itself and the past
    only."""

    def __init__(self, vocab: int, d: int = 128, n_layer: int = 1, n_head: int = 1, d_hid: int | None = None,
                 max_len: int = 512, *, vocab_out: int | None = None, norm_first: bool = True,
                 activation: str = "gelu", causal: bool = True, positions: str = "learned", init_std: float = 0.02,
                 dtype: torch.dtype = torch.float32, device="cpu", generator: torch.Generator | None = None):
        super().__init__()
        check_choice("positions", positions, POSITIONS)
        for name, v in (("vocab", vocab), ("d", d), ("n_layer", n_layer), ("n_head", n_head), ("max_len", max_len)):
            if v < 1:
                raise ConfigError(name, f"must be >= 1, got {v}")
        if d % n_head:
            raise ConfigError("n_head", f"d={d} is not divisible by n_head={n_head}")
        self.d, self.norm_first, self.positions = d, norm_first, positions
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d) if positions == "learned" else None
        table = sinusoidal_positions(max_len, d) if positions == "sinusoidal" else torch.zeros(max_len, d)
        self.register_buffer("pe", table, persistent=False)
        self.blocks = nn.ModuleList(StandardBlock(d, n_head, d_hid or 4 * d, norm_first=norm_first,
                                                  activation=activation, causal=causal) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d) if norm_first else nn.Identity()
        self.decoder = nn.Linear(d, vocab_out or vocab)
        self.to(dtype=dtype, device=device)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p) * init_std)

    def embed(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token plus positional embedding ``(..., d)`` of ids ``idx`` at ``positions`` (default
        ``0..T-1`` along the last axis)."""
        if positions is None:
            positions = torch.arange(idx.shape[-1], device=idx.device)
        x = self.emb(idx)
        return x + (self.pos(positions) if self.pos is not None else self.pe[positions].to(x))

    def features(self, idx: torch.Tensor, n_query: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The final representation ``(B, T, d)`` (after ``ln_f`` for pre-LN) and every layer's
        attention map ``(B, H, T, T)``. ``n_query``: the last block computes its output (and map
        rows) at the last ``n_query`` positions only — the same numbers as the full model's there
        (tests), at a fraction of the cost when only those positions are read."""
        x = self.embed(idx)
        maps = []
        for i, block in enumerate(self.blocks):
            x, att = block(x, n_query if i == len(self.blocks) - 1 else None)
            maps.append(att)
        return self.ln_f(x), maps

    def forward(self, idx: torch.Tensor, return_attention: bool = False, n_query: int | None = None):
        x, maps = self.features(idx, n_query)
        logits = self.decoder(x)
        return (logits, maps) if return_attention else logits

    def layer0_scores(self, q_ids: torch.Tensor, q_pos: torch.Tensor, k_ids: torch.Tensor,
                      k_pos: torch.Tensor) -> torch.Tensor:
        """First layer's pre-softmax scores ``q . k / sqrt(d_head)`` of queries (token ``q_ids``
        (Q,), position ``q_pos`` (Q,)) on keys (token ``k_ids`` (N,), position ``k_pos`` (P,)):
        ``(Q, H, N, P)``. In layer 0 a score depends on these four only (not on the rest of the
        sequence); the attention map row of a query is the softmax of its scores over the allowed
        key positions (tests)."""
        block = self.blocks[0]
        att = block.attn
        H = att.n_head
        dh = self.d // H
        xq = block.attention_input(self.embed(q_ids, q_pos))  # (Q, d)
        xk = block.attention_input(self.embed(k_ids[:, None].expand(-1, k_pos.numel()),
                                              k_pos[None, :].expand(k_ids.numel(), -1)))  # (N, P, d)
        q = att.q(xq).view(-1, H, dh)
        k = att.k(xk).view(k_ids.numel(), k_pos.numel(), H, dh)
        return torch.einsum("qhe,nphe->qhnp", q, k) / math.sqrt(dh)


class WarmupAdamW:
    """``torch.optim.AdamW`` with a linear warm-up: the learning rate of step ``s`` (1-based) is
    ``lr min(1, s / warmup)``. ``zero_grad()``; ``step()`` steps the optimiser then the schedule;
    ``lr`` the rate the next step uses; ``state_dict``/``load_state_dict`` for checkpoints."""

    def __init__(self, params, *, lr: float, warmup: int, weight_decay: float, betas: tuple[float, float],
                 eps: float):
        if not (math.isfinite(lr) and lr > 0):
            raise ConfigError("lr", f"must be a finite number > 0, got {lr}")
        if warmup < 0:
            raise ConfigError("warmup", f"must be >= 0 steps, got {warmup}")
        if not (weight_decay >= 0):
            raise ConfigError("weight_decay", f"must be >= 0, got {weight_decay}")
        self.opt = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        w = max(int(warmup), 1)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / w))

    @property
    def lr(self) -> float:
        return float(self.opt.param_groups[0]["lr"])

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def step(self) -> None:
        self.opt.step()
        self.sched.step()

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "sched": self.sched.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])


def adamw_warmup(params, *, lr: float = 1e-3, warmup: int = 10, weight_decay: float = 0.01,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> WarmupAdamW:
    """The standard optimiser of rung 2: AdamW (decoupled weight decay) with ``warmup`` steps of
    linear learning-rate warm-up to ``lr`` (see :class:`WarmupAdamW`)."""
    return WarmupAdamW(params, lr=lr, warmup=warmup, weight_decay=weight_decay, betas=betas, eps=eps)
