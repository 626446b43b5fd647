"""Topic structure in a one-layer transformer (Li, Li, Risteski, ICML 2023).

Spec: ``papers/topic.md``. Everything below is derived here from the masked-LM objective; the
spec's printed equations are only checked against the derivation in ``tests/test_topic_*``.

What this module derives
------------------------
1. **Stage 1** (one-hot embeddings, uniform attention, squared loss, ``N -> inf``; spec §3.5).
   The context vector of a document with topic set ``S`` is built from the masking law
   (unselected positions keep their word; selected ones keep it w.p. ``p_c``, become a uniform
   random word w.p. ``p_r``, ``[MASK]`` otherwise), the per-position loss is written in the
   symmetric coordinates ``(A, B, C, m, r, s, b_w, b_M)`` by counting key classes, and the
   gradient flow is the full-matrix flow restricted to that invariant subspace: the Frobenius
   metric pulled back is ``diag(multiplicities)``, so ``theta_k' = -eta L_theta_k / n_k``.
   The eigen-form (``omega_1, omega_2, omega_3``), the decoupled topic-mode ODE, its closed-form
   solution and the optimum (and the headline ``1/(v(1-(1-p_c)p_m))``) follow from that flow.
2. **Embedding version** (``W^V = I``, ``E = W^{E T} W^E``; spec §3.5 "Embedding version"): the
   chain rule through ``E = W^T W`` turns the linear topic mode into a logistic one.
3. **Stage 2** (``W^V`` frozen at the stage-1 optimum; spec §3.6): the population attention loss
   over the full vocabulary for any key x query logit matrix, in jax (so ``G = dL/dS`` comes by
   autodiff), its tied parametrisation ``(s1, s2, s3, s_Mw, s_wM, s_MM)``, the optimum ``gamma*``
   and the K/Q escape rate ``sigma_max(G)/sqrt(d_a)`` that predicts the stage-2 onset.
4. **Two-stage reduced system**: the topic mode plus the K/Q scale ``k`` growing at the
   ``omega_2``-dependent escape rate (the time-scale separation of spec §3.4).

Two masking variants (spec §8 Decision 2): ``keys="theory"`` (selected positions are keys: the
factor ``a = 1-(1-p_c)p_m``) and ``keys="code"`` (the official code's attention mask: selected
positions are invisible, the context is pure ``u_S``).

Float64 throughout.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from .algebra import natural_gradient_flow
from .core import ParamsBase, ReducedSystem
from .errors import ConfigError, check_choice

PAPER = "topic"
SPEC = "papers/topic.md"
KEY_VARIANTS = ("theory", "code")

__all__ = [
    "PAPER",
    "KEY_VARIANTS",
    "TopicConfig",
    "Config",
    "context_frequencies",
    "stage1_loss",
    "multiplicities",
    "stage1_flow",
    "stage1_system",
    "eigen_coordinates",
    "topic_mode_equation",
    "topic_mode_solution",
    "stage1_optimum",
    "headline_block_difference",
    "embedding_topic_mode",
    "stage2_loss",
    "tied_logits",
    "gamma_from",
    "predicted_onset",
    "escape_rate_polynomial",
    "embedding_system",
    "stage2_optimum",
    "escape_rate",
    "two_stage_system",
    "stage2_tied_loss",
    "stage2_system",
    "stage2_parameters",
    "two_stage_parameters",
    "attention_dim",
    "reduced_coordinates",
    "full_value_matrix",
    "systems",
    "system_parameters",
    "default_run",
    "kappa",
]

# Symbols ----------------------------------------------------------------------------------------
T, v, tau = sp.symbols("T v tau", positive=True)
p_m, p_c, p_r = sp.symbols("p_m p_c p_r", positive=True)
lam = sp.Symbol("lam", nonnegative=True)
eta = sp.Symbol("eta", positive=True)
A, B, C, m, r, s, b_w, b_M = sp.symbols("A B C m r s b_w b_M", real=True)
omega_1, omega_2, omega_3 = sp.symbols("omega_1 omega_2 omega_3", real=True)
e_2 = sp.Symbol("e_2", real=True)
k_qk = sp.Symbol("k", nonnegative=True)  # K/Q scale
g_1, g_2, d_a = sp.symbols("g_1 g_2 d_a", real=True)
t_sym = sp.Symbol("t", real=True)

STAGE1_STATE = (A, B, C, m, r, s, b_w, b_M)
STAGE1_PARAMETERS = (T, v, tau, p_m, p_c, p_r, lam, eta)


# ------------------------------------------------------------------------------------------------
# Configuration (spec §1, §2, §8 Decisions)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TopicConfig(ParamsBase):
    """Data, masking, model and optimiser of one topic-model run.

    Sizes: ``T`` topics of ``v`` words, ``tau`` topics per document, documents of ``N`` tokens
    (``N_max > N``: length uniform in ``[N, N_max]``). Masking ``p_m, p_c, p_r`` (spec §1.2).
    Time: ``t = lr * step`` for SGD on the mean loss over selected positions (spec §6).
    """

    T: int = 10
    v: int = 10
    tau: int = 2
    N: int = 500
    N_max: int = 0  # 0: every document has N tokens
    data: str = "tau"  # "tau" (theory, spec §1.1) or "lda" (Dir(alpha), spec §1.3)
    alpha: float = 0.1
    p_m: float = 0.15
    p_c: float = 0.1
    p_r: float = 0.1
    keys: str = "theory"  # selected positions are keys ("theory") or not ("code")
    random_ids: str = "words"  # random replacement among words (theory) or all ids (code parity)
    masking: str = "dynamic"  # "dynamic" (fresh every step) or "static" (drawn once per document)
    vocab: str = "theory"  # "theory": Tv words + MASK; "code": PAD, MASK, START, END + words
    lam: float = 0.0  # weight decay lambda ||W||_F^2 (gradient-carrying; spec §8 Decision 8)
    loss: str = "squared"  # "squared" (sum over vocabulary) or "ce"
    attention: str = "uniform"  # "uniform" (W_K = W_Q = 0 frozen) or "trained"
    value: str = "trained"  # "trained", "identity" or "block" (frozen)
    embedding: str = "one_hot"  # "one_hot" or "trained" (tied W_pred = W_E^T)
    embedding_init: str = "gaussian"  # trained W_E: N(0, init_scale^2) or "identity" (init_scale * I)
    d_a: int = 0  # K/Q dimension; 0 -> vocabulary size D (spec §8 Decision 11)
    optimizer: str = "sgd"  # "sgd" (no momentum) or "adam"
    lr: float = 0.2
    batch: int = 64
    steps: int = 500
    log_every: int = 10
    init_scale: float = 0.0  # std of the zero-mean Gaussian init of W_V (and W_K, W_Q)
    kq_init_scale: float = -1.0  # std for W_K, W_Q; < 0 -> init_scale
    n_docs: int = 0  # 0: fresh documents every step; > 0: a fixed training set of that many
    seed: int = 0

    def validate(self) -> None:
        for name, lo in (("T", 1), ("v", 2), ("tau", 1), ("N", 1), ("batch", 1), ("steps", 1),
                         ("log_every", 1)):
            val = getattr(self, name)
            if val < lo:
                raise ConfigError(name, f"must be >= {lo}, got {val}")
        if self.tau > self.T:
            raise ConfigError("tau", f"topics per document tau={self.tau} exceeds the number of topics T={self.T}")
        if self.N_max and self.N_max < self.N:
            raise ConfigError("N_max", f"must be 0 or >= N={self.N}, got {self.N_max}")
        for name in ("p_m", "p_c", "p_r"):
            val = getattr(self, name)
            if not (math.isfinite(val) and 0 <= val <= 1):
                raise ConfigError(name, f"must be a probability in [0, 1], got {val}")
        if self.p_m == 0:
            raise ConfigError("p_m", "must be > 0 (no position would be selected)")
        if self.p_c + self.p_r > 1 + 1e-12:
            raise ConfigError("p_r", f"p_c + p_r = {self.p_c + self.p_r:g} exceeds 1")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ConfigError("alpha", f"Dirichlet concentration must be > 0, got {self.alpha}")
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError("lam", f"weight decay must be >= 0, got {self.lam}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError("lr", f"learning rate must be a finite number > 0, got {self.lr}")
        if not (math.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ConfigError("init_scale", f"must be >= 0, got {self.init_scale}")
        if not math.isfinite(self.kq_init_scale):
            raise ConfigError("kq_init_scale", "must be finite")
        if self.d_a < 0:
            raise ConfigError("d_a", f"must be >= 0, got {self.d_a}")
        if self.n_docs < 0:
            raise ConfigError("n_docs", f"must be >= 0, got {self.n_docs}")
        for name, allowed in (
            ("data", ("tau", "lda")), ("keys", KEY_VARIANTS), ("random_ids", ("words", "all")),
            ("masking", ("dynamic", "static")), ("vocab", ("theory", "code")),
            ("loss", ("squared", "ce")), ("attention", ("uniform", "trained")),
            ("value", ("trained", "identity", "block")), ("embedding", ("one_hot", "trained")),
            ("optimizer", ("sgd", "adam")), ("embedding_init", ("gaussian", "identity")),
        ):
            check_choice(name, getattr(self, name), allowed)
        if self.masking == "static" and self.n_docs == 0:
            raise ConfigError("masking", "static masking needs a fixed training set (n_docs > 0)")

    @property
    def n_words(self) -> int:
        return self.T * self.v

    @property
    def kq_scale(self) -> float:
        return self.init_scale if self.kq_init_scale < 0 else self.kq_init_scale


Config = TopicConfig


# ------------------------------------------------------------------------------------------------
# 1. Stage 1: the loss in symmetric coordinates, from the context-vector expectation (spec §3.5)
# ------------------------------------------------------------------------------------------------
def context_frequencies(keys: str = "theory") -> dict[str, sp.Expr]:
    """Limit ``N -> inf`` of the key distribution ``x_bar = X_tilde 1 / N`` of a document whose
    topic set is ``S`` (spec §3.5 "Context vector"), per token, from the masking law (§1.2):

    * a document word appears unselected w.p. ``1-p_m`` or selected-and-kept w.p. ``p_m p_c``;
    * a selected position becomes a uniform random word (any of the ``Tv``) w.p. ``p_m p_r``;
    * it becomes ``[MASK]`` w.p. ``p_m (1-p_c-p_r)``.

    ``keys="code"``: selected positions are masked out as keys, so only unselected positions
    remain and the context is exactly ``u_S``.
    Returns the frequency of one in-document word ``f_in``, one out-of-document word ``f_out``
    and of ``[MASK]`` ``f_mask``.
    """
    if keys == "theory":
        keep = (1 - p_m) + p_m * p_c  # the word itself is seen at its position
        rand = p_m * p_r / (T * v)  # random replacement spread over all words
        return {"f_in": keep / (tau * v) + rand, "f_out": rand, "f_mask": p_m * (1 - p_c - p_r)}
    if keys == "code":
        return {"f_in": 1 / (tau * v), "f_out": sp.Integer(0), "f_mask": sp.Integer(0)}
    raise ConfigError("keys", f"must be one of {KEY_VARIANTS}, got {keys!r}")


def multiplicities() -> dict[sp.Symbol, sp.Expr]:
    """Number of entries of ``(W, b)`` carried by each symmetric coordinate (spec §3.5):
    diagonal ``Tv``; same topic off-diagonal ``T v (v-1)``; different topics ``T v (T-1) v``;
    MASK column / row ``Tv``; MASK-MASK 1; word bias ``Tv``; MASK bias 1."""
    return {A: T * v, B: T * v * (v - 1), C: T * v * (T - 1) * v, m: T * v, r: T * v, s: 1,
            b_w: T * v, b_M: 1}


def _outputs(keys: str) -> dict[str, sp.Expr]:
    """Mean output ``W x_bar + b`` on the three row classes, summing entry x key frequency over
    the key classes seen from each row (counts per class in brackets)."""
    f = context_frequencies(keys)
    fi, fo, fM = f["f_in"], f["f_out"], f["f_mask"]
    # row = a word of a document topic: itself [1], its topic's other words [v-1], the other
    # document topics' words [(tau-1)v], the absent topics' words [(T-tau)v], MASK [1]
    o_in = A * fi + B * (v - 1) * fi + C * ((tau - 1) * v * fi + (T - tau) * v * fo) + m * fM + b_w
    # row = a word of an absent topic: itself, its topic's other words, the document's words
    # [tau v], the other absent topics' words [(T-tau-1)v], MASK
    o_out = A * fo + B * (v - 1) * fo + C * (tau * v * fi + (T - tau - 1) * v * fo) + m * fM + b_w
    # MASK row: every word key through r, the MASK key through s
    o_mask = r * (tau * v * fi + (T - tau) * v * fo) + s * fM + b_M
    return {"o_in": o_in, "o_out": o_out, "o_mask": o_mask}


def frobenius_norm_sq() -> sp.Expr:
    """``||W||_F^2`` in symmetric coordinates (weight decay is on W only, not on b)."""
    n = multiplicities()
    return sum(n[x] * x**2 for x in (A, B, C, m, r, s))


@lru_cache(maxsize=None)
def stage1_loss(keys: str = "theory") -> sp.Expr:
    """Per-selected-position population loss ``E_S E ||W x_bar + b - e_y||^2 + lam ||W||_F^2``.

    The label ``y`` is uniform on the document's words, so ``E[e_y | S] = u_S`` and
    ``E||e_y - u_S||^2 = 1 - 1/(tau v)``; the loss is the same for every ``S`` (symmetry):
    ``tau v (o_in - 1/(tau v))^2 + (T-tau) v o_out^2 + o_M^2 + 1 - 1/(tau v)`` (spec §3.5).
    """
    o = _outputs(keys)
    target_in = 1 / (tau * v)
    data = tau * v * (o["o_in"] - target_in) ** 2 + (T - tau) * v * o["o_out"] ** 2 + o["o_mask"] ** 2
    return data + (1 - target_in) + lam * frobenius_norm_sq()


def _eigen_map() -> dict[sp.Symbol, sp.Expr]:
    """(A, B, C) in terms of the eigenvalues on Pi_1 (within-topic contrast), Pi_2 (topic
    contrast) and Pi_3 (mean): ``W = sum_k omega_k Pi_k`` (spec §3.5 "Eigen-form")."""
    sol = sp.solve([sp.Eq(omega_1, A - B), sp.Eq(omega_2, A + (v - 1) * B - v * C),
                    sp.Eq(omega_3, A + (v - 1) * B + (T - 1) * v * C)], [A, B, C], dict=True)[0]
    return sol


def eigen_coordinates() -> dict[str, sp.Expr]:
    """Eigenvalues of the word block of ``W`` (read off from ``W`` acting on the projectors:
    ``Pi_1 = I - P/v``, ``Pi_2 = P/v - J/(Tv)``, ``Pi_3 = J/(Tv)``)."""
    return {"omega_1": A - B, "omega_2": A + (v - 1) * B - v * C, "omega_3": A + (v - 1) * B + (T - 1) * v * C}


def _observables(keys: str) -> dict[str, sp.Expr]:
    ev = eigen_coordinates()
    return {
        "within_topic_mode": ev["omega_1"],
        "topic_mode": ev["omega_2"],
        "mean_mode": ev["omega_3"],
        # mean over same-topic pairs (incl. diagonal) - mean over different-topic pairs = omega_2/v
        "block_difference": (A + (v - 1) * B) / v - C,
        "offdiagonal_block_difference": B - C,
        "population_loss": stage1_loss(keys),
    }


@lru_cache(maxsize=None)
def stage1_flow(keys: str = "theory") -> dict[sp.Symbol, sp.Expr]:
    """The stage-1 gradient flow ``W' = -eta grad_W L`` restricted to the symmetric subspace:
    the pulled-back Frobenius metric is ``diag(n_k)`` (``multiplicities``), so
    ``theta_k' = -eta n_k^{-1} dL/dtheta_k`` (spec §3.5 "Gradient flow")."""
    loss = stage1_loss(keys)
    n = multiplicities()
    rhs = natural_gradient_flow(loss, [((x,), sp.Matrix([[n[x]]]), eta) for x in STAGE1_STATE])
    return {x: sp.factor_terms(sp.expand(f)) for x, f in zip(STAGE1_STATE, rhs)}


