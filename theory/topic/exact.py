"""The exact (un-reduced) population gradient flows of the topic paper's one-layer model (docs/papers/topic.md §3.5,
§3.6): every entry of every trained matrix, the ``N -> inf`` masked-LM loss over all ``C(T, tau)``
documents, no symmetry reduction, no linearisation. The claims' theory checks run on these flows;
the reduced ODEs (:mod:`.derive`, :mod:`.stage2`) and the linearised escape (:mod:`.onset`) define
the criteria and are checked against them.

* :func:`stage1_flow` — uniform attention, ``(W_V, b)`` trained (spec §3.5): the full-space flow
  ``d[W | b]/dt = -2 eta ([W | b] M - C) - 2 eta lam [W | 0]`` with ``M = E[x~ x~^T]``,
  ``C = E[u_S x~^T]`` (``x~ = [x_bar_S; 1]``) is linear and solved in closed form through the
  eigen-decomposition of ``M`` (exact to rounding), from ``W = 0, b = 0`` or a Gaussian init.
* :func:`joint_flow` — ``W_K, W_Q, W_V, b`` trained together (spec §3.4, §3.6; ``value="optimum"``:
  ``W_V, b`` frozen at the stage-1 optimum, the stage-2 theorem's setting): the population loss
  :func:`.population.stage2_loss` of the logits ``W_K^T W_Q / sqrt(d_a)`` (the full ``D x D`` key
  x query matrix), integrated from one Gaussian init per seed by scipy's RK45 on the jax gradient
  (K/Q at ``kq_lr_ratio x lr``). Observables as the training run logs them: ``topic_mode``,
  ``norm_W_K``, ``norm_W_Q``, ``norm_W_V`` and the population ``gamma_hat`` (held-out unmasked
  documents, :func:`population_gamma`).

Time = optimiser steps (``eta = lr`` in the flow, :mod:`.config`). Float64. Theory vocabulary only
(``D = Tv + 1``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..errors import ConfigError
from .config import TopicConfig
from .population import document_table, enable_x64, reduced_coordinates, stage2_loss, word_topics
from .stage2 import attention_dim, value_optimum

__all__ = ["stage1_flow", "joint_flow", "population_gamma", "stage1_moments"]


def _topic_of(config: TopicConfig) -> np.ndarray:
    return np.concatenate([word_topics(config.T, config.v), [-1]])


def _check(config: TopicConfig) -> None:
    if config.vocab != "theory":
        raise ConfigError("vocab", "the exact population flows are on the theory vocabulary (Tv words + MASK)")
    if config.loss != "squared":
        raise ConfigError("loss", "the exact population flows are of the squared loss "
                                  "(docs/papers/topic.md §8 Decision 1)")
    if config.optimizer != "sgd":
        raise ConfigError("optimizer", "a gradient flow describes plain SGD (Adam has no time map)")


def stage1_moments(config: TopicConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(M, C)``: ``M = E_S[x~ x~^T]``, ``C = E_S[u_S x~^T]`` over the equally likely topic sets
    (``x~ = [x_bar_S; 1]``, :func:`.population.document_table` with the config's key variant)."""
    _, X, U = document_table(config)
    Xt = np.concatenate([X, np.ones((X.shape[0], 1))], axis=1)
    return Xt.T @ Xt / X.shape[0], U.T @ Xt / X.shape[0]


def stage1_flow(config: TopicConfig, times, W0=None, b0=None) -> dict[str, np.ndarray]:
    """The exact stage-1 flow (module docstring) on ``times`` (steps) from ``[W0 | b0]`` (default
    0): ``topic_mode`` (``omega_2``), ``block_difference``, ``A``, ``B``, ``C`` and ``norm_W_V``
    per time, computed on the full matrices (:func:`.population.reduced_coordinates`)."""
    _check(config)
    M, C = stage1_moments(config)
    D = M.shape[0] - 1
    Lam = np.diag(np.r_[np.full(D, config.lam), 0.0])
    mu, V = np.linalg.eigh(M + Lam)
    mu = np.clip(mu, 0.0, None)
    Wt0 = np.zeros((D, D + 1))
    if W0 is not None:
        Wt0[:, :D] = W0
    if b0 is not None:
        Wt0[:, D] = b0
    eta = config.lr
    topic_of = _topic_of(config)
    out: dict[str, list] = {}
    CV, W0V = C @ V, Wt0 @ V
    for t in np.asarray(times, dtype=np.float64):
        decay = np.exp(-2 * eta * mu * t)
        # d Y/dt = -2 eta (Y mu - CV) in the eigenbasis: Y(t) = Y0 e^{-2 eta mu t} + CV (1 - e^{..})/mu
        gain = np.where(mu > 1e-14, (1 - decay) / np.where(mu > 1e-14, mu, 1.0), 2 * eta * t)
        Y = W0V * decay + CV * gain
        Wt = Y @ V.T
        rc = reduced_coordinates(Wt[:, :D], Wt[:, D], topic_of, mask_id=D - 1)
        for k in ("topic_mode", "block_difference", "A", "B", "C"):
            out.setdefault(k, []).append(rc[k])
        out.setdefault("norm_W_V", []).append(float(np.linalg.norm(Wt[:, :D])))
    return {k: np.asarray(v) for k, v in out.items()}


