"""Stage 1 and the embedding version, derived from the masked-LM objective (spec §3.5).

The context vector of a document with topic set ``S`` is built from the masking law (unselected
positions keep their word; selected ones keep it w.p. ``p_c``, become a uniform random word w.p.
``p_r``, ``[MASK]`` otherwise); the per-position squared loss is written in the symmetric
coordinates ``(A, B, C, m, r, s, b_w, b_M)`` of ``(W^V, b)`` by counting key classes, and the
gradient flow is the full-matrix flow restricted to that invariant subspace: the Frobenius metric
pulled back is ``diag(multiplicities)``, so ``theta_k' = -eta n_k^{-1} dL/dtheta_k``.

The paper's named quantities stay named (``ReducedSystem.definitions``): ``a = 1-(1-p_c)p_m``, the
key frequencies ``f_in, f_out, f_M`` and the mean outputs ``o_in, o_out, o_M``; the flow is the
loss differentiated *through* them (:func:`chain_rule`). The eigen-form, the decoupled topic mode,
its closed-form solution, the optimum and the headline ``1/(v(1-(1-p_c)p_m))`` follow from the
expanded flow. Two masking variants (spec §8 Decision 2): ``keys="theory"`` (selected positions
are keys) and ``keys="code"`` (the official attention mask: the context is pure ``u_S``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import sympy as sp

from ..core import TIME, ReducedSystem
from ..errors import ConfigError
from .config import KEY_VARIANTS, PAPER, SPEC, TopicConfig

__all__ = [
    "T", "v", "tau", "p_m", "p_c", "p_r", "lam", "eta", "A", "B", "C", "m", "r", "s", "b_w", "b_M",
    "omega_1", "omega_2", "omega_3", "e_2", "t_sym", "STAGE1_STATE", "STAGE1_PARAMETERS",
    "chain_rule", "context_frequencies", "stage1_definitions", "stage1_loss", "multiplicities",
    "stage1_flow", "stage1_system", "eigen_coordinates", "topic_mode_equation", "topic_mode_solution",
    "headline_block_difference", "kappa", "numeric_subs", "stage1_optimum", "embedding_topic_mode",
    "embedding_system", "frobenius_norm_sq", "n_sel", "FULL_SYMBOLIC_MAX_D", "FULL_PARAMETERS", "full_space_symbols",
    "document_loss", "document_distribution", "full_space_residual_expr", "full_space_system",
]

# Symbols ----------------------------------------------------------------------------------------
T, v, tau = sp.symbols("T v tau", positive=True)
p_m, p_c, p_r = sp.symbols("p_m p_c p_r", positive=True)
lam = sp.Symbol("lam", nonnegative=True)
eta = sp.Symbol("eta", positive=True)
A, B, C, m, r, s, b_w, b_M = sp.symbols("A B C m r s b_w b_M", real=True)
omega_1, omega_2, omega_3 = sp.symbols("omega_1 omega_2 omega_3", real=True)
e_2 = sp.Symbol("e_2", real=True)
t_sym = TIME

# the paper's named quantities (definitions of the exported systems)
a_sym = sp.Symbol("a", positive=True)
f_in, f_out, f_M = sp.symbols("f_in f_out f_M", nonnegative=True)
o_in, o_out, o_M = sp.symbols("o_in o_out o_M", real=True)

STAGE1_STATE = (A, B, C, m, r, s, b_w, b_M)
STAGE1_PARAMETERS = (T, v, tau, p_m, p_c, p_r, lam, eta)


def chain_rule(expr: sp.Expr, x: sp.Symbol, definitions: Sequence[tuple[sp.Symbol, sp.Expr]]) -> sp.Expr:
    """``d expr / d x`` where ``expr`` and each definition may use the symbols defined before it
    (forward-mode chain rule; the result keeps the definition symbols)."""
    d: dict[sp.Symbol, sp.Expr] = {}
    for q, e in definitions:
        d[q] = sp.diff(e, x) + sum((sp.diff(e, p) * dp for p, dp in d.items() if dp != 0), sp.Integer(0))
    return sp.diff(expr, x) + sum((sp.diff(expr, q) * dq for q, dq in d.items() if dq != 0), sp.Integer(0))


# ------------------------------------------------------------------------------------------------
# Stage 1: the loss in symmetric coordinates, from the context-vector expectation (spec §3.5)
# ------------------------------------------------------------------------------------------------
def context_frequencies(keys: str = "theory") -> dict[str, sp.Expr]:
    """Limit ``N -> inf`` of the key distribution ``x_bar = X_tilde 1 / N`` of a document whose
    topic set is ``S`` (spec §3.5 "Context vector"), per token, from the masking law (§1.2):

    * a document word appears unselected w.p. ``1-p_m`` or selected-and-kept w.p. ``p_m p_c``;
    * a selected position becomes a uniform random word (any of the ``Tv``) w.p. ``p_m p_r``;
    * it becomes ``[MASK]`` w.p. ``p_m (1-p_c-p_r)``.

    ``keys="code"``: selected positions are masked out as keys, so only unselected positions
    remain and the context is exactly ``u_S``. Returns the frequency of one in-document word
    ``f_in``, one out-of-document word ``f_out`` and of ``[MASK]`` ``f_mask`` (in parameters)."""
    if keys == "theory":
        keep = (1 - p_m) + p_m * p_c  # the word itself is seen at its position: a = 1-(1-p_c)p_m
        rand = p_m * p_r / (T * v)  # random replacement spread over all words
        return {"f_in": keep / (tau * v) + rand, "f_out": rand, "f_mask": p_m * (1 - p_c - p_r)}
    if keys == "code":
        return {"f_in": 1 / (tau * v), "f_out": sp.Integer(0), "f_mask": sp.Integer(0)}
    raise ConfigError("keys", f"must be one of {KEY_VARIANTS}, got {keys!r}")


def frequency_definitions(keys: str) -> list[tuple[sp.Symbol, sp.Expr]]:
    """``a := 1-(1-p_c)p_m``, ``f_in, f_out, f_M`` (theory keys); ``f_in := 1/(tau v)`` (code keys:
    no random words or MASK among the keys, ``f_out = f_M = 0``)."""
    if keys == "code":
        return [(f_in, 1 / (tau * v))]
    fr = context_frequencies(keys)
    return [(a_sym, 1 - (1 - p_c) * p_m), (f_in, a_sym / (tau * v) + p_m * p_r / (T * v)),
            (f_out, fr["f_out"]), (f_M, fr["f_mask"])]


def frequency_symbols(keys: str) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """``(f_in, f_out, f_M)`` as they appear in the definitions-based expressions."""
    return (f_in, f_out, f_M) if keys == "theory" else (f_in, sp.Integer(0), sp.Integer(0))


def multiplicities() -> dict[sp.Symbol, sp.Expr]:
    """Number of entries of ``(W, b)`` carried by each symmetric coordinate (spec §3.5):
    diagonal ``Tv``; same topic off-diagonal ``T v (v-1)``; different topics ``T v (T-1) v``;
    MASK column / row ``Tv``; MASK-MASK 1; word bias ``Tv``; MASK bias 1."""
    return {A: T * v, B: T * v * (v - 1), C: T * v * (T - 1) * v, m: T * v, r: T * v, s: 1,
            b_w: T * v, b_M: 1}


def stage1_definitions(keys: str = "theory") -> list[tuple[sp.Symbol, sp.Expr]]:
    """Frequencies, then the mean output ``W x_bar + b`` on the three row classes, summing entry x
    key frequency over the key classes seen from each row (counts per class in brackets)."""
    fi, fo, fM = frequency_symbols(keys)
    # row = a word of a document topic: itself [1], its topic's other words [v-1], the other
    # document topics' words [(tau-1)v], the absent topics' words [(T-tau)v], MASK [1]
    e_in = A * fi + B * (v - 1) * fi + C * ((tau - 1) * v * fi + (T - tau) * v * fo) + m * fM + b_w
    # row = a word of an absent topic: itself, its topic's other words, the document's words
    # [tau v], the other absent topics' words [(T-tau-1)v], MASK
    e_out = A * fo + B * (v - 1) * fo + C * (tau * v * fi + (T - tau - 1) * v * fo) + m * fM + b_w
    # MASK row: every word key through r, the MASK key through s
    e_mask = r * (tau * v * fi + (T - tau) * v * fo) + s * fM + b_M
    return frequency_definitions(keys) + [(o_in, e_in), (o_out, e_out), (o_M, e_mask)]


def frobenius_norm_sq() -> sp.Expr:
    """``||W||_F^2`` in symmetric coordinates (weight decay is on W only, not on b)."""
    n = multiplicities()
    return sum(n[x] * x**2 for x in (A, B, C, m, r, s))


def _loss_in_outputs() -> sp.Expr:
    """The label ``y`` is uniform on the document's words: ``E[e_y | S] = u_S``,
    ``E||e_y - u_S||^2 = 1 - 1/(tau v)``; the loss is the same for every ``S`` (symmetry)."""
    ti = 1 / (tau * v)
    return tau * v * (o_in - ti) ** 2 + (T - tau) * v * o_out**2 + o_M**2 + (1 - ti) + lam * frobenius_norm_sq()


def _expand(expr: sp.Expr, definitions) -> sp.Expr:
    for q, e in reversed(definitions):
        expr = expr.xreplace({q: e})
    return expr


@lru_cache(maxsize=None)
def stage1_loss(keys: str = "theory") -> sp.Expr:
    """Per-selected-position population loss ``E_S E ||W x_bar + b - e_y||^2 + lam ||W||_F^2`` in
    state and parameters: ``tau v (o_in - 1/(tau v))^2 + (T-tau) v o_out^2 + o_M^2 + 1 - 1/(tau v)``
    (spec §3.5)."""
    return _expand(_loss_in_outputs(), stage1_definitions(keys))


def eigen_coordinates() -> dict[str, sp.Expr]:
    """Eigenvalues of the word block of ``W`` (read off from ``W`` acting on the projectors:
    ``Pi_1 = I - P/v``, ``Pi_2 = P/v - J/(Tv)``, ``Pi_3 = J/(Tv)``; spec §3.5 "Eigen-form")."""
    return {"omega_1": A - B, "omega_2": A + (v - 1) * B - v * C, "omega_3": A + (v - 1) * B + (T - 1) * v * C}


def _eigen_map() -> dict[sp.Symbol, sp.Expr]:
    """(A, B, C) in terms of the eigenvalues ``omega_k``: ``W = sum_k omega_k Pi_k``."""
    ev = eigen_coordinates()
    return sp.solve([sp.Eq(omega_1, ev["omega_1"]), sp.Eq(omega_2, ev["omega_2"]),
                     sp.Eq(omega_3, ev["omega_3"])], [A, B, C], dict=True)[0]


def _observables() -> dict[str, sp.Expr]:
    ev = eigen_coordinates()
    return {
        "within_topic_mode": ev["omega_1"],
        "topic_mode": ev["omega_2"],
        "mean_mode": ev["omega_3"],
        # mean over same-topic pairs (incl. diagonal) - mean over different-topic pairs = omega_2/v
        "block_difference": (A + (v - 1) * B) / v - C,
        "offdiagonal_block_difference": B - C,
        "population_loss": _loss_in_outputs(),
    }


@lru_cache(maxsize=None)
def _stage1_rhs(keys: str) -> tuple[sp.Expr, ...]:
    """``theta_k' = -eta n_k^{-1} dL/dtheta_k``, differentiated through the definitions."""
    defs = stage1_definitions(keys)
    loss = _loss_in_outputs()
    n = multiplicities()
    return tuple(sp.factor_terms(sp.expand(-eta * chain_rule(loss, x, defs) / n[x])) for x in STAGE1_STATE)