@lru_cache(maxsize=None)
def stage1_system(keys: str = "theory") -> ReducedSystem:
    """:func:`stage1_flow` packaged with its observables and closed forms."""
    rhs = [stage1_flow(keys)[x] for x in STAGE1_STATE]
    return ReducedSystem(
        name=f"stage1_{keys}",
        paper=PAPER,
        state=STAGE1_STATE,
        parameters=STAGE1_PARAMETERS,
        rhs=tuple(rhs),
        observables=_observables(keys),
        closed_forms={"topic_mode": topic_mode_solution(keys)["omega_2"],
                      "block_difference_optimum": headline_block_difference(keys, limit=False)},
        spec=f"{SPEC} §3.5 (keys={keys})",
        description=("Stage 1: one-hot embeddings, uniform attention, squared loss, N -> inf; "
                     "W^V and b in symmetric coordinates; time t = lr * step."),
    )


@lru_cache(maxsize=None)
def topic_mode_equation(keys: str = "theory") -> dict[str, sp.Expr]:
    """``d omega_2/dt`` from the stage-1 flow, rewritten in eigen-coordinates. It depends on
    ``omega_2`` only (the topic mode decouples), and is affine: ``rate * (omega_2* - omega_2)``.
    Also ``kappa`` (the topic-contrast eigenvalue of ``Cov(u_S)``) read off the rate."""
    ev = eigen_coordinates()
    rhs = stage1_flow(keys)
    d_om2 = sp.expand(sum(sp.diff(ev["omega_2"], x) * rhs[x] for x in (A, B, C)).subs(_eigen_map()))
    rate = sp.factor(-sp.diff(d_om2, omega_2))
    fixed = sp.factor(sp.cancel(d_om2.subs(omega_2, 0) / rate))
    o = _outputs(keys)
    a_eff = sp.factor(sp.diff(o["o_in"] - o["o_out"], A) * tau * v)
    kap = sp.factor(sp.cancel((rate / (2 * eta) - lam) / a_eff**2))
    return {"rhs": sp.factor(d_om2), "rate": rate, "omega_2_star": fixed, "a": a_eff, "kappa": kap}