def population_gamma(S: np.ndarray, config: TopicConfig) -> float:
    """The population ``gamma_hat`` of the key x query logits ``S`` ((Tv+1)^2): the training run's
    statistic (:func:`empirical.topic.model.attention_statistics`: held-out unmasked documents, every
    position a key) for long documents: per topic set, a query word ``q`` weighs a key position of
    word ``k`` by ``e^{S_kq} / (N sum_j x_j e^{S_jq})`` (``x = u_S``); ``alpha_hat``, ``beta_hat``
    are the mean weights over same-topic other-word and same-word pairs over the mean over
    different-topic pairs (pairs pooled over the topic sets, each equally likely);
    ``gamma = ((v-1) alpha + beta) / v``."""
    T_, v_, tau_ = config.T, config.v, config.tau
    n = T_ * v_
    top = word_topics(T_, v_)
    sums = np.zeros(3)
    counts = np.zeros(3)
    Sw = np.asarray(S, dtype=np.float64)[:n, :n]
    for sets in _sets(T_, tau_):
        ids = np.nonzero(np.isin(top, sets))[0]
        L = Sw[np.ix_(ids, ids)]  # key x query over the document's words
        E = np.exp(L - L.max(0, keepdims=True))
        w = E / E.mean(0, keepdims=True)  # N x per-position weight (x_k = 1/(tau v) each)
        t = top[ids]
        same_w = np.eye(len(ids), dtype=bool)
        same_t = t[:, None] == t[None, :]
        for j, m in enumerate((same_t & ~same_w, same_w, ~same_t)):
            sums[j] += w[m].sum()
            counts[j] += m.sum()
    mean = sums / counts
    return float(((v_ - 1) * mean[0] / mean[2] + mean[1] / mean[2]) / v_)


@lru_cache(maxsize=8)
def _sets(T_: int, tau_: int):
    import itertools

    return tuple(itertools.combinations(range(T_), tau_))


@lru_cache(maxsize=16)
def _grad_fn(config: TopicConfig, D: int, d_a: int, frozen_value: bool):
    enable_x64()
    import jax
    import jax.numpy as jnp

    Wv, bv = value_optimum(config)
    n_kq = d_a * D

    def unpack(z):
        K = z[:n_kq].reshape(d_a, D)
        Q = z[n_kq:2 * n_kq].reshape(d_a, D)
        if frozen_value:
            return K, Q, jnp.asarray(Wv), jnp.asarray(bv)
        W = z[2 * n_kq:2 * n_kq + D * D].reshape(D, D)
        b = z[2 * n_kq + D * D:]
        return K, Q, W, b

    def loss(z):
        K, Q, W, b = unpack(z)
        return stage2_loss(K.T @ Q / math.sqrt(d_a), W, b, config, xp=jnp)

    return jax.jit(jax.grad(loss)), unpack


def joint_flow(config: TopicConfig, seed: int, times, *, rtol: float = 1e-7, atol: float = 1e-10) -> dict[str, np.ndarray]:
    """The exact joint flow (module docstring) from the Gaussian init of ``seed`` (numpy
    ``default_rng(seed)``: ``W_K, W_Q ~ N(0, kq_scale^2)``, ``W_V ~ N(0, init_scale^2)``, ``b = 0``)
    on ``times`` (steps): ``topic_mode``, ``norm_W_K``, ``norm_W_Q``, ``norm_W_V``, ``gamma_hat``."""
    from scipy.integrate import solve_ivp

    _check(config)
    if config.attention != "trained":
        raise ConfigError("attention", "the joint flow trains attention (use stage1_flow for uniform attention)")
    D = config.n_words + 1
    d_a = attention_dim(config)
    frozen = config.value == "optimum"
    if config.value not in ("trained", "optimum"):
        raise ConfigError("value", "the joint flow trains W_V or freezes it at the stage-1 optimum")
    base = TopicConfig(T=config.T, v=config.v, tau=config.tau, p_m=config.p_m, p_c=config.p_c, p_r=config.p_r,
                       keys=config.keys)  # what the loss reads: one compiled gradient per data law
    grad, unpack = _grad_fn(base, D, d_a, frozen)
    rng = np.random.default_rng(seed)
    K0 = rng.normal(size=(d_a, D)) * config.kq_scale
    Q0 = rng.normal(size=(d_a, D)) * config.kq_scale
    parts = [K0.ravel(), Q0.ravel()]
    if not frozen:
        parts += [(rng.normal(size=(D, D)) * config.init_scale).ravel(), np.zeros(D)]
    z0 = np.concatenate(parts)
    n_kq = d_a * D
    rate = np.full(z0.size, config.lr)
    rate[:2 * n_kq] *= config.kq_lr_ratio
    times = np.asarray(times, dtype=np.float64)
    sol = solve_ivp(lambda t, z: -rate * np.asarray(grad(z)), (0.0, float(times[-1])), z0, t_eval=times,
                    method="RK45", rtol=rtol, atol=atol)
    if not sol.success:
        from ..errors import SolverError

        raise SolverError(f"exact joint flow: {sol.message}")
    topic_of = _topic_of(config)
    out: dict[str, list] = {}
    for z in sol.y.T:
        K, Q, W, b = (np.asarray(x) for x in unpack(z))
        out.setdefault("topic_mode", []).append(reduced_coordinates(W, b, topic_of, mask_id=D - 1)["topic_mode"])
        out.setdefault("norm_W_K", []).append(float(np.linalg.norm(K)))
        out.setdefault("norm_W_Q", []).append(float(np.linalg.norm(Q)))
        out.setdefault("norm_W_V", []).append(float(np.linalg.norm(W)))
        out.setdefault("gamma_hat", []).append(population_gamma(K.T @ Q / math.sqrt(d_a), config))
    return {k: np.asarray(v) for k, v in out.items()}