@lru_cache(maxsize=None)
def stage1_flow(keys: str = "theory") -> dict[sp.Symbol, sp.Expr]:
    """The stage-1 gradient flow ``W' = -eta grad_W L`` restricted to the symmetric subspace, in
    state and parameters only (definitions expanded): the pulled-back Frobenius metric is
    ``diag(n_k)`` (``multiplicities``), so ``theta_k' = -eta n_k^{-1} dL/dtheta_k`` (spec §3.5)."""
    defs = stage1_definitions(keys)
    return {x: sp.factor_terms(sp.expand(_expand(f, defs))) for x, f in zip(STAGE1_STATE, _stage1_rhs(keys))}


@lru_cache(maxsize=None)
def stage1_system(keys: str = "theory") -> ReducedSystem:
    """:func:`stage1_flow` with its named quantities, observables and closed forms."""
    return ReducedSystem(
        name=f"stage1_{keys}", paper=PAPER, state=STAGE1_STATE, parameters=STAGE1_PARAMETERS,
        rhs=_stage1_rhs(keys), definitions=tuple(stage1_definitions(keys)), observables=_observables(),
        closed_forms={"topic_mode": topic_mode_solution(keys)["omega_2"],
                      "block_difference_optimum": headline_block_difference(keys, limit=False)},
        spec=f"{SPEC} §3.5 (keys={keys})",
        description=(r"Stage 1: one-hot embeddings, uniform attention, squared loss, $N \to \infty$; "
                     r"$W^V$ and $b$ in symmetric coordinates; $\eta$ = lr, time = optimiser step. The minibatch "
                     r"noise does not live on these coordinates (docs/papers/topic.md, SDE note): its exact "
                     r"covariance (closed-form moments) is exported with the full-space system of a small "
                     r"vocabulary (tdyn derive topic --set T=2 --set v=2 --set tau=1), and theory.topic.sde "
                     r"simulates it at any size."),
    )


