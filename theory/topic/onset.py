"""The two-stage escape in detail (docs/papers/topic.md §3.4, §3.6): what the K/Q norms, the stage-2 onset and the
attention ratio ``gamma`` do from a small random initialisation, in the linearised theory.

* **Stage 1.** The value matrix's topic mode is affine (:func:`~.derive.topic_mode_equation`):
  ``omega_2(t) = omega_2* (1 - exp(-lambda_V t))`` from ``omega_2(0) = 0`` (the mean of a
  zero-mean init), ``lambda_V`` the topic-mode rate per step.
* **The escape.** With ``S = W_K^T W_Q / sqrt(d_a)`` and ``G = dL/dS`` at uniform attention,
  ``W_K' = -eta_KQ W_Q G^T / sqrt(d_a)``, ``W_Q' = -eta_KQ W_K G / sqrt(d_a)``: for each singular
  pair ``(u_i, v_i, sigma_i)`` of ``G``, ``(a_i, b_i) = (W_K u_i, W_Q v_i)`` obey
  ``a' = -c_i b``, ``b' = -c_i a``, ``c_i = eta_KQ sigma_i / sqrt(d_a)``: ``a(t) = a_0 cosh x_i - b_0
  sinh x_i``. Along the stage-1 path ``G`` scales like ``|g_1 omega_2 + g_2 omega_2^2|``
  (:func:`~.stage2.escape_rate_polynomial`), so ``x_i(t) = (sigma_i / sigma_max) X(t)`` with
  ``X(t) = int_0^t rho`` and ``rho(t) = eta_KQ |g_1 omega_2 + g_2 omega_2^2| / sqrt(d_a)`` (per
  step; ``rho* = eta_KQ sigma_max(G*) / sqrt(d_a)`` at the stage-1 optimum). For a Gaussian init
  of std ``eps`` (``a_0, b_0 ~ N(0, eps^2 I_{d_a})``):

      E ||W_K(t)||_F^2 = eps^2 d_a sum_{i=1}^{D} cosh(2 x_i(t))      (the same for W_Q).

  The **onset** is where this reaches 1 (K/Q of order one: the logits leave the linear regime;
  the spec's ``k = 1``).
* **Stage 2 along the tied line.** Past the onset the logits move along ``S(lambda) = lambda S*``
  (``S*`` the tied optimum of :func:`~.stage2.stage2_optimum`, ``lambda = 1`` at the optimum;
  exact by symmetry for the code key mask, where ``s_1 = s_2``). With ``W_K, W_Q`` balanced and
  aligned with the top singular space, the factorised flow gives ``d ln lambda / dX = 2 phi(lambda)``,
  ``phi = L'(lambda) / L'(0)`` (``phi(0) = 1``: the linear escape; ``phi(1) = 0``: the optimum),
  from ``lambda_0 = s_0 / s_2*`` with ``s_0 = eps^2 sqrt(d_a) / (2 v)``: the expected growing-mode
  logit (``E[(a_0 - b_0)^2/4] = eps^2 d_a / 2`` per mode, the top space being ``P_c / v`` with
  ``P_c`` the centred same-topic block matrix). ``gamma(t) = gamma(lambda S*)``.

:func:`curves` puts these on a time grid (``topic_mode``, ``norm_W_K``, ``norm_W_Q``,
``kq_growth`` = ``X``, ``gamma_hat``): the theory the two-stage claims are checked against.
Valid while stage 1 has converged before the onset (``rho* <~ lambda_V``) and ``eps`` is small.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .config import TopicConfig
from .derive import numeric_subs, topic_mode_equation
from .population import gamma_from, stage2_loss, tied_logits
from .stage2 import attention_dim, escape_rate, escape_rate_polynomial, stage2_optimum, value_optimum

__all__ = ["stage1_rate", "escape_constants", "kq_norm", "tied_line", "curves", "predicted_onset_time",
           "onset_regime"]


def _key(c: TopicConfig) -> tuple:
    return (c.T, c.v, c.tau, c.p_m, c.p_c, c.p_r, c.keys, c.vocab, c.d_a)


def stage1_rate(config: TopicConfig) -> tuple[float, float]:
    """``(lambda_V, omega_2*)``: the stage-1 topic mode's rate per step (at ``eta = lr``) and its
    fixed point (``lam`` as in the config; NaN when the mode has no signal, ``tau = T``)."""
    return _stage1_rate(config.keys, tuple(sorted((str(k), float(v)) for k, v in numeric_subs(config).items())))


@lru_cache(maxsize=256)
def _stage1_rate(keys: str, subs: tuple) -> tuple[float, float]:
    eq = topic_mode_equation(keys)
    values = dict(subs)
    num = {x: values[str(x)] for x in eq["rate"].free_symbols | eq["omega_2_star"].free_symbols}
    star = eq["omega_2_star"].subs(num)
    return float(eq["rate"].subs(num)), float(star) if star.is_finite else math.nan


def escape_constants(config: TopicConfig) -> dict[str, object]:
    """``sigma`` (the singular values of ``G*``, descending, padded with zeros to the vocabulary
    size ``D``), ``sigma_max``, ``g_1, g_2`` (:func:`~.stage2.escape_rate_polynomial`), ``d_a``,
    ``D`` and ``rho_star`` (per step, at ``eta_KQ = kq_lr_ratio * lr``). Cached per sizes, masking
    and keys (the autodiff of the population loss is the slow part)."""
    sig, g1, g2 = _escape(*_key(config))
    D = config.n_words + (4 if config.vocab == "code" else 1)
    sig = np.concatenate([sig, np.zeros(max(0, D - sig.size))])
    d_a = attention_dim(config)
    return {"sigma": sig, "sigma_max": float(sig[0]), "g_1": g1, "g_2": g2, "d_a": d_a, "D": D,
            "rho_star": config.lr * config.kq_lr_ratio * float(sig[0]) / math.sqrt(d_a)}


@lru_cache(maxsize=32)
def _escape(T_, v_, tau_, pm, pc, pr, keys, vocab, d_a):
    cfg = TopicConfig(T=T_, v=v_, tau=tau_, p_m=pm, p_c=pc, p_r=pr, keys=keys)
    W, b = value_optimum(cfg)
    sig = np.linalg.svd(escape_rate(cfg, W, b)["G"], compute_uv=False)
    g1, g2 = escape_rate_polynomial(cfg)
    return sig, float(g1), float(g2)


def kq_norm(config: TopicConfig, X) -> np.ndarray:
    """Expected ``||W_K||_F`` (= that of ``W_Q``) after top-mode growth ``X`` (module docstring):
    ``eps sqrt(d_a sum_i cosh(2 X sigma_i / sigma_max))``, ``eps = config.kq_scale``."""
    e = escape_constants(config)
    x = np.abs(2 * np.asarray(X, dtype=np.float64)[..., None] * (e["sigma"] / e["sigma_max"]))
    log_cosh = x + np.log1p(np.exp(-2 * x)) - math.log(2.0)  # no overflow for large growth
    m = log_cosh.max(-1, keepdims=True)
    log_total = m[..., 0] + np.log(np.exp(log_cosh - m).sum(-1))
    with np.errstate(over="ignore"):  # a growth past float range is an infinite norm
        return config.kq_scale * np.sqrt(e["d_a"]) * np.exp(0.5 * log_total)


@lru_cache(maxsize=32)
def _line(T_, v_, tau_, pm, pc, pr, keys):
    cfg = TopicConfig(T=T_, v=v_, tau=tau_, p_m=pm, p_c=pc, p_r=pr, keys=keys)
    opt = stage2_optimum(cfg)
    W, b = value_optimum(cfg)
    lam = np.linspace(0.0, 1.0, 401)

    def loss(x):
        if keys == "theory":
            S = tied_logits(T_, v_, x * opt["s1"], x * opt["s2"], 0.0, 0.0, 0.0, x * opt["s1"], xp=np)
        else:
            S = tied_logits(T_, v_, x * opt["s1"], x * opt["s2"], xp=np)
        return float(stage2_loss(S, W, b, cfg, documents="one", xp=np))

    h = 1e-5
    slope = np.array([(loss(x + h) - loss(x - h)) / (2 * h) for x in lam])
    gam = np.array([gamma_from(v_, x * opt["s1"], x * opt["s2"]) for x in lam])
    return lam, slope, gam, float(opt["s2"]), float(opt["gamma"])


def tied_line(config: TopicConfig) -> dict[str, np.ndarray | float]:
    """The stage-2 line ``S(lambda) = lambda S*`` at ``W^V*``: ``lam`` (grid on [0, 1]), ``phi =
    L'(lambda)/L'(0)``, ``gamma(lambda)``, ``s2_star`` and ``gamma_star``."""
    lam, slope, gam, s2, gs = _line(config.T, config.v, config.tau, config.p_m, config.p_c, config.p_r,
                                    config.keys)
    return {"lam": lam, "phi": slope / slope[0], "gamma": gam, "s2_star": s2, "gamma_star": gs}


def _lambda_of_X(config: TopicConfig, X: np.ndarray) -> np.ndarray:
    """``lambda(X)`` from ``d ln lambda/dX = 2 phi(lambda)``, ``lambda(0) = lambda_0`` (scipy's
    RK45 with dense output; ``phi`` interpolated on the tied line)."""
    X = np.asarray(X, dtype=np.float64)
    top = max(float(np.max(X)), 1e-9)
    sol = _lambda_solution(*_key(config), config.kq_scale, 2.0 ** math.ceil(math.log2(top)))
    return np.exp(sol(np.clip(X, 0.0, None))[0])


@lru_cache(maxsize=64)
def _lambda_solution(T_, v_, tau_, pm, pc, pr, keys, vocab, d_a_field, eps: float, x_max: float):
    from scipy.integrate import solve_ivp

    cfg = TopicConfig(T=T_, v=v_, tau=tau_, p_m=pm, p_c=pc, p_r=pr, keys=keys, vocab=vocab)
    line = tied_line(cfg)
    d_a = d_a_field or attention_dim(cfg)
    lam0 = eps**2 * math.sqrt(d_a) / (2 * v_) / line["s2_star"]
    lam, phi = line["lam"], line["phi"]
    sol = solve_ivp(lambda x, y: 2 * np.interp(np.exp(y), lam, phi, right=0.0), (0.0, x_max), [math.log(lam0)],
                    method="RK45", rtol=1e-8, atol=1e-10, dense_output=True)
    return sol.sol


def curves(config: TopicConfig, times=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The linearised two-stage theory on ``times`` (steps; default 2001 points over the run):
    ``(t, curves)`` with ``curves`` ``topic_mode`` (``omega_2``; frozen at ``omega_2*`` when the
    value matrix is, ``value="optimum"``), ``kq_growth`` (``X``), ``norm_W_K``, ``norm_W_Q``,
    ``gamma_hat`` (the attention ratio on the tied line), each of shape ``(len(t),)``
    (:func:`simulate.trajectory.make_trajectory` makes them a trajectory)."""
    t = np.linspace(0.0, float(config.steps), 2001) if times is None else np.asarray(times, dtype=np.float64)
    topic, X = _growth(config, t)
    line = tied_line(config)
    gam = np.interp(_lambda_of_X(config, X), line["lam"], line["gamma"])
    norm = kq_norm(config, X)
    return t, {"topic_mode": topic, "kq_growth": X, "norm_W_K": norm, "norm_W_Q": norm, "gamma_hat": gam}