@lru_cache(maxsize=None)
def topic_mode_solution(keys: str = "theory") -> dict[str, sp.Expr]:
    """Closed-form ``omega_2(t)`` from ``omega_2(0) = 0``: the mode is affine,
    ``omega_2' = rate (omega_2* - omega_2)``, so ``omega_2 = omega_2* (1 - exp(-rate t))``
    (the tests check that it solves :func:`topic_mode_equation`)."""
    eq = topic_mode_equation(keys)
    return {"omega_2": eq["omega_2_star"] * (1 - sp.exp(-eq["rate"] * t_sym)), "time_constant": 1 / eq["rate"]}


@lru_cache(maxsize=None)
def headline_block_difference(keys: str = "theory", limit: bool = True) -> sp.Expr:
    """Optimal ``omega_2*/v`` = mean same-topic minus mean different-topic entry of ``W^V``;
    with ``limit`` the weight-decay-free limit ``lam -> 0`` (spec §3.2: ``1/(v(1-(1-p_c)p_m))``)."""
    val = sp.simplify(topic_mode_equation(keys)["omega_2_star"] / v)
    return sp.simplify(sp.limit(val, lam, 0)) if limit else val


def kappa(config: TopicConfig) -> float:
    """``kappa`` of the document law: tau-model from the derivation; LDA ``Dir(alpha)``:
    ``1/(v T (T alpha + 1))`` (spec §3.5), the same eigenvalue of ``Cov(u_S)``."""
    if config.data == "lda":
        return 1.0 / (config.v * config.T * (config.T * config.alpha + 1))
    expr = topic_mode_equation(config.keys)["kappa"]
    return float(expr.subs(_numeric_subs(config)))