@lru_cache(maxsize=None)
def topic_mode_equation(keys: str = "theory") -> dict[str, sp.Expr]:
    """``d omega_2/dt`` from the stage-1 flow, rewritten in eigen-coordinates. It depends on
    ``omega_2`` only (the topic mode decouples), and is affine: ``rate * (omega_2* - omega_2)``.
    Also ``kappa`` (the topic-contrast eigenvalue of ``Cov(u_S)``) read off the rate."""
    ev = eigen_coordinates()
    defs = stage1_definitions(keys)
    rhs = dict(zip(STAGE1_STATE, _stage1_rhs(keys)))
    # from the compact flow: expanding it only after combining the three rows is ~5x faster
    d_om2 = sp.expand(_expand(sum(sp.diff(ev["omega_2"], x) * rhs[x] for x in (A, B, C)), defs).subs(_eigen_map()))
    rate = sp.factor(-sp.diff(d_om2, omega_2))
    fixed = sp.factor(sp.cancel(d_om2.subs(omega_2, 0) / rate))
    a_eff = sp.factor(sp.diff(_expand(o_in - o_out, defs), A) * tau * v)
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


def numeric_subs(config: TopicConfig, lr: float | None = None) -> dict[sp.Symbol, Any]:
    """Sympy substitution of a config's sizes, masking, weight decay and ``eta = lr``."""
    return {T: config.T, v: config.v, tau: config.tau, p_m: sp.nsimplify(config.p_m),
            p_c: sp.nsimplify(config.p_c), p_r: sp.nsimplify(config.p_r), lam: sp.nsimplify(config.lam),
            eta: lr if lr is not None else config.lr}