def _growth(config: TopicConfig, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(omega_2(t), X(t))`` on ``t`` (steps): the topic mode and the top mode's log growth."""
    e = escape_constants(config)
    lam_V, om_star = stage1_rate(config)
    fine = np.linspace(0.0, float(np.max(t)), 8001)
    om = np.full_like(fine, om_star) if config.value == "optimum" else om_star * (1 - np.exp(-lam_V * fine))
    rho = config.lr * config.kq_lr_ratio * np.abs(e["g_1"] * om + e["g_2"] * om**2) / math.sqrt(e["d_a"])
    X_fine = np.concatenate([[0.0], np.cumsum((rho[1:] + rho[:-1]) / 2 * np.diff(fine))])
    return np.interp(t, fine, om), np.interp(t, fine, X_fine)


@lru_cache(maxsize=256)
def predicted_onset_time(config: TopicConfig) -> float:
    """The step at which the expected ``||W_K||_F`` reaches 1 (:func:`kq_norm` of the growth,
    interpolated in ``ln ||W_K||``; ``inf`` when it does not within ``16 x`` the config's steps)."""
    t = np.linspace(0.0, 16.0 * config.steps, 16001)
    return _crossing(t, kq_norm(config, _growth(config, t)[1]), 1.0)


def _crossing(t, y, level) -> float:
    idx = np.nonzero(y >= level)[0]
    if not idx.size:
        return float("inf")
    i = idx[0]
    if i == 0:
        return float(t[0])
    y0, y1 = math.log(max(y[i - 1], 1e-300)), math.log(y[i])
    return float(t[i - 1] + (t[i] - t[i - 1]) * (math.log(level) - y0) / (y1 - y0)) if y1 > y0 else float(t[i])


@lru_cache(maxsize=256)
def onset_regime(config: TopicConfig) -> dict[str, float]:
    """The two-stage claims' derived quantities: ``kq_initial_norm`` (``eps sqrt(d_a D)``: the
    expected ``||W_K(0)||_F``), ``rate_ratio`` (``rho* / lambda_V``: K/Q escape over value learning),
    ``onset`` (:func:`predicted_onset_time`, steps) and ``onset_window`` (``(onset + 1/rho*) /
    steps``: the run covers the onset and one e-fold after it when ``<= 1``)."""
    e = escape_constants(config)
    lam_V, _ = stage1_rate(config)
    onset = predicted_onset_time(config)
    return {"kq_initial_norm": config.kq_scale * math.sqrt(e["d_a"] * e["D"]),
            "rate_ratio": e["rho_star"] / lam_V, "onset": onset,
            "onset_window": (onset + 1.0 / e["rho_star"]) / config.steps}