def _numeric_subs(config: TopicConfig, lr: float | None = None) -> dict[sp.Symbol, Any]:
    return {T: config.T, v: config.v, tau: config.tau, p_m: sp.nsimplify(config.p_m),
            p_c: sp.nsimplify(config.p_c), p_r: sp.nsimplify(config.p_r), lam: sp.nsimplify(config.lam),
            eta: lr if lr is not None else config.lr}


def stage1_optimum(config: TopicConfig, keys: str | None = None) -> dict[str, float]:
    """Stationary point of the reduced stage-1 loss (ridge on ``W``, ``b`` free). With
    ``config.lam == 0`` the limit ``lam -> 0`` of the ridge solution (unique, spec §3.5)."""
    keys = keys or config.keys
    subs = _numeric_subs(config)
    subs.pop(lam)
    loss = stage1_loss(keys).subs(subs)
    eqs = [sp.diff(loss, x) for x in STAGE1_STATE]
    sol = sp.solve(eqs, STAGE1_STATE, dict=True)[0]
    lam_val = sp.nsimplify(config.lam)
    out = {}
    for x in STAGE1_STATE:
        e = sol[x]
        e = sp.limit(e, lam, 0) if lam_val == 0 else e.subs(lam, lam_val)
        out[str(x)] = float(e)
    return out