def kappa(config: TopicConfig) -> float:
    """``kappa`` of the document law: tau-model from the derivation; LDA ``Dir(alpha)``:
    ``1/(v T (T alpha + 1))`` (spec §3.5), the same eigenvalue of ``Cov(u_S)``."""
    if config.data == "lda":
        return 1.0 / (config.v * config.T * (config.T * config.alpha + 1))
    return float(topic_mode_equation(config.keys)["kappa"].subs(numeric_subs(config)))


def stage1_optimum(config: TopicConfig, keys: str | None = None) -> dict[str, float]:
    """Stationary point of the reduced stage-1 loss (ridge on ``W``, ``b`` free). With
    ``config.lam == 0`` the limit ``lam -> 0`` of the ridge solution (unique, spec §3.5)."""
    keys = keys or config.keys
    subs = numeric_subs(config)
    subs.pop(lam)
    loss = stage1_loss(keys).subs(subs)
    sol = sp.solve([sp.diff(loss, x) for x in STAGE1_STATE], STAGE1_STATE, dict=True)[0]
    lam_val = sp.nsimplify(config.lam)
    out = {}
    for x in STAGE1_STATE:
        e = sol[x]
        e = sp.limit(e, lam, 0) if lam_val == 0 else e.subs(lam, lam_val)
        out[str(x)] = float(e)
    return out


# ------------------------------------------------------------------------------------------------
# Embedding version (spec §3.5): E = W_E^T W_E, W^V = I
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
        description=r"Topic mode of $E = W_E^\top W_E$ with $W^V = I$ frozen: logistic growth to $1/a$.",
    )


