"""Multi-head linear self-attention on in-context regression (spec §2), seeds on a leading axis ``S``.

``ATTN(Z) = Z + sum_h W^V_h Z (Z^T W^{KQ}_h Z) / N`` read at the query token ``ŷ_q = ATTN(Z)[D, N]`` (0-based).
The value matrix ``W^V_h`` has only its ``y -> y`` entry ``v_h``; the key-query matrix has only its ``x``-block:
``U_h`` (merged) or ``K_h^T Q_h`` (separate, rank ``R``) — the invariant set of spec §2, decision 1. The forward
pass is the attention itself on the token matrix (the query column of ``Z Z^T W^{KQ} Z``), not the reduced
formula ``c^T Γ x_q``; :func:`two_layer_cubic` is that formula, for the equivalence test.

Parameter shapes: ``v`` ``(S, H)``; ``U`` ``(S, H, D, D)``; ``K``, ``Q`` ``(S, H, R, D)``.
"""

from __future__ import annotations

import torch

__all__ = ["LinearAttention", "two_layer_cubic", "cubic_features", "expected_loss"]


class LinearAttention(torch.nn.Module):
    """``S`` independent multi-head linear attentions (one per seed), merged or separate key-query."""

    def __init__(self, params: dict[str, torch.Tensor], merged: bool):
        super().__init__()
        self.merged = merged
        self.v = torch.nn.Parameter(params["v"].clone())
        if merged:
            self.U = torch.nn.Parameter(params["U"].clone())
        else:
            self.K = torch.nn.Parameter(params["K"].clone())
            self.Q = torch.nn.Parameter(params["Q"].clone())

    def key_query(self) -> torch.Tensor:
        """The ``x``-block of ``W^{KQ}_h``, shape ``(S, H, D, D)``."""
        return self.U if self.merged else torch.einsum("shri,shrj->shij", self.K, self.Q)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The full ``(D+1) x (D+1)`` matrices ``(W^V, W^KQ)``, shape ``(S, H, D+1, D+1)`` each."""
        kq = self.key_query()
        S, H, D, _ = kq.shape
        WV = kq.new_zeros(S, H, D + 1, D + 1)
        WV[:, :, D, D] = self.v
        WKQ = torch.nn.functional.pad(kq, (0, 1, 0, 1))
        return WV, WKQ

    def gamma(self) -> torch.Tensor:
        """The effective matrix ``Γ = sum_h v_h U_h``, shape ``(S, D, D)``."""
        return torch.einsum("sh,shij->sij", self.v, self.key_query())

    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        """``Z`` ``(S, B, D+1, N+1)`` -> ``ŷ_q`` ``(S, B)``."""
        N = Z.shape[-1] - 1
        WV, WKQ = self.weights()
        zq = Z[..., -1]                                              # the query token (S, B, D+1)
        query = torch.einsum("shij,sbj->shbi", WKQ, zq)              # W^KQ_h z_q
        scores = torch.einsum("sbin,shbi->shbn", Z, query)           # Z^T W^KQ_h z_q: one score per token
        mixed = torch.einsum("sbjn,shbn->shbj", Z, scores)           # Z (Z^T W^KQ_h z_q)
        out = zq + torch.einsum("shij,shbj->sbi", WV, mixed) / N     # the query column of ATTN(Z)
        return out[..., -1]


def cubic_features(Z: torch.Tensor) -> torch.Tensor:
    """``z = vec(c x_q^T)``, ``c = (1/N) sum_n y_n x_n``: ``(..., B, D+1, N+1)`` -> ``(..., B, D*D)``."""
    N, D = Z.shape[-1] - 1, Z.shape[-2] - 1
    x, y, xq = Z[..., :D, :N], Z[..., D, :N], Z[..., :D, N]
    c = torch.einsum("...dn,...n->...d", x, y) / N
    return (c[..., :, None] * xq[..., None, :]).flatten(-2)


def two_layer_cubic(W1: torch.Tensor, w2: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """A two-layer linear network on the cubic features (spec §2): ``ŷ = w2^T W1 z``; ``W1`` ``(S, H, D*D)``,
    ``w2`` ``(S, H)``, ``Z`` ``(S, B, D+1, N+1)`` -> ``(S, B)``."""
    return torch.einsum("sh,shf,sbf->sb", w2, W1, cubic_features(Z))


def expected_loss(gamma: torch.Tensor, lam, N: int) -> torch.Tensor:
    """The population loss of ``Γ`` ``(S, D, D)`` (spec §3: ``(1/(2D)) [T - 2 tr(Γ Λ^2) + tr(Γ Λ Γ^T M)]``),
    shape ``(S,)``; differentiable."""
    lam = torch.as_tensor(lam, dtype=gamma.dtype, device=gamma.device)
    D, T = lam.numel(), lam.sum()
    m = (1 + 1 / N) * lam ** 2 + T / N * lam
    quad = torch.einsum("sij,j,sij,i->s", gamma, lam, gamma, m)
    return (T - 2 * torch.einsum("sii,i->s", gamma, lam ** 2) + quad) / (2 * D)
