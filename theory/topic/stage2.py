"""Stage 2 (``W^V`` frozen at the stage-1 optimum; docs/papers/topic.md §3.6) and the two-stage reduced system.

* :func:`stage2_optimum` — the optimal tied attention ``gamma*`` (numerical; code variant
  ``1 + T p_c/p_r``); :func:`escape_rate` — ``G = dL/dS`` at uniform attention by autodiff of
  :func:`~theory.topic.population.stage2_loss` and ``sigma_max(G)``; :func:`predicted_onset`.
* :func:`stage2_system` — gradient flow on the tied logits ``(s_1, s_2)``. The loss is written by
  key classes (per query type: the attention mass ``h`` of one key of each class, the outputs
  ``o``), and differentiated through the softmax: with ``u_k = h_k dL/dh_k`` and ``P_j`` the mass
  on the keys whose logit is ``s_j``, ``dL/ds_j = sum_{k in j} u_k - P_j sum_k u_k``.
* :func:`two_stage_system` — the topic mode plus the K/Q scale ``k`` growing at the
  ``omega_2``-dependent escape rate (the time-scale separation of spec §3.4).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import sympy as sp

from ..core import ReducedSystem
from ..errors import ConfigError
from .config import PAPER, SPEC, TopicConfig
from .derive import (STAGE1_PARAMETERS, A, B, C, T, b_M, b_w, chain_rule, context_frequencies, eta, m,
                     numeric_subs, omega_2, p_c, p_m, p_r, r, s, stage1_optimum, tau, topic_mode_equation, v)
from .population import enable_x64, full_value_matrix, gamma_from, stage2_loss, tied_logits

__all__ = ["s1", "s2", "s3", "s_Mw", "s_wM", "s_MM", "STAGE2_STATE", "STAGE2_VALUE", "STAGE2_TYING",
           "k_qk", "g_1", "g_2", "d_a", "stage2_tied_loss", "logit_multiplicities", "stage2_system",
           "stage2_optimum", "value_optimum", "escape_rate", "attention_dim", "predicted_onset", "escape_rate_polynomial",
           "two_stage_system"]

s1, s2, s3, s_Mw, s_wM, s_MM = sp.symbols("s_1 s_2 s_3 s_Mw s_wM s_MM", real=True)
STAGE2_STATE = (s1, s2, s3, s_Mw, s_wM, s_MM)
STAGE2_VALUE = (A, B, C, m, r, s, b_w, b_M)
#: Paper-style tying (spec §3.6, §8 Decision 7); ``s3 = 0`` is the softmax gauge.
STAGE2_TYING = {s3: 0, s_Mw: 0, s_wM: 0, s_MM: s1}
k_qk = sp.Symbol("k", nonnegative=True)  # K/Q scale
g_1, g_2, d_a = sp.symbols("g_1 g_2 d_a", real=True)


# ------------------------------------------------------------------------------------------------
# The tied loss by key classes (spec §3.6)
# ------------------------------------------------------------------------------------------------
def _key_classes(keys: str):
    """Per query kind (``i``: a word of a document topic, ``x``: a word of an absent topic, ``M``:
    MASK): the key classes ``(index, count, frequency, logit, group, topics in group)`` and the MASK
    key ``(frequency, logit)``. Classes: 1 the query's own token, 2 its topic's other words, 3 the
    (other) document topics' words, 4 the absent topics' words."""
    f = context_frequencies(keys)
    fi, fo, fM = f["f_in"], f["f_out"], f["f_mask"]
    return {
        "i": ([(1, 1, fi, s1, "q", 1), (2, v - 1, fi, s2, "q", 1), (3, (tau - 1) * v, fi, s3, "doc", tau - 1),
               (4, (T - tau) * v, fo, s3, "abs", T - tau)], (fM, s_Mw)),
        "x": ([(1, 1, fo, s1, "q", 1), (2, v - 1, fo, s2, "q", 1), (3, tau * v, fi, s3, "doc", tau),
               (4, (T - tau - 1) * v, fo, s3, "abs", T - tau - 1)], (fM, s_Mw)),
        "M": ([(3, tau * v, fi, s_wM, "doc", tau), (4, (T - tau) * v, fo, s_wM, "abs", T - tau)], (fM, s_MM)),
    }


def _losses():
    """The four query types at a selected position: ``(name, query kind, weight, targets per class,
    target variance)`` (MASK ``1-p_c-p_r``; kept ``p_c``, target itself; random ``p_r``, its topic
    in the document w.p. ``tau/T``)."""
    ti = 1 / (tau * v)
    return [("c", "i", p_c, {1: 1, 2: 0, 3: 0, 4: 0}, 0),
            ("r", "i", p_r * tau / T, {1: ti, 2: ti, 3: ti, 4: 0}, 1 - ti),
            ("x", "x", p_r * (1 - tau / T), {1: 0, 2: 0, 3: ti, 4: 0}, 1 - ti),
            ("M", "M", 1 - p_c - p_r, {3: ti, 4: 0}, 1 - ti)]


def _outputs(classes, h, hM):
    """Output of one key of each class (spec §3.6): ``A h_k + B (H_t(k) - h_k) + C (H_words - H_t(k))
    + m h_M + b_w``; MASK row ``r H_words + s h_M + b_M``."""
    H_words = sum(c * h[k] for k, c, *_ in classes)
    per_group: dict[str, sp.Expr] = {}
    for k, c, _, _, g, _ in classes:
        per_group[g] = per_group.get(g, 0) + c * h[k]
    out = {k: A * h[k] + B * (per_group[g] / nt - h[k]) + C * (H_words - per_group[g] / nt) + m * hM + b_w
           for k, _, _, _, g, nt in classes}
    return out, r * H_words + s * hM + b_M


@lru_cache(maxsize=None)
def stage2_tied_loss(keys: str = "theory") -> sp.Expr:
    """Population loss with tied logits ``(s1, s2, s3, s_Mw, s_wM, s_MM)`` and ``W^V`` in the
    symmetric coordinates, ``N -> inf``, in state and parameters (spec §3.6): a mixture over the
    query type; key class mass = context frequency x ``exp(logit)``, normalised."""
    kinds = _key_classes(keys)
    total = 0
    for _, kind, w, target, var in _losses():
        classes, (fM, lM) = kinds[kind]
        Z = sum(c * fr * sp.exp(lg) for _, c, fr, lg, _, _ in classes) + fM * sp.exp(lM)
        h = {k: fr * sp.exp(lg) / Z for k, _, fr, lg, _, _ in classes}
        out, oM = _outputs(classes, h, fM * sp.exp(lM) / Z)
        total += w * (sum(c * (out[k] - target[k]) ** 2 for k, c, *_ in classes) + oM**2 + var)
    return total


def logit_multiplicities() -> dict[sp.Symbol, sp.Expr]:
    """Entries of the (Tv+1)^2 logit matrix carried by each tied logit under the paper-style tying
    (spec §3.6, §8 Decision 7): ``s1`` on the word diagonal and MASK-MASK, ``s2`` on same-topic
    off-diagonal pairs; ``s3 = s_Mw = s_wM = 0`` (softmax gauge)."""
    return {s1: T * v + 1, s2: T * v * (v - 1)}


@lru_cache(maxsize=None)
def _stage2_parts(keys: str):
    """Definitions, right-hand sides and the loss (in definition symbols) of :func:`stage2_system`.
    ``W^V`` at a stage-1 optimum has no MASK row/column and no MASK bias (``m = r = s = b_M = 0``)."""
    from .derive import frequency_definitions, frequency_symbols

    fsym = dict(zip(("f_in", "f_out", "f_mask"), frequency_symbols(keys)))
    fnum = context_frequencies(keys)
    to_sym = {fnum[k]: fsym[k] for k in fsym if fnum[k] != 0}
    tie = {**STAGE2_TYING, m: 0, r: 0, s: 0, b_M: 0}
    defs = list(frequency_definitions(keys))
    h_of, o_of, mask_mass, cls_of = {}, {}, {}, {}
    for kind, (classes, (fM, lM)) in _key_classes(keys).items():
        # a class with key frequency 0 (code keys: absent topics) gets no attention but still an output
        classes = [(k, c, to_sym.get(fr, fr), sp.sympify(lg).subs(tie), g, nt) for k, c, fr, lg, g, nt in classes]
        fM, lM = to_sym.get(fM, fM), sp.sympify(lM).subs(tie)
        Z = sp.Symbol(f"Z_{kind}", positive=True)
        defs.append((Z, sum(c * fr * sp.exp(lg) for _, c, fr, lg, _, _ in classes) + fM * sp.exp(lM)))
        h = {}
        for k, _, fr, lg, _, _ in classes:
            h[k] = sp.Symbol(f"h_{kind}{k}", positive=True) if fr != 0 else sp.Integer(0)
            if fr != 0:
                defs.append((h[k], fr * sp.exp(lg) / Z))
        if fM != 0:
            hM = sp.Symbol(f"h_{kind}M", positive=True)
            defs.append((hM, fM * sp.exp(lM) / Z))
            mask_mass[kind] = (hM, lM)
        out, _ = _outputs(classes, h, 0)
        o = {}
        for k in h:
            o[k] = sp.Symbol(f"o_{kind}{k}", real=True)
            defs.append((o[k], out[k].subs(tie)))
        h_of[kind], o_of[kind], cls_of[kind] = h, o, classes
    rhs_terms = {s1: 0, s2: 0}
    loss = 0
    for name, kind, w, target, var in _losses():
        classes, h, o = cls_of[kind], h_of[kind], o_of[kind]
        L = sum(c * (o[k] - target[k]) ** 2 for k, c, *_ in classes) + var
        loss += w * L
        o_defs = [(o[k], e) for q, e in defs for k in o if q == o[k]]
        u = {}
        for k in (k for k in h if h[k] != 0):
            u[k] = sp.Symbol(f"u_{name}{k}", real=True)
            defs.append((u[k], sp.factor_terms(h[k] * chain_rule(L, h[k], o_defs))))
        ubar = sp.Symbol(f"ubar_{name}", real=True)
        defs.append((ubar, sum(u.values())))
        for j in (s1, s2):
            own = sum(u[k] for k, _, _, lg, _, _ in classes if lg == j and k in u)
            P = sum(c * h[k] for k, c, _, lg, _, _ in classes if lg == j)
            if kind in mask_mass and mask_mass[kind][1] == j:
                P += mask_mass[kind][0]
            rhs_terms[j] += w * (own - P * ubar)
    n = logit_multiplicities()
    rhs = tuple(-eta * rhs_terms[j] / n[j] for j in (s1, s2))
    return tuple(defs), rhs, loss


@lru_cache(maxsize=None)
def stage2_system(keys: str = "theory") -> ReducedSystem:
    """Stage 2 as gradient flow on the attention-logit matrix ``S`` (the object whose gradient
    ``G`` at ``S = 0`` drives the K/Q escape), restricted to the paper-style tied subspace with the
    pulled-back Frobenius metric ``diag(n)``; ``W^V, b`` are parameters (frozen). Its stationary
    points are those of the tied loss (:func:`stage2_optimum`)."""
    defs, rhs, loss = _stage2_parts(keys)
    gamma = ((v - 1) * sp.exp(s2) + sp.exp(s1)) / v
    return ReducedSystem(
        name=f"stage2_{keys}", paper=PAPER, state=(s1, s2),
        parameters=(T, v, tau, p_m, p_c, p_r, eta, A, B, C, b_w),
        rhs=rhs, definitions=defs,
        observables={"gamma": gamma, "alpha": sp.exp(s2), "beta": sp.exp(s1), "stage2_loss": loss},
        spec=f"{SPEC} §3.6 (keys={keys}, paper-style tying)",
        description=(r"Tied attention logits under gradient flow with $W^V$ frozen (stage 2). Per query kind "
                     r"$i$/$x$/$M$: $Z$ normaliser, $h$ key masses, $o$ outputs; $u_k = h_k\, \partial L/\partial h_k$ "
                     r"per loss term $c, r, x, M$."),
    )


# ------------------------------------------------------------------------------------------------
# Numerical optimum and escape rate (full vocabulary, population.py)
# ------------------------------------------------------------------------------------------------
def value_optimum(config: TopicConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(W^V*, b*)`` on the theory vocabulary: the stage-1 optimum (``lam -> 0``) of the config's
    key variant, where the stage-2 theorem freezes the value matrix (cached per sizes, masking
    and keys: the sympy solve is the slow part)."""
    W, b = _value_optimum(config.T, config.v, config.tau, config.p_m, config.p_c, config.p_r, config.keys)
    return W.copy(), b.copy()