# ------------------------------------------------------------------------------------------------
# One document's loss and the minibatch noise in the full (W, b) space (spec "SDE note")
# ------------------------------------------------------------------------------------------------
#: labelled (selected) positions per document: the label frequencies are Multinomial(n_sel, u_S)/n_sel
n_sel = sp.Symbol("n_sel", positive=True)
#: largest vocabulary (``D = Tv + 1``) whose full-space system is also built in sympy (``D^2 + D`` states)
FULL_SYMBOLIC_MAX_D = 7
#: the full-space system's parameters (``T, v, tau`` are the instance's numbers)
FULL_PARAMETERS = (p_m, p_c, p_r, lam, eta, n_sel)


def full_space_symbols(config: TopicConfig) -> dict[str, sp.Matrix]:
    """State ``W`` (D x D), ``b`` (D) and the sample symbols of one document: its context ``xbar``
    (D) and label frequencies ``q`` (Tv: a label is a word, never ``[MASK]``), theory vocabulary
    (words ``0..Tv-1``, then ``[MASK]``)."""
    nw = config.n_words
    D = nw + 1
    return {"W": sp.Matrix(D, D, lambda i, j: sp.Symbol(f"W_{i}_{j}", real=True)),
            "b": sp.Matrix(D, 1, lambda i, _: sp.Symbol(f"b_{i}", real=True)),
            "xbar": sp.Matrix(D, 1, lambda i, _: sp.Symbol(f"xbar_{i}", real=True)),
            "q": sp.Matrix(nw, 1, lambda i, _: sp.Symbol(f"q_{i}", real=True))}


def document_loss(config: TopicConfig) -> sp.Expr:
    """The per-sample loss of one document (the minibatch's sample): the mean over its ``n_sel``
    selected positions of ``||W xbar + b - e_{y_j}||^2`` (uniform attention: every query sees the
    context ``xbar``), written with the label frequencies ``q_w = #{j: y_j = w}/n_sel``, plus the
    weight decay: ``||W xbar + b||^2 - 2 (W xbar + b).q + sum_w q_w + lam ||W||_F^2``
    (``||e_y||^2 = 1 = sum_w q_w``). Averaged over the documents it is the stage-1 loss (spec §3.5)."""
    sym = full_space_symbols(config)
    W, b, x, q = sym["W"], sym["b"], sym["xbar"], sym["q"]
    o = W * x + b
    qD = q.col_join(sp.zeros(1, 1))
    return (o.T * o)[0] - 2 * (o.T * qD)[0] + sum(q) + lam * sum(w**2 for w in W)


