"""JoMA population quantities: data of the block, the block flow as one array formula, entropies,
closed-form times and the HBLT co-occurrence — numpy by default, any array module via ``xp=``
(``jax.numpy`` for the SDE), so the numeric observables and the jax drifts share one formula.

Everything here is checked against the sympy derivation (:mod:`.derive`) in the tests.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from ..core import compile_expressions
from ..errors import ConfigError
from .config import JomaConfig
from .derive import cooccurrence_formula

__all__ = [
    "class_distributions", "make_data", "mixture_data", "initial_parameters", "block_parameters",
    "block_initial_state", "block_flow",
    "centred_gradient", "softmax_zhat", "position_attention_entropy", "blow_up_times", "convergence_time", "entropy",
    "fixed_point_entropy", "stable_rank", "slope_sign_changes", "drops_then_bounces", "normalised_correlation",
    "cooccurrence_probability", "hblt_leaf_lca_heights",
]


# ------------------------------------------------------------------------------------------------
# Data of the block (docs/papers/joma.md §5 Fig. 2): X (N, Mc) rows x_n = P(. | y = n), G (N, K)
# ------------------------------------------------------------------------------------------------
def class_distributions(Mc: int, N: int, data: str, rng: np.random.Generator) -> np.ndarray:
    """``X`` (N, Mc), ``X[n] = P(l | y = n)``: half "distinct" tokens peaked around a
    class-dependent index (``data="gaussian"``, the official toy's scaled to ``Mc``) and half
    "common" uniform-random ones; rows normalised to 1 (spec §5 Fig. 2)."""
    X = rng.random((Mc, N)) / 2
    if data == "gaussian":
        nd = Mc // 2
        l = np.arange(nd)[:, None]
        y = np.arange(N)[None, :]
        X[:nd] = np.exp(-((l - y / N * nd) ** 2) / (30 * (nd / 10) ** 2 + 1e-12))
    X = X / X.sum(0, keepdims=True)
    return X.T.copy()


def make_data(config: JomaConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(X (N, Mc), G (N, K))``: :func:`class_distributions` and the stationary gradient
    (``centred``: :func:`centred_gradient`; ``random``: Gaussian)."""
    rng = np.random.default_rng(config.data_seed)
    X = class_distributions(config.Mc, config.N, config.data, rng)
    G = centred_gradient(config.K) if config.gradient == "centred" else rng.standard_normal((config.N, config.K))
    return X, G


def initial_parameters(config: JomaConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(W0 (d, K), z0 (Mc,))``: Gaussian with std ``init_scale`` (the official toy uses 1/100)."""
    rng = np.random.default_rng(config.seed + 1000)
    W0 = rng.standard_normal((config.d, config.K)) * config.init_scale
    z0 = rng.standard_normal(config.Mc) * config.init_scale
    return W0, z0


def block_parameters(config: JomaConfig, X=None, G=None) -> dict[str, float]:
    X, G = (X, G) if X is not None else make_data(config)
    p = {f"x_{n + 1}_{l + 1}": float(X[n, l]) for n in range(X.shape[0]) for l in range(X.shape[1])}
    p.update({f"g_{n + 1}_{k + 1}": float(G[n, k]) for n in range(G.shape[0]) for k in range(G.shape[1])})
    p["tau"] = float(config.temperature)
    bbar = X.mean(0)  # Decision 4: bbar = E[x] (the value of E[b] at z = 0)
    p.update({f"bbar_{l + 1}": float(bbar[l]) for l in range(X.shape[1])})
    return p


def block_initial_state(config: JomaConfig) -> dict[str, float]:
    """Reduced coordinates of the initial network: ``z``, ``v_k = U_C^T w_k`` (first Mc rows of W
    with the identity embedding), ``s_k = u_q^T w_k`` (row Mc)."""
    W0, z0 = initial_parameters(config)
    y = {f"z_{l + 1}": float(z0[l]) for l in range(config.Mc)}
    y.update({f"v_{k + 1}_{l + 1}": float(W0[l, k]) for k in range(config.K) for l in range(config.Mc)})
    y.update({f"s_{k + 1}": float(W0[config.Mc, k]) for k in range(config.K)})
    return y




def centred_gradient(K: int) -> np.ndarray:
    """``G = I - 11^T/K`` (K, K): ``-dL/dh`` of cross-entropy on logits ``h = 0`` (times ``N``)."""
    return np.eye(K) - np.ones((K, K)) / K


def mixture_data(config: JomaConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mixture data of Theorem 3 (spec §2.5) as finite sequences: ``(tokens, labels, X)``.

    ``K`` classes, class ``y`` has the token distribution ``P(. | y)`` of :func:`make_data` (one row
    per class); each class contributes ``n_per_class`` sequences of ``seq_len`` tokens drawn i.i.d.
    from it. ``tokens`` (n, seq_len) int64, ``labels`` (n,), ``X`` (n, Mc) the bags of words
    ``x_l = #(l in sequence)/seq_len`` (spec §1.2): a mixture of ``K`` multinomial clouds."""
    P = class_distributions(config.Mc, config.K, config.data, np.random.default_rng(config.data_seed))
    rng = np.random.default_rng(config.data_seed + 7)
    labels = np.repeat(np.arange(config.K), config.n_per_class)
    cum = np.cumsum(P, axis=1)
    u = rng.random((labels.size, config.seq_len))
    tokens = np.minimum((u[:, :, None] > cum[labels][:, None, :]).sum(-1), config.Mc - 1).astype(np.int64)
    X = np.stack([np.bincount(t, minlength=config.Mc) for t in tokens]) / config.seq_len
    return tokens, labels, X


# ------------------------------------------------------------------------------------------------
# The block flow (spec §2.1) as one array formula
# ------------------------------------------------------------------------------------------------
def _dphi(activation, pre, xp):
    if activation == "linear":
        return xp.ones_like(pre)
    if activation == "tanh":
        return 1 - xp.tanh(pre) ** 2
    if activation == "relu":
        return (pre > 0).astype(pre.dtype)
    raise ConfigError("activation", f"must be linear, tanh or relu, got {activation!r}")


def block_flow(attention: str, activation: str, X, G, V, s, z, temperature: float = 1.0, xp=np):
    """``(Vdot (K, Mc), sdot (K,), zdot (Mc,))`` of the block flow (spec §2.1 listing, with logit
    temperature ``T``: ``b ∝ x o exp(z/T)``): the mean over the ``N`` rows of ``X`` (N, Mc) with
    stationary gradients ``G`` (N, K). Equals :func:`.derive.block_system`'s rhs (tested)."""
    N = X.shape[0]
    E = X * xp.exp(z / temperature)
    B = {"linear": X * z, "exp": E, "softmax": E / E.sum(1, keepdims=True)}[attention]
    pre = B @ V.T + s
    C = G * _dphi(activation, pre, xp) / N
    Uv = C @ V
    if attention == "linear":
        zdot = (X * Uv).sum(0)
    elif attention == "exp":
        zdot = (B * Uv).sum(0) / temperature
    else:
        zdot = ((B * Uv).sum(0) - (B * (B * Uv).sum(1, keepdims=True)).sum(0)) / temperature
    return C.T @ B, C.sum(0), zdot


def softmax_zhat(V: np.ndarray, bbar: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Theorem 1's softmax estimate (spec §2.2) without its constant: ``(zhat, term1, term2)`` with
    ``term1 = sum_k v_k^2/(2T)``, ``term2 = -bbar sum_k |v_k|^2/(2T)`` (Decision 4: ``bbar = E[x]``);
    ``V`` (K, Mc), ``bbar`` (Mc,)."""
    t1 = (V**2).sum(0) / (2 * temperature)
    t2 = -bbar * (V**2).sum() / (2 * temperature)
    return t1 + t2, t1, t2


def position_attention_entropy(z, tokens, temperature: float = 1.0, xp=np):
    """Mean over sequences of the entropy (nats) of the softmax attention over positions with
    logits ``z[token]/T`` — the attention a network with free logits computes (spec §1.2).
    ``z`` (..., Mc), ``tokens`` (n, L) -> (...,)."""
    logits = z[..., tokens] / temperature  # (..., n, L)
    logits = logits - logits.max(-1, keepdims=True)
    p = xp.exp(logits)
    p = p / p.sum(-1, keepdims=True)
    return -(p * xp.log(xp.where(p > 0, p, 1.0))).sum(-1).mean(-1)


# ------------------------------------------------------------------------------------------------
# Closed-form times, entropies, correlations (spec §2.4-2.6, §5)
# ------------------------------------------------------------------------------------------------
def blow_up_times(Delta) -> np.ndarray:
    """``t*_l = sqrt(pi/2)/|Delta_l|`` (inf where Delta_l = 0)."""
    D = np.abs(np.asarray(Delta, float))
    with np.errstate(divide="ignore"):
        return np.where(D > 0, math.sqrt(math.pi / 2) / D, np.inf)




def convergence_time(mu: float, eps: float) -> float:
    """``t_j(eps) = int_0^{(1-eps) mu} exp(-r^2/2)/(mu - r) dr``: time for ``v_dot = (mu - v)
    exp(v^2/2)`` to go from 0 to ``(1 - eps) mu`` (spec §2.5)."""
    from scipy.integrate import quad

    if not 0 < eps < 1:
        raise ConfigError("eps", f"must be in (0, 1), got {eps}")
    if mu <= 0:
        raise ConfigError("mu", f"must be > 0, got {mu}")
    val, _ = quad(lambda r: math.exp(-r * r / 2) / (mu - r), 0.0, (1 - eps) * mu, limit=200)
    return float(val)


def entropy(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy (nats) of ``softmax(logits)`` along ``axis``."""
    a = np.asarray(logits, float)
    a = a - a.max(axis=axis, keepdims=True)
    p = np.exp(a)
    p /= p.sum(axis=axis, keepdims=True)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=axis)


def fixed_point_entropy(mu, x=None, temperature: float = 2.0) -> float:
    """``H(softmax(mu^2/temperature + log x))``: the entropy the nonlinear dynamics end at (spec
    §2.5; temperature 2 is the paper's ``exp(v^2/2)``, 3 the Fig. 4 script's)."""
    mu = np.asarray(mu, float)
    logx = np.zeros_like(mu) if x is None else np.log(np.asarray(x, float))
    return float(entropy(mu**2 / temperature + logx))


def stable_rank(W) -> float:
    """``sr(W) = |W|_F^2 / |W|_2^2`` (spec §2.6, Decision 10)."""
    W = np.asarray(W, float)
    s = np.linalg.svd(W, compute_uv=False)
    return float((s**2).sum() / s[0] ** 2) if s[0] > 0 else 0.0


def slope_sign_changes(H, tol: float = 1e-7) -> np.ndarray:
    """Indices where the slope of ``H`` changes sign, ignoring steps with ``|dH| <= tol`` (flat
    plateaus, integrator noise). Drop-then-bounce = exactly one change, from down to up."""
    d = np.diff(np.asarray(H, float))
    sig = np.sign(d)[np.abs(d) > tol]
    idx = np.nonzero(np.abs(d) > tol)[0]
    return idx[1:][np.diff(sig) != 0]


def drops_then_bounces(H, tol: float = 1e-7) -> bool:
    """True when ``H`` first decreases, then increases, with a single turning point."""
    d = np.diff(np.asarray(H, float))
    sig = np.sign(d)[np.abs(d) > tol]
    return bool(sig.size > 1 and sig[0] < 0 and sig[-1] > 0 and len(slope_sign_changes(H, tol)) == 1)


def normalised_correlation(a, b, axis: int = -1) -> np.ndarray:
    """NC = Pearson correlation (centred, normalised dot product) along ``axis`` (spec §5 Fig. 2)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    a = a - a.mean(axis, keepdims=True)
    b = b - b.mean(axis, keepdims=True)
    den = np.sqrt((a * a).sum(axis) * (b * b).sum(axis))
    return np.where(den > 0, (a * b).sum(axis) / np.where(den > 0, den, 1.0), np.nan)



# ------------------------------------------------------------------------------------------------
# HBLT (spec §3.3)
# ------------------------------------------------------------------------------------------------
def cooccurrence_probability(rho: float, H, rho0: float = 0.0):
    """Numeric ``P(y_l=1 | y_m=1)`` for LCA height(s) ``H``."""
    _, P = cooccurrence_formula()
    f = compile_expressions((sp.Symbol("rho", real=True), sp.Symbol("H", positive=True, integer=True),
                             sp.Symbol("rho0", real=True)), P)
    return f(rho, np.asarray(H, float), rho0)


def hblt_leaf_lca_heights(depth: int, branching: int, query: int = 0) -> np.ndarray:
    """LCA height ``H`` of every leaf with leaf ``query`` in a complete tree (leaves numbered
    left to right; ``H = 0`` for the query itself, ``depth`` when the LCA is the root)."""
    n = branching**depth
    H = np.zeros(n, dtype=int)
    for leaf in range(n):
        a, b, h = leaf, query, 0
        while a != b:
            a, b, h = a // branching, b // branching, h + 1
        H[leaf] = h
    return H