@lru_cache(maxsize=32)
def _value_optimum(T_: int, v_: int, tau_: int, pm: float, pc: float, pr: float, keys: str):
    cfg = TopicConfig(T=T_, v=v_, tau=tau_, p_m=pm, p_c=pc, p_r=pr, keys=keys)
    return full_value_matrix(stage1_optimum(cfg), T_, v_)


def stage2_optimum(config: TopicConfig, W=None, b=None) -> dict[str, float]:
    """Optimal tied attention at ``W^V`` = stage-1 optimum of the same key variant.

    ``keys="theory"``: paper-style tying ``s_MM = s1``, ``s_Mw = s_wM = s3 = 0``; minimise over
    ``(s1, s2)``. ``keys="code"``: word queries see only word keys and the loss depends on
    ``gamma`` only, so ``s1 = s2 = log gamma`` (MASK queries see uniform words)."""
    from scipy.optimize import minimize, minimize_scalar

    if W is None:
        W, b = value_optimum(config)
    Tn, vn = config.T, config.v

    if config.keys == "theory":
        def f(z):
            return float(stage2_loss(tied_logits(Tn, vn, z[0], z[1], 0.0, 0.0, 0.0, z[0], xp=np), W, b, config,
                                     documents="one", xp=np))
        z0 = np.array([0.5, 1.0])
    else:
        def f(z):
            return float(stage2_loss(tied_logits(Tn, vn, z[0], z[0], xp=np), W, b, config, documents="one", xp=np))
        z0 = np.array([1.0])
    # numpy evaluation (no compile per shape): Brent in 1-D, BFGS + Nelder-Mead polish in 2-D
    if z0.size == 1:
        res = minimize_scalar(lambda x: f(np.array([x])), bracket=(0.0, 1.0), method="brent", tol=1e-12)
        z = np.array([res.x])
    else:
        res = minimize(f, z0, method="BFGS", jac="3-point", options={"gtol": 1e-9, "maxiter": 500})
        res = minimize(f, res.x, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-16, "maxiter": 2000})
        z = res.x
    s1v, s2v = (z[0], z[1]) if config.keys == "theory" else (z[0], z[0])
    return {"s1": float(s1v), "s2": float(s2v), "alpha": math.exp(s2v), "beta": math.exp(s1v),
            "gamma": gamma_from(vn, s1v, s2v), "loss": float(res.fun), "loss_uniform": f(np.zeros_like(z0)),
            "converged": bool(res.success)}