# ------------------------------------------------------------------------------------------------
# 2. Embedding version (spec §3.5): E = W_E^T W_E, W^V = I
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def embedding_topic_mode(keys: str = "theory") -> dict[str, sp.Expr]:
    """Topic mode ``e_2`` of ``E = W^{E T} W^E`` under gradient flow on ``W^E``.

    ``L(E)`` is the stage-1 loss with ``W -> E``; in the topic eigenspace the gradient
    ``G = dL/dE`` has eigenvalue ``g = (dL/de_2)/(T-1)`` (``T-1`` = multiplicity of ``Pi_2``).
    ``W^E' = -eta dL/dW^E = -2 eta W^E G`` (G symmetric) gives
    ``E' = W^E'^T W^E + W^E^T W^E' = -2 eta (G E + E G) = -4 eta g e_2`` on the mode."""
    eq = topic_mode_equation(keys)
    # L restricted to the topic mode, from the flow: d om2/dt = -(eta/(T-1)) dL/d om2
    dL_dom2 = -(T - 1) * eq["rhs"] / eta
    g = (dL_dom2 / (T - 1)).subs(omega_2, e_2)
    rhs = sp.factor(sp.simplify(-4 * eta * g * e_2))
    return {"rhs": rhs, "fixed_point": sp.simplify(sp.solve(rhs / e_2, e_2)[0])}


@lru_cache(maxsize=None)
def embedding_system(keys: str = "theory") -> ReducedSystem:
    em = embedding_topic_mode(keys)
    return ReducedSystem(
        name=f"embedding_{keys}", paper=PAPER, state=(e_2,), parameters=STAGE1_PARAMETERS,
        rhs=(em["rhs"],), observables={"block_difference": e_2 / v},
        closed_forms={"fixed_point": em["fixed_point"]},
        spec=f"{SPEC} §3.5 (embedding version, keys={keys})",
        description="Topic mode of E = W_E^T W_E with W^V = I frozen: logistic growth to 1/a.",
    )


# ------------------------------------------------------------------------------------------------
# 3. Full-matrix helpers (numpy): reduced coordinates of (W, b) and the inverse map
# ------------------------------------------------------------------------------------------------
def word_topics(T_: int, v_: int) -> np.ndarray:
    return np.repeat(np.arange(T_), v_)