def _document_vectors(config: TopicConfig):
    """Per topic set ``S`` (numbers ``T, v, tau`` of ``config``): ``x_bar_S`` from
    :func:`context_frequencies` (sympy in the masking probabilities) and ``u_S``."""
    import itertools

    T_, v_, tau_ = config.T, config.v, config.tau
    fr = {k: e.subs({T: T_, v: v_, tau: tau_}) for k, e in context_frequencies(config.keys).items()}
    out = []
    for S in itertools.combinations(range(T_), tau_):
        inside = [i // v_ in S for i in range(T_ * v_)]
        xbar = [fr["f_in"] if k else fr["f_out"] for k in inside] + [fr["f_mask"]]
        out.append((S, xbar, [sp.Rational(int(k), tau_ * v_) for k in inside]))
    return out


def document_distribution(config: TopicConfig):
    """The law of one document (``theory.noise``): its topic set ``S`` uniform over the
    ``C(T, tau)`` sets, the context ``xbar = x_bar_S`` of a long document (``N -> inf``, spec
    §3.5) and its ``n_sel`` labels i.i.d. uniform over the document's words,
    ``q ~ Multinomial(n_sel, u_S)/n_sel``: a :class:`~theory.noise.Mixture` of
    point-mass-context x multinomial-label parts. Exact (finite mixture, closed-form moments)."""
    from ..noise import Finite, Independent, Mixture, Moments

    sym = full_space_symbols(config)
    docs = _document_vectors(config)
    parts = [Independent((Finite(({s: e for s, e in zip(sym["xbar"], xbar)},), (1,)),
                          Moments.multinomial(list(sym["q"]), n_sel, u, scale=1 / n_sel))) for _, xbar, u in docs]
    return Mixture(tuple(sp.Rational(1, len(docs)) for _ in docs), tuple(parts))


def _full_population_loss(config: TopicConfig) -> sp.Expr:
    """``E_S ||W x_bar_S + b - u_S||^2 + (1 - 1/(tau v)) + lam ||W||_F^2`` (spec §3.5), written
    from the document vectors, not from the per-sample loss."""
    sym = full_space_symbols(config)
    W, b = sym["W"], sym["b"]
    docs = _document_vectors(config)
    tot = sp.Integer(0)
    for _, xbar, u in docs:
        r = W * sp.Matrix(xbar) + b - sp.Matrix(list(u) + [0])
        tot += (r.T * r)[0]
    return tot / len(docs) + 1 - sp.Rational(1, config.tau * config.v) + lam * sum(w**2 for w in W)


def full_space_residual_expr(config: TopicConfig) -> sp.Expr:
    """``||W_w - sum_k omega_k Pi_k||_F`` of the word block in the state symbols (spec §6)."""
    sym = full_space_symbols(config)
    nw, v_ = config.n_words, config.v
    Ww = sym["W"][:nw, :nw]
    cls = {"d": [], "s": [], "c": []}
    for i in range(nw):
        for j in range(nw):
            cls["d" if i == j else ("s" if i // v_ == j // v_ else "c")].append((i, j))
    mean = {k: sum(Ww[i, j] for i, j in ij) / len(ij) for k, ij in cls.items() if ij}
    return sp.sqrt(sum((Ww[i, j] - mean[k]) ** 2 for k, ij in cls.items() for i, j in ij))


@lru_cache(maxsize=None)
def _full_space_system(T_: int, v_: int, tau_: int, keys: str) -> ReducedSystem:
    from ..noise import derive_noise

    config = TopicConfig(T=T_, v=v_, tau=tau_, keys=keys)
    sym = full_space_symbols(config)
    state = tuple(sym["W"]) + tuple(sym["b"])
    L = _full_population_loss(config)
    rhs = tuple(-eta * sp.diff(L, x) for x in state)
    noise = derive_noise(document_loss(config), state, tuple(sym["xbar"]) + tuple(sym["q"]),
                         document_distribution(config), preconditioner=eta, simplify=False,
                         description=(r"one document: topic set $S$ uniform, context $\bar{x}_S$ ($N \to \infty$), "
                                      r"$n_{sel}$ labels $\sim \mathrm{Multinomial}(n_{sel}, u_S)$; time = optimiser "
                                      r"steps ($\eta$ = lr)"))
    nw = config.n_words
    return ReducedSystem(
        name=f"stage1_full_{keys}", paper=PAPER, state=state, parameters=FULL_PARAMETERS, rhs=rhs,
        observables={"off_symmetric_residual": full_space_residual_expr(config),
                     "topic_mode": sum(sym["W"][i, j] * (sp.Rational(1, v_) if i // v_ == j // v_ else 0)
                                       - sym["W"][i, j] / nw for i in range(nw) for j in range(nw)) / (T_ - 1)},
        spec=f"{SPEC} §3.5, SDE note (full D x D space, T={T_} v={v_} tau={tau_}, keys={keys})", noise=noise,
        description=(r"Stage 1 in the full $(W^V, b)$ space with its minibatch noise: one-hot, uniform attention, "
                     r"squared loss, $N \to \infty$ context; $\eta$ = lr, time = optimiser step."),
    )


def full_space_system(config: TopicConfig) -> ReducedSystem:
    """The stage-1 flow on every entry of ``(W, b)`` (``D^2 + D`` states, ``D = Tv + 1``) with its
    minibatch noise derived from :func:`document_loss` under :func:`document_distribution`
    (exact: ``noise.method == "moments"``). The drift is ``-eta`` times the gradient of the
    population loss (written independently of the per-sample loss, so ``check_drift`` is a real
    check); on the symmetric subspace it is :func:`stage1_flow`. Sympy: for small instances only
    (:data:`FULL_SYMBOLIC_MAX_D`); the SDE at any size is :mod:`theory.topic.sde`, whose numeric
    per-sample flow the tests hold against this one."""
    D = config.n_words + 1
    if D > FULL_SYMBOLIC_MAX_D:
        raise ConfigError("T", f"the symbolic full-space system has D^2 + D = {D * D + D} states; it is built up to "
                               f"D = {FULL_SYMBOLIC_MAX_D} (T v <= {FULL_SYMBOLIC_MAX_D - 1}); the SDE at any size "
                               "is theory.topic.sde")
    return _full_space_system(config.T, config.v, config.tau, config.keys)