def escape_rate(config: TopicConfig, W=None, b=None, documents: str = "all") -> dict[str, float]:
    """``G = dL/dS`` at uniform attention (``S = 0``) by autodiff of ``stage2_loss`` and its top
    singular value (spec §3.6 "Escape rate"): with ``S = W^{K T} W^Q / sqrt(d_a)``,
    ``W^K' = -lr W^Q G^T/sqrt(d_a)``, ``W^Q' = -lr W^K G/sqrt(d_a)``: K/Q grow like
    ``exp(lr sigma_max(G) t / sqrt(d_a))``."""
    enable_x64()
    import jax
    import jax.numpy as jnp

    if W is None:
        W, b = value_optimum(config)
    D = config.n_words + 1
    G = np.asarray(jax.grad(lambda S: stage2_loss(S, W, b, config, documents=documents))(jnp.zeros((D, D))))
    return {"sigma_max": float(np.linalg.svd(G, compute_uv=False)[0]), "G": G}


def attention_dim(config: TopicConfig, D: int | None = None) -> int:
    """K/Q dimension ``d_a`` (0 in the config: the vocabulary size ``D``)."""
    D = D if D is not None else config.n_words + (4 if config.vocab == "code" else 1)
    return config.d_a or D


def predicted_onset(config: TopicConfig, lr: float | None = None) -> dict[str, float]:
    """Spec §3.6 heuristic ``t_2 ~ t_1 + sqrt(d_a) ln(1/eps) / (lr sigma_max(G))`` in steps,
    with ``t_1`` the time the topic mode reaches 80% of its plateau (``ln 5 / rate``)."""
    lr = lr or config.lr
    eps = config.kq_scale
    if eps <= 0:
        raise ConfigError("kq_init_scale", "the onset prediction needs a K/Q init scale > 0")
    da = attention_dim(config)
    sig = escape_rate(config)["sigma_max"]
    rate1 = float(topic_mode_equation(config.keys)["rate"].subs(numeric_subs(config, lr)))
    t1 = math.log(5.0) / rate1
    t2 = t1 + math.sqrt(da) * math.log(1.0 / eps) / (lr * sig)
    return {"t1_steps": t1, "t2_steps": t2, "sigma_max": sig, "stage1_rate": rate1, "d_a": da}