def full_value_matrix(coords: dict[str, float], T_: int, v_: int) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` on the theory vocabulary (``Tv`` words then ``[MASK]``) from symmetric coords."""
    n = T_ * v_
    top = word_topics(T_, v_)
    same = top[:, None] == top[None, :]
    W = np.zeros((n + 1, n + 1))
    W[:n, :n] = np.where(same, coords["B"], coords["C"])
    W[np.arange(n), np.arange(n)] = coords["A"]
    W[:n, n] = coords["m"]
    W[n, :n] = coords["r"]
    W[n, n] = coords["s"]
    b = np.full(n + 1, coords["b_w"])
    b[n] = coords["b_M"]
    return W, b


def reduced_coordinates(W: np.ndarray, b: np.ndarray | None, topic_of: np.ndarray,
                        mask_id: int | None = None) -> dict[str, float]:
    """Symmetric coordinates of a full matrix as means over the entry classes (spec §6).

    ``topic_of[i]`` is the topic of id ``i`` (``-1`` for special tokens, excluded from the word
    classes); ``mask_id`` locates the MASK row/column. Works for ``W^V`` or ``E``."""
    W = np.asarray(W, dtype=np.float64)
    words = np.nonzero(topic_of >= 0)[0]
    tw = topic_of[words]
    Ww = W[np.ix_(words, words)]
    same = tw[:, None] == tw[None, :]
    diag = np.eye(len(words), dtype=bool)
    Av = Ww[diag].mean()
    Bv = Ww[same & ~diag].mean()
    Cv = Ww[~same].mean()
    v_ = int(same[0].sum())
    out = {"A": Av, "B": Bv, "C": Cv}
    if mask_id is not None:
        out.update(m=W[words, mask_id].mean(), r=W[mask_id, words].mean(), s=W[mask_id, mask_id])
    if b is not None:
        out["b_w"] = float(np.asarray(b)[words].mean())
        if mask_id is not None:
            out["b_M"] = float(np.asarray(b)[mask_id])
    out["within_topic_mode"] = Av - Bv
    out["topic_mode"] = Av + (v_ - 1) * Bv - v_ * Cv
    out["block_difference"] = Ww[same].mean() - Cv
    out["offdiagonal_block_difference"] = Bv - Cv
    return {k: float(x) for k, x in out.items()}


# ------------------------------------------------------------------------------------------------
# 4. Stage 2 (spec §3.6): population attention loss over the full vocabulary (jax)
# ------------------------------------------------------------------------------------------------
def _enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)


def _context_vector(T_, v_, topics, pm, pc, pr, keys):
    """Numeric ``x_bar_S`` (length ``Tv + 1``) for the document topic set ``topics``; same law as
    :func:`context_frequencies` (checked against it in the tests)."""
    n = T_ * v_
    in_doc = np.isin(word_topics(T_, v_), topics)
    x = np.zeros(n + 1)
    if keys == "theory":
        x[:n] = in_doc * ((1 - pm + pm * pc) / (len(topics) * v_)) + pm * pr / n
        x[n] = pm * (1 - pc - pr)
    else:
        x[:n] = in_doc / (len(topics) * v_)
    return x


def _documents(T_, tau_, which):
    if which == "one":
        return [tuple(range(tau_))]
    return list(itertools.combinations(range(T_), tau_))


def stage2_loss(logits, W, b, config: TopicConfig, *, documents: str = "all", xp=None):
    """Population per-selected-position loss with ``W^V, b`` given and key x query attention
    logits ``logits`` ((Tv+1) x (Tv+1); column = query token), ``N -> inf``. jax-traceable in
    ``logits`` (and ``W``, ``b``).

    Query token at a selected position: ``[MASK]`` (prob ``1-p_c-p_r``), the word itself
    (``p_c``; target = that word) or a uniform random word (``p_r``; target ~ ``u_S``). Keys:
    mass ``x_bar_k exp(logit[k, q])``, normalised (spec §3.6 step 1). Squared error against
    ``e_w`` expands to ``||o - E[e_w]||^2 + Var``. ``documents="one"`` uses the single topic set
    ``{0..tau-1}``: exact when ``logits`` and ``W`` are invariant under topic permutations.
    ``xp``: array module (``numpy`` for plain evaluation, default ``jax.numpy`` for autodiff).
    """
    if xp is None:
        _enable_x64()
        import jax.numpy as xp
    jnp = xp

    T_, v_, tau_ = config.T, config.v, config.tau
    n = T_ * v_
    pm, pc, pr = config.p_m, config.p_c, config.p_r
    logits = jnp.asarray(logits)
    W = jnp.asarray(W)
    b = jnp.asarray(b)
    total = 0.0
    docs = _documents(T_, tau_, documents)
    top = word_topics(T_, v_)
    for S in docs:
        x = jnp.asarray(_context_vector(T_, v_, S, pm, pc, pr, config.keys))
        in_doc = np.isin(top, S)
        u = np.zeros(n + 1)
        u[:n] = in_doc / (tau_ * v_)
        u = jnp.asarray(u)
        var = 1.0 - 1.0 / (tau_ * v_)
        # attention of every query token q (columns): mass x_k exp(logit[k, q]) normalised
        wts = x[:, None] * jnp.exp(logits - logits.max(0, keepdims=True))
        att = wts / wts.sum(0, keepdims=True)
        out = W @ att + b[:, None]  # (D, queries): output for query token q
        err_u = ((out - u[:, None]) ** 2).sum(0) + var  # targets ~ u_S
        L_mask = err_u[n]
        L_rand = err_u[:n].mean()
        # correct query: the token is the target word w, uniform over the document's words
        eye = jnp.eye(n + 1)[:, :n]
        err_self = ((out[:, :n] - eye) ** 2).sum(0)
        L_corr = (err_self * jnp.asarray(in_doc)).sum() / in_doc.sum()
        total = total + (1 - pc - pr) * L_mask + pc * L_corr + pr * L_rand
    return total / len(docs)


def tied_logits(T_: int, v_: int, s1=0.0, s2=0.0, s3=0.0, s_Mw=0.0, s_wM=0.0, s_MM=0.0, xp=None):
    """The (Tv+1)^2 logit matrix with the slides' tying: same token ``s1``, same topic ``s2``,
    different topic ``s3``; MASK key/word query ``s_Mw``, word key/MASK query ``s_wM``, ``s_MM``."""
    if xp is None:
        _enable_x64()
        import jax.numpy as xp
    jnp = xp

    n = T_ * v_
    top = word_topics(T_, v_)
    same = jnp.asarray(top[:, None] == top[None, :])
    eye = jnp.eye(n, dtype=bool)
    words = jnp.where(eye, s1, jnp.where(same, s2, s3))
    col = jnp.full((n, 1), s_wM)
    row = jnp.full((1, n), s_Mw)
    return jnp.block([[words, col], [row, jnp.full((1, 1), s_MM)]])


def gamma_from(v_: int, s1: float, s2: float, s3: float = 0.0) -> float:
    """``gamma = ((v-1)/v) e^{s2-s3} + (1/v) e^{s1-s3}`` (spec §3.3)."""
    return ((v_ - 1) * math.exp(s2 - s3) + math.exp(s1 - s3)) / v_


def stage2_optimum(config: TopicConfig, W=None, b=None) -> dict[str, float]:
    """Optimal tied attention at ``W^V`` = stage-1 optimum of the same key variant.

    ``keys="theory"``: paper-style tying ``s_MM = s1``, ``s_Mw = s_wM = s3 = 0``; minimise over
    ``(s1, s2)``. ``keys="code"``: word queries see only word keys and the loss depends on
    ``gamma`` only, so ``s1 = s2 = log gamma`` (MASK queries see uniform words)."""
    from scipy.optimize import minimize, minimize_scalar

    if W is None:
        W, b = full_value_matrix(stage1_optimum(config.replace(lam=0.0)), config.T, config.v)
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
    L_uniform = f(np.zeros_like(z0))
    return {"s1": float(s1v), "s2": float(s2v), "alpha": math.exp(s2v), "beta": math.exp(s1v),
            "gamma": gamma_from(vn, s1v, s2v), "loss": float(res.fun), "loss_uniform": L_uniform,
            "converged": bool(res.success)}


def escape_rate(config: TopicConfig, W=None, b=None, documents: str = "all") -> dict[str, float]:
    """``G = dL/dS`` at uniform attention (``S = 0``) by autodiff of :func:`stage2_loss` and its
    top singular value (spec §3.6 "Escape rate"): with ``S = W^{K T} W^Q / sqrt(d_a)``,
    ``W^K' = -lr W^Q G^T/sqrt(d_a)``, ``W^Q' = -lr W^K G/sqrt(d_a)``: K/Q grow like
    ``exp(lr sigma_max(G) t / sqrt(d_a))``."""
    _enable_x64()
    import jax
    import jax.numpy as jnp

    if W is None:
        W, b = full_value_matrix(stage1_optimum(config.replace(lam=0.0)), config.T, config.v)
    D = config.n_words + 1
    G = np.asarray(jax.grad(lambda S: stage2_loss(S, W, b, config, documents=documents))(jnp.zeros((D, D))))
    sig = float(np.linalg.svd(G, compute_uv=False)[0])
    return {"sigma_max": sig, "G": G}


def attention_dim(config: TopicConfig, D: int | None = None) -> int:
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
    rate1 = float(topic_mode_equation(config.keys)["rate"].subs(_numeric_subs(config, lr)))
    t1 = math.log(5.0) / rate1
    t2 = t1 + math.sqrt(da) * math.log(1.0 / eps) / (lr * sig)
    return {"t1_steps": t1, "t2_steps": t2, "sigma_max": sig, "stage1_rate": rate1, "d_a": da}


# ------------------------------------------------------------------------------------------------
# 4b. Stage 2 in sympy: the tied attention loss by key/row classes, and the logit-space flow
# ------------------------------------------------------------------------------------------------
s1, s2, s3, s_Mw, s_wM, s_MM = sp.symbols("s_1 s_2 s_3 s_Mw s_wM s_MM", real=True)
STAGE2_STATE = (s1, s2, s3, s_Mw, s_wM, s_MM)
STAGE2_VALUE = (A, B, C, m, r, s, b_w, b_M)


def _query_loss(classes, mask_mass, target_var):
    """Squared error of one query type. ``classes``: list of ``(count, per_token_mass, group,
    n_topics_in_group, target_per_token)`` over the word tokens; ``group`` tags the topics of a
    class (classes with the same tag share their topics). Output of word row ``i`` (spec §3.6):
    ``A h_i + B (H_t(i) - h_i) + C (H_words - H_t(i)) + m h_M + b_w``; MASK row
    ``r H_words + s h_M + b_M``."""
    H_words = sum(c * h for c, h, *_ in classes)
    per_topic: dict[str, sp.Expr] = {}
    n_top: dict[str, sp.Expr] = {}
    for c, h, g, nt, _ in classes:
        per_topic[g] = per_topic.get(g, 0) + c * h
        n_top[g] = nt
    loss = 0
    for c, h, g, nt, y in classes:
        Ht = per_topic[g] / n_top[g]
        o = A * h + B * (Ht - h) + C * (H_words - Ht) + m * mask_mass + b_w
        loss += c * (o - y) ** 2
    o_M = r * H_words + s * mask_mass + b_M
    return loss + o_M**2 + target_var


@lru_cache(maxsize=None)
def stage2_tied_loss(keys: str = "theory") -> sp.Expr:
    """Population loss with tied logits ``(s1, s2, s3, s_Mw, s_wM, s_MM)`` and ``W^V`` in the
    symmetric coordinates, ``N -> inf`` (spec §3.6): a mixture over the query token at a
    selected position (MASK ``1-p_c-p_r``; kept ``p_c``, target = itself; random ``p_r``, its
    topic in the document w.p. ``tau/T``). Key class mass = context frequency x ``exp(logit)``."""
    f = context_frequencies(keys)
    fi, fo, fM = f["f_in"], f["f_out"], f["f_mask"]
    ti = 1 / (tau * v)
    E = sp.exp

    def word_query(f_own, own_target, other_target, doc_target):
        """Query word whose topic has key frequency ``f_own`` (in-document or absent)."""
        if f_own is fi:  # query topic in the document
            rest = [((tau - 1) * v, fi, "doc", tau - 1, doc_target), ((T - tau) * v, fo, "abs", T - tau, 0)]
        else:
            rest = [(tau * v, fi, "doc", tau, doc_target), ((T - tau - 1) * v, fo, "abs", T - tau - 1, 0)]
        Z = f_own * E(s1) + (v - 1) * f_own * E(s2) + sum(c * fr for c, fr, *_ in rest) * E(s3) + fM * E(s_Mw)
        cls = [(1, f_own * E(s1) / Z, "q", 1, own_target), (v - 1, f_own * E(s2) / Z, "q", 1, other_target)]
        cls += [(c, fr * E(s3) / Z, g, nt, y) for c, fr, g, nt, y in rest]
        return cls, fM * E(s_Mw) / Z

    cls, hM = word_query(fi, 1, 0, 0)
    L_correct = _query_loss(cls, hM, 0)
    cls, hM = word_query(fi, ti, ti, ti)
    L_rand_in = _query_loss(cls, hM, 1 - ti)
    cls, hM = word_query(fo, 0, 0, ti)
    L_rand_out = _query_loss(cls, hM, 1 - ti)
    Z = (tau * v * fi + (T - tau) * v * fo) * E(s_wM) + fM * E(s_MM)
    cls = [(tau * v, fi * E(s_wM) / Z, "doc", tau, ti), ((T - tau) * v, fo * E(s_wM) / Z, "abs", T - tau, 0)]
    L_mask = _query_loss(cls, fM * E(s_MM) / Z, 1 - ti)
    return ((1 - p_c - p_r) * L_mask + p_c * L_correct
            + p_r * (tau / T * L_rand_in + (1 - tau / T) * L_rand_out))


def logit_multiplicities() -> dict[sp.Symbol, sp.Expr]:
    """Entries of the (Tv+1)^2 logit matrix carried by each tied logit under the paper-style tying
    (spec §3.6, §8 Decision 7): ``s1`` on the word diagonal and MASK-MASK, ``s2`` on same-topic
    off-diagonal pairs; ``s3 = s_Mw = s_wM = 0`` (softmax gauge)."""
    return {s1: T * v + 1, s2: T * v * (v - 1)}


STAGE2_TYING = {s3: 0, s_Mw: 0, s_wM: 0, s_MM: s1}


@lru_cache(maxsize=None)
def stage2_system(keys: str = "theory") -> ReducedSystem:
    """Stage 2 as gradient flow on the attention-logit matrix ``S`` (the object whose gradient
    ``G`` at ``S = 0`` drives the K/Q escape), restricted to the paper-style tied subspace with
    the pulled-back Frobenius metric ``diag(n)``; ``W^V, b`` are parameters (frozen). Its
    stationary points are those of the tied loss (:func:`stage2_optimum`)."""
    # W^V at a stage-1 optimum has no MASK row/column and no MASK bias (stage1_optimum: m = r =
    # s = b_M = 0 for both key variants); A, B, C, b_w stay parameters
    loss = stage2_tied_loss(keys).subs(STAGE2_TYING).subs({m: 0, r: 0, s: 0, b_M: 0})
    n = logit_multiplicities()
    # diagonal metric: -eta n_k^{-1} dL/ds_k (not expanded: the softmax ratios would blow up)
    rhs = [-eta * sp.diff(loss, x) / n[x] for x in (s1, s2)]
    gamma = ((v - 1) * sp.exp(s2) + sp.exp(s1)) / v
    return ReducedSystem(
        name=f"stage2_{keys}", paper=PAPER, state=(s1, s2),
        parameters=(T, v, tau, p_m, p_c, p_r, eta, A, B, C, b_w),
        rhs=tuple(rhs), observables={"gamma": gamma, "alpha": sp.exp(s2), "beta": sp.exp(s1),
                                     "stage2_loss": loss},
        spec=f"{SPEC} §3.6 (keys={keys}, paper-style tying)",
        description="Tied attention logits under gradient flow with W^V frozen (stage 2).",
    )


def stage2_parameters(config: TopicConfig) -> dict[str, float]:
    """Parameters of :func:`stage2_system`: sizes, masking, ``eta = lr`` and ``W^V*``."""
    opt = stage1_optimum(config.replace(lam=0.0))
    return {**{k: x for k, x in system_parameters(config).items() if k != "lam"}, **opt}


# ------------------------------------------------------------------------------------------------
# 5. Two-stage reduced system: topic mode + K/Q scale
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
    G1 = escape_rate(config, W1, b1)["G"]
    U, _, Vt = np.linalg.svd(G1)
    u, w = U[:, 0], Vt[0]
    vals = []
    for frac in (0.5, 1.0):
        W = W0 + frac * (W1 - W0)
        vals.append(float(u @ escape_rate(config, W, b1)["G"] @ w))
    # q(f) = c1 f + c2 f^2 with q(.5), q(1): f = omega_2/om_star
    q_half, q_one = vals
    c2 = 2 * (q_one - 2 * q_half)
    c1 = q_one - c2
    return c1 / om_star, c2 / om_star**2


@lru_cache(maxsize=None)
def two_stage_system(keys: str = "theory") -> ReducedSystem:
    """``omega_2' `` from the stage-1 flow (the other value modes are fast or frozen) and the K/Q
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


def two_stage_parameters(config: TopicConfig) -> dict[str, float]:
    """Parameter values of :func:`two_stage_system` for ``config`` (``g_1, g_2`` from the escape
    rate of the stage-2 loss along the stage-1 path, ``d_a`` the K/Q dimension)."""
    g1v, g2v = escape_rate_polynomial(config)
    return {**system_parameters(config), "g_1": g1v, "g_2": g2v, "d_a": float(attention_dim(config))}


# ------------------------------------------------------------------------------------------------
# CLI conventions (figures/cli.py)
# ------------------------------------------------------------------------------------------------
def system_parameters(config: TopicConfig) -> dict[str, float]:
    return {"T": config.T, "v": config.v, "tau": config.tau, "p_m": config.p_m, "p_c": config.p_c,
            "p_r": config.p_r, "lam": config.lam, "eta": config.lr}


def systems(config: TopicConfig | None = None) -> list[ReducedSystem]:
    config = config or TopicConfig()
    return [stage1_system(config.keys), embedding_system(config.keys), stage2_system(config.keys),
            two_stage_system(config.keys)]


def default_run(config: TopicConfig) -> dict[str, Any]:
    """`tdyn simulate topic`: the stage-1 flow from ``W = 0, b = 0``. The time unit is one
    optimiser step: ``eta = lr`` sits in the right-hand side (gradient-flow time ``lr * step``)."""
    n = config.steps // config.log_every + 1
    return {
        "system": stage1_system(config.keys),
        "params": system_parameters(config),
        "y0": {str(x): 0.0 for x in STAGE1_STATE},
        "t": np.linspace(0.0, float(config.steps), n),
    }


def problem(config) -> "Problem":
    """The :class:`~theory.Problem` that ``tdyn simulate`` integrates (wraps :func:`default_run`)."""
    from .problem import Problem

    run = default_run(config)
    return Problem(run["system"], run["params"], run["y0"], run["t"], run.get("solve_options", {}))