# ------------------------------------------------------------------------------------------------
# Two-stage reduced system: topic mode + K/Q scale
# ------------------------------------------------------------------------------------------------
def escape_rate_polynomial(config: TopicConfig) -> tuple[float, float]:
    """``G`` along the stage-1 path ``W = (omega_2/omega_2*) W_topic + bias`` is a quadratic in
    ``omega_2`` without constant term (the loss is quadratic in ``W``; ``G = 0`` at ``W = 0``
    with the optimal bias): returns ``(g_1, g_2)`` with ``sigma_max(G) ~ |g_1 w + g_2 w^2|``,
    ``w = omega_2``, fitted exactly from two evaluations along the top singular direction of
    ``G(W^V*)`` (the third point, ``G = 0`` at ``omega_2 = 0``, is exact)."""
    opt = stage1_optimum(config.replace(lam=0.0))
    om_star = opt["A"] + (config.v - 1) * opt["B"] - config.v * opt["C"]
    W1, b1 = full_value_matrix(opt, config.T, config.v)
    W0, _ = full_value_matrix({**opt, "A": 0.0, "B": 0.0, "C": 0.0}, config.T, config.v)
    U, _, Vt = np.linalg.svd(escape_rate(config, W1, b1)["G"])
    u, w = U[:, 0], Vt[0]
    q_half, q_one = (float(u @ escape_rate(config, W0 + frac * (W1 - W0), b1)["G"] @ w) for frac in (0.5, 1.0))
    # q(f) = c1 f + c2 f^2 through q(.5), q(1), with f = omega_2/om_star
    c2 = 2 * (q_one - 2 * q_half)
    c1 = q_one - c2
    return c1 / om_star, c2 / om_star**2


@lru_cache(maxsize=None)
def two_stage_system(keys: str = "theory") -> ReducedSystem:
    """``omega_2'`` from the stage-1 flow (the other value modes are fast or frozen) and the K/Q
    scale ``k' = eta |g_1 omega_2 + g_2 omega_2^2| k / sqrt(d_a)`` (linearised escape, K and Q
    aligned with the top singular pair of ``G``). Valid while attention is near uniform."""
    eq = topic_mode_equation(keys)
    growth = eta * sp.Abs(g_1 * omega_2 + g_2 * omega_2**2) / sp.sqrt(d_a)
    return ReducedSystem(
        name=f"two_stage_{keys}", paper=PAPER, state=(omega_2, k_qk),
        parameters=STAGE1_PARAMETERS + (g_1, g_2, d_a),
        rhs=(eq["rhs"], growth * k_qk),
        observables={"topic_mode": omega_2, "block_difference": omega_2 / v, "kq_scale": k_qk},
        spec=f"{SPEC} §3.4, §3.6 (escape rate; keys={keys})",
        description="Value topic mode and the K/Q scale from small init: time-scale separation.",
    )
